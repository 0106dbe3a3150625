"""Lowering of a vector plan (memory-bound stages on the vector unit) to the NPU IR.

Assumes: the kernel's dimensions take the roles of :mod:`.view` — batch loops, a row
dimension tiled by ``TR`` rows, a column group held whole in a tile row (padded to
``CP`` elements: 32 B for float16, 64 B for float32), carried reduced dimensions —
and every stage is elementwise over ``(row, columns)`` or a sum/max/min reduction over
the columns (plus carried dimensions for a single reduction), with loads indexed by
the stage's iterators.  Tensors are float16 or float32.  Anything else raises
:class:`~polycomp.errors.TargetError` naming the stage.

Guarantees: each GM tensor is read and written as a 2-d box — ``(row, columns)``
directly, ``(columns, row)`` (an axis-0 reduction, a transpose, softmax over a leading
axis) through a staging tile of ``CP x TRP`` elements (``TRP``: ``TR`` rounded up to
16) and a vector ``Transpose``; row vectors ``(columns)`` are loaded once, values per
row ``(row)`` per tile.  The host tiling sets ``TR`` to as many rows as UB holds with
every buffer (ping-pong copies included).  Reductions read only the valid columns; a
carried reduction accumulates into the tile's result from its identity
(``Duplicate``).  Input tiles and output tiles are marked ``pingpong`` with the tile
(inside carried loops: the load) number as their rotation counter, for the
double-buffering pass; temporaries are touched by the vector pipe only.  The program
has no flags: :mod:`.sync` places them.  Without carried reductions: one op per
distinct expression node (the same op on the same values is computed once), the ops
over row vectors only run once before the tile loop (:func:`hoist_rows`), and a
product read only by a sum becomes a ``FusedMulAdd`` (:func:`fuse_mul_add`).  The
dimension roles come from :mod:`polycomp.scheduler.npu.view` (the ``npu-map`` pass
records them).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from polycomp import ir
from polycomp.errors import NpuCapacityError, TargetError
from polycomp.scheduler.npu.view import (
    VectorView,
    choose_view,
    dim_size,
    stage_vars,
    tensor_keys,
)

from .lower_cube import tile_walk
from .program import (
    CopyIn,
    CopyOut,
    GlobalTensor,
    GmRegion,
    Ix,
    Kernel,
    Let,
    LocalBuf,
    Loop,
    Phase,
    Program,
    Slot,
    Tiling,
    VecOp,
    ceildiv,
    imin,
    ix,
    product,
)

_BIN = {"+": "Add", "-": "Sub", "*": "Mul", "/": "Div", "max": "Max", "min": "Min",
        ">": "CompareGT", ">=": "CompareGE", "<": "CompareLT", "<=": "CompareLE",
        "==": "CompareEQ", "!=": "CompareNE"}
_CALL = {"exp": "Exp", "log": "Ln", "sqrt": "Sqrt", "rsqrt": "Rsqrt", "erf": "Erf",
         "tanh": "Tanh", "abs": "Abs", "fabs": "Abs"}
_RED = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}
_ACC = {"sum": ("Add", 0.0), "max": ("Max", float("-inf")), "min": ("Min", float("inf"))}
_FLOATS = ("float16", "float32")


@dataclass(frozen=True)
class Val:
    """A value of the tile computation: a UB buffer (``kind`` ND / COL / ROW) or a
    scalar (a float or a tiling value)."""
    kind: str
    buf: LocalBuf | None = None
    scalar: float | Ix | None = None


@dataclass(frozen=True)
class GmAccess:
    """How a GM tensor meets its UB tile: ``kind`` ND / COL / ROW, ``transposed`` when
    its columns come before its row in GM, and the box's split and row stride."""
    kind: str
    transposed: bool
    split: int
    row_stride: Ix


