"""Vector-unit mapping of row-wise memory-bound kernels into an NPU program.

Assumes: every input is a 2-d ``(R, C)`` tensor or a 1-d ``(C)`` row vector, and every
stage is elementwise over ``(R, C)`` or a sum/max/min reduction over the last axis
(``(R,)``), with loads indexed by the stage's iterators — softmax and layernorm along
the last axis, gelu, relu, elementwise and row reductions.  Tensors are float16 or
float32.  Anything else raises :class:`~polycomp.errors.TargetError` naming the stage.

Guarantees: the program tiles rows by ``TR`` (host tiling: as many rows as UB holds
with every tile buffer, ping-pong copies included); rows are padded to ``CP`` (the
row length rounded up to 16 elements: 32 B for float16, 64 B for float32);
reductions read only the ``C`` valid columns; input tiles and output tiles are
ping-pong buffers whose reuse is ordered by V->MTE2 and MTE3->V flags, each produced
tile by MTE2->V / V->MTE3 flags.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from polycomp import ir
from polycomp.errors import NpuCapacityError, TargetError
from polycomp.hw.npu.program import (
    CopyIn,
    CopyOut,
    GlobalTensor,
    GmRegion,
    Ix,
    LocalBuf,
    Loop,
    Program,
    SetFlag,
    Slot,
    VecOp,
    WaitFlag,
    ceildiv,
    imin,
    ix,
)

_BIN = {"+": "Add", "-": "Sub", "*": "Mul", "/": "Div", "max": "Max", "min": "Min",
        ">": "CompareGT", ">=": "CompareGE", "<": "CompareLT", "<=": "CompareLE",
        "==": "CompareEQ", "!=": "CompareNE"}
_CALL = {"exp": "Exp", "log": "Ln", "sqrt": "Sqrt", "rsqrt": "Rsqrt", "erf": "Erf",
         "tanh": "Tanh", "abs": "Abs", "fabs": "Abs"}
_RED = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}
_FLOATS = ("float16", "float32")


@dataclass(frozen=True)
class Val:
    """A value of the tile computation: a UB buffer (``kind`` ND / COL / ROW) or a
    scalar (a float or a tiling value)."""
    kind: str
    buf: LocalBuf | None = None
    scalar: float | Ix | None = None


@dataclass
class _Builder:
    name: str
    copies: int
    R: str = ""
    C: str = ""
    buffers: list[LocalBuf] = field(default_factory=list)
    ops: list = field(default_factory=list)
    values: dict[str, Val] = field(default_factory=dict)
    inputs: dict[str, Val] = field(default_factory=dict)
    tile_rows: int | str = "TR"
    tile_cols: int | str = "CP"

    def new(self, kind: str, dtype: str, copies: int = 1) -> LocalBuf:
        cols = 32 // {"float16": 2, "float32": 4}[dtype] if kind == "COL" else self.tile_cols
        b = LocalBuf(f"ub{len(self.buffers)}", "UB", dtype,
                     1 if kind == "ROW" else self.tile_rows, cols, kind, copies)
        self.buffers.append(b)
        return b


def _dim_name(e, stage: str) -> str | int:
    """A size symbol's name, or 1 for a broadcast dimension."""
    if ir.is_const(e, 1):
        return 1
    if not isinstance(e, ir.Var):
        raise TargetError(f"npu: {stage}: extent {e} is not a size symbol")
    return e.name


def _slot(b: LocalBuf) -> Slot:
    return Slot(b, ix("t") % b.copies if b.copies > 1 else ix(0))


def _emit(bld: _Builder, op: str, srcs: tuple, dtype: str, kind: str) -> Val:
    if dtype not in _FLOATS:
        raise TargetError(f"npu: the vector mapping takes float16/float32 values, got {dtype}")
    b = bld.new(kind, dtype)
    bld.ops.append((op, b, srcs))
    return Val(kind, b)


def _operand(v: Val):
    return v.scalar if v.buf is None else v.buf


def _load(bld: _Builder, e: ir.Load, row: ir.Var, col: ir.Var, stage: str) -> Val:
    name = e.buffer.name
    pattern = tuple("r" if i is row else "c" if i is col else "0" if ir.is_const(i, 0)
                    else "?" for i in e.indices)
    kind = {("r", "c"): "ND", ("c",): "ROW", ("r",): "COL", ("r", "0"): "COL",
            ("0", "c"): "ROW"}.get(pattern)
    v = bld.values.get(name) or bld.inputs.get(name)
    if kind is None or v is None or v.kind != kind:
        raise TargetError(f"npu: stage {stage} reads {name}[{', '.join(map(str, e.indices))}]"
                          f"; the vector mapping takes row-wise accesses only")
    return v


