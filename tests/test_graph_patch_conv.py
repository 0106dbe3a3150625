"""Convolutions whose windows tile the input (stride == kernel, no padding: ViT's patch
embedding) rewritten as their product (``graph/rewrite.py`` ``patchify_convs``;
docs/graph.md "Patch convolutions"): the rewritten graph holds a ``matmul`` by the
constant ``w.reshape(F, C*KH*KW).T`` and no ``conv2d``; ViT's ``flatten(2) ->
transpose(1, 2)`` after it is the product itself; results match eager torch (odd
channel counts, non-square patches, extent-1 and 3 batches, the NCHW result read by
another operator, no bias); overlapping windows, padding and groups keep the
convolution; ``POLYCOMP_PATCH_CONV=0`` keeps it too."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from polycomp.graph.dynamo import polycomp_backend
from polycomp.graph.fx import import_module
from polycomp.graph.rewrite import patchify_convs
from polycomp.graph.shapes import propagate


class Vit(nn.Module):
    """ViT's patch embedding: conv, ``flatten(2)``, ``transpose(1, 2)``, plus a token."""

    def __init__(self, c=3, f=10, k=(4, 2), bias=True):
        super().__init__()
        self.conv = nn.Conv2d(c, f, k, stride=k, bias=bias)

    def forward(self, x):
        return self.conv(x).flatten(2).transpose(1, 2) + 1.0


class Nchw(nn.Module):
    """The convolution's NCHW result read as it is (a relu, then a channel sum)."""

    def __init__(self, c=5, f=7, k=3, **kw):
        super().__init__()
        self.conv = nn.Conv2d(c, f, k, stride=kw.pop("stride", k), **kw)

    def forward(self, x):
        return torch.relu(self.conv(x)).sum(dim=1)


def _ops(mod, x):
    g = import_module(mod.eval(), [tuple(x.shape)])
    propagate(g)
    n = patchify_convs(g)
    return n, [nd.op for nd in g.nodes]


def _check(mod, x):
    torch.manual_seed(0)
    mod.eval()
    with torch.no_grad():
        torch._dynamo.reset()
        got = torch.compile(mod, backend=polycomp_backend, dynamic=False)(x)
        ref = mod(x)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_vit_patches_become_one_product():
    torch.manual_seed(0)
    n, ops = _ops(Vit(), torch.randn(1, 3, 12, 10))
    assert n == 1
    assert "conv2d" not in ops and ops.count("matmul") == 1
    assert "transpose" not in ops      # flatten(2).transpose(1, 2) is the product itself
    assert ops[:5] == ["reshape", "permute", "reshape", "matmul", "add"]


def test_nchw_result_and_kept_cases():
    torch.manual_seed(0)
    n, ops = _ops(Nchw(), torch.randn(2, 5, 9, 6))
    assert n == 1 and "conv2d" not in ops and ops.count("permute") == 2
    for mod, x in ((Nchw(stride=2), torch.randn(1, 5, 9, 9)),     # windows overlap
                   (Nchw(padding=1), torch.randn(1, 5, 9, 9)),    # padding
                   (Nchw(c=4, f=6, groups=2), torch.randn(1, 4, 9, 9))):
        n, ops = _ops(mod, x)
        assert n == 0 and "conv2d" in ops


@pytest.mark.parametrize("mod, shape", [
    (Vit(c=5, f=9, k=(3, 3), bias=False), (3, 5, 9, 12)),
    (Nchw(), (2, 5, 9, 6)),
])
def test_patch_conv_matches_eager(mod, shape):
    torch.manual_seed(1)
    _check(mod, torch.randn(*shape))


def test_switch_keeps_the_convolution(monkeypatch):
    from polycomp.graph import compile_graph
    monkeypatch.setenv("POLYCOMP_PATCH_CONV", "0")
    torch.manual_seed(0)
    mod, x = Vit(c=1, f=2, k=(2, 2)).eval(), torch.randn(1, 1, 4, 4)
    cg = compile_graph(import_module(mod, [tuple(x.shape)]), "cpu")
    assert any(n.op == "conv2d" for s in cg.steps for n in s.group.nodes)
    monkeypatch.setenv("POLYCOMP_PATCH_CONV", "1")
    cg = compile_graph(import_module(mod, [tuple(x.shape)]), "cpu")
    got = cg(x.numpy())
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got, mod(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert not any(n.op == "conv2d" for s in cg.steps for n in s.group.nodes)
    assert any(n.op == "matmul" for s in cg.steps for n in s.group.nodes)
