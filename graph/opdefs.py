"""The operator table of the graph layer: for each op its fusion class, shape rule,
lowering to ``@tensor_expr`` stages and a FLOP estimate.

Fusion classes (TSCompiler / AStitch vocabulary):

* ``backbone``  compute-intensive contractions (``matmul``): one per fused kernel;
* ``chain``     ``attention`` (``softmax(q k^T * scale + mask) v``): a kernel of its own,
  written as the chain the CPU/CUDA chain fusion (``scheduler/chain``) recognises;
* ``reduce``    reductions (``softmax``, ``layernorm``, ``sum``, ``mean``, ``amax``);
* ``elementwise`` / ``injective``: memory-intensive ops stitched around the others;
* ``view``      a ``reshape`` whose index map is not quasi-affine (``(B, S, H) -> (B*S, H)``):
  executed by the runtime as a zero-copy reshape of a contiguous buffer.

Lowerings receive the input :class:`~polycomp.frontend.dsl.Tensor` s of the kernel being
traced and return the stage computing the node's output, in the node's dtype.

Dtypes: each op has a dtype rule (:attr:`OpDef.dtype`).  Binary elementwise ops compute
in the promoted dtype of their operands (their loads are cast to it; a ``cast`` node
converts explicitly -- the torch importer inserts them to follow torch's promotion);
``div`` and the transcendental unary ops give float32 for integer inputs; ``sum`` of
bool / int8 / int32 gives int64 (as torch).  Contractions and sums over float16 /
bfloat16 accumulate in float32 (one extra cast stage stores the result), as
``softmax`` and ``layernorm`` of the operator library do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import sympy

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import DTypeError, ShapeMismatchError
from polycomp.frontend import dsl, ops

from .ir import Node, Shape, dim, numel
from .shapes import Constraint, Constraints, broadcast, mismatch

ShapeRule = Callable[[Node, Constraints], Shape]


def _dtype_first(node: Node) -> str:
    return node.inputs[0].dtype if node.inputs else "float32"


@dataclass(frozen=True)
class OpDef:
    kind: str
    shape: ShapeRule
    lower: Callable  # (node, ins: list[dsl.Tensor], out_shape: tuple[ir.Expr]) -> dsl.Tensor
    flops_per_elem: float = 1.0
    dtype: Callable[[Node], str] = _dtype_first  # the output's dtype


def _axis(node: Node, axis: int, ndim: int) -> int:
    a = axis + ndim if axis < 0 else axis
    if not 0 <= a < ndim:
        raise ShapeMismatchError(f"{node.op} {node.name!r}: axis {axis} out of range for "
                                 f"rank {ndim}", node.location)
    return a


def _bload(x: dsl.Tensor, idx: tuple, out_ndim: int):
    """Load ``x`` broadcast to an output of rank ``out_ndim`` at ``idx``."""
    off = out_ndim - x.ndim
    return x[tuple(0 if ir.is_const(d, 1) else idx[off + k] for k, d in enumerate(x.shape))]


def _compute(shape, f, name: str, dtype: str | None = None) -> dsl.Tensor:
    """``compute`` with an index function taking the index tuple."""
    return dsl.compute(shape, ops._indexed(len(shape), f), name=name, dtype=dtype)


def _as(e, dtype: str):
    """``e`` converted to ``dtype`` (a no-op when it has it)."""
    return ir.cast(e, dtype)


def _float_dtype(d: str) -> str:
    """torch: a float op on an integer or bool tensor computes in the default float."""
    return d if dt.is_float(d) else "float32"


def _name(node: Node) -> str:
    return f"s_{node.name}"


# --------------------------------------------------------------------- elementwise

_BIN = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b, "maximum": lambda a, b: ir.max_(a, b)}


def _binary_shape(node: Node, cs: Constraints) -> Shape:
    if len(node.inputs) == 1:
        return node.inputs[0].shape
    return broadcast(node, cs, node.inputs[0], node.inputs[1])


def _binary_dtype(node: Node) -> str:
    d = node.inputs[0].dtype
    for v in node.inputs[1:]:
        d = dt.promote(d, v.dtype)
    if node.op == "div":
        return _float_dtype(d)
    if d == "bool" and node.op == "sub":
        raise DTypeError(f"sub {node.name!r}: subtraction of bool tensors; cast them to a "
                         f"number type first", node.location)
    return d


def _scalar(node: Node, d: str):
    """The node's scalar operand (a Python number, or a size parameter: an ``ir.Expr``)
    as an expression of dtype ``d``."""
    s = node.attrs["scalar"]
    if isinstance(s, ir.Expr):
        return _as(s, d)
    if dt.is_float(d):
        return ir.const(float(s), d)
    if isinstance(s, float) and not float(s).is_integer():
        raise DTypeError(f"{node.op} {node.name!r}: the scalar {s} does not fit {d}",
                         node.location)
    if d == "bool":
        return ir.const(bool(s))
    return ir.const(int(s), d)


# on bool operands (torch): + is logical or, * logical and, maximum is or
_BOOL_BIN = {"add": lambda a, b: ir.bitwise("|", a, b), "mul": lambda a, b: ir.bitwise("&", a, b),
             "maximum": lambda a, b: ir.bitwise("|", a, b)}


def _binary_lower(node: Node, ins, shape):
    d = node.output.dtype
    f = _BOOL_BIN[node.op] if d == "bool" else _BIN[node.op]
    n = len(shape)
    if len(ins) == 1:
        s = _scalar(node, d)
        if node.attrs.get("reverse"):
            return _compute(shape, lambda i: f(s, _as(ins[0][i], d)), name=_name(node), dtype=d)
        return _compute(shape, lambda i: f(_as(ins[0][i], d), s), name=_name(node), dtype=d)
    a, b = ins
    return _compute(shape, lambda i: f(_as(_bload(a, i, n), d), _as(_bload(b, i, n), d)),
                    name=_name(node), dtype=d)


def _gelu(x, approximate: str):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + dsl.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + dsl.erf(x * 0.7071067811865476))


_UN = {"relu": lambda x, a: ir.max_(x, 0), "tanh": lambda x, a: dsl.tanh(x),
       "exp": lambda x, a: dsl.exp(x), "log": lambda x, a: dsl.log(x),
       "sigmoid": lambda x, a: dsl.sigmoid(x),
       "neg": lambda x, a: -x, "sqrt": lambda x, a: dsl.sqrt(x),
       "rsqrt": lambda x, a: dsl.rsqrt(x), "erf": lambda x, a: dsl.erf(x),
       "gelu": lambda x, a: _gelu(x, a.get("approximate", "none")),
       "hardtanh": lambda x, a: _hardtanh(x, a["lo"], a["hi"])}


def _hardtanh(x, lo: float, hi: float):
    """``min(max(x, lo), hi)`` (relu6 is ``hardtanh(0, 6)``); NaN stays NaN as in torch."""
    c = ir.min_(ir.max_(x, ir.const(lo, x.dtype)), ir.const(hi, x.dtype))
    return ir.select(ir.binary("!=", x, x), x, c)


_FLOAT_UN = ("tanh", "exp", "log", "sigmoid", "sqrt", "rsqrt", "erf", "gelu")


def _same_shape(node: Node, cs: Constraints) -> Shape:
    return node.inputs[0].shape


def _unary_dtype(node: Node) -> str:
    d = node.inputs[0].dtype
    if node.op in _FLOAT_UN:
        return _float_dtype(d)
    if d == "bool":
        raise DTypeError(f"{node.op} {node.name!r}: not defined on bool tensors",
                         node.location)
    return d


def _unary_lower(node: Node, ins, shape):
    f = _UN[node.op]
    d = node.output.dtype
    return _compute(shape, lambda i: f(_as(ins[0][i], d), node.attrs), name=_name(node),
                    dtype=d)


def _cast_dtype(node: Node) -> str:
    return dt.canonical(node.attrs["dtype"])


def _cast_lower(node: Node, ins, shape):
    d = node.output.dtype
    return _compute(shape, lambda i: _as(ins[0][i], d), name=_name(node), dtype=d)


# --------------------------------------------------------------------- injective


def _perm(node: Node, ndim: int) -> tuple[int, ...]:
    if node.op == "transpose":
        a, b = (_axis(node, node.attrs[k], ndim) for k in ("dim0", "dim1"))
        sw = list(range(ndim))
        sw[a], sw[b] = sw[b], sw[a]
        return tuple(sw)
    p = tuple(_axis(node, d, ndim) for d in node.attrs["perm"])
    if sorted(p) != list(range(ndim)):
        raise ShapeMismatchError(f"permute {node.name!r}: {p} is not a permutation",
                                 node.location)
    return p


def _permute_shape(node: Node, cs: Constraints) -> Shape:
    s = node.inputs[0].shape
    return tuple(s[k] for k in _perm(node, len(s)))


def _permute_lower(node: Node, ins, shape):
    p = _perm(node, len(shape))
    inv = [p.index(k) for k in range(len(p))]
    return _compute(shape, lambda i: ins[0][tuple(i[inv[k]] for k in range(len(p)))],
                       name=_name(node))


def _slice_shape(node: Node, cs: Constraints) -> Shape:
    """``x[start:end]`` along ``axis``; a symbolic ``end`` (``mask[:S]``) gives extent
    ``end - start`` and the constraint ``min(end, extent) == end`` (checked per call)."""
    x = node.inputs[0]
    s = list(x.shape)
    a = _axis(node, node.attrs["axis"], len(s))
    start = int(node.attrs.get("start", 0))
    end = sympy.sympify(node.attrs["end"]) if node.attrs.get("end") is not None else s[a]
    if (end - s[a]).is_number:
        end = min(end, s[a])
    else:
        cs.recorded.append(Constraint(sympy.Min(end, s[a]), end,
                                      f"slice {node.name!r}: end within {x.name!r}"))
    s[a] = end - start
    return tuple(s)


def _slice_lower(node: Node, ins, shape):
    a = _axis(node, node.attrs["axis"], len(shape))
    st = int(node.attrs.get("start", 0))
    hi = ins[0].shape[a]
    clamp = not ir.is_const(shape[a]) or not ir.is_const(hi)  # provably in bounds for isl
    return _compute(shape, lambda i: ins[0][tuple(
        (ir.min_(v + st, hi - 1) if clamp else v + st) if k == a else v
        for k, v in enumerate(i))], name=_name(node))


def _select_shape(node: Node, cs: Constraints) -> Shape:
    """``x[index]``: the block ``index`` of ``x``'s leading axis (constant ``index``), the
    axis dropped.  Made by ``graph/rewrite.py`` ``stack_projections`` (the q, k and v
    blocks of a stacked projection); a zero-copy view at run time (:func:`kind_of`)."""
    x = node.inputs[0]
    if not x.shape:
        raise ShapeMismatchError(f"select {node.name!r}: {x.name!r} has no axis", node.location)
    k, n = int(node.attrs["index"]), x.shape[0]
    if k < 0 or (n.is_Integer and k >= int(n)):
        raise ShapeMismatchError(f"select {node.name!r}: index {k} out of range for "
                                 f"extent {n}", node.location)
    return tuple(x.shape[1:])


def _select_lower(node: Node, ins, shape):
    k = int(node.attrs["index"])
    return _compute(shape, lambda i: ins[0][(k,) + tuple(i)], name=_name(node))


def split_reshape(src: Shape, dst: Shape) -> tuple[int, Shape, Shape] | None:
    """``(prefix, src_rest, dst_rest)`` when ``src -> dst`` keeps a common prefix and the
    rest are integer extents (a quasi-affine index map), else None."""
    k = 0
    while k < min(len(src), len(dst)) and _same_extent(src[k], dst[k]):
        k += 1
    rs, rd = tuple(src[k:]), tuple(dst[k:])
    if all(d.is_Integer for d in (*rs, *rd)):
        return k, rs, rd
    return None


def _same_extent(a, b) -> bool:
    """``sympy.simplify(a - b) == 0``; a difference sympy already evaluated to an
    integer is decided without ``simplify`` (which returns an integer as it is, and
    costs milliseconds)."""
    d = sympy.sympify(a - b)
    if d.is_Integer:
        return bool(d == 0)
    return bool(sympy.simplify(d) == 0)


def _reshape_shape(node: Node, cs: Constraints) -> Shape:
    x = node.inputs[0]
    src = x.shape
    target = [sympy.sympify(d) for d in node.attrs["shape"]]
    total = sympy.Mul(*src)
    holes = [k for k, d in enumerate(target) if d == -1]
    if len(holes) > 1:
        raise ShapeMismatchError(f"reshape {node.name!r}: more than one -1", node.location)
    if holes:
        known = sympy.Mul(*[d for d in target if d != -1])
        target[holes[0]] = sympy.simplify(total / known)
    else:
        cs.equal(sympy.Mul(*target), total, node, x, x, "reshape size")
    return tuple(sympy.simplify(d) for d in target)


def is_runtime_view(node: Node) -> bool:
    """``node`` runs as a zero-copy view of its operand (a view step, no kernel): a
    ``reshape`` that is no quasi-affine index map, or a ``select`` (a block of the
    leading axis: contiguous in a C-ordered array)."""
    return node.op == "select" or (node.op == "reshape" and split_reshape(
        node.inputs[0].shape, node.output.shape) is None)


def _strides(shape) -> list[int]:
    out: list[int] = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


def reshape_index(src: Shape, dst: Shape, i: tuple) -> tuple:
    """The index of ``src`` that a quasi-affine reshape ``src -> dst`` reads for the
    point ``i`` of ``dst`` (:func:`split_reshape`; row-major order kept)."""
    sp = split_reshape(src, dst)
    assert sp is not None
    k, rs, rd = sp
    ds, ss = _strides(rd), _strides(rs)
    off = sum((i[k + j] * ds[j] for j in range(len(rd))), ir.const(0, "int64"))
    rest = tuple((off // ss[j]) % int(rs[j]) if j else off // ss[j]
                 for j in range(len(rs)))
    return tuple(i[:k]) + rest


def _reshape_lower(node: Node, ins, shape):
    src, dst = node.inputs[0].shape, node.output.shape
    return _compute(shape, lambda i: ins[0][reshape_index(src, dst, i)], name=_name(node))


def _expand_shape(node: Node, cs: Constraints) -> Shape:
    """``x.expand(*shape)``: new leading axes, ``-1`` keeps an extent, an extent 1
    stretches; any other extent must equal the target (a constraint when symbolic)."""
    x = node.inputs[0]
    src = tuple(x.shape)
    target = [sympy.Integer(-1) if d == -1 else dim(d) for d in node.attrs["shape"]]
    lead = len(target) - len(src)
    if lead < 0:
        raise ShapeMismatchError(f"expand {node.name!r}: target rank {len(target)} below "
                                 f"the input's {len(src)}", node.location)
    out = []
    for k, t in enumerate(target):
        if k < lead:
            if t == -1:
                raise ShapeMismatchError(f"expand {node.name!r}: -1 for a new leading axis",
                                         node.location)
            out.append(t)
            continue
        d = src[k - lead]
        if t == -1 or t == d:
            out.append(d)
        elif d == 1:
            out.append(t)
        else:
            out.append(cs.equal(d, t, node, x, x, f"expand axis {k}"))
    return tuple(out)


def _expand_lower(node: Node, ins, shape):
    x = ins[0]
    lead = len(shape) - x.ndim
    return _compute(shape, lambda i: x[tuple(
        0 if ir.is_const(d, 1) else i[lead + k] for k, d in enumerate(x.shape))],
        name=_name(node))


def _cat_shape(node: Node, cs: Constraints) -> Shape:
    """``torch.cat`` along ``axis``: equal ranks, the other extents agree, the axis sums."""
    xs = node.inputs
    nd = len(xs[0].shape)
    a = _axis(node, node.attrs["axis"], nd)
    out = list(xs[0].shape)
    for v in xs[1:]:
        if len(v.shape) != nd:
            raise mismatch(node, xs[0], v, "cat needs equal ranks")
        for k in range(nd):
            if k != a:
                out[k] = cs.equal(out[k], v.shape[k], node, xs[0], v, f"cat axis {k}")
    out[a] = sympy.Add(*[v.shape[a] for v in xs])
    return tuple(out)


def _cat_dtype(node: Node) -> str:
    d = node.inputs[0].dtype
    for v in node.inputs[1:]:
        d = dt.promote(d, v.dtype)
    return d


def _cat_lower(node: Node, ins, shape):
    """A chain of selects on the axis index; each operand's load is clamped into its own
    extent (in bounds whichever branch is taken)."""
    d = node.output.dtype
    a = _axis(node, node.attrs["axis"], len(shape))

    def body(i):
        offs = []
        o: object = ir.const(0, "int64")
        for t in ins:
            offs.append(o)
            o = t.shape[a] + o  # type: ignore[operator]

        def load(j):
            t = ins[j]
            loc = i[a] - offs[j] if j else i[a]
            loc = ir.max_(ir.min_(loc, t.shape[a] - 1), 0) if len(ins) > 1 else loc
            return _as(t[tuple(loc if k == a else v for k, v in enumerate(i))], d)
        e = load(len(ins) - 1)
        for j in range(len(ins) - 2, -1, -1):
            e = ir.select(ir.binary("<", i[a], offs[j + 1]), load(j), e)
        return e
    return _compute(shape, body, name=_name(node), dtype=d)


# --------------------------------------------------------------------- gathers
#
# ``index``: numpy / torch advanced indexing ``x[..., idx_1, ..., idx_m, ...]`` along the
# axes ``attrs["axes"]`` (one index tensor each, broadcast together to a shape B); the
# indexed axes are replaced by B where they are adjacent, else B comes first (numpy's
# rule).  ``embedding(idx, w)`` is ``index(w, idx, axes=(0,))``, ``index_select(x, d,
# idx)`` ``index(x, idx, axes=(d,))``, ONNX ``Gather`` the same with ``wrap``.
# ``gather``: torch.gather / ONNX GatherElements, ``out[i] = x[i with i[axis] replaced by
# idx[i]]`` (``out`` has ``idx``'s shape).  ``wrap``: a negative index counts from the end
# (torch's tensor indexing, ONNX); without it a negative index is out of range.  Indices
# outside the extent raise IndexOutOfRangeError at run time (the DSL's gather_index).


def _index_dtype_check(node: Node, idx) -> None:
    for v in idx:
        if v.dtype not in ("int32", "int64"):
            raise DTypeError(f"{node.op} {node.name!r}: index tensor {v.name!r} is {v.dtype}; "
                             f"indices are int32 or int64", node.location)


def _index_axes(node: Node, ndim: int) -> tuple[int, ...]:
    axes = tuple(_axis(node, a, ndim) for a in node.attrs["axes"])
    if len(axes) != len(node.inputs) - 1 or len(set(axes)) != len(axes) or not axes:
        raise ShapeMismatchError(f"index {node.name!r}: one index tensor per indexed axis, "
                                 f"each axis once (axes {axes})", node.location)
    return axes


def _adjacent(axes: tuple[int, ...]) -> bool:
    return list(axes) == list(range(axes[0], axes[0] + len(axes)))


def _index_shape(node: Node, cs: Constraints) -> Shape:
    x, idx = node.inputs[0], node.inputs[1:]
    _index_dtype_check(node, idx)
    axes = _index_axes(node, len(x.shape))
    b: Shape = tuple(idx[0].shape)
    for v in idx[1:]:
        b = broadcast(node, cs, type(v)("_b", v.dtype, b), v)
    rest = [d for k, d in enumerate(x.shape) if k not in axes]
    if _adjacent(axes):
        a0 = axes[0]
        return tuple(x.shape[:a0]) + tuple(b) + tuple(x.shape[axes[-1] + 1:])
    return tuple(b) + tuple(rest)


def _index_value(node: Node, v, extent):
    """An index read from a tensor as int64, negative ones counted from the end when the
    node wraps (the DSL turns it into a checked gather index)."""
    v = _as(v, "int64")
    if node.attrs.get("wrap"):
        return ir.select(ir.binary("<", v, 0), v + extent, v)
    return v


def _index_lower(node: Node, ins, shape):
    x, idx = ins[0], ins[1:]
    axes = _index_axes(node, x.ndim)
    nb = len(shape) - (x.ndim - len(axes))
    start = axes[0] if _adjacent(axes) else 0

    def body(i):
        b = tuple(i[start:start + nb])
        rest = iter(tuple(i[:start]) + tuple(i[start + nb:]))
        at = []
        for a in range(x.ndim):
            if a in axes:
                t = idx[axes.index(a)]
                at.append(_index_value(node, _bload(t, b, nb), x.shape[a]))
            else:
                at.append(next(rest))
        return x[tuple(at)]
    return _compute(shape, body, name=_name(node))


def _gather_shape(node: Node, cs: Constraints) -> Shape:
    x, idx = node.inputs
    _index_dtype_check(node, [idx])
    if len(x.shape) != len(idx.shape):
        raise mismatch(node, x, idx, "gather needs an index of the input's rank")
    a = _axis(node, node.attrs["axis"], len(x.shape))
    for k, (dx, di) in enumerate(zip(x.shape, idx.shape)):
        diff = sympy.sympify(dx - di)
        if k == a or diff == 0:
            continue
        if diff.is_number:
            if int(diff) < 0:
                raise mismatch(node, x, idx, f"gather: index extent {di} above {dx} on "
                                             f"axis {k}")
        else:       # torch: index.size(k) <= input.size(k), checked per call
            cs.recorded.append(Constraint(sympy.Min(di, dx), di,
                                          f"gather {node.name!r}: index within {x.name!r} "
                                          f"on axis {k}"))
    return tuple(idx.shape)


def _gather_lower(node: Node, ins, shape):
    x, idx = ins
    a = _axis(node, node.attrs["axis"], x.ndim)

    def at(i, k):
        if k == a:
            return _index_value(node, idx[i], x.shape[a])
        if ir.structural_equal(ir.const(x.shape[k]), ir.const(shape[k])):
            return i[k]
        return ir.min_(i[k], x.shape[k] - 1)   # provably in bounds for isl (the constraint)
    return _compute(shape, lambda i: x[tuple(at(i, k) for k in range(len(i)))],
                    name=_name(node))


def _iota_shape(node: Node, cs: Constraints) -> Shape:
    """``arange(start, end, step)``: ``ceil((end - start) / step)`` elements."""
    start, end, step = (dim(node.attrs[k]) for k in ("start", "end", "step"))
    n = sympy.ceiling((end - start) / step)
    if n.is_number:
        n = sympy.Integer(max(int(n), 0))
    return (n,)


def _iota_lower(node: Node, ins, shape):
    d = node.output.dtype
    st, step = node.attrs["start"], node.attrs["step"]
    return _compute(shape, lambda i: _as(i[0] * step + st if step != 1 else i[0] + st, d),
                    name=_name(node), dtype=d)


def _where_shape(node: Node, cs: Constraints) -> Shape:
    c, a, b = node.inputs
    ab = broadcast(node, cs, a, b)
    tmp = type(a)("_ab", a.dtype, ab)
    return broadcast(node, cs, c, tmp)


def _where_dtype(node: Node) -> str:
    c, a, b = node.inputs
    if c.dtype != "bool":
        raise DTypeError(f"where {node.name!r}: the condition must be bool, got {c.dtype}",
                         node.location)
    return dt.promote(a.dtype, b.dtype)


def _where_lower(node: Node, ins, shape):
    d = node.output.dtype
    n = len(shape)
    c, a, b = ins
    return _compute(shape, lambda i: ir.select(_bload(c, i, n), _as(_bload(a, i, n), d),
                                               _as(_bload(b, i, n), d)),
                    name=_name(node), dtype=d)


_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _cmp_lower(node: Node, ins, shape):
    d = dt.promote(ins[0].dtype, ins[1].dtype) if len(ins) == 2 else ins[0].dtype
    op, n = _CMP[node.op], len(shape)
    if len(ins) == 1:
        s = _scalar(node, d)
        return _compute(shape, lambda i: ir.binary(op, _as(ins[0][i], d), s),
                        name=_name(node), dtype="bool")
    a, b = ins
    return _compute(shape, lambda i: ir.binary(op, _as(_bload(a, i, n), d),
                                               _as(_bload(b, i, n), d)),
                    name=_name(node), dtype="bool")


# --------------------------------------------------------------------- backbone


def _matmul_shape(node: Node, cs: Constraints) -> Shape:
    a, b = node.inputs
    sa, sb = a.shape, b.shape
    if len(sa) < 2 or len(sb) < 2:
        raise mismatch(node, a, b, "matmul needs rank >= 2")
    cs.equal(sa[-1], sb[-2], node, a, b, "contraction extent")
    if len(sb) == 2:
        return tuple(sa[:-1]) + (sb[-1],)
    if len(sa) != len(sb):
        raise mismatch(node, a, b, "batched matmul needs equal ranks")
    lead = tuple(cs.equal(x, y, node, a, b, f"batch axis {k}")
                 for k, (x, y) in enumerate(zip(sa[:-2], sb[:-2])))
    return lead + (sa[-2], sb[-1])


def _matmul_dtype(node: Node) -> str:
    d = dt.promote(node.inputs[0].dtype, node.inputs[1].dtype)
    if d == "bool":
        raise DTypeError(f"matmul {node.name!r}: not defined on bool tensors", node.location)
    return d


def _finish(node: Node, t: dsl.Tensor, shape) -> dsl.Tensor:
    """``t`` (accumulated in a wider dtype) stored in the node's dtype: an extra stage."""
    d = node.output.dtype
    if t.dtype == d:
        return t
    return _compute(shape, lambda i: _as(t[i], d), name=_name(node), dtype=d)


