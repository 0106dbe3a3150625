"""The vector-unit part of a fused NPU chain: the middle stages on one ``TM x TL`` tile.

:class:`TileVec` translates the elementwise stages between the two products (their IR
bodies) into vector instructions on UB tiles, per ``(m-block, l-block)``:

* a load of the previous array at the stage's own point is the current tile (``ND``);
* a load of another input indexed by the stage's iterators is a tile of it copied in
  by MTE2 for this block: ``(.., m, l)`` an ``ND`` tile, ``(.., l)`` one ``ROW``,
  ``(.., m)`` a ``COL`` value per row (batch iterators pick the batch element);
* the iterator ``m`` is ``mo*TM + r`` (a ``COL`` of row numbers), ``l`` is
  ``lo*TL + c`` (a ``ROW`` of column numbers), a batch iterator a scalar: both index
  vectors are made once per program by ``Duplicate`` over a shrinking number of rows
  of a ``COL`` buffer (``TL^2/16 + 4 TL`` vector cycles; and a ``Transpose`` for the
  row), as there is no iota instruction in the NPU API this project declares;
* ``+ - * /``, ``min``/``max``, comparisons (0/1 values), ``select``, ``exp``,
  ``tanh``, ``sqrt``, ``abs``, negation and float32 casts become one instruction each.

Temporaries come from a pool per ``(layout, dtype)``: an expression node's result is
freed when its parent has read it, a stage's result when the next stage is done, so a
causal mask with a scale needs two ``TM x TL`` temporaries, not one per node.  Every
temporary is touched by the vector pipe only (no flags).  Anything else raises
:class:`~polycomp.errors.TargetError` (the chain is then compiled unfused).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import numpy as np

from polycomp import ir
from polycomp.errors import TargetError

from .program import (
    CopyIn,
    GlobalTensor,
    GmRegion,
    Ix,
    LocalBuf,
    Loop,
    Scalar,
    Slot,
    VecCall,
    VecOp,
    ix,
)

__all__ = ["TileVec", "Val", "InputTile"]

_BIN = {"+": "Add", "-": "Sub", "*": "Mul", "/": "Div", "max": "Max", "min": "Min",
        ">": "CompareGT", ">=": "CompareGE", "<": "CompareLT", "<=": "CompareLE",
        "==": "CompareEQ", "!=": "CompareNE"}
_CALL = {"exp": "Exp", "tanh": "Tanh", "sqrt": "Sqrt", "abs": "Abs"}
_FOLD = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
         "Max": np.maximum, "Min": np.minimum, "CompareGT": np.greater,
         "CompareGE": np.greater_equal, "CompareLT": np.less, "CompareLE": np.less_equal,
         "CompareEQ": np.equal, "CompareNE": np.not_equal, "Exp": np.exp, "Tanh": np.tanh,
         "Sqrt": np.sqrt, "Abs": np.abs}


@dataclass(frozen=True)
class Val:
    """A tile value: ``kind`` ND (TM x TL), COL (a value per row), ROW (one row) or S
    (a scalar: a float or an index expression); ``buf`` for tiles, ``temp`` when it
    belongs to the pool."""
    kind: str
    buf: LocalBuf | None = None
    scalar: float | Ix | None = None
    temp: bool = False


@dataclass(frozen=True)
class InputTile:
    """An input's tile for one block: the GM box (offsets/extents as index
    expressions of the block), the UB buffer (ping-pong) and its kind; ``row_stride``
    the GM elements between consecutive rows (``m``)."""
    tensor: GlobalTensor
    buf: LocalBuf
    kind: str
    offsets: tuple[Ix, ...]
    extents: tuple[Ix, ...]
    row_stride: Ix


@dataclass
class TileVec:
    """The translator (module docstring).  ``pp`` selects the ping-pong copy of
    buffers another pipe fills; ``iters`` maps the chain's batch iterators to loop
    variables; ``m_off``/``l_off`` are the block's first row and column, ``m_ext``/
    ``l_ext`` its valid extents."""
    tm: int
    tl: int
    copies: int
    pp: Ix
    m_off: Ix
    l_off: Ix
    m_ext: Ix
    l_ext: Ix
    batch_vars: tuple[str, ...]
    gm: dict                                  # input name -> GlobalTensor
    ops: list = field(default_factory=list)   # VecOps of one block, in order
    pre: list = field(default_factory=list)   # once per program (index vectors)
    buffers: list = field(default_factory=list)
    loads: dict = field(default_factory=dict)  # (tensor, pattern) -> InputTile
    free: dict = field(default_factory=dict)
    row_ids: LocalBuf | None = None
    col_ids: LocalBuf | None = None
    _cache: dict = field(default_factory=dict)

    # ---------------------------------------------------------------- buffers
    def new(self, kind: str, dtype: str, copies: int = 1, name: str | None = None) -> LocalBuf:
        rows = 1 if kind == "ROW" else self.tm
        cols = (32 // _size(dtype)) if kind == "COL" else self.tl
        b = LocalBuf(name or f"ubT{len(self.buffers)}", "UB", dtype, rows, cols, kind, copies)
        self.buffers.append(b)
        return b

    def temp(self, kind: str, dtype: str = "float32") -> Val:
        pool = self.free.setdefault((kind, dtype), [])
        b = pool.pop() if pool else self.new(kind, dtype)
        return Val(kind, b, temp=True)

    def release(self, v: Val) -> None:
        if v.temp and v.buf is not None:
            self.free.setdefault((v.kind, v.buf.dtype), []).append(v.buf)

    def slot(self, b: LocalBuf) -> Slot:
        return Slot(b, self.pp if b.pingpong or b.copies > 1 else ix(0))

    # ---------------------------------------------------------------- ops
    def emit(self, op: str, args: list[Val], kind: str | None = None,
             dst: Val | None = None, extra: tuple = ()) -> Val:
        """``op`` over ``args`` (then the scalars ``extra``: a reduction's valid
        columns); the result in ``dst`` or a new temporary."""
        if all(a.kind == "S" for a in args) and dst is None:
            if all(isinstance(a.scalar, float) for a in args) and op in _FOLD:
                with np.errstate(all="ignore"):
                    v = _FOLD[op](*(np.float32(cast(float, a.scalar)) for a in args))
                return Val("S", scalar=float(np.float32(v)))
            args = [self.emit("Duplicate", [args[0]], "COL"), *args[1:]]
        kinds = {a.kind for a in args}
        if kind is None:
            kind = "ND" if "ND" in kinds or {"COL", "ROW"} <= kinds else \
                ("COL" if "COL" in kinds else "ROW")
        srcs = tuple(self.slot(a.buf) if a.buf is not None else a.scalar for a in args)
        srcs += extra
        for a in args:
            self.release(a)
        out = dst if dst is not None else self.temp(kind)
        assert out.buf is not None
        self.ops.append(VecOp(op, self.slot(out.buf), srcs, self.m_ext))
        return out

    # ---------------------------------------------------------------- index vectors
    def _row_numbers(self) -> LocalBuf:
        """A COL buffer holding 0..TM-1 (made once per program)."""
        if self.row_ids is None:
            b = self.new("COL", "float32", name="ubRowIds")
            r = ix("r_ids")
            self.pre.append(Loop("r_ids", ix(self.tm), (
                VecOp("Duplicate", Slot(b), (ix(self.tm - 1) - r,), ix(self.tm) - r),)))
            self.row_ids = b
        return self.row_ids

    def _col_numbers(self) -> LocalBuf:
        """A ROW buffer holding 0..TL-1: ``Duplicate`` of ``TL - 1 - c`` over its first
        ``TL - c`` elements for c = 0, 1, ... (element e keeps the last value written)."""
        if self.col_ids is None:
            row = LocalBuf("ubColIds", "UB", "float32", 1, self.tl, "ROW")
            self.buffers.append(row)
            c = ix("c_ids")
            self.pre += [Loop("c_ids", ix(self.tl), (
                VecCall("Duplicate", Slot(row), (Scalar(ix(self.tl - 1) - c),),
                        ix(self.tl) - c),))]
            self.col_ids = row
        return self.col_ids

    def m_index(self) -> Val:
        if "m" not in self._cache:
            self._cache["m"] = self.emit("Add", [Val("COL", self._row_numbers()),
                                                 Val("S", scalar=self.m_off)])
        return self._cache["m"]

    def l_index(self) -> Val:
        if "l" not in self._cache:
            self._cache["l"] = self.emit("Add", [Val("ROW", self._col_numbers()),
                                                 Val("S", scalar=self.l_off)])
        return self._cache["l"]

    def keep(self, v: Val) -> Val:
        """``v`` without pool ownership (a cached value read several times)."""
        return Val(v.kind, v.buf, v.scalar, False)

    def zero_safe(self) -> bool:
        """Do the block's instructions map an all-zero column (``T`` and the inputs
        past ``L`` are zero-padded) to finite values?  Only then may the columns past
        ``L`` reach the second product unmasked (their ``Z`` rows are zero)."""
        safe = {"Add", "Sub", "Mul", "Max", "Min", "Tanh", "Abs", "Cast"}
        return all(isinstance(o, VecOp) and o.op in safe
                   and all(not isinstance(x, float) or np.isfinite(x) for x in o.srcs)
                   for o in self.ops) \
            and self.row_ids is None and self.col_ids is None

    def end_block(self) -> None:
        """Release the values cached for one block."""
        for v in self._cache.values():
            self.release(v)
        self._cache.clear()

    # ---------------------------------------------------------------- stages
    def stage(self, body: ir.Expr, prev: ir.Buffer, cur: Val, iters: tuple, nb: int) -> Val:
        """The value of a middle stage ``body`` (``prev`` at its own point is ``cur``)."""
        roles = {v.name: ("b", k) for k, v in enumerate(iters[:nb])}
        roles[iters[nb].name] = ("m", 0)
        roles[iters[nb + 1].name] = ("l", 0)
        return self._expr(body, prev, cur, roles)

    def _expr(self, e, prev, cur: Val, roles: dict) -> Val:
        if isinstance(e, (ir.IntImm, ir.FloatImm)):
            return Val("S", scalar=float(e.value))
        if isinstance(e, ir.Var):
            role = roles.get(e.name)
            if role is None:
                raise TargetError(f"npu chain: the symbol {e.name} as a value")
            if role[0] == "m":
                return self.keep(self.m_index())
            if role[0] == "l":
                return self.keep(self.l_index())
            return Val("S", scalar=ix(self.batch_vars[role[1]]))
        if isinstance(e, ir.Load):
            if e.buffer is prev:
                return Val(cur.kind, cur.buf)
            return self._input(e, roles)
        if isinstance(e, ir.Cast):
            if e.dtype not in ("float32", "bool"):
                raise TargetError(f"npu chain: a cast to {e.dtype} between the products")
            return self._expr(e.value, prev, cur, roles)
        if isinstance(e, ir.Unary) and e.op == "neg":
            return self.emit("Mul", [self._expr(e.a, prev, cur, roles), Val("S", scalar=-1.0)])
        if isinstance(e, ir.Binary) and e.op in _BIN:
            return self.emit(_BIN[e.op], [self._expr(x, prev, cur, roles) for x in (e.a, e.b)])
        if isinstance(e, ir.Call) and e.name in _CALL and len(e.args) == 1:
            return self.emit(_CALL[e.name], [self._expr(e.args[0], prev, cur, roles)])
        if isinstance(e, ir.Select):
            return self.emit("Select", [self._expr(x, prev, cur, roles)
                                        for x in (e.cond, e.t, e.f)])
        raise TargetError(f"npu chain: {type(e).__name__} {getattr(e, 'op', '')} between "
                          f"the products has no vector instruction here")

    def _input(self, e: ir.Load, roles: dict) -> Val:
        t = self.gm.get(e.buffer.name)
        if t is None or t.dtype != "float32":
            raise TargetError(f"npu chain: {e.buffer.name} read between the products is not "
                              f"a float32 input")
        pat = []
        for i in e.indices:
            if not isinstance(i, ir.Var) or i.name not in roles:
                raise TargetError(f"npu chain: {e.buffer.name} is not indexed by iterators")
            pat.append(roles[i.name])
        names = [p[0] for p in pat]
        if "m" in names and "l" in names and names.index("m") > names.index("l"):
            raise TargetError(f"npu chain: {e.buffer.name} is indexed (l, m)")
        kind = "ND" if {"m", "l"} <= set(names) else \
            ("ROW" if "l" in names else ("COL" if "m" in names else ""))
        if not kind:
            raise TargetError(f"npu chain: {e.buffer.name} indexed by batch iterators only")
        key = (t.name, tuple(pat))
        if key not in self.loads:
            buf = self.new(kind, "float32", name=f"ub_{t.name}_{len(self.buffers)}")
            buf = LocalBuf(buf.name, buf.level, buf.dtype, buf.rows, buf.cols, buf.layout,
                           pingpong=True)
            self.buffers[-1] = buf
            offs, exts = [], []
            for p in pat:
                o, x = {"m": (self.m_off, self.m_ext), "l": (self.l_off, self.l_ext)}.get(
                    p[0], (ix(self.batch_vars[p[1]]), ix(1)))
                offs.append(o)
                exts.append(x)
            mpos = names.index("m") if "m" in names else len(names) - 1
            stride = ix(1)
            for d in t.dims[mpos + 1:]:
                stride = stride * ix(d)
            self.loads[key] = InputTile(t, buf, kind, tuple(offs), tuple(exts), stride)
        return Val(kind, self.loads[key].buf)

    def copy_ins(self) -> tuple:
        """The MTE2 copies of this block's input tiles."""
        out = []
        for it in self.loads.values():
            split = 0 if it.kind == "COL" else 1
            out.append(CopyIn(GmRegion(it.tensor, it.offsets, it.extents, split,
                                       it.row_stride if it.kind != "ROW" else None),
                              self.slot(it.buf)))
        return tuple(out)


def _size(dtype: str) -> int:
    return {"float16": 2, "float32": 4}[dtype]
