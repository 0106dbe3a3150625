"""A compiled piece with no tensor input (an ``arange`` with constant shapes, handed to
an op that runs eagerly) returns torch tensors, as every piece does."""
import pytest
import torch

from polycomp.graph.dynamo import polycomp_backend


@pytest.mark.slow
def test_piece_without_tensor_inputs_returns_torch_tensors():
    def f(x):
        pos = torch.arange(5, dtype=torch.float32) * 2.0   # compiled, no tensor input
        return torch.cumsum(pos, 0) + x                    # cumsum runs eagerly

    reports = []

    def backend(gm, ex):
        fn = polycomp_backend(gm, ex, options={"target": "c", "strict": True})
        reports.append(fn.polycomp_report)
        return fn
    torch._dynamo.reset()
    cf = torch.compile(f, backend=backend, dynamic=False)
    x = torch.randn(5)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), f(x))
    assert any(r.compiled for r in reports) and any("cumsum" in e for r in reports
                                                    for e in r.eager)
