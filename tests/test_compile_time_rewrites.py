"""Compile-time rewrites that must give the same results as the code they replaced.

Each test compares a faster form with the direct computation it stands for (the
differential checks of whole kernels are the goldens and the fuzzer: their generated
source is unchanged).
"""
from __future__ import annotations

import random

import islpy as isl
import pytest

from polycomp import ir
from polycomp.affine import AffForm, aff_to_ir
from polycomp.errors import NonAffineIndexError


@pytest.mark.parametrize("text", [
    "[N] -> { [i, j] -> [(3i - 2j + N + 5)] }",
    "[N, M] -> { [i, j] -> [(floor((i + 2N)/4) - 7)] }",
    "{ [i] -> [(floor((3i + floor((i)/2))/5))] }",
    "[N] -> { [i, j] -> [(-j)] }",
    "{ [] -> [(12)] }",
])
def test_aff_form_builds_what_aff_to_ir_builds(text):
    """AffForm read once, converted for two sets of inputs: the expression
    aff_to_ir builds (same tree, structurally)."""
    aff = isl.Aff(text)
    n_in = aff.dim(isl.dim_type.in_)
    params = {aff.get_dim_name(isl.dim_type.param, k): ir.Var(f"p{k}", is_param=True)
              for k in range(aff.dim(isl.dim_type.param))}
    form = AffForm(aff)
    for ins in ([ir.Var(f"x{k}") for k in range(n_in)],
                [ir.IntImm(k + 3) for k in range(n_in)]):
        assert ir.structural_equal(form.to_ir(ins, params), aff_to_ir(aff, ins, params))


def test_aff_form_names_a_parameter_without_a_value():
    form = AffForm(isl.Aff("[N] -> { [i] -> [(i + N)] }"))
    with pytest.raises(NonAffineIndexError, match="'N'"):
        form.to_ir([ir.Var("i")], {})


class _Plus(ir.Binary):
    """A subclass of a node class: Mutator.generic treats it as its base class."""


def test_mutator_generic_on_a_subclass_and_on_leaves():
    x, y = ir.Var("x"), ir.Var("y")
    e = _Plus("+", x, ir.IntImm(1), "int64")
    sub = ir.substitute(ir.Store(ir.Buffer("B", "int64", (ir.IntImm(4),)), (x,), e), {x: y})
    assert ir.structural_equal(sub.value, ir.Binary("+", y, ir.IntImm(1), "int64"))
    assert ir.substitute(e, {ir.Var("z"): y}) is e          # unchanged: same node
    leaf = ir.IntImm(3)
    assert ir.Mutator().visit(leaf) is leaf


def _live_direct(r, name):
    """The live range as first written: every access's loops, each tested against
    every access (the definition _live computes)."""
    ps = r.pos[name]
    lo, hi = min(ps), max(ps)
    for stack in r.loops[name]:
        for lid in stack:
            a, b = r.spans[lid]
            if not all(a <= q <= b for q in ps):
                lo, hi = min(lo, a), max(hi, b)
    return lo, hi


def test_ub_reuse_live_ranges_match_the_definition():
    from polycomp.hw.npu.ub_reuse import _live, _Ranges
    rng = random.Random(5)
    for _ in range(200):
        r = _Ranges()
        r.spans = []
        for _ in range(rng.randint(1, 6)):
            a = rng.randint(0, 30)
            r.spans.append([a, a + rng.randint(0, 10)])
        ps = sorted(rng.sample(range(40), rng.randint(1, 6)))
        r.pos["b"] = ps
        r.loops["b"] = [tuple(rng.sample(range(len(r.spans)), rng.randint(0, len(r.spans))))
                        for _ in ps]
        assert _live(r, "b") == _live_direct(r, "b")