def _matmul_lower(node: Node, ins, shape):
    a, b = ins
    k = dsl.reduce_axis(a.shape[-1], f"k_{node.name}")
    nb = b.ndim
    acc = ops.accumulation_dtype(node.output.dtype)

    def body(i):
        bi = (k, i[-1]) if nb == 2 else tuple(i[:-2]) + (k, i[-1])
        return dsl.sum(_as(a[tuple(i[:-1]) + (k,)], acc) * _as(b[bi], acc), axis=k)
    name = _name(node) if acc == node.output.dtype else _name(node) + "_acc"
    return _finish(node, _compute(shape, body, name=name, dtype=acc), shape)


# --------------------------------------------------------------------- reductions


def _softmax_lower(node: Node, ins, shape):
    return ops.softmax(ins[0], node.attrs.get("axis", -1), name=_name(node))


def _layernorm_shape(node: Node, cs: Constraints) -> Shape:
    x = node.inputs[0]
    for g in node.inputs[1:]:
        cs.equal(x.shape[-1], g.shape[-1], node, x, g, "normalised extent")
    return x.shape


def _layernorm_lower(node: Node, ins, shape):
    return ops.layernorm(ins[0], ins[1], ins[2], node.attrs.get("eps", 1e-5), name=_name(node))


def _reduce_shape(node: Node, cs: Constraints) -> Shape:
    s = node.inputs[0].shape
    a = _axis(node, node.attrs.get("axis", -1), len(s))
    if node.attrs.get("keepdim", False):
        return tuple(sympy.Integer(1) if k == a else d for k, d in enumerate(s))
    return tuple(d for k, d in enumerate(s) if k != a)