@dataclass
class _Builder:
    name: str
    view: VectorView
    buffers: list[LocalBuf] = field(default_factory=list)
    ops: list = field(default_factory=list)
    values: dict[str, Val] = field(default_factory=dict)
    inputs: dict[str, Val] = field(default_factory=dict)
    keys: dict[str, tuple] = field(default_factory=dict)    # tensor -> dimension keys
    tile_rows: int | str = "TR"
    tile_cols: int | str = "CP"
    pre_ops: list = field(default_factory=list)    # before the carried loops
    carry_end: int = 0                             # ops[:carry_end] run inside them
    prefix: str = "ub"                             # of the buffers' names
    # (op, sources, type, kind) -> the value an earlier op computed: one op per
    # distinct node (a tensor cast in two stages is cast once); off with carried
    # reductions, whose running total is written in place
    memo: dict[tuple, Val] = field(default_factory=dict)

    @property
    def C(self) -> Ix:
        return product(dim_size(k) for k in self.view.cols)

    def new(self, kind: str, dtype: str, pingpong: bool = False) -> LocalBuf:
        cols = 32 // {"float16": 2, "float32": 4}[dtype] if kind == "COL" else self.tile_cols
        b = LocalBuf(f"{self.prefix}{len(self.buffers)}", "UB", dtype,
                     1 if kind == "ROW" else self.tile_rows, cols, kind, pingpong=pingpong)
        self.buffers.append(b)
        return b

    def staging(self, dtype: str) -> LocalBuf:
        """A ``CP x TRP`` tile: a transposed box on its way in or out (ping-pong)."""
        b = LocalBuf(f"{self.prefix}{len(self.buffers)}", "UB", dtype, "CP", "TRP", "ND",
                     pingpong=True)
        self.buffers.append(b)
        return b


def _kind(roles: list[str], view: VectorView, what: str) -> str:
    """ND / COL / ROW of a tensor whose dimensions have ``roles``."""
    n_c = roles.count("c")
    if n_c not in (0, len(view.cols)):
        raise TargetError(f"npu: {what} holds only some of the columns "
                          f"{', '.join(view.cols)}; the vector mapping takes whole rows")
    has_r = "r" in roles or view.row is None
    kind = {(True, True): "ND", (False, True): "ROW", (True, False): "COL"}.get(
        (has_r, n_c > 0))
    if kind is None:
        raise TargetError(f"npu: {what} has neither the row dimension nor the columns")
    return kind


def gm_access(keys: tuple, dims: tuple, view: VectorView, what: str) -> GmAccess:
    """How a GM tensor with dimension ``keys`` (sizes ``dims``) is read or written."""
    roles = [view.role(k) for k in keys]
    kind = _kind(roles, view, what)
    n = len(roles)
    cpos = [i for i, r in enumerate(roles) if r == "c"]
    rpos = roles.index("r") if "r" in roles else None
    if cpos and ([keys[i] for i in cpos] != list(view.cols) or cpos[-1] - cpos[0] + 1 != len(cpos)):
        raise TargetError(f"npu: {what}: its columns {', '.join(view.cols)} are not "
                          f"adjacent and in order")
    if kind == "COL":
        assert rpos is not None or view.row is None
        return GmAccess(kind, False, 0, product(dims[(rpos if rpos is not None else n) + 1:]))
    if rpos is None or rpos < cpos[0]:
        if any(r != "u" for r in roles[cpos[-1] + 1:]):
            raise TargetError(f"npu: {what}: a dimension after its columns is not mapped")
        stride = product(dims[rpos + 1:]) if rpos is not None else product(dims[cpos[0]:])
        return GmAccess(kind, False, n - cpos[0], stride)
    if any(r != "u" for r in roles[rpos + 1:]):
        raise TargetError(f"npu: {what}: a dimension after its row is not mapped")
    return GmAccess(kind, True, n - rpos, product(dims[cpos[-1] + 1:]))
def int8_output_in_epilogue_only(o) -> None:
    """An int8 result is mapped only as the epilogue of an int8 matmul (its tiles' rows
    are n0 bytes, a multiple of 32: whole blocks for DataCopyPad); a vector program's
    rows of CP elements (a multiple of 16) are not."""
    if o.dtype == "int8":
        raise TargetError(f"npu: output {o.name} is int8; int8 results are mapped only "
                          f"as the vector epilogue of an int8 matmul")


def _emit(bld: _Builder, op: str, srcs: tuple, dtype: str, kind: str) -> Val:
    # int8: only as a cast's result (an int8 output: Cast to half, then to int8, both
    # CAST_TRUNC: the DSL's float -> int8 truncates; npu-isa)
    if dtype not in _FLOATS and not (dtype == "int8" and op == "Cast" and kind == "ND"):
        raise TargetError(f"npu: the vector mapping takes float16/float32 values, got {dtype}")
    # floats by their repr: 0.0 and -0.0 are different operands
    key = (op, tuple(repr(x) if isinstance(x, float) else x for x in srcs), dtype, kind)
    if not bld.view.carried and key in bld.memo:
        return bld.memo[key]
    b = bld.new(kind, dtype)
    bld.ops.append((op, b, srcs))
    bld.memo[key] = Val(kind, b)
    return Val(kind, b)


