"""Model-level differential fuzzer: random PyTorch programs (:mod:`fuzz_graphs`) through
``torch.compile(backend="polycomp")`` against eager PyTorch.

Every program is compiled (``options={"strict": True}``: an internal error or an import
that disagrees with torch about a dtype fails the test instead of running eagerly; every
third program for the default target ``cpu``, the others for ``c``) and called twice
with fresh inputs of the same shapes; each call must give what eager gives:

* the same output structure, shapes and dtypes; integer and bool outputs exactly;
* float outputs within ``rtol``/``atol`` of eager (float32: 1e-4 / 1e-5, float64:
  1e-10 / 1e-12) -- or, where rounding was amplified (cancellation, division by a small
  value), at most twice as far from a float64 evaluation of the same program as eager
  float32 is: polycomp must be as accurate as eager, never less; NaN where eager has
  NaN, the same infinities;
* the inputs mutated exactly as eager mutates them;
* and a program that does not update a view in place (what polycomp runs eagerly on
  purpose) must be compiled as one piece: no eager op, no split.

``POLYCOMP_GRAPH_FUZZ_N`` programs (default 96) in ``CHUNKS`` tests (for pytest-xdist):
the first ``FAST_CHUNKS`` (48 programs and the regression seeds, about 26 s of CPU) are
in the fast lane (``-m "not slow"``), the others are marked ``slow`` -- ``.ci/run`` runs
both, all 96 (``POLYCOMP_GRAPH_FUZZ_N=192`` gives the former run).
``POLYCOMP_GRAPH_FUZZ_SEED`` shifts the seeds.  A failure prints the seed and the
program's source; ``check_program(make_program(seed))`` replays it.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from fuzz_graphs import Program, make_program  # noqa: E402

N = int(os.environ.get("POLYCOMP_GRAPH_FUZZ_N", "96"))
SEED0 = int(os.environ.get("POLYCOMP_GRAPH_FUZZ_SEED", "0"))
CHUNKS = 8
FAST_CHUNKS = 4  # chunks outside `slow`: the fast lane's share of the programs
TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-10, 1e-12)}
REGRESSION_SEEDS: list[int] = [347, 1029]  # bool + bool; in-place on a 3-d matmul


def target_of(seed: int) -> str:
    """Every third program on the default target ``cpu`` (vector code), the others on
    ``c`` (portable C: the same graph layer, a third of the compile time)."""
    return "cpu" if seed % 3 == 0 else "c"


class _Recorder:
    def __init__(self, target: str):
        self.reports: list = []
        self.target = target

    def __call__(self, gm, example_inputs):
        from polycomp.graph.dynamo import polycomp_backend
        fn = polycomp_backend(gm, example_inputs, options={"strict": True,
                                                            "target": self.target})
        self.reports.append(fn.polycomp_report)
        return fn


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _double(t):
    return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def _close(name: str, got: torch.Tensor, want: torch.Tensor, exact64,
           rounded32: bool = False) -> None:
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    if not want.is_floating_point():
        assert torch.equal(got, want), f"{name}: {got} != {want}"
        return
    rtol, atol = TOL[torch.float32 if rounded32 else want.dtype]
    g, w = got.double(), want.double()
    nan = torch.isnan(w)
    assert torch.equal(torch.isnan(g), nan), f"{name}: NaN where eager has none (or not)\n" \
        f"got {got}\nwant {want}"
    inf = torch.isinf(w)
    assert torch.equal(g[inf], w[inf]) and not torch.isinf(g[~inf]).any(), \
        f"{name}: infinities differ\ngot {got}\nwant {want}"
    ok = nan | inf | ((g - w).abs() <= atol + rtol * w.abs())
    if not ok.all() and exact64 is not None:  # as accurate as eager, against float64
        e = exact64.double()
        ok |= (g - e).abs() <= 2 * (w - e).abs() + atol + rtol * e.abs()
    bad = (~ok).nonzero()
    assert ok.all(), f"{name}: {len(bad)} element(s) differ, first at {bad[0].tolist()}: " \
        f"polycomp {g[tuple(bad[0])].item()!r} eager {w[tuple(bad[0])].item()!r}" + \
        ("" if exact64 is None else f" float64 {exact64.double()[tuple(bad[0])].item()!r}")


def _float64_run(m, inputs):
    """The program with every float input and parameter in float64 (a reference of
    higher precision), or None when torch refuses it."""
    import copy
    try:
        m64 = copy.deepcopy(m).double()
        with torch.no_grad():
            return _as_tuple(m64(*[_double(t.clone()) for t in inputs]))
    except Exception:
        return None


def check_program(p: Program) -> None:
    """Compile ``p`` and compare two calls with eager (see the module docstring)."""
    m = p.module()
    rec = _Recorder(target_of(p.seed))
    cm = torch.compile(m, backend=rec)
    for call in range(2):
        inputs = p.fresh_inputs() if call == 0 else [_redraw(t, p.seed) for t in p.inputs]
        ref_in = [t.clone() for t in inputs]
        with torch.no_grad():
            ref = _as_tuple(m(*ref_in))
            exact = _float64_run(m, inputs)
            got = _as_tuple(cm(*inputs))
        assert len(got) == len(ref), f"{len(got)} outputs, eager has {len(ref)}"
        for k, (g, r) in enumerate(zip(got, ref)):
            e = exact[k] if exact is not None and len(exact) == len(ref) else None
            low = p.rounded32[k] if k < len(p.rounded32) else False
            _close(f"call {call} output {k}", g, r, e if low or r.dtype == torch.float32
                   else None, low)
        for k, (a, r) in enumerate(zip(inputs, ref_in)):
            _close(f"call {call} input x{k} after the call", a, r, None)
    if not p.may_fall_back:
        lines = [line for r in rec.reports for line in r.eager]
        assert not lines, f"ran eagerly: {lines}"
        assert all(r.compiled == r.pieces == 1 for r in rec.reports), \
            [(r.compiled, r.pieces) for r in rec.reports]


def _redraw(t: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 7919)
    if t.dtype == torch.bool:
        return torch.rand(t.shape, generator=g) > 0.5
    if t.dtype == torch.int64:
        return torch.randint(-6, 7, t.shape, generator=g)
    return (torch.randn(t.shape, generator=g) * 1.5).to(t.dtype)


def _seeds(chunk: int) -> list[int]:
    return [SEED0 + s for s in range(N) if s % CHUNKS == chunk]


@pytest.mark.parametrize("chunk", [
    pytest.param(c, marks=() if c < FAST_CHUNKS else pytest.mark.slow) for c in range(CHUNKS)])
def test_random_graphs_match_eager(chunk, capsys):
    failures = []
    for seed in _seeds(chunk) + (REGRESSION_SEEDS if chunk == 0 else []):
        p = make_program(seed)
        torch._dynamo.reset()
        try:
            check_program(p)
        except Exception as e:  # collect: one test reports every failing program
            msg = str(e).splitlines()
            failures.append(f"seed {seed}: {type(e).__name__}: {' | '.join(msg[:6])}\n"
                            f"{p.source}")
    capsys.readouterr()  # the eager-fallback lines of programs that update views
    assert not failures, f"{len(failures)} of {len(_seeds(chunk))} programs differ:\n\n" + \
        "\n".join(failures)


def test_fuzzer_draws_what_it_claims():
    """The generator covers the constructs the issue asks for, over the seeds CI runs."""
    seen: dict[str, int] = {}
    dtypes: set = set()
    outs = set()
    for seed in range(SEED0, SEED0 + N):
        p = make_program(seed)
        for op in p.ops:
            seen[op] = seen.get(op, 0) + 1
        dtypes |= {t.dtype for t in p.inputs}
        outs.add(len([o for o in p.source.rsplit("return ", 1)[1].split(",") if o.strip()]))
    for op in ("inplace", "reshape", "transpose", "slice", "matmul", "linear", "reduce",
               "softmax", "layer_norm", "cast", "binary", "binary-scalar", "unary"):
        assert seen.get(op, 0) >= 5, (op, seen)
    assert {torch.float32, torch.float64, torch.int64, torch.bool} <= dtypes
    assert {1, 2, 3} <= outs