def _reduce_dtype(node: Node) -> str:
    d = node.inputs[0].dtype
    if node.op == "sum" and d in ("bool", "int8", "int32"):
        return "int64"
    if node.op == "mean" and not dt.is_float(d):
        raise DTypeError(f"mean {node.name!r}: needs a float tensor, got {d}", node.location)
    return d


def _reduce_lower(node: Node, ins, shape):
    x = ins[0]
    a = _axis(node, node.attrs.get("axis", -1), x.ndim)
    keep = node.attrs.get("keepdim", False)
    r = dsl.reduce_axis(x.shape[a], f"r_{node.name}")
    red = {"sum": dsl.sum, "mean": dsl.sum, "amax": dsl.max}[node.op]
    acc = node.output.dtype if node.op == "amax" else ops.accumulation_dtype(node.output.dtype)

    def body(i):
        rest = tuple(i[:a]) + (r,) + tuple(i[a + 1:] if keep else i[a:])
        return red(_as(x[rest], acc), axis=r)
    if node.op != "mean":
        name = _name(node) if acc == node.output.dtype else _name(node) + "_acc"
        return _finish(node, _compute(shape, body, name=name, dtype=acc), shape)
    s = _compute(shape, body, name=_name(node) + "_sum", dtype=acc)
    n = dsl.cast(x.shape[a], acc)
    name = _name(node) if acc == node.output.dtype else _name(node) + "_acc"
    return _finish(node, _compute(shape, lambda i: s[i] / n, name=name, dtype=acc), shape)