def fuse_mul_add(bld: _Builder) -> None:
    """``d = t + c`` (or ``c + t``) with ``t = f * g`` read by nothing else, ``f`` an
    ``ND`` tile of ``d``'s type computed here and read only by that product, ``c`` a
    tile: one ``FusedMulAdd`` (``f = g * f + c``, in place in ``f``), ``d`` renamed
    ``f``.  Stage values and loaded tiles are never ``f``.  One instruction (one pass
    over the tile) fewer per fused pair."""
    stage_bufs = {v.buf.name for v in bld.values.values() if v.buf is not None}
    made = {b.name for _op, b, _s in bld.ops}

    def readers(name: str) -> list[int]:
        return [k for k, (_o, _b, srcs) in enumerate(bld.ops)
                if any(isinstance(x, LocalBuf) and x.name == name for x in srcs)]
    k = 0
    while k < len(bld.ops):
        op, d, srcs = bld.ops[k]
        hit = None
        if op == "Add" and d.layout == "ND" and all(isinstance(x, LocalBuf) for x in srcs):
            for t, c in ((srcs[0], srcs[1]), (srcs[1], srcs[0])):
                j = next((i for i in range(k) if bld.ops[i][1].name == t.name), None)
                if j is None or bld.ops[j][0] != "Mul" or readers(t.name) != [k] or \
                        t.name in stage_bufs:
                    continue
                for f, g in ((bld.ops[j][2][0], bld.ops[j][2][1]),
                             (bld.ops[j][2][1], bld.ops[j][2][0])):
                    if isinstance(f, LocalBuf) and isinstance(g, LocalBuf) and \
                            f.layout == "ND" and f.dtype == d.dtype == t.dtype and \
                            f.name in made and f.name not in stage_bufs and \
                            f is not g and readers(f.name) == [j]:
                        hit = (j, f, g, c)
                        break
                if hit:
                    break
        if hit is None:
            k += 1
            continue
        j, f, g, c = hit
        t = bld.ops[j][1]
        bld.ops[k] = ("FusedMulAdd", f, (g, c))
        del bld.ops[j]

        def sub(x, d=d, f=f):
            return f if isinstance(x, LocalBuf) and x.name == d.name else x
        bld.ops = [(o, b, tuple(sub(x) for x in xs)) for o, b, xs in bld.ops]
        bld.values = {n: (Val(v.kind, f) if v.buf is not None and v.buf.name == d.name
                          else v) for n, v in bld.values.items()}
        bld.buffers = [b for b in bld.buffers if b.name not in (d.name, t.name)]
        k = j


def hoist_rows(bld: _Builder, row_bufs: set[str]) -> list:
    """The ops over row vectors only (``ROW`` results of loaded row vectors, earlier
    such results and scalars: a cast of gamma) taken out of ``bld.ops``: they are the
    same for every tile and run once, after the row vectors' loads."""
    out: list = []
    seen = set(row_bufs)
    keep: list = []
    for op, b, srcs in bld.ops:
        if b.layout == "ROW" and op not in _RED.values() and \
                all(not isinstance(x, LocalBuf) or x.name in seen for x in srcs):
            out.append((op, b, srcs))
            seen.add(b.name)
        else:
            keep.append((op, b, srcs))
    bld.ops = keep
    return out


def _operand(v: Val):
    return v.scalar if v.buf is None else v.buf


