"""Pass: initial schedule from per-class schedule matrices with backbone separation.

Assumes: ``ctx.model`` is a DSL model (statements carry their stage); the input schedule
is ignored.

Builds, for the fusion groups of :func:`polycomp.scheduler.common.classify.fusion_groups`
(backbone + epilogue, prologue stages in front), the tree whose flattened schedule is,
per statement (``g`` = group position, ``p`` = position inside the group):

* prologue stage ``P[o]``:        ``[g, 0, o]``          under a mark ``prologue``
* backbone init ``C_init[o]``:    ``[g, 1, o, 0]``
* backbone update ``C_upd[o,r]``: ``[g, 1, o, 1, r]``
* epilogue stage ``E_p[o]``:      ``[g, 1, o, 2 + p]``

i.e. ``domain -> sequence(groups) -> [sequence(prologue, body)] -> band(o)`` (permutable,
members marked coincident where :func:`band_coincidence` proves it) ``-> sequence(init,
update -> band(r), epilogue...)``; the group's root filter is preceded by a mark
``backbone:<n>`` whose payload, the group's operator class, is ``backbones(state)[n]``
(:class:`Backbones`).  (Epilogue statements are not marked: isl cannot read back a mark
directly above a leaf; the pass notes list them.)  The epilogue is thus pulled out of
the reduction loops but kept under the common output band (TSCompiler Fig. 7e/8c), so a
later tiling of that band tiles the epilogue with the backbone.

*Row stitching* (AStitch's regional scheme): a run of stages over the same rows ``R``
(one to three dimensions, e.g. ``B x S`` for a layernorm over ``(B, S, H)``)
— reductions to ``R`` and row-wise stages ``R x J`` reading run members only at the row
or at their own point (:func:`~polycomp.scheduler.common.classify.row_runs`) — becomes one
group of class ``rowreduce``: a band over ``R`` above the sequence of all its statements,
each with a band over its own inner (reduce or row-wise) dimensions.  Every read of a run
member is at the same row, so the consumer's per-row read footprint is contained in the
producer's per-row write footprint.

Guarantees: every flow dependence into an epilogue statement comes from a statement of
the same output point ``o`` (the same row, for a stitched group) that is earlier in the
inner sequence, or from an earlier group; hence the schedule is legal (checked in
debug mode).  A kernel whose stages are
not all classified falls back to the program-order tree; ``options.isl_scheduler``
is handled by the isl scheduler pass instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp.frontend.dsl_model import DslModel
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.classify import fusion_groups, row_runs, with_row_runs
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import (
    band_map,
    mark_coincidence,
    reduce_band,
    stmt_filter,
    union_set_list,
)
from polycomp.state import CompileState


@dataclass(frozen=True)
class Backbone:
    """The payload of a ``backbone:<n>`` mark: ``kind``, the operator class of the group
    below it (a DSL fusion group's class: ``matmul``, ``conv``, ``reduce``,
    ``elementwise``, ``rowreduce``, ...; a C loop nest's path kind: ``contraction``,
    ``elementwise``)."""
    kind: str


@dataclass(eq=False)
class Backbones:
    """The payloads of a compile's ``backbone:<n>`` marks, indexed by ``n`` (a slot of the
    compile state; the passes that place backbone marks add them here)."""
    items: list[Backbone] = field(default_factory=list)

    def mark(self, kind: str) -> isl.Id:
        """A new ``backbone:<n>`` mark for a group of class ``kind``."""
        self.items.append(Backbone(kind))
        return marks.make(marks.BACKBONE, len(self.items) - 1)

    def of(self, node_or_name: isl.ScheduleNode | str) -> Backbone:
        """The payload of a ``backbone:<n>`` mark (a node or its name)."""
        return self.items[marks.index_of(node_or_name, marks.BACKBONE)]


def backbones(state: CompileState) -> Backbones:
    """The backbone marks' payloads of ``state``'s compile."""
    return state.slot(Backbones)


def _trimmed(run, groups):
    """A run of two- or three-dimensional rows as a row group may take it: without the
    stages at either end that belong to a fusion group reaching outside the run (a
    product's epilogue, e.g. the bias and residual additions before a layernorm, stays
    with the product's kernel), and only when its reductions are no contractions (a
    batched product's output points are no rows); None when nothing is left to stitch."""
    from polycomp.scheduler.common.classify import RowRun
    owner = {st: g for g in groups for st in g.prologue + g.stages}
    stages = list(run.stages)

    def inside(st):
        g = owner.get(st)
        return g is not None and set(g.prologue + g.stages) <= set(stages)
    while stages and not inside(stages[0]):
        stages.pop(0)
    while stages and not inside(stages[-1]):
        stages.pop()
    if not any(st.is_reduction for st in stages) or any(
            owner[st].kind in ("contraction", "conv") for st in stages if st.is_reduction):
        return None
    return RowRun(stages, run.rank)


class PatternSchedulePass(Pass):
    name = "pattern-schedule"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        m = ctx.model
        if not isinstance(m, DslModel):  # a C SCoP: keep its tree
            ctx.note(self.name, "no DSL stages: kept the front end's schedule tree")
            return schedule
        groups = fusion_groups(m.graph)
        if ctx.cuda_options.row_stitching:
            runs: list = [r for r in row_runs(m.graph) if self._stitchable(m, r, ctx)]
            for rank in (2, 3):         # rows of two or three dimensions (B x S x ...)
                taken = {st for r in runs for st in r.stages}
                for r in row_runs(m.graph, rank):
                    r = _trimmed(r, groups)
                    if r is not None and not taken & set(r.stages) and \
                            self._stitchable(m, r, ctx):
                        runs.append(r)
            groups = with_row_runs(groups, runs)
        by_stage: dict = {}
        for s in m.statements:
            by_stage.setdefault(s.stage, []).append(s)
        ictx = m.domain.get_ctx()
        sched = isl.Schedule.from_domain(m.domain)
        node = sched.get_root().child(0)
        group_stmts = [[s for st in g.prologue + g.stages for s in by_stage[st]] for g in groups]
        if len(groups) > 1:
            filters = [stmt_filter(x, ictx) for x in group_stmts]
            node = node.insert_sequence(union_set_list(ictx, filters))
        for k, g in enumerate(groups):
            leaf = node.child(k).child(0) if len(groups) > 1 else node
            depth = leaf.get_tree_depth()
            leaf = self._group(leaf, g, by_stage, ictx, m.dependences, ctx)
            while leaf.get_tree_depth() > depth:
                leaf = leaf.parent()
            node = leaf.parent().parent() if len(groups) > 1 else leaf
        ctx.note(self.name, "groups: " + "; ".join(
            f"{g.kind} {g.backbone.name}"
            + (f" + epilogue {[e.name for e in g.epilogue]}" if g.epilogue else "")
            + (f" + prologue {[p.name for p in g.prologue]}" if g.prologue else "")
            for g in groups))
        return node.get_schedule()

    def _stitchable(self, m, run, ctx) -> bool:
        """AStitch's legality test, in isl: for every read of a run member by a later
        member, the elements read for a row are a subset of the elements the producer
        writes for that row (so one kernel iteration per row sees all it needs)."""
        members = {st.output.buffer.name: st for st in run.stages}

        def per_row(stmt, rel):
            # { S[i, ...] -> A[...] }  ->  { [i] -> A[...] }
            n = stmt.domain.dim(isl.dim_type.set)
            return rel.reset_tuple_id(isl.dim_type.in_).project_out(
                isl.dim_type.in_, run.rank, n - run.rank)

        writes: dict = {}
        for s in m.statements:
            if s.stage in run.stages:
                for a in s.writes:
                    w = per_row(s, a.relation)
                    name = a.buffer.name
                    writes[name] = w if name not in writes else writes[name].union(w)
        for s in m.statements:
            if s.stage not in run.stages:
                continue
            for a in s.reads:
                if a.buffer.name in members and members[a.buffer.name] is not s.stage:
                    if not per_row(s, a.relation).is_subset(writes[a.buffer.name]):
                        ctx.note(self.name, f"row run {[x.name for x in run.stages]} not stitched: "
                                            f"{s.name} reads {a.buffer.name} outside its rows")
                        return False
        return True

    def _group(self, node, g, by_stage, ictx, deps, ctx):
        node = node.insert_mark(backbones(ctx).mark(g.kind)).child(0)
        if g.prologue:
            pro = [s for st in g.prologue for s in by_stage[st]]
            body = [s for st in g.stages for s in by_stage[st]]
            node = node.insert_sequence(union_set_list(ictx, [stmt_filter(pro, ictx),
                                                              stmt_filter(body, ictx)]))
            p = node.child(0).child(0).insert_mark(marks.make(marks.PROLOGUE)).child(0)
            p = self._output_band(p, pro, len(g.prologue[0].iters), deps)
            while p.get_tree_depth() > node.get_tree_depth():
                p = p.parent()
            node = p.child(1).child(0)
        return self._body(node, g, by_stage, ictx, deps)

    def _output_band(self, node, stmts, n, deps):
        if n == 0:
            return node
        node = node.insert_partial_schedule(band_map(stmts, n)).band_set_permutable(1)
        return mark_coincidence(node, deps)

    def _body(self, node, g, by_stage, ictx, deps):
        bb = by_stage[g.backbone]
        epi = [s for st in g.epilogue for s in by_stage[st]]
        nspatial = g.rows if g.rows is not None else len(g.backbone.iters)
        node = self._output_band(node, bb + epi, nspatial, deps)
        if nspatial:
            node = node.child(0)
        parts = [[s] for s in bb] + [[s] for s in epi]
        if len(parts) == 1:
            return node
        node = node.insert_sequence(union_set_list(ictx, [stmt_filter(p, ictx) for p in parts]))
        for k, part in enumerate(parts):
            s = part[0]
            leaf = node.child(k).child(0)
            if len(s.iters) > nspatial:  # reduce axes, or a row-wise stage's inner dims
                leaf = leaf.insert_partial_schedule(
                    reduce_band(s, nspatial, len(s.iters) - nspatial))
                node = leaf.parent().parent()
        return node