# --------------------------------------------------------------------- convolution, pooling


def _pair_attr(node: Node, key: str) -> tuple[int, int]:
    v = node.attrs.get(key, 1 if key in ("stride", "dilation") else 0)
    a, b = (v, v) if isinstance(v, int) else tuple(v)
    return int(a), int(b)


def window_extent(size, k: int, s: int, p: int, d: int):
    """``floor((size + 2p - d(k - 1) - 1) / s) + 1`` (torch's output extent; sympy, so a
    symbolic ``size`` gives a floor expression the lowering turns into a division)."""
    e = sympy.sympify(size) + 2 * p - d * (k - 1) - 1
    return sympy.floor(e / s) + 1 if s != 1 else e + 1


def _window_shape(node: Node, x, kh: int, kw: int) -> tuple:
    (sh, sw), (ph, pw), (dh, dw) = (_pair_attr(node, k) for k in ("stride", "padding",
                                                                    "dilation"))
    oh = window_extent(x.shape[2], kh, sh, ph, dh)
    ow = window_extent(x.shape[3], kw, sw, pw, dw)
    for o in (oh, ow):
        if o.is_number and int(o) < 1:
            raise ShapeMismatchError(f"{node.op} {node.name!r}: the window does not fit the "
                                     f"input {x.name!r} {tuple(map(str, x.shape))} (output "
                                     f"extent {o})", node.location)
    return oh, ow


