"""Operator classification of stages and backbone fusion groups (TSCompiler §5.2).

Each stage of a kernel is classified from its index expressions:

* ``contraction`` — a reduction whose body multiplies loads that together use every
  output and reduce iterator, each reduce iterator in at least two loads (matmul,
  batch-matmul; ``conv`` when some index mixes an output and a reduce iterator,
  ``h*s + kh*d``);
* ``reduce`` — any other reduction (row sum/max, mean);
* ``pad`` — a ``select`` guarding a load whose indices are shifted iterators;
* ``transpose`` — one load with a permutation of the output iterators;
* ``broadcast`` — loads whose indices use a proper subset of the iterators;
* ``elementwise`` — everything else without reduction.

Fusion groups: the *backbone* is a contraction/conv stage (else a reduce, else the last
stage); *prologue* stages are pad/elementwise/transpose stages before it whose only
consumer is the backbone; *epilogue* stages are the stages after it that read the
backbone's output (directly or through earlier epilogue stages) at the same output
point (an index map equal to the identity on the backbone's output space), with the
same output shape.  Every other stage is its own group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from polycomp import ir
from polycomp.frontend.dsl import KernelGraph
from polycomp.scheduler.common.contraction import contraction_class, iterators_of, loads_of

CLASSES = ("contraction", "conv", "reduce", "pad", "transpose", "broadcast", "elementwise")




def _has_select_guarded_load(e) -> bool:
    found = []

    def fn(n):
        if isinstance(n, ir.Select) and (loads_of(n.t) or loads_of(n.f)):
            found.append(n)
    ir.walk(e, fn)
    return bool(found)


def classify_stage(stage) -> str:
    iters = set(stage.iters)
    loads = loads_of(stage.body)
    if stage.is_reduction:
        return contraction_class(stage)
    if _has_select_guarded_load(stage.body):
        return "pad"
    if len(loads) == 1:
        idx = loads[0].indices
        if all(isinstance(i, ir.Var) for i in idx) and set(idx) == iters \
                and list(idx) != list(stage.iters) and len(idx) == len(stage.iters):
            return "transpose"
    for ld in loads:
        used = set().union(*(iterators_of(i) for i in ld.indices)) if ld.indices else set()
        if used < iters:
            return "broadcast"
    return "elementwise"


@dataclass
class FusionGroup:
    """Stages scheduled together: an optional backbone with its epilogue."""
    backbone: Any                    # Stage
    kind: str                        # class of the backbone
    epilogue: list = field(default_factory=list)
    prologue: list = field(default_factory=list)
    rows: int | None = None          # for kind "rowreduce": the number of row dimensions

    @property
    def stages(self) -> list:
        return [self.backbone] + self.epilogue


def _reads_at_identity(stage, producer, loads: dict | None = None) -> bool | None:
    """True if ``stage`` reads ``producer`` only at ``producer[stage.iters]``; None if it
    does not read it at all.  ``loads``: each stage's :func:`loads_of` its body, where
    the caller has them."""
    found = None
    for ld in (loads[stage] if loads is not None else loads_of(stage.body)):
        if ld.buffer is not producer.output.buffer:
            continue
        ok = len(ld.indices) == len(stage.iters) and all(
            i is v for i, v in zip(ld.indices, stage.iters))
        found = ok if found is None else (found and ok)
    return found


def _same_shape(a, b) -> bool:
    from polycomp.lowering.simplify import const_difference
    sa, sb = a.output.shape, b.output.shape
    return len(sa) == len(sb) and all(x is y or const_difference(x, y) == 0 for x, y in zip(sa, sb))


def fusion_groups(graph: KernelGraph) -> list[FusionGroup]:
    """Partition the stages of ``graph`` into fusion groups, in program order."""
    stages = list(graph.stages)
    kinds = {s: classify_stage(s) for s in stages}
    # each body walked once (the tests below ask about every pair of stages)
    loads = {s: loads_of(s.body) for s in stages}
    consumers = {s: [t for t in stages if _reads_at_identity(t, s, loads) is not None]
                 for s in stages}
    outputs = {id(t) for t in graph.outputs}
    groups: list[FusionGroup] = []
    taken: set = set()
    for s in stages:
        if s in taken:
            continue
        g = FusionGroup(s, kinds[s])
        taken.add(s)
        # epilogue: following stages that consume a group member at the identity point
        members = [s]
        for t in stages[stages.index(s) + 1:]:
            if t in taken or t.is_reduction or not _same_shape(t, s):
                continue
            reads = [_reads_at_identity(t, m, loads) for m in members]
            if any(r is False for r in reads) or not any(r for r in reads):
                continue
            # every stage t reads must already be computed before the group runs
            if not _inputs_ready(t, members, stages, taken, s, loads[t]):
                continue
            g.epilogue.append(t)
            members.append(t)
            taken.add(t)
        groups.append(g)
    # prologue: a pad stage consumed only by the next group's contraction/conv backbone
    for k, g in enumerate(groups[:-1]):
        nxt = groups[k + 1]
        if g.kind == "pad" and not g.epilogue and nxt.kind in ("contraction", "conv") \
                and consumers[g.backbone] == [nxt.backbone] \
                and id(g.backbone.output) not in outputs:
            nxt.prologue.append(g.backbone)
    return [g for g in groups if not any(g.backbone in h.prologue for h in groups)]


def _inputs_ready(t, members, stages, taken, backbone, loads: list) -> bool:
    """All stages ``t`` reads (``loads``: its loads) are group members or computed
    before the backbone."""
    before = set(stages[:stages.index(backbone)])
    for ld in loads:
        prod = next((p for p in stages if p.output.buffer is ld.buffer), None)
        if prod is None or prod in members or prod in before:
            continue
        return False
    return True


# --------------------------------------------------------------------------- row runs


@dataclass
class RowRun:
    """Consecutive stages over the same rows ``R`` (the first ``rank`` output dims of
    every stage, same extents): reductions whose output is exactly ``R`` (reducing
    trailing axes) and row-wise stages ``R x (j...)``; every read of a run member is at
    the row ``[i]`` (a reduction's result, broadcast along the row) or at the reader's
    own point.  AStitch's regional stitching keeps such a run in one kernel."""
    stages: list
    rank: int


def _reads_of(stage, producer) -> list:
    return [ld for ld in loads_of(stage.body) if ld.buffer is producer.output.buffer]


def _row_compatible(stage, producer, rank) -> bool:
    own = tuple(stage.iters) + tuple(stage.reduce_axes)   # the reader's own point
    for ld in _reads_of(stage, producer):
        n = len(ld.indices)
        if n == rank:     # the producer's row value
            if not all(ld.indices[d] is stage.iters[d] for d in range(rank)):
                return False
        elif n == len(own) and n > rank:   # the same point
            if not all(ld.indices[d] is own[d] for d in range(n)):
                return False
        else:
            return False
    return True


def row_runs(graph: KernelGraph, rank: int = 1) -> list[RowRun]:
    """Maximal runs of at least two stages, or a single reduction, over ``rank`` rows
    that contain a reduction (see :class:`RowRun`)."""
    from polycomp.lowering.simplify import const_difference
    runs: list = []
    cur: list = []

    def same_rows(a, b):
        sa, sb = a.output.shape, b.output.shape
        return len(sa) >= rank and len(sb) >= rank and all(
            x is y or const_difference(x, y) == 0 for x, y in zip(sa[:rank], sb[:rank]))

    def fits(s):
        if s.is_reduction:
            if len(s.iters) != rank:
                return False
        elif len(s.iters) < rank:
            return False
        if cur and not same_rows(cur[0], s):
            return False
        return all(_row_compatible(s, p, rank) for p in cur if _reads_of(s, p))

    def close():
        if cur and any(s.is_reduction for s in cur):
            runs.append(RowRun(list(cur), rank))

    for s in graph.stages:
        if fits(s):
            cur.append(s)
        else:
            close()
            cur = [s] if fits_alone(s, rank) else []
    close()
    return runs


def fits_alone(s, rank) -> bool:
    return (s.is_reduction and len(s.iters) == rank) or \
        (not s.is_reduction and len(s.iters) >= rank)


def with_row_runs(groups: list, runs: list) -> list:
    """Replace the groups that exactly cover a row run by one ``rowreduce`` group."""
    out = list(groups)
    for run in runs:
        members = set(run.stages)
        covering = [g for g in out if set(g.prologue + g.stages) & members]
        if {st for g in covering for st in g.prologue + g.stages} != members:
            continue
        first = out.index(covering[0])
        out = [g for g in out if g not in covering]
        out.insert(first, FusionGroup(run.stages[0], "rowreduce", list(run.stages[1:]), [],
                                      run.rank))
    return out