def _load(bld: _Builder, e: ir.Load, vars: dict, stage: str) -> Val:
    name = e.buffer.name
    v = bld.values.get(name) or bld.inputs.get(name)
    keys = bld.keys.get(name)
    what = f"stage {stage} reads {name}[{', '.join(map(str, e.indices))}]"
    if v is None or keys is None or len(keys) != len(e.indices):
        raise TargetError(f"npu: {what}; the vector mapping reads inputs and earlier "
                          f"stages only")
    roles = []
    for i, k in zip(e.indices, keys):
        if k is None and ir.is_const(i, 0):
            continue
        if not isinstance(i, ir.Var) or i.name not in vars or vars[i.name] != k:
            raise TargetError(f"npu: {what}; the vector mapping takes accesses by the "
                              f"stage's iterators only")
        roles.append(bld.view.role(k))
    if _kind(roles, bld.view, what) != v.kind:
        raise TargetError(f"npu: {what} as a {_kind(roles, bld.view, what)} value; it is "
                          f"a {v.kind} value")
    return v


def _expr(bld: _Builder, e, vars: dict, stage: str) -> Val:
    if isinstance(e, (ir.IntImm, ir.FloatImm)):
        return Val("S", scalar=float(e.value))
    if isinstance(e, ir.Var):
        if e.name in vars:
            raise TargetError(f"npu: stage {stage} uses the iterator {e.name} as a value; "
                              f"the vector mapping has no iota")
        return Val("S", scalar=ix(e.name))
    if isinstance(e, ir.Load):
        return _load(bld, e, vars, stage)
    if isinstance(e, ir.Cast):
        v = _expr(bld, e.value, vars, stage)
        if v.buf is None or v.buf.dtype == e.dtype:
            return v
        return _emit(bld, "Cast", (v.buf,), e.dtype, v.kind)
    if isinstance(e, ir.Unary) and e.op == "neg":
        v = _expr(bld, e.a, vars, stage)
        return _emit(bld, "Mul", (_operand(v), -1.0), e.dtype, v.kind)
    args: list[Val]
    if isinstance(e, ir.Binary) and e.op in _BIN:
        op, args = _BIN[e.op], [_expr(bld, x, vars, stage) for x in (e.a, e.b)]
    elif isinstance(e, ir.Call) and e.name in _CALL:
        op, args = _CALL[e.name], [_expr(bld, x, vars, stage) for x in e.args]
    elif isinstance(e, ir.Select):
        op, args = "Select", [_expr(bld, x, vars, stage) for x in (e.cond, e.t, e.f)]
    else:
        raise TargetError(f"npu: stage {stage}: {type(e).__name__} "
                          f"{getattr(e, 'op', getattr(e, 'name', ''))} has no vector "
                          f"instruction in the NPU mapping")
    if all(a.kind == "S" for a in args):     # of sizes: a value per row, via Duplicate
        args[0] = _emit(bld, "Duplicate", (_operand(args[0]),), "float32", "COL")
    kinds = [a.kind for a in args]
    kind = "ND" if "COL" in kinds and "ROW" in kinds else \
        next(k for k in ("ND", "COL", "ROW") if k in kinds)
    dtype = e.dtype if e.dtype in _FLOATS else "float32"
    return _emit(bld, op, tuple(_operand(a) for a in args), dtype, kind)


def _stage(bld: _Builder, s) -> None:
    vars = stage_vars(s)
    bld.keys[s.name] = tensor_keys(s.output)
    out_roles = [bld.view.role(vars[v.name]) for v in s.iters]
    if s.is_reduction:
        red = [bld.view.role(vars[a.var.name]) for a in s.reduce_axes]
        if s.reduce_op not in _RED or red.count("c") != 1 or \
                any(r not in ("c", "k", "u") for r in red) or "c" in out_roles:
            raise TargetError(f"npu: stage {s.name}: only sum/max/min reductions over the "
                              f"columns {', '.join(bld.view.cols)} are mapped to the vector "
                              f"unit")
        if _kind(out_roles, bld.view, f"stage {s.name}") != "COL":
            raise TargetError(f"npu: stage {s.name}: reduction to a non-row value")
        v = _expr(bld, s.body, vars, s.name)
        if v.kind != "ND" or v.buf is None:
            raise TargetError(f"npu: stage {s.name}: reduction of a non-tile value")
        acc = s.output.dtype if s.output.dtype in _FLOATS else "float32"
        part = _emit(bld, _RED[s.reduce_op], (v.buf, bld.C), acc, "COL")
        if "k" in red:
            op, identity = _ACC[s.reduce_op]
            total = bld.new("COL", acc)
            bld.pre_ops.append(("Duplicate", total, (identity,)))
            bld.ops.append((op, total, (total, part.buf)))
            part = Val("COL", total)
            bld.carry_end = len(bld.ops)
        bld.values[s.name] = part
        return
    kind = _kind(out_roles, bld.view, f"stage {s.name}")
    if kind != "ND":
        raise TargetError(f"npu: stage {s.name} is not over (row, columns); the vector "
                          f"mapping computes whole tiles")
    v = _expr(bld, s.body, vars, s.name)
    if v.kind != "ND" or v.buf is None or v.buf.dtype != s.output.dtype:
        v = _emit(bld, "Cast", (_operand(v),), s.output.dtype, "ND")
    bld.values[s.name] = v