def _conv_shape(node: Node, cs: Constraints) -> Shape:
    """``conv2d(x (N, C, H, W), w (F, C/groups, KH, KW)[, b (F,)])``."""
    x, w = node.inputs[0], node.inputs[1]
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise mismatch(node, x, w, "conv2d needs x (N, C, H, W) and w (F, C/groups, KH, KW)")
    g = int(node.attrs.get("groups", 1))
    f, cg, kh, kw = w.shape
    if not all(d.is_Integer for d in (f, cg, kh, kw)):
        raise mismatch(node, x, w, "conv2d needs integer weight extents")
    if int(f) % g:
        raise mismatch(node, x, w, f"{f} output channels are not a multiple of groups={g}")
    cs.equal(x.shape[1], cg * g, node, x, w, "input channels (C == groups * w.shape[1])")
    if len(node.inputs) > 2:
        b = node.inputs[2]
        if len(b.shape) != 1:
            raise mismatch(node, w, b, "conv2d bias must be 1-d")
        cs.equal(b.shape[0], f, node, w, b, "bias extent")
    oh, ow = _window_shape(node, x, int(kh), int(kw))
    return (x.shape[0], f, oh, ow)


def _int(e) -> int:
    """An integer extent of a traced tensor (``ir.IntImm`` or int)."""
    return int(getattr(e, "value", e))


def _inside(h, v, x: dsl.Tensor):
    return (h >= 0) & (h < x.shape[2]) & (v >= 0) & (v < x.shape[3])


#: windows of at most this many positions with one input channel per output are summed
#: as an expression, not a reduction (:func:`_conv_lower`)
UNROLL_WINDOW = 25


def POLYCOMP_PAD_STAGE() -> bool:
    """Whether grouped convolutions read a zero-padded copy of their input
    (``POLYCOMP_PAD_STAGE=0``: the padding ``select`` in the window, for comparisons)."""
    import os
    return os.environ.get("POLYCOMP_PAD_STAGE", "1") != "0"


def POLYCOMP_CONV_PAD_STAGE() -> bool:
    """Whether padded groups-1 convolutions of at most ``FEW_CHANNELS`` input channels
    (RGB stems, which keep the CPU backend's width form) with laid-out weights read a
    zero-padded copy of their input: the width form's row vectors are then plain
    (strided) loads, not masked loads under a condition at every window position
    (ResNet-18's 7x7/2 stem with its max pool, 1 thread, batch 8: 29.0 -> 25.5 ms).
    The channel form hoists its conditions out of the channel loop and gained nothing
    (a 56x56 64-channel 3x3 lost the copy's time), so other convolutions keep the
    ``select``.  ``POLYCOMP_CONV_PAD_STAGE=0`` keeps it everywhere (for comparisons)."""
    import os
    return os.environ.get("POLYCOMP_CONV_PAD_STAGE", "1") != "0"


def _padded(x, ph: int, pw: int, fill, name: str):
    """``x`` (N, C, H, W) with ``ph`` / ``pw`` rows / columns of ``fill`` on each side,
    as a stage of its own: the window loops that read it need no per-element bounds
    test (a depthwise convolution's row vectors are then plain loads, not masked loads
    under a condition recomputed at every window position)."""
    N, C, H, W = x.shape

    def body(n, c, h, v):
        return ir.select(_inside(h - ph, v - pw, x), x[n, c, h - ph, v - pw], fill)
    return dsl.compute((N, C, H + 2 * ph, W + 2 * pw), body, name=name, dtype=x.dtype)


