"""Pass: move reduce loops outside the contiguous output dimension (column reductions).

A reduction such as ``out[j] = sum_i x[i, j]`` runs in program order as ``for j: for i``
— its innermost loop strides through ``x`` by whole rows and reduces into one scalar,
which vectorises poorly.  Exchanging the loops gives ``for i: for j: out[j] += x[i, j]``:
unit stride in ``x`` and ``out``, an elementwise vector update.

Assumes: the program-order subtree of a reduction stage under its filter (``band[s] ->
sequence[init, update -> band[r]]``, or the update's band alone for a 0-d output), and
``ctx.model``.  A stage qualifies when its last output dimension ``j`` is the
(unit-stride) last index of some load of the update and no reduce dimension appears in
the last index of any load: the reduce loop is then not the contiguous one.  It also
qualifies as a *sliding window* (a depthwise convolution ``sum_{rh, rw} x[n, f, s*y + rh,
s*z + rw] * w[f, rh, rw]``, a pooling window): some load's last index is ``s*j + r`` (a
constant stride ``s``, a reduce variable ``r``), every load reading ``j`` reads it only
in its last index, and the rest do not vary with ``j`` (:func:`window_qualifies`); the
exchange then turns the 3-wide reduction vectorised along ``rw`` into vectors along the
output row ``z`` with the window loops outside (a direct depthwise convolution).

Guarantees: the subtree becomes

    sequence
      filter init:   mark cpu_parallel -> band[s]                (coincident)
      filter update: mark cpu_parallel -> band[s_0.., floor(j/T)] -> band[r..] -> band[j mod T]

(``T = TILE`` output elements per parallel task).  Initialisation first is legal (only
same-element dependences go from init to update).  The update band is permutable: its
only dependences are between instances updating the same ``out[s]``, ordered by ``r``,
and every ``j``-tile keeps ``r`` in increasing order for each element, so the
reassociation-free summation order of each element is unchanged; the outer members are
coincident (different elements), so the tile loop may run in parallel.
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.cpu import tree as T
from polycomp.scheduler.cpu.backbone_tile import (
    dim_aff,
    floor_div_aff,
    loop_vars,
    mod_aff,
    to_upa,
    unit_stride_in,
)
from polycomp.state import CompileState

TILE = 256


def _loads(e) -> list:
    out = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) else None)
    return out


def _tiled(node) -> bool:
    """Whether a subtree already holds a micro-kernel (``cpu-backbone-tile`` tiled the
    stage: a channel-form convolution with its init on each register tile starts with
    a band too, not the program-order ``band[s] -> sequence``)."""
    if isinstance(node, T.Mark) and node.name.split(":")[0] == marks.CPU_MICROKERNEL:
        return True
    if isinstance(node, T.Sequence):
        return any(_tiled(c) for c in node.children)
    child = getattr(node, "child", None)
    return child is not None and _tiled(child)


def qualifies(init, update) -> bool:
    stage = update.stage
    if not stage.iters or not stage.reduce_axes:
        return False
    j = stage.iters[-1]
    red = {a.var for a in stage.reduce_axes}
    loads = [ld for ld in _loads(update.value) if ld.buffer is not update.write and ld.indices]
    if window_qualifies(j, red, loads):
        return True
    if not any(unit_stride_in(ld.indices[-1], j) for ld in loads):
        return False
    return not any(loop_vars(ld.indices[-1]) & red for ld in loads)


def window_qualifies(j, red: set, loads: list) -> bool:
    """A sliding window along ``j`` (a depthwise convolution or a pooling window:
    ``x[.., s*j + r]`` with a constant stride ``s >= 1`` and a reduce variable ``r``):
    some load's last index holds ``j`` and a reduce variable, every load that reads ``j``
    reads it in its last index only (with a constant stride), and the others do not vary
    with ``j`` at all (weights ``w[f, r]``: one value per vector).  Exchanged, the
    innermost loop walks ``j``: ``s``-strided loads and a unit-stride update."""
    from polycomp.lowering.vectorize import affine_in
    window = False
    for ld in loads:
        *lead, last = ld.indices
        if any(j in loop_vars(e) for e in lead):
            return False
        vs = loop_vars(last)
        if j not in vs:
            continue
        a = affine_in(last, j)
        if a is None or not isinstance(a[0], int) or a[0] < 1:
            return False
        window = window or bool(vs & red)
    return window


def interchanged(init, update):
    ispace, sp = init.domain.get_space(), update.domain.get_space()
    n_s = ispace.dim(isl.dim_type.set)
    n_all = sp.dim(isl.dim_type.set)
    init_band = T.Band([to_upa(dim_aff(ispace, d)) for d in range(n_s)], permutable=True,
                       coincident=[True] * n_s)
    j = dim_aff(sp, n_s - 1)
    outer = [to_upa(dim_aff(sp, d)) for d in range(n_s - 1)] + [to_upa(floor_div_aff(j, TILE))]
    point = T.Band([to_upa(mod_aff(j, TILE))], permutable=True, coincident=[True])
    red = T.Band([to_upa(dim_aff(sp, d)) for d in range(n_s, n_all)], point, permutable=True)
    upd = T.Mark(marks.CPU_PARALLEL, T.Band(outer, red, permutable=True, coincident=[True] * n_s))
    return T.Sequence([T.Filter(isl.UnionSet.from_set(isl.Set.universe(ispace)),
                                T.Mark(marks.CPU_PARALLEL, init_band)),
                       T.Filter(isl.UnionSet.from_set(isl.Set.universe(sp)), upd)])


def window_rows(init, update):
    """A sliding window (:func:`window_qualifies`) with at least one output dimension
    before the row ``j``: the init and the update of each output row together,

        band[s_0 .. s_{n-2}]          (init and update; coincident)
          sequence
            filter init:   band[j]
            filter update: band[r..] -> band[j]

    so the row of accumulators is zeroed and updated by every window position while it
    is in L1 (a depthwise convolution's 56-wide rows: 9 passes over 224 bytes, not over
    the whole output).  The subtree starts with its band (no mark), so ``cpu-fuse`` can
    fuse the stages after it (a bias, an activation) into the same row loop and the
    accumulator array is contracted to one row; ``cpu-parallel`` marks the outer band.
    Legality: the outer band is coincident and permutable for both statements (every
    dependence is between instances of one output element, which share the outer
    coordinates); per element the init comes first (earlier sequence child) and the
    updates keep their order in ``r``."""
    ispace, sp = init.domain.get_space(), update.domain.get_space()
    n_s = ispace.dim(isl.dim_type.set)
    n_all = sp.dim(isl.dim_type.set)
    outer = [T.union_members([to_upa(dim_aff(ispace, d)), to_upa(dim_aff(sp, d))])
             for d in range(n_s - 1)]
    init_row = T.Band([to_upa(dim_aff(ispace, n_s - 1))], permutable=True, coincident=[True])
    upd_row = T.Band([to_upa(dim_aff(sp, n_s - 1))], permutable=True, coincident=[True])
    red = T.Band([to_upa(dim_aff(sp, d)) for d in range(n_s, n_all)], upd_row,
                 permutable=True)
    seq = T.Sequence([T.Filter(isl.UnionSet.from_set(isl.Set.universe(ispace)), init_row),
                      T.Filter(isl.UnionSet.from_set(isl.Set.universe(sp)), red)])
    return T.Band(outer, seq, permutable=True, coincident=[True] * (n_s - 1))


def _window(init, update) -> bool:
    """:func:`window_rows` applies (``POLYCOMP_WINDOW_ROWS=0``: the whole-output
    exchange, for comparisons)."""
    import os
    if os.environ.get("POLYCOMP_WINDOW_ROWS", "1") == "0":
        return False
    stage = update.stage
    if len(stage.iters) < 2 or not stage.reduce_axes:
        return False
    loads = [ld for ld in _loads(update.value) if ld.buffer is not update.write and ld.indices]
    return window_qualifies(stage.iters[-1], {a.var for a in stage.reduce_axes}, loads)


class CpuReduceInterchangePass(Pass):
    name = "cpu-reduce-interchange"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        domain, tree = T.from_schedule(schedule)
        order = [s.name for s in ctx.model.statements]
        stmts = {s.name: s for s in ctx.model.statements}
        kids = T.stage_children(tree)
        changed = False
        for child in kids:
            filt = child.filter if isinstance(child, T.Filter) else domain
            names = sorted(T.statements_of(filt), key=order.index)
            sts = [stmts[n] for n in names if n in stmts]
            if len(sts) != 2 or sts[0].kind != "init" or sts[1].kind != "update":
                continue
            body = child.child if isinstance(child, T.Filter) else child
            if not isinstance(body, T.Band) or _tiled(body) or not qualifies(*sts):
                continue
            if _window(*sts):
                new = window_rows(*sts)
                ctx.note(self.name, f"{sts[1].stage.name}: sliding window, reduce loops "
                                    f"outside the row, init and update per output row")
            else:
                new = interchanged(*sts)
                ctx.note(self.name, f"{sts[1].stage.name}: reduce loops outside the "
                                    f"contiguous dimension, {TILE}-element parallel tiles")
            if isinstance(child, T.Filter):
                child.child = new
            else:
                tree = new
            changed = True
        return T.to_schedule(domain, tree) if changed else schedule
