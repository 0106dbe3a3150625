"""Lowering of memory promotions: statement rewriting and copy/sync statements.

The promotion passes (:mod:`polycomp.scheduler.promotion.shared`,
:mod:`polycomp.scheduler.promotion.registers`, :mod:`polycomp.scheduler.gpu.rowreduce`)
leave :class:`~polycomp.scheduler.promotion.record.Promotion` records in
``promotion_state(state).promotions``, each copy statement typed by a
:class:`~polycomp.scheduler.promotion.record.CopyStmt`.  Here:

* an instance of a promoted statement accesses ``local[(idx - offset) // stride]``
  instead of ``array[idx]`` (the offset is the box offset at that instance, an isl Aff
  of the statement coordinates converted with :func:`polycomp.affine.aff_to_ir`,
  read once per statement: :class:`polycomp.affine.AffForm`);
* ``copy_in`` extension statements ``copy[p, a]`` store ``array[a]`` (or, for a fused
  producer, the producer's expression at ``a``) into ``local``; ``copy_out`` statements
  store ``local`` back into ``array``; ``sync`` statements are barriers;
  for the CUDA-only part of a record (``promo.warp``, a privatised reduction),
  ``warp_allreduce`` statements combine a privatised accumulator across the threads of
  a row (:func:`polycomp.hw.cuda.rowreduce.allreduce`: a ``__shfl_xor_sync`` butterfly
  over the row's lanes, through shared memory across the warps of a longer row);
  ``store_lane0`` statements have the row's thread 0 store it; ``copy_in_lane0``
  statements start thread 0's accumulator from the element and the others' from 0
  (:mod:`polycomp.scheduler.gpu.scop_reduce`).
"""
from __future__ import annotations

from polycomp import ir
from polycomp.affine import AffForm
from polycomp.errors import PolycompInternalError
from polycomp.scheduler.promotion.record import CopyStmt, Promotion


def _local_index(promo, idx, offsets):
    out = []
    for d, (i, off) in enumerate(zip(idx, offsets)):
        e = i - off
        s = promo.box.strides[d]
        out.append(e if s == 1 else e // s)
    return tuple(out)


class _Redirect(ir.Mutator):
    def __init__(self, table):
        self.table = table  # array name -> (promo, offsets IR)

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        hit = self.table.get(e.buffer.name)
        if hit is None:
            return ir.Load(e.buffer, idx, e.dtype, e.lanes) if idx != e.indices else e
        promo, offs = hit
        return ir.Load(promo.local, _local_index(promo, idx, offs), e.dtype)

    def visit_Store(self, s):
        idx = tuple(self.visit(i) for i in s.indices)
        v = self.visit(s.value)
        hit = self.table.get(s.buffer.name)
        if hit is None:
            return ir.Store(s.buffer, idx, v, s.lanes)
        promo, offs = hit
        return ir.Store(promo.local, _local_index(promo, idx, offs), v)


class _Inline(ir.Mutator):
    """Replace loads of inlined arrays by their producer's expression at that point."""

    def __init__(self, inlined):
        self.inlined = inlined  # array name -> Stage

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        st = self.inlined.get(e.buffer.name)
        if st is None:
            return ir.Load(e.buffer, idx, e.dtype, e.lanes) if idx != e.indices else e
        return self.visit(ir.substitute(st.body, dict(zip(st.iters, idx))))


def promoted_builders(model, promotions, var, inlined: dict | None = None) -> dict:
    """Statement builders (name -> fn(args) -> Stmt) for promoted and copy statements.

    ``var(name)`` returns the IR Var of an isl parameter (model symbols and block/thread
    ids); ``inlined`` maps arrays that are never stored to the stage computing them: a
    load of one becomes the stage's expression (recomputation instead of storage)."""
    params = ParamLookup(var)
    inlined = inlined or {}
    by_stmt: dict = {}
    for p in promotions:
        for sname, offs in p.offsets.items():
            by_stmt.setdefault(sname, []).append((p, offs))
    out = {}
    for s in model.statements:
        reads_inlined = any(a.buffer.name in inlined for a in s.reads)
        if s.name not in by_stmt and not reads_inlined:
            continue

        # the offsets read once (make runs once per generated instance)
        forms = [(p, [AffForm(o) for o in offs]) for p, offs in by_stmt.get(s.name, ())]

        def make(args, s=s, forms=forms):
            stmt = ir.substitute(s.store(), dict(zip(s.iters, args)))
            if inlined:
                stmt = _Inline(inlined).visit(stmt)
            table = {}
            for p, offs in forms:
                table[p.array.name] = (p, [o.to_ir(args, params) for o in offs])
            return _Redirect(table).visit(stmt) if table else stmt
        out[s.name] = make
    for p in promotions:
        for cname, copy in p.copies.items():
            out[cname] = _copy_builder(p, copy, params)
    return out


def _copy_builder(p: Promotion, copy: CopyStmt, params):
    kind, nprefix = copy.kind, copy.n_prefix
    # the box offsets read once (make runs once per generated instance)
    forms = [AffForm(o) for o in p.box.offsets] if kind != "sync" else []

    def make(args):
        if kind == "sync":
            return ir.barrier()
        pre, a = args[:nprefix], tuple(args[nprefix:])
        offs = [o.to_ir(pre, params) for o in forms]
        lidx = _local_index(p, a, offs)
        if kind == "copy_in":
            if p.producer is not None:
                st = p.producer
                value = ir.substitute(st.body, dict(zip(st.iters, a)))
            else:
                value = ir.Load(p.array, a, p.array.dtype)
            return ir.Store(p.local, lidx, value)
        if kind == "copy_out":
            return ir.Store(p.array, a, ir.Load(p.local, lidx, p.array.dtype))
        zero = tuple(ir.IntImm(0) for _ in p.local.shape)
        if kind == "warp_allreduce":   # butterfly: every lane ends with the row's result
            from .rowreduce import allreduce
            return allreduce(p, params)
        if kind == "copy_in_lane0":     # lane 0 starts from the element, the others from 0
            lane = params[p.warp.lane_param]
            return ir.Store(p.local, zero, ir.Select(
                ir.Binary("==", lane, ir.IntImm(0), "bool"),
                ir.Load(p.array, a, p.array.dtype), _zero(p.local.dtype), p.local.dtype))
        if kind == "store_lane0":
            lane = params[p.warp.lane_param]
            return ir.IfThenElse(ir.Binary("==", lane, ir.IntImm(0), "bool"),
                                 ir.Store(p.array, a, ir.Load(p.local, zero, p.array.dtype)))
        raise PolycompInternalError(f"unknown copy kind {kind}")
    return make


def _zero(dtype: str) -> ir.Expr:
    return ir.FloatImm(0.0, dtype) if dtype.startswith("float") else ir.IntImm(0, dtype)


class ParamLookup(dict):
    """Every name is a parameter: ``lookup[name]`` is ``var(name)`` (the IR variable the
    copy code uses for a schedule parameter of the promoted group)."""

    def __init__(self, var):
        super().__init__()
        self.var = var

    def __contains__(self, name):
        return True

    def __getitem__(self, name):
        return self.var(name)