def _conv_lower(node: Node, ins, shape):
    """Groups 1: the op library's ``conv2d_nchw`` (the form the CPU backend's direct
    convolution recognises; attribute ``weight_layout="chwf"``, set only by
    :func:`polycomp.graph.lower.group_kernel` for a constant weight it hands the kernel
    as ``(C, KH, KW, F)``, reads ``w[c, kh, kw, f]``).  Grouped / depthwise: input
    channel ``(f // (F/g)) * (C/g) + c`` (depthwise with multiplier 1: ``f``); with a
    padding, a zero-padded copy of the input is its own stage (:func:`_padded`); with
    ``C/g == 1`` and at most ``UNROLL_WINDOW`` window positions the window sum is written
    out as an expression (an elementwise stage), else the window (and channel) loops
    reduce."""
    x, w = ins[0], ins[1]
    g = int(node.attrs.get("groups", 1))
    stride, pad, dil = (_pair_attr(node, k) for k in ("stride", "padding", "dilation"))
    d = node.output.dtype
    acc = ops.accumulation_dtype(d)
    has_bias = len(ins) > 2
    nm = _name(node) + ("_conv" if has_bias or acc != d else "")
    if node.attrs.get("pixels_flat"):
        # a 1x1 stride-1 convolution lowered over flattened pixels (graph/lower.py
        # ``pixel_flat``): x (N, C, H*W), out[n, f, p] = sum_c w[f, c] * x[n, c, p]
        rc = dsl.reduce_axis(_int(w.shape[1]), f"rc_{node.name}")
        t = dsl.compute(shape, lambda n, f, p: dsl.sum(
            _as(x[n, rc, p], acc) * _as(w[f, rc, 0, 0], acc), axis=[rc]), name=nm, dtype=acc)
    elif g == 1:
        from polycomp.scheduler.cpu.backbone_tile import FEW_CHANNELS
        src, p1 = x, pad
        if any(pad) and POLYCOMP_CONV_PAD_STAGE() and \
                node.attrs.get("weight_layout") == "chwf" and _int(w.shape[0]) <= FEW_CHANNELS:
            src, p1 = _padded(x, pad[0], pad[1], ir.const(0.0, x.dtype),
                              _name(node) + "_pad"), (0, 0)
        t = ops.conv2d_nchw(src, w, stride, p1, dil, out_dtype=acc, name=nm,
                            w_layout=node.attrs.get("weight_layout", "fchw"))
    else:
        (sh, sw), (ph, pw), (dh, dw) = stride, pad, dil
        F, cg, KH, KW = (_int(e) for e in w.shape)
        fo = F // g
        rh = dsl.reduce_axis(KH, f"rh_{node.name}")
        rw = dsl.reduce_axis(KW, f"rw_{node.name}")
        rc = dsl.reduce_axis(cg, f"rc_{node.name}") if cg > 1 else None
        zero = ir.const(0.0, acc)
        src, qh, qw = x, ph, pw
        if (ph or pw) and POLYCOMP_PAD_STAGE():
            src, qh, qw = _padded(x, ph, pw, ir.const(0.0, x.dtype), _name(node) + "_pad"), 0, 0

        def term(n, f, y, z, a, b_, c):
            h = y * sh + a * dh - qh
            v = z * sw + b_ * dw - qw
            xv = _as(src[n, c, h, v], acc)
            if qh or qw:
                xv = ir.select(_inside(h, v, x), xv, zero)
            return xv * _as(w[f, 0, a, b_], acc)

        def unrolled(n, f, y, z):
            c = f if fo == 1 else f // fo
            out = zero  # the reduction's identity first: the same sums, zeros' signs too
            for a in range(KH):
                for b_ in range(KW):
                    out = out + term(n, f, y, z, a, b_, c)
            return out

        def body(n, f, y, z):
            h = y * sh + rh * dh - qh
            v = z * sw + rw * dw - qw
            c = f if fo == 1 else f // fo
            if rc is not None:
                c = c * cg + rc
            xv = _as(src[n, c, h, v], acc)
            if qh or qw:
                xv = ir.select(_inside(h, v, x), xv, zero)
            wv = _as(w[f, rc if rc is not None else 0, rh, rw], acc)
            axes = [rh, rw] if rc is None else [rc, rh, rw]
            return dsl.sum(xv * wv, axis=axes)
        # one input channel per output (depthwise) and a small window: the window sum
        # written out, ((0 + t_00) + t_01) + .. in the reduction's order, an elementwise
        # stage (vectors along the output row, the sum in registers, no accumulator
        # array stored and reloaded at every window position)
        small = cg == 1 and KH * KW <= UNROLL_WINDOW
        t = dsl.compute(shape, unrolled if small else body, name=nm, dtype=acc)
    if has_bias:
        b = ins[2]
        t = _compute(t.shape, lambda i: t[i] + _as(b[i[1]], acc),
                     name=_name(node) + ("_bias" if acc != d else ""), dtype=acc)
    return _finish(node, t, t.shape)


def _pool_shape(node: Node, cs: Constraints) -> Shape:
    x = node.inputs[0]
    if len(x.shape) != 4:
        raise ShapeMismatchError(f"{node.op} {node.name!r}: needs (N, C, H, W), got "
                                 f"{x.name!r} of rank {len(x.shape)}", node.location)
    kh, kw = _pair_attr(node, "kernel")
    oh, ow = _window_shape(node, x, kh, kw)
    return (x.shape[0], x.shape[1], oh, ow)


def _pool_lower(node: Node, ins, shape):
    """``max_pool2d``: max over the window of the in-bounds values (padding is -inf, as
    torch).  ``avg_pool2d``: the window's sum divided by ``divisor`` if given, else by
    ``KH*KW`` (``count_include_pad`` or no padding), else by the in-bounds count
    ``(min(h0 + KH, H) - max(h0, 0)) * (...)``."""
    x = ins[0]
    kh, kw = _pair_attr(node, "kernel")
    (sh, sw), (ph, pw), (dh, dw) = (_pair_attr(node, k) for k in ("stride", "padding",
                                                                    "dilation"))
    d = node.output.dtype
    acc = d if node.op == "max_pool2d" else ops.accumulation_dtype(d)
    rh = dsl.reduce_axis(kh, f"rh_{node.name}")
    rw = dsl.reduce_axis(kw, f"rw_{node.name}")
    is_max = node.op == "max_pool2d"
    fill = ir.const(-np.inf if is_max else 0.0, acc)

    def body(n, c, y, z):
        h = y * sh + rh * dh - ph
        v = z * sw + rw * dw - pw
        xv = _as(x[n, c, h, v], acc)
        if ph or pw:
            xv = ir.select(_inside(h, v, x), xv, fill)
        return (dsl.max if is_max else dsl.sum)(xv, axis=[rh, rw])
    small = kh * kw <= UNROLL_WINDOW

    def unrolled(n, c, y, z):
        # the reduction written out in its order: fill, then each window position (a
        # padded copy of the input, as depthwise convolutions read, measured 2x slower
        # for ResNet's stem pool: its input is the stem's 3 MB output)
        out = fill
        for a in range(kh):
            for b_ in range(kw):
                h = y * sh + a * dh - ph
                v = z * sw + b_ * dw - pw
                xv = _as(x[n, c, h, v], acc)
                if ph or pw:
                    xv = ir.select(_inside(h, v, x), xv, fill)
                out = dsl.max(out, xv) if is_max else out + xv
        return out
    nm = _name(node) if is_max else _name(node) + "_sum"
    t = dsl.compute(shape, unrolled if small else body, name=nm, dtype=acc)
    if is_max:
        return t
    div = node.attrs.get("divisor")
    if div is None and (node.attrs.get("count_include_pad", True) or not (ph or pw)):
        div = kh * kw
    if div is not None:
        inv = ir.const(1.0 / float(div), acc)
        out = dsl.compute(shape, lambda n, c, y, z: t[n, c, y, z] * inv,
                          name=_name(node) + ("_acc" if acc != d else ""), dtype=acc)
    else:
        H, W = x.shape[2], x.shape[3]

        def avg(n, c, y, z):
            h0, v0 = y * sh - ph, z * sw - pw
            ch = ir.min_(h0 + kh, H) - ir.max_(h0, 0)
            cw = ir.min_(v0 + kw, W) - ir.max_(v0, 0)
            return t[n, c, y, z] / _as(ch * cw, acc)
        out = dsl.compute(shape, avg, name=_name(node) + ("_acc" if acc != d else ""),
                          dtype=acc)
    return _finish(node, out, shape)