@dataclass(frozen=True)
class _Load:
    tensor: GlobalTensor
    buf: LocalBuf            # where MTE2 writes (a staging tile when transposed)
    access: GmAccess


def _setup(bld: _Builder, graph) -> tuple[list[GlobalTensor], list[_Load], list[_Load]]:
    tensors: list[GlobalTensor] = []
    loads: list[_Load] = []
    row_loads: list[_Load] = []
    view = bld.view
    for t in graph.inputs:
        if t.dtype not in _FLOATS:
            raise TargetError(f"npu: input {t.name} is {t.dtype}; the vector mapping takes "
                              f"float16/float32")
        keys = tensor_keys(t)
        dims = tuple(1 if k is None else dim_size(k) for k in keys)
        g = GlobalTensor(t.name, t.dtype, dims)
        tensors.append(g)
        bld.keys[t.name] = keys
        acc = gm_access(keys, dims, view, f"input {t.name}")
        if acc.kind == "ROW":
            if any(view.role(k) in ("b", "k") for k in keys):
                raise TargetError(f"npu: input {t.name}: a row vector with batch "
                                  f"dimensions is not mapped")
            b = bld.new("ROW", t.dtype)
            row_loads.append(_Load(g, b, acc))
        elif acc.transposed:
            st = bld.staging(t.dtype)
            b = bld.new("ND", t.dtype)
            bld.ops.append(("Transpose", b, (st,)))
            loads.append(_Load(g, st, acc))
        else:
            b = bld.new(acc.kind, t.dtype, pingpong=True)
            loads.append(_Load(g, b, acc))
        bld.inputs[t.name] = Val(acc.kind, b)
    return tensors, loads, row_loads


def ping_pong(bld: _Builder, v: Val) -> LocalBuf:
    """Mark the buffer of ``v`` (an output tile, read by MTE3) ``pingpong``."""
    assert v.buf is not None
    ob = LocalBuf(v.buf.name, "UB", v.buf.dtype, v.buf.rows, v.buf.cols, v.buf.layout,
                  pingpong=True)
    bld.buffers[bld.buffers.index(v.buf)] = ob

    def sub(x):
        return ob if x == v.buf else x
    bld.ops = [(op, sub(b), tuple(sub(x) for x in srcs)) for op, b, srcs in bld.ops]
    bld.pre_ops = [(op, sub(b), tuple(sub(x) for x in srcs)) for op, b, srcs in bld.pre_ops]
    return ob


def _region(g: GlobalTensor, keys: tuple, acc: GmAccess, view: VectorView,
            row0: Ix, rows: Ix) -> GmRegion:
    offs, exts = [], []
    for k, d in zip(keys, g.dims):
        role = view.role(k)
        if role == "r":
            offs.append(row0)
            exts.append(rows)
        elif role == "c":
            offs.append(ix(0))
            exts.append(ix(d))
        elif role in ("b", "k"):
            offs.append(ix(f"i_{k}"))
            exts.append(ix(1))
        else:
            offs.append(ix(0))
            exts.append(ix(1))
    return GmRegion(g, tuple(offs), tuple(exts), acc.split, acc.row_stride)


def _check_carried(graph, view: VectorView) -> None:
    if not view.carried:
        return
    first, rest = graph.stages[0], graph.stages[1:]
    inputs = {t.name for t in graph.inputs}
    reads = _loads(rest)
    if not first.is_reduction or reads & inputs:
        raise TargetError(f"npu: kernel {graph.name}: a reduction over several dimensions "
                          f"({', '.join(view.carried + view.cols)}) is mapped only as the "
                          f"kernel's first stage, with later stages reading its result")


def _loads(stages) -> set:
    out: set = set()

    def visit(e) -> None:
        if isinstance(e, ir.Load):
            out.add(e.buffer.name)
    for s in stages:
        ir.walk(s.body, visit)
    return out


