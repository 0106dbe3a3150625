"""Compile time of long DSL chains (issue #14, "compile time grows too fast").

The CPU fusion pass grew a group greedily and, for every candidate, re-checked the
dependences of the whole group and composed the group's outer map with itself (every
pair of statements): cubic in the chain length (200 stages: 58 s, 100: 7.7 s).  It now
checks only the dependences that involve the new member, with the outer map restricted
to their sources and sinks.  The legality and coincidence conditions hold dependence by
dependence, so the decisions are the same; the tests compare against the full check."""

import hashlib

import islpy as isl
import pytest

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.hw.cpu.codegen import PRELUDE_END
from polycomp.scheduler.cpu import fuse as F

N = pc.sym("N")


def _chain(n: int):
    @pc.tensor_expr
    def chain(A: pc.Tensor[(N,), "float32"]):
        def stage(T, s):
            return pc.compute((N,), lambda i: T[i] * 1.5 + 1.0, name=f"S{s}")
        T = A
        for s in range(n):
            T = stage(T, s)
        return T
    return chain


def _shifted(n: int):
    """Stages reading their producer shifted by one under a select: fusion on the outer
    loop is legal but not coincident."""
    @pc.tensor_expr
    def shifted(A: pc.Tensor[(N,), "float32"]):
        def stage(T, s):
            return pc.compute((N,), lambda i: pc.select(i >= 1, T[i - 1], 0.0) + T[i],
                              name=f"S{s}")
        T = A
        for s in range(n):
            T = stage(T, s)
        return T
    return shifted


class _FullCheckFuser(F._Fuser):
    """The check as it was: all dependences among group + [nxt] (all of the program's
    dependences intersected with the group, issue #14), the whole outer map composed
    with its inverse (issue #24: the fuser now tests each dependence by emptiness)."""

    def fusable(self, group, nxt, prefix, coincident_only, outer):
        members = group.members + [nxt]
        dom = F._filter_union(members)
        deps = self.deps.intersect_domain(dom).intersect_range(dom)
        if prefix is not None:
            deps = deps.intersect(prefix.apply_range(prefix.reverse()))
        if deps.is_empty():
            return True, True
        outer = outer[0]
        if deps.is_subset(outer.apply_range(outer.reverse())):
            return True, True
        if coincident_only:
            return False, False
        pairs = outer.reverse().apply_range(deps).apply_range(outer)
        le = isl.UnionMap.from_map(isl.Map.lex_le(isl.Space.set_alloc(dom.get_ctx(), 0, 1)
                                                  .align_params(pairs.get_space())))
        return pairs.is_subset(le), False


def _digest(kernel, target):
    return hashlib.sha1(compile_kernel(kernel, target).source.encode()).hexdigest()


@pytest.mark.parametrize("kernel, target", [
    (_chain(12), "c"), (_shifted(6), "c"), (_shifted(5), "cpu-avx2"),
    (ops.OPS["softmax"].factory("float32"), "c"),
    (ops.OPS["layernorm"].factory("float32"), "cpu-avx2"),
])
def test_incremental_fusion_check_makes_the_same_decisions(kernel, target, monkeypatch):
    fast = _digest(kernel, target)
    monkeypatch.setattr(F, "_Fuser", _FullCheckFuser)
    assert _digest(kernel, target) == fast


def test_long_chain_compiles_and_fuses():
    """150 chained stages compile (cubic before: ~25 s here; the timing lives in
    ``polycomp bench compile``, never in a test) into one fused loop."""
    ck = compile_kernel(_chain(150), "c")
    assert "S149" in ck.source
    assert ck.source.split(PRELUDE_END, 1)[1].count("for (") == 1   # the kernel's loops