def adaptive_bins(size: int, out: int) -> tuple[list[int], list[int]]:
    """torch's adaptive pooling bins: ``[floor(i*size/out), ceil((i+1)*size/out))``."""
    starts = [(i * size) // out for i in range(out)]
    ends = [-(-((i + 1) * size) // out) for i in range(out)]
    return starts, ends


def _adaptive_shape(node: Node, cs: Constraints) -> Shape:
    x = node.inputs[0]
    if len(x.shape) != 4:
        raise ShapeMismatchError(f"adaptive_avg_pool2d {node.name!r}: needs (N, C, H, W), "
                                 f"got {x.name!r} of rank {len(x.shape)}", node.location)
    oh, ow = node.attrs["out"]
    for size, o in ((x.shape[2], oh), (x.shape[3], ow)):
        if o != 1 and not size.is_Integer:
            raise ShapeMismatchError(
                f"adaptive_avg_pool2d {node.name!r}: output extent {o} of the symbolic "
                f"extent {size}: the bins floor(i*{size}/{o}) are not affine (only output 1 "
                f"or an integer input extent)", node.location)
    return (x.shape[0], x.shape[1], sympy.Integer(oh), sympy.Integer(ow))


def _adaptive_lower(node: Node, ins, shape):
    """Output 1: the sum over the whole (possibly symbolic) plane divided by ``H*W``.
    Otherwise (integer extents) the bins of :func:`adaptive_bins`: a window of the widest
    bin's extent at ``start(i) = (i*H) // OH`` (quasi-affine), values past the bin's end
    ``((i+1)*H + OH - 1) // OH`` masked, divided by the bin's size."""
    x = ins[0]
    d = node.output.dtype
    acc = ops.accumulation_dtype(d)
    oh, ow = node.attrs["out"]
    H, W = x.shape[2], x.shape[3]
    axes = []
    spans: list[tuple[int, int] | None] = []
    for size, o, tag in ((H, oh, "h"), (W, ow, "w")):
        if o == 1:
            spans.append(None)
            axes.append(dsl.reduce_axis(size, f"r{tag}_{node.name}"))
        else:
            st, en = adaptive_bins(_int(size), o)
            spans.append((_int(size), o))
            axes.append(dsl.reduce_axis(max(e - s for s, e in zip(st, en)),
                                        f"r{tag}_{node.name}"))
    zero = ir.const(0.0, acc)

    def bounds(i, span):
        size, o = span
        return (i * size) // o, ((i + 1) * size + (o - 1)) // o

    def body(n, c, y, z):
        idx, conds = [], []
        for i, r, span, size in ((y, axes[0], spans[0], H), (z, axes[1], spans[1], W)):
            if span is None:
                idx.append(r)
                continue
            lo, hi = bounds(i, span)
            if span[0] % span[1]:
                idx.append(ir.min_(lo + r, size - 1))
                conds.append(lo + r < hi)
            else:
                idx.append(lo + r)
        xv = _as(x[n, c, idx[0], idx[1]], acc)
        if conds:
            cond = conds[0] if len(conds) == 1 else conds[0] & conds[1]
            xv = ir.select(cond, xv, zero)
        return dsl.sum(xv, axis=axes)
    t = dsl.compute(shape, body, name=_name(node) + "_sum", dtype=acc)

    def avg(n, c, y, z):
        cnt = []
        for i, span, size in ((y, spans[0], H), (z, spans[1], W)):
            if span is None:
                cnt.append(size)
            else:
                lo, hi = bounds(i, span)
                cnt.append(hi - lo)
        return t[n, c, y, z] / _as(cnt[0] * cnt[1], acc)
    out = dsl.compute(shape, avg, name=_name(node) + ("_acc" if acc != d else ""), dtype=acc)
    return _finish(node, out, shape)


def _float_only(node: Node) -> str:
    d = node.inputs[0].dtype
    if not dt.is_float(d):
        raise DTypeError(f"{node.op} {node.name!r}: needs a float tensor, got {d}",
                         node.location)
    return d


def _conv_dtype(node: Node) -> str:
    d = _float_only(node)
    for v in node.inputs[1:]:
        if v.dtype != d:
            raise DTypeError(f"conv2d {node.name!r}: input {d} with {v.name!r} {v.dtype}",
                             node.location)
    return d
# --------------------------------------------------------------------- attention (chain)


def _attention_shape(node: Node, cs: Constraints) -> Shape:
    """``attention(q, k, v[, mask])``: ``q (*b, L, E)``, ``k (*b, S, E)``, ``v (*b, S,
    Ev)`` -> ``(*b, L, Ev)`` (equal ranks and batch extents, no broadcasting); the
    additive ``mask`` broadcasts to ``(*b, L, S)``, or to ``(*b, S)`` with ``rowless``."""
    q, k, v = node.inputs[:3]
    if not len(q.shape) == len(k.shape) == len(v.shape) >= 2:
        raise mismatch(node, q, k, "attention needs q, k, v of one rank >= 2")
    cs.equal(q.shape[-1], k.shape[-1], node, q, k, "head dim of q and k")
    cs.equal(k.shape[-2], v.shape[-2], node, k, v, "key length of k and v")
    lead = tuple(cs.equal(cs.equal(x, y, node, q, k, f"batch axis {j}"), z, node, q, v,
                          f"batch axis {j}")
                 for j, (x, y, z) in enumerate(zip(q.shape[:-2], k.shape[:-2], v.shape[:-2])))
    if len(node.inputs) > 3:
        m = node.inputs[3]
        full = lead + ((k.shape[-2],) if node.attrs.get("rowless") else
                       (q.shape[-2], k.shape[-2]))
        broadcast(node, cs, m, type(m)("_scores", m.dtype, full))
    return lead + (q.shape[-2], v.shape[-1])


def _attention_dtype(node: Node) -> str:
    ds = {v.dtype for v in node.inputs}
    d = node.inputs[0].dtype
    if len(ds) != 1 or not dt.is_float(d):
        raise DTypeError(f"attention {node.name!r}: q, k, v (and the mask) must share one "
                         f"float dtype, got {', '.join(sorted(ds))}", node.location)
    return d


def _attention_lower(node: Node, ins, shape):
    """Attention as the chain :mod:`polycomp.scheduler.chain.detect` fuses: ``T = q .
    k^T`` (``k`` read as stored, ``[.., l, r]``), one elementwise stage (scale, the
    additive mask, the causal ``select``), the op library's softmax over ``l``, ``O = P .
    v``.  The chain is fusible when the mask is indexed by iterators only (no broadcast
    extent 1 other than a missing leading axis), as the torch importer arranges."""
    q, k, v = ins[:3]
    mask = ins[3] if len(ins) > 3 else None
    d = node.output.dtype
    n = len(shape)
    r = dsl.reduce_axis(q.shape[-1], f"k_{node.name}")
    sshape = tuple(shape[:-1]) + (k.shape[-2],)
    t = _compute(sshape, lambda i: dsl.sum(q[tuple(i[:-1]) + (r,)]
                                           * k[tuple(i[:-2]) + (i[-1], r)], axis=r),
                 name=_name(node) + "_t", dtype=d)
    scale = ir.const(float(node.attrs["scale"]), d)
    rowless = bool(node.attrs.get("rowless"))

    def score(i):
        e = t[i] * scale
        if mask is not None:
            e = e + _bload(mask, tuple(i[:-2]) + (i[-1],) if rowless else i,
                           n - 1 if rowless else n)
        if node.attrs.get("causal"):
            e = ir.select(ir.binary("<=", i[-1], i[-2]), e, ir.const(float("-inf"), d))
        return e
    sc = _compute(sshape, score, name=_name(node) + "_s", dtype=d)
    p = ops.softmax(sc, -1, name=_name(node) + "_p")
    l_ = dsl.reduce_axis(k.shape[-2], f"l_{node.name}")
    return _compute(shape, lambda i: dsl.sum(p[tuple(i[:-1]) + (l_,)]
                                             * v[tuple(i[:-2]) + (l_, i[-1])], axis=l_),
                    name=_name(node), dtype=d)


OPS: dict[str, OpDef] = {
    **{k: OpDef("elementwise", _binary_shape, _binary_lower, dtype=_binary_dtype) for k in _BIN},
    **{k: OpDef("elementwise", _same_shape, _unary_lower, 8.0 if k in ("gelu", "erf") else 1.0,
                dtype=_unary_dtype)
       for k in _UN},
    "cast": OpDef("elementwise", _same_shape, _cast_lower, 0.0, dtype=_cast_dtype),
    "transpose": OpDef("injective", _permute_shape, _permute_lower, 0.0),
    "permute": OpDef("injective", _permute_shape, _permute_lower, 0.0),
    "slice": OpDef("injective", _slice_shape, _slice_lower, 0.0),
    "select": OpDef("injective", _select_shape, _select_lower, 0.0),
    "reshape": OpDef("injective", _reshape_shape, _reshape_lower, 0.0),
    "expand": OpDef("injective", _expand_shape, _expand_lower, 0.0),
    "cat": OpDef("injective", _cat_shape, _cat_lower, 0.0, dtype=_cat_dtype),
    "iota": OpDef("injective", _iota_shape, _iota_lower, 0.0,
                  dtype=lambda n: dt.canonical(n.attrs["dtype"])),
    "index": OpDef("injective", _index_shape, _index_lower, 0.0),
    "gather": OpDef("injective", _gather_shape, _gather_lower, 0.0),
    "where": OpDef("elementwise", _where_shape, _where_lower, dtype=_where_dtype),
    **{k: OpDef("elementwise", _binary_shape, _cmp_lower, dtype=lambda n: "bool")
       for k in _CMP},
    "matmul": OpDef("backbone", _matmul_shape, _matmul_lower, dtype=_matmul_dtype),
    "softmax": OpDef("reduce", _same_shape, _softmax_lower, 5.0),
    "layernorm": OpDef("reduce", _layernorm_shape, _layernorm_lower, 8.0),
    "sum": OpDef("reduce", _reduce_shape, _reduce_lower, dtype=_reduce_dtype),
    "mean": OpDef("reduce", _reduce_shape, _reduce_lower, dtype=_reduce_dtype),
    "amax": OpDef("reduce", _reduce_shape, _reduce_lower, dtype=_reduce_dtype),
    "conv2d": OpDef("backbone", _conv_shape, _conv_lower, dtype=_conv_dtype),
    "max_pool2d": OpDef("reduce", _pool_shape, _pool_lower, dtype=_float_only),
    "avg_pool2d": OpDef("reduce", _pool_shape, _pool_lower, dtype=_float_only),
    "adaptive_avg_pool2d": OpDef("reduce", _adaptive_shape, _adaptive_lower,
                                 dtype=_float_only),
    "attention": OpDef("chain", _attention_shape, _attention_lower, 5.0,
                       dtype=_attention_dtype),
}


def kind_of(node: Node) -> str:
    if is_runtime_view(node):
        return "view"
    return OPS[node.op].kind


def flops(node: Node, env: dict) -> float:
    """FLOPs of ``node`` with dims bound by ``env`` (the cost model's estimate)."""
    if node.op == "matmul":
        k = int(node.inputs[0].shape[-1].xreplace(env))
        return 2.0 * numel(node.output.shape, env) * k
    if node.op == "conv2d":
        _, cg, kh, kw = (int(e) for e in node.inputs[1].shape)
        return 2.0 * numel(node.output.shape, env) * cg * kh * kw
    if node.op in ("max_pool2d", "avg_pool2d"):
        kh, kw = _pair_attr(node, "kernel")
        return float(numel(node.output.shape, env) * kh * kw)
    if node.op == "attention":  # two products over the (*b, L, S) scores, the softmax
        q, k_, v = node.inputs[:3]
        scores = numel(q.shape[:-1], env) * int(k_.shape[-2].xreplace(env))
        return scores * (2.0 * int(q.shape[-1].xreplace(env))
                         + 2.0 * int(v.shape[-1].xreplace(env)) + 5.0)
    src = node.inputs[0] if node.inputs else node.output
    return OPS[node.op].flops_per_elem * numel(src.shape, env)