def _widen_staged(bld: _Builder) -> None:
    """With a transposed box, tiles have ``TRP`` rows (``TR`` rounded up to 16): a
    transpose writes whole 16-row bands."""
    if not any(b.cols == "TRP" for b in bld.buffers):
        return
    wide = {b.name: dataclasses.replace(b, rows="TRP") for b in bld.buffers
            if b.layout == "ND" and b.rows == "TR"}

    def sub(x):
        return wide.get(x.name, x) if isinstance(x, LocalBuf) else x
    bld.buffers = [sub(b) for b in bld.buffers]
    bld.ops = [(op, sub(b), tuple(sub(x) for x in srcs)) for op, b, srcs in bld.ops]
    bld.pre_ops = [(op, sub(b), tuple(sub(x) for x in srcs)) for op, b, srcs in bld.pre_ops]


@dataclass(frozen=True)
class VectorPart:
    """The vector cores' program of a kernel or phase, the GM tensors it reads and
    writes (in argument order) and the number of row tiles (the work it splits over
    the cores)."""
    program: Program
    tensors: tuple[GlobalTensor, ...]
    tiles: Ix


def vector_part(graph, view: VectorView | None = None, long: bool = False) -> VectorPart:
    """The vector program of ``graph`` with the dimension roles ``view`` (default:
    :func:`~polycomp.scheduler.npu.view.choose_view`'s); see the module docstring.
    ``long``: with the long-row form too (:mod:`.lower_longrow`) where the plan allows
    it, the host choosing between the two forms at run time."""
    view = view or choose_view(graph)
    _check_carried(graph, view)
    bld = _Builder(graph.name, view)
    tensors, loads, row_loads = _setup(bld, graph)
    for s in graph.stages:
        _stage(bld, s)
    hoisted: list = []
    if not view.carried:
        fuse_mul_add(bld)
        hoisted = hoist_rows(bld, {x.buf.name for x in row_loads})
        bld.carry_end = len(bld.ops)
    R = ix(dim_size(view.row)) if view.row is not None else ix(1)
    t, TR = ix("t"), ix("TR")
    rows = imin(TR, R - t * TR)
    outs: list[tuple[GlobalTensor, LocalBuf, GmRegion]] = []
    for o in graph.outputs:
        int8_output_in_epilogue_only(o)
        v = bld.values[o.name]
        keys = tensor_keys(o)
        dims = tuple(1 if k is None else dim_size(k) for k in keys)
        g = GlobalTensor(o.name, o.dtype, dims, is_output=True)
        tensors.append(g)
        acc = gm_access(keys, dims, view, f"output {o.name}")
        if acc.kind != v.kind or acc.kind == "ROW":
            raise TargetError(f"npu: output {o.name} is a {v.kind} value written as "
                              f"{acc.kind}; not mapped")
        if acc.transposed:
            ob = bld.staging(o.dtype)
            bld.ops.append(("Transpose", ob, (v.buf,)))
        else:
            ob = ping_pong(bld, v)
        outs.append((g, ob, _region(g, keys, acc, view, t * TR, rows)))
    _widen_staged(bld)
    outs = [(g, next(b for b in bld.buffers if b.name == ob.name), r) for g, ob, r in outs]
    loads = [_Load(x.tensor, next(b for b in bld.buffers if b.name == x.buf.name), x.access)
             for x in loads]

    # the row tiles over the batch loops, numbered; this core takes every bnum-th one;
    # rotation counters: n = this core's tile count, l = its load count (n and the
    # carried loops); ping-pong slots and flag events follow them
    n_t = ceildiv(R, TR)
    total: Ix = n_t
    lets: list = [Let("t", ix("tile") % n_t)]
    stride: Ix = n_t
    for k in reversed(view.batch):
        lets.append(Let(f"i_{k}", (ix("tile") // stride) % ix(dim_size(k))))
        stride = stride * ix(dim_size(k))
        total = total * ix(dim_size(k))
    n = ix("i")
    ld: Ix = n
    for k in view.carried:
        ld = ld * ix(dim_size(k)) + ix(f"i_{k}")
    loaded = {ld_.buf.name for ld_ in loads}

    def slot(b) -> Slot:
        if not b.pingpong:
            return Slot(b)
        return Slot(b, ld if b.name in loaded else n)

    def vec(ops) -> tuple:
        return tuple(VecOp(op, slot(b), tuple(slot(x) if isinstance(x, LocalBuf) else x
                                              for x in srcs), rows) for op, b, srcs in ops)
    copy_in = tuple(CopyIn(_region(x.tensor, bld.keys[x.tensor.name], x.access, view,
                                   t * TR, rows), slot(x.buf)) for x in loads)
    copy_out = tuple(CopyOut(slot(b), r, pipe="MTE3") for _, b, r in outs)
    inner, post = vec(bld.ops[:bld.carry_end]), vec(bld.ops[bld.carry_end:])
    if not view.carried:
        body: tuple = (*copy_in, *inner, *post, *copy_out)
    else:
        nest: tuple = (*copy_in, *inner)
        for k in reversed(view.carried):
            nest = (Loop(f"i_{k}", ix(dim_size(k)), nest),)
        body = (*vec(bld.pre_ops), *nest, *post, *copy_out)
    loop = tile_walk(total, body, tuple(lets))
    row_bufs = {x.buf.name: next(b for b in bld.buffers if b.name == x.buf.name)
                for x in row_loads}
    pro: tuple = tuple(CopyIn(GmRegion(x.tensor, (ix(0),) * len(x.tensor.dims),
                                       tuple(ix(d) for d in x.tensor.dims), x.access.split,
                                       x.access.row_stride), Slot(row_bufs[x.buf.name]))
                       for x in row_loads)
    pro += tuple(VecOp(op, Slot(b), tuple(Slot(x) if isinstance(x, LocalBuf) else x
                                          for x in srcs), ix(1)) for op, b, srcs in hoisted)
    from .lower_longrow import long_rows
    lf = long_rows(graph, view) if long else None
    if lf is None:
        prog = Program(graph.name, "AIV", tuple(bld.buffers), pro + loop,
                       Tiling(rows=R, cols=bld.C))
        return VectorPart(prog, tuple(tensors), total)
    # two forms, chosen by the host (LR): whole rows in a tile, or rows in chunks
    LR = ix("LR")
    body2 = (Loop("ls", 1 - LR, pro + loop),
             Loop("ll", LR, tile_walk(total, lf.body, tuple(lets))))
    prog = Program(graph.name, "AIV", tuple(bld.buffers) + lf.buffers, body2,
                   Tiling(rows=R, cols=bld.C, long=True))
    return VectorPart(prog, tuple(tensors), total)


def vector_program(graph, view: VectorView | None = None) -> Kernel:
    """The vector-only kernel of ``graph`` (``KERNEL_TYPE_AIV_ONLY``): its row tiles
    over every vector core."""
    part = vector_part(graph, view, long=True)
    return Kernel(graph.name, "aiv", part.tensors, (Phase(None, part.program),),
                  Tiling(), (), part.tiles)


def _ub_bytes(prog: Program, env: dict) -> int:
    return sum(b.size(env) * b.copies + b.reserve for b in prog.buffers)


#: the most rows of a vector tile: one repeat per row, at most 255 repeats per call
MAX_TILE_ROWS = 255

#: the largest share of a row that the bank pitch padding may add (1/8)
PITCH_PAD_LIMIT = 8


def pitch_itemsize(prog: Program) -> int:
    """The widest item of the UB tiles whose rows are ``CP`` elements long (0: none)."""
    return max((b.itemsize for b in prog.buffers
                if b.level == "UB" and b.cols == "CP" and b.layout == "ND"), default=0)


def bank_pitch(cp: int, itemsize: int) -> int:
    """``cp`` (a multiple of 16 elements) padded so that a tile row of ``itemsize``-byte
    elements is an odd multiple of 256 bytes: consecutive rows then alternate between
    the two halves of the 16 UB bank groups, so a repeat-form call over the rows (one
    repeat a row, a column chunk a call) does not meet the delayed write of its own
    previous row in the same groups (docs/npu.md, "Row pitch").  Only where a row is
    longer than one repeat (256 B), short enough for the repeat form (at most 255
    blocks), and the padding adds at most 1/:data:`PITCH_PAD_LIMIT` of the row."""
    b = cp * itemsize
    if itemsize == 0 or b <= 256 or -(-b // 32) > 255:
        return cp
    m = -(-b // 256) | 1
    if m * 256 * PITCH_PAD_LIMIT > b * (PITCH_PAD_LIMIT + 1) or -(-m * 256 // 32) > 255:
        return cp
    return m * 256 // itemsize


#: the widest chunk of the long-row form, in elements (then halved until a row fits):
#: narrow chunks leave many rows to a tile, so each call has many repeats
LONG_CHUNK = 256


def vector_tiling(prog: Program, sizes: dict, ub_capacity: int, cores: int = 0,
                  tiles: Ix | None = None) -> dict:
    """Host tiling of a vector program (after ``npu-isa``: its temporaries count too):
    ``CP`` (the row length padded to 16 elements, then to an odd multiple of 256 bytes
    by :func:`bank_pitch`), ``TR`` (rows per tile: as many as UB
    holds, at most R and at most 255) and ``TRP`` (``TR`` padded to 16, the columns of a
    staging tile).  A program with the long-row form (``prog.tiling.long``) also gets
    ``LR`` (1: rows in chunks) and ``CW`` (the chunk width): where one row of ``CP``
    elements does not fit UB, ``LR`` = 1, ``CP`` = 0 (the one-tile form's buffers are
    empty), ``CW`` = the row length padded to 16 but at most :data:`LONG_CHUNK`, halved
    until a row fits, and ``TR`` as many rows of ``CW`` as fit; else ``LR`` = ``CW`` =
    0.  With ``cores`` and the kernel's tile count ``tiles`` (an expression of ``TR``),
    ``TR`` is then the smallest that keeps the busiest core's number of tiles
    (``ceildiv(tiles, cores)``, the instructions it issues): its rows, the work, shrink
    and the cores' shares even out.  A row that fits neither way
    raises :class:`NpuCapacityError` (rows longer than a repeat stride spans, 255 data
    blocks, take ``npu-isa``'s row-by-row form)."""
    rows, cols = prog.tiling.rows, prog.tiling.cols
    assert rows is not None and cols is not None, prog.name
    R, C = rows.eval(sizes), cols.eval(sizes)
    cp = bank_pitch(-(-C // 16) * 16, pitch_itemsize(prog))
    long = prog.tiling.long

    def env(tr: int, cp: int = cp, cw: int = 0) -> dict:
        out = {**sizes, "CP": cp, "TR": tr, "TRP": -(-tr // 16) * 16}
        return {**out, "LR": int(cw > 0), "CW": cw} if long else out

    def rows_fitting(**kw) -> int:
        lo, hi = 1, max(1, min(R, MAX_TILE_ROWS))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if _ub_bytes(prog, env(mid, **kw)) <= ub_capacity \
                else (lo, mid - 1)
        return lo

    if _ub_bytes(prog, env(1)) <= ub_capacity:
        tr = rows_fitting()
        out = env(tr)
    elif long:
        cw = min(cp, LONG_CHUNK)
        while cw > 16 and _ub_bytes(prog, env(1, 0, cw)) > ub_capacity:
            cw = max(16, cw // 32 * 16)
        if _ub_bytes(prog, env(1, 0, cw)) > ub_capacity:
            raise NpuCapacityError(f"npu: kernel {prog.name}: a chunk of one row of 16 "
                                   f"elements needs {_ub_bytes(prog, env(1, 0, cw))} B of "
                                   f"UB; UB holds {ub_capacity} B")
        out = env(rows_fitting(cp=0, cw=cw), 0, cw)
    else:
        raise NpuCapacityError(f"npu: kernel {prog.name}: one row of {C} elements needs "
                               f"{_ub_bytes(prog, env(1))} B of UB with its "
                               f"{len(prog.buffers)} buffers; UB holds {ub_capacity} B "
                               f"(rows are split into chunks only for a single row "
                               f"dimension read directly, without carried reductions)")
    if cores and tiles is not None:
        def rounds(tr: int) -> int:
            return -(-tiles.eval({**out, "TR": tr}) // cores)
        best, k = out["TR"], rounds(out["TR"])
        while best > 1 and rounds(best - 1) == k:
            best -= 1
        out = {**out, "TR": best, "TRP": -(-best // 16) * 16}
    return {k: out[k] for k in ("CP", "TR", "TRP", "LR", "CW") if k in out}