def _expr(bld: _Builder, e, row, col, stage: str) -> Val:
    if isinstance(e, (ir.IntImm, ir.FloatImm)):
        return Val("S", scalar=float(e.value))
    if isinstance(e, ir.Var):
        return Val("S", scalar=ix(e.name))
    if isinstance(e, ir.Load):
        return _load(bld, e, row, col, stage)
    if isinstance(e, ir.Cast):
        v = _expr(bld, e.value, row, col, stage)
        if v.buf is None or v.buf.dtype == e.dtype:
            return v
        return _emit(bld, "Cast", (v.buf,), e.dtype, v.kind)
    if isinstance(e, ir.Unary) and e.op == "neg":
        v = _expr(bld, e.a, row, col, stage)
        return _emit(bld, "Mul", (_operand(v), -1.0), e.dtype, v.kind)
    args: list[Val]
    if isinstance(e, ir.Binary) and e.op in _BIN:
        op, args = _BIN[e.op], [_expr(bld, x, row, col, stage) for x in (e.a, e.b)]
    elif isinstance(e, ir.Call) and e.name in _CALL:
        op, args = _CALL[e.name], [_expr(bld, x, row, col, stage) for x in e.args]
    elif isinstance(e, ir.Select):
        op, args = "Select", [_expr(bld, x, row, col, stage) for x in (e.cond, e.t, e.f)]
    else:
        raise TargetError(f"npu: stage {stage}: {type(e).__name__} "
                          f"{getattr(e, 'op', getattr(e, 'name', ''))} has no vector "
                          f"instruction in the NPU mapping")
    kinds = [a.kind for a in args]
    if all(k == "S" for k in kinds):
        raise TargetError(f"npu: stage {stage}: a scalar-only expression is not mapped")
    kind = "ND" if "COL" in kinds and "ROW" in kinds else \
        next(k for k in ("ND", "COL", "ROW") if k in kinds)
    dtype = e.dtype if e.dtype in _FLOATS else "float32"
    return _emit(bld, op, tuple(_operand(a) for a in args), dtype, kind)


def _stage(bld: _Builder, s) -> None:
    if s.is_reduction:
        if len(s.iters) != 1 or len(s.reduce_axes) != 1 or s.reduce_op not in _RED:
            raise TargetError(f"npu: stage {s.name}: only reductions over the last axis "
                              f"of a 2-d tensor are mapped to the vector unit")
        v = _expr(bld, s.body, s.iters[0], s.reduce_axes[0].var, s.name)
        if v.kind != "ND":
            raise TargetError(f"npu: stage {s.name}: reduction of a non-tile value")
        acc = s.output.dtype if s.output.dtype in _FLOATS else "float32"
        bld.values[s.name] = _emit(bld, _RED[s.reduce_op], (v.buf, ix(bld.C)), acc, "COL")
        return
    if len(s.iters) != 2:
        raise TargetError(f"npu: stage {s.name} is {len(s.iters)}-d; the vector mapping "
                          f"takes 2-d (rows, columns) stages")
    v = _expr(bld, s.body, s.iters[0], s.iters[1], s.name)
    if v.kind != "ND" or v.buf is None or v.buf.dtype != s.output.dtype:
        v = _emit(bld, "Cast", (_operand(v),), s.output.dtype, "ND")
    bld.values[s.name] = v


def _setup(bld: _Builder, graph) -> tuple[list[GlobalTensor], list, list]:
    tensors, loads, row_loads = [], [], []
    out = graph.outputs[0]
    two_d = [t for t in (out, *graph.inputs) if len(t.shape) == 2]
    if not two_d:
        raise TargetError(f"npu: kernel {graph.name} has no 2-d output or input for the "
                          f"vector mapping")
    R, C = (_dim_name(e, graph.name) for e in two_d[0].shape)
    if not isinstance(R, str) or not isinstance(C, str):
        raise TargetError(f"npu: kernel {graph.name}: the (rows, columns) of "
                          f"{two_d[0].name} are not size symbols")
    bld.R, bld.C = R, C
    for t in graph.inputs:
        if t.dtype not in _FLOATS:
            raise TargetError(f"npu: input {t.name} is {t.dtype}; the vector mapping takes "
                              f"float16/float32")
        dims = tuple(_dim_name(e, t.name) for e in t.shape)
        g = GlobalTensor(t.name, t.dtype, dims)
        tensors.append(g)
        if dims == (bld.R, bld.C):
            b = bld.new("ND", t.dtype, bld.copies)
            loads.append((g, b))
        elif dims in ((bld.C,), (1, bld.C)):
            b = bld.new("ROW", t.dtype)
            row_loads.append((g, b))
        elif dims == (bld.R, 1):
            b = bld.new("COL", t.dtype, bld.copies)
            loads.append((g, b))
        else:
            raise TargetError(f"npu: input {t.name} of shape {dims} is neither (R, C) = "
                              f"({bld.R}, {bld.C}), a row ({bld.C}) / (1, {bld.C}) nor a "
                              f"column ({bld.R}, 1)")
        bld.inputs[t.name] = Val(b.layout, b)
    return tensors, loads, row_loads


def ping_pong(bld: _Builder, v: Val) -> LocalBuf:
    """Give the buffer of ``v`` (an output tile, read by MTE3) ``bld.copies`` copies."""
    assert v.buf is not None
    ob = LocalBuf(v.buf.name, "UB", v.buf.dtype, v.buf.rows, v.buf.cols, v.buf.layout,
                  bld.copies)
    bld.buffers[bld.buffers.index(v.buf)] = ob
    bld.ops = [(op, ob if b == v.buf else b,
                tuple(ob if x == v.buf else x for x in srcs)) for op, b, srcs in bld.ops]
    return ob


def vector_program(graph, double_buffer: bool) -> Program:
    """The vector program of ``graph``; see the module docstring."""
    c = 2 if double_buffer else 1
    bld = _Builder(graph.name, c)
    tensors, loads, row_loads = _setup(bld, graph)
    for s in graph.stages:
        _stage(bld, s)
    t, TR, R = ix("t"), ix("TR"), ix(bld.R)
    rows = imin(TR, R - t * TR)
    outs: list = []
    for o in graph.outputs:
        v = bld.values[o.name]
        ob = ping_pong(bld, v)
        dims = (bld.R, bld.C) if v.kind == "ND" else (bld.R,)
        g = GlobalTensor(o.name, o.dtype, dims, is_output=True)
        tensors.append(g)
        region = GmRegion(g, (t * TR, ix(0))[:len(dims)], (rows, ix(bld.C))[:len(dims)])
        outs.append(CopyOut(_slot(ob), region, pipe="MTE3"))
    vec = tuple(VecOp(op, _slot(b), tuple(_slot(x) if isinstance(x, LocalBuf) else x
                                          for x in srcs), rows) for op, b, srcs in bld.ops)
    s = t % c
    body = (WaitFlag("V", "MTE2", s),
            *(CopyIn(GmRegion(g, (t * TR, ix(0)), (rows, ix(g.dims[1]))), _slot(b))
              for g, b in loads),
            SetFlag("MTE2", "V", s), WaitFlag("MTE2", "V", s),
            WaitFlag("MTE3", "V", s), *vec, SetFlag("V", "MTE2", s),
            SetFlag("V", "MTE3", s), WaitFlag("V", "MTE3", s), *outs,
            SetFlag("MTE3", "V", s))
    pro: tuple = tuple(SetFlag(p, q, ix(e)) for p, q in (("V", "MTE2"), ("MTE3", "V"))
                       for e in range(c))
    if row_loads:
        pro += (*(CopyIn(GmRegion(g, (ix(0),) * len(g.dims), tuple(ix(d) for d in g.dims)),
                         Slot(b)) for g, b in row_loads),
                SetFlag("MTE2", "V", ix(2)), WaitFlag("MTE2", "V", ix(2)))
    epi = tuple(WaitFlag(p, q, ix(e)) for p, q in (("V", "MTE2"), ("MTE3", "V"))
                for e in range(c))
    return Program(graph.name, "vector", tuple(tensors), tuple(bld.buffers),
                   pro + (Loop("t", ceildiv(R, TR), body),) + epi,
                   {"rows": bld.R, "cols": bld.C})


def vector_tiling(prog: Program, sizes: dict, ub_capacity: int) -> dict:
    """Host tiling of a vector program: ``CP`` (row length padded to 16 elements) and
    ``TR`` (rows per tile: as many as UB holds, at most R)."""
    R, C = sizes[prog.tiling["rows"]], sizes[prog.tiling["cols"]]
    cp = -(-C // 16) * 16
    env = {**sizes, "CP": cp, "TR": 1}
    fixed = sum(b.size(env) * b.copies for b in prog.buffers if b.rows != "TR")
    per_row = sum(b.size(env) * b.copies for b in prog.buffers if b.rows == "TR")
    tr = (ub_capacity - fixed) // per_row if per_row else R
    if tr < 1:
        raise NpuCapacityError(f"npu: kernel {prog.name}: one row of {C} elements needs "
                               f"{fixed + per_row} B of UB with its {len(prog.buffers)} "
                               f"buffers; UB holds {ub_capacity} B")
    return {"CP": cp, "TR": max(1, min(tr, R))}
