"""Lower one fusion group to one multi-stage ``@tensor_expr`` kernel.

Each distinct non-integer extent of the group (``B``, ``S``, ``B*S``, ...) becomes an isl
parameter of the kernel: affine combinations of dim symbols stay affine (``S + 1``), a
product of symbols (``B*S``, not affine in isl) becomes a parameter of its own whose value
the runtime evaluates from the bound dims.  The kernel's inputs are the group's external
values (graph inputs, constants, other groups' outputs) and its outputs the values used
outside the group; every operator contributes its stages (:mod:`polycomp.graph.opdefs`).

*Row flattening* (:func:`row_flat`): a group whose backbone is a linear layer -- ``(*P, K)
x (K, N)`` with a 2-D right operand and ``len(P) >= 2`` -- and whose other operators are
row-wise (elementwise, ``layernorm``, ``softmax`` over the last axis) is lowered over the
flattened rows: every value of shape ``(*P, X)`` becomes ``(prod(P), X)`` (``B*S`` is one
parameter), so the kernel holds one GEMM with ``M = prod(P)`` and no batch loop around it
(the weight panel is packed once per call, not once per batch element).  The runtime
hands the kernel zero-copy reshapes of its contiguous arguments (:attr:`GroupKernel.arg_shapes`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace

import numpy as np
import sympy

from polycomp import ir
from polycomp.frontend.dsl import Kernel, Tensor

from .ir import Node, Shape, Value
from .opdefs import OPS, is_runtime_view, reshape_index
from .partition import Group, Partition


@dataclass
class ParamMap:
    """sympy extents -> isl parameters of one kernel."""
    exprs: dict[str, sympy.Expr] = field(default_factory=dict)
    _vars: dict[sympy.Expr, ir.Var] = field(default_factory=dict)

    def to_ir(self, e: sympy.Expr):
        e = sympy.sympify(e)
        if e.is_Integer:
            return int(e)
        if isinstance(e, sympy.Add):
            parts = [self.to_ir(a) for a in e.args]
            acc = parts[0]
            for p in parts[1:]:
                acc = acc + p
            return acc
        if isinstance(e, sympy.Mul) and len(e.args) == 2 and e.args[0].is_Integer:
            return int(e.args[0]) * self.to_ir(e.args[1])
        if isinstance(e, sympy.floor):  # floor(affine / d): a convolution's output extent
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if den.is_Integer and int(den) > 0 and sympy.Poly(num).is_linear:
                return self.to_ir(sympy.expand(num)) // int(den)
        if e not in self._vars:
            name = str(e) if isinstance(e, sympy.Symbol) else f"d{len(self._vars)}"
            self._vars[e] = ir.Var(name, "int64", is_param=True)
            self.exprs[name] = e
        return self._vars[e]

    def shape(self, shape) -> tuple:
        return tuple(self.to_ir(d) for d in shape)


@dataclass
class GroupKernel:
    kernel: Kernel
    inputs: list[Value]
    outputs: list[Value]
    params: ParamMap
    key: str
    # graph value -> the shape the kernel declares for it (row-flattened groups only;
    # the runtime passes a zero-copy reshape of the array)
    arg_shapes: dict[Value, Shape] = field(default_factory=dict)
    # constant graph value -> the array the kernel takes instead (laid out at compile
    # time: :func:`conv_weight_layouts`)
    arg_arrays: dict[Value, np.ndarray] = field(default_factory=dict)
    # constant convolution weights handed to the kernel as they are, for the backend to
    # read pre-packed (option ``prepack``: :func:`conv_weight_layouts` ``prepack``)
    prepack: list[Value] = field(default_factory=list)
    # the projection's head split folded into its GEMM (:func:`head_split`)
    heads: "HeadSplit | None" = None
    # what of the group's layout the GEMM took over (Step.folded): "split" (the head
    # split, :func:`head_split`), else the layout operators read in place
    # (:func:`folded_layout`) by name, "" for none
    folded: str = ""


def argname(v: Value) -> str:
    """The kernel argument name of graph value ``v``."""
    return f"t_{v.name}"


def structural_key(group: Group, inputs: list[Value], outputs: list[Value]) -> str:
    """Equal keys <=> the same kernel (names aside): identical groups compile once."""
    ref = {v: f"i{k}" for k, v in enumerate(inputs)}
    parts = [";".join(f"{v.dtype}{tuple(map(str, v.shape))}" for v in inputs)]
    for k, n in enumerate(group.nodes):
        ref[n.output] = f"n{k}"
        attrs = sorted((a, str(b)) for a, b in n.attrs.items())
        parts.append(f"{n.op}({','.join(ref[v] for v in n.inputs)}){attrs}")
    parts.append("->" + ",".join(ref[v] for v in outputs))
    return "|".join(parts)


_ROW_OPS = frozenset({"layernorm"})  # reductions over the last axis, whatever the rank


def row_flat(group: Group) -> dict[Value, Shape] | None:
    """The flattened shape of every value a group reads or writes when the group can run
    over flattened rows, else ``None``.

    Assumes shapes are propagated.  The group qualifies when it holds a ``matmul`` of an
    operand ``(*P, K)`` (``len(P) >= 2``) by a 2-D operand, and every other value it
    touches is a *row value* ``(*P, X)`` (becomes ``(prod(P), X)``), a value whose
    leading extents are all 1 (``(1, .., 1, X)`` -> ``(1, X)``, a broadcast), a value of
    rank <= 1 (broadcast along the last axis), or a 2-D right operand of a matmul; and
    every operator is elementwise, a matmul of that form, ``layernorm``, or a
    ``softmax`` over the last axis.  Guarantees: every operator computes the same
    elements on the flattened shapes (no operator reads across rows except along the
    last axis, which is kept)."""
    lead: tuple | None = None
    for n in group.nodes:
        if n.op == "matmul" and len(n.inputs[1].shape) == 2 and len(n.inputs[0].shape) >= 3:
            lead = tuple(n.inputs[0].shape[:-1])
            break
    if lead is None:
        return None
    p = len(lead)
    rows = sympy.Mul(*lead)
    flat: dict[Value, Shape] = {}

    def fits(v: Value) -> bool:
        s = tuple(v.shape)
        if len(s) <= 1:
            return True
        if len(s) == p + 1 and s[:p] == lead:
            flat[v] = (rows, s[-1])
            return True
        if len(s) == p + 1 and all(d == 1 for d in s[:p]):
            flat[v] = (sympy.Integer(1), s[-1])
            return True
        return False

    if not _row_wise(group, p):
        return None
    for n in group.nodes:
        vals = list(n.inputs) if n.op != "matmul" else [n.inputs[0]]
        if not all(fits(v) for v in [*vals, n.output]):
            return None
        if n.op != "matmul" and len(n.output.shape) != p + 1:
            return None  # a rank-1 result of rank-1 operands: not a row value
    return flat


def _row_wise(group: Group, p: int) -> bool:
    """Every operator of ``group`` is row-wise for rows of rank ``p`` (see :func:`row_flat`)."""
    for n in group.nodes:
        if n.op == "matmul":
            if len(n.inputs[1].shape) != 2 or len(n.inputs[0].shape) != p + 1:
                return False
        elif n.op == "softmax":
            if n.attrs.get("axis", -1) not in (-1, p):
                return False
        elif OPS[n.op].kind != "elementwise" and n.op not in _ROW_OPS:
            return False
    return True


def _flat_node(n: Node) -> Node:
    if n.op == "softmax":
        return replace(n, attrs={**n.attrs, "axis": -1})
    return n


@dataclass(frozen=True, eq=False)
class HeadSplit:
    """A projection whose result is split into attention heads (:func:`head_split`):
    ``matmul(a, w)`` with ``a (*P, S, K)`` and ``w (K, H*D)``, elementwise operators on
    it, then ``reshape(*P, S, H, D)`` and the transpose of ``S`` and ``H``."""
    matmul: Node
    heads: int
    dim: int
    # rank-1 operands of the elementwise operators (a bias ``(H*D,)``): read as ``(H, 1, D)``
    vectors: tuple[Value, ...]
    # operators before the matmul (a layer norm feeding it), lowered as they are
    pre: tuple[Node, ...] = ()
    # a stacked projection (``graph/rewrite.py`` ``stack_projections``): ``parts`` blocks
    # of ``H*D`` columns (q, k, v), reshaped to ``(*P, S, T, H, D)`` and permuted to
    # ``(T, *P, H, S, D)``; 1 for one projection
    parts: int = 1


def _swaps(n: Node, a: int, b: int) -> bool:
    """``n`` (``transpose`` / ``permute``) exchanges axes ``a`` and ``b`` only."""
    rank = len(n.output.shape)
    try:
        from .opdefs import _perm
        p = _perm(n, rank)
    except Exception:
        return False
    want = list(range(rank))
    want[a], want[b] = want[b], want[a]
    return list(p) == want


def _permutes(n: Node, perm: list) -> bool:
    """``n`` (``transpose`` / ``permute``) is the permutation ``perm`` (output axis
    ``q`` is input axis ``perm[q]``)."""
    try:
        from .opdefs import _perm
        return list(_perm(n, len(n.output.shape))) == list(perm)
    except Exception:
        return False


def _vector_chain(mm: Node, mid: list[Node], n_out) -> tuple[Value, list[Value]] | None:
    """``(last value, rank-1 operands)`` when ``mid`` is a chain of elementwise operators
    on ``mm``'s result reading otherwise only 0-d values and rank-1 values of extent
    ``n_out`` or 1 (:func:`head_split`), else None."""
    cur = mm.output
    vectors: list[Value] = []
    for n in mid:
        if OPS[n.op].kind != "elementwise" or cur not in n.inputs or \
                tuple(n.output.shape) != tuple(cur.shape) or n.output.dtype != cur.dtype:
            return None
        for v in n.inputs:
            if v is cur or len(v.shape) == 0 or (len(v.shape) == 1 and v.shape[0] == 1):
                continue
            if len(v.shape) != 1 or v.shape[0] != n_out:
                return None
            if v not in vectors:
                vectors.append(v)
        cur = n.output
    return cur, vectors


def head_split(group: Group, outputs: list[Value]) -> HeadSplit | None:
    """The head split of a Q/K/V projection folded into its GEMM, or None.

    Assumes shapes are propagated.  The group qualifies when its operators are, in
    order: one ``matmul`` of ``a (*P, S, K)`` by a 2-D ``w (K, N)``; elementwise
    operators each reading the previous result and otherwise only values of rank <= 1
    (extent ``N`` or 1) or 0-d scalars; ``reshape`` to ``(*P, S, H, D)`` (integer ``H``,
    ``D``, ``H*D == N``); ``transpose``/``permute`` exchanging ``S`` and ``H``; and its
    only output is the last one.  The group is then lowered at the output's points
    ``(*P, H, S, D)``: ``out[.., h, s, d] = sum_k a[.., s, k] * w[k, h, d]`` (``w``
    passed as the zero-copy ``(K, H, D)`` reshape, each rank-1 operand as ``(H, 1, D)``)
    followed by the elementwise operators at the same points.  Guarantees: the same
    elements as the unfused group (``(h, d)`` is ``h*D + d`` of the flat ``N`` axis, the
    reshape and transpose only rename points), with no stage of its own for the reshape
    or the transpose: the GEMM writes its tiles straight into the head layout and the
    bias epilogue runs on them (the CPU GEMM tree puts the head loop with the column
    tiles, :mod:`polycomp.scheduler.cpu.backbone_tile`).

    The stacked form (``graph/rewrite.py`` ``stack_projections``: ``w (K, T*H*D)``,
    ``reshape(*P, S, T, H, D)``, ``permute`` to ``(T, *P, H, S, D)``) qualifies too
    (:attr:`HeadSplit.parts` ``= T``): ``out[t, .., h, s, d] = sum_k a[.., s, k] *
    w[k, t*H + h, d]``, ``w`` passed as ``(K, T*H, D)``, each rank-1 operand as ``(T,
    1, .., 1, H, 1, D)`` (``(t, h, d)`` is ``(t*H + h)*D + d`` of the flat axis)."""
    nodes = group.nodes
    p = next((q for q, n in enumerate(nodes) if n.op == "matmul"), len(nodes))
    pre = nodes[:p]
    made = {n.output for n in pre}
    if len(nodes) - p < 3 or nodes[-1].output not in outputs or \
            any(v is not nodes[-1].output and v not in made for v in outputs):
        return None
    mm, *mid, rs, tr = nodes[p:]
    if mm.op != "matmul" or rs.op != "reshape" or tr.op not in ("transpose", "permute"):
        return None
    a, w = mm.inputs
    if len(w.shape) != 2 or len(a.shape) < 2 or w.const is None:
        return None
    if mm.output.dtype not in ("float32", "float64") or a.dtype != mm.output.dtype or \
            w.dtype != mm.output.dtype:
        return None
    n_out = w.shape[1]
    lead = tuple(a.shape[:-1])
    chain = _vector_chain(mm, mid, n_out)
    if chain is None:
        return None
    cur, vectors = chain
    if rs.inputs[0] is not cur or tr.inputs[0] is not rs.output:
        return None
    shp = tuple(rs.output.shape)
    p = len(lead)
    if len(shp) not in (p + 2, p + 3) or shp[:p] != lead or \
            not all(d.is_Integer for d in shp[p:]):
        return None
    parts = int(shp[p]) if len(shp) == p + 3 else 1
    heads, dim = int(shp[-2]), int(shp[-1])
    if not n_out.is_Integer or parts * heads * dim != int(n_out) or heads < 2:
        return None
    if parts == 1 and not _swaps(tr, p - 1, p):
        return None
    if parts > 1 and (len(shp) == p + 2 or not _permutes(tr, [p, *range(p - 1), p + 1, p - 1,
                                                               p + 2])):
        return None
    if any(v in vectors for v in (a, w)) or any(
            v is not mm.output and v in [m.output for m in mid] for v in vectors):
        return None
    if any(v is w or v in vectors for n in pre for v in n.inputs):
        return None              # read by a prologue operator under its own shape
    return HeadSplit(mm, heads, dim, tuple(vectors), tuple(pre), parts)


def _head_split_lower(hs: HeadSplit, group: Group, env: dict, out_shape: tuple):
    """The stages of a :class:`HeadSplit` group at the output's points (``env``: the
    kernel's arguments by graph value, ``w`` and the vectors already in their
    ``(K, H, D)`` / ``(H, 1, D)`` shapes); returns the output tensor."""
    from polycomp.frontend import dsl

    from .opdefs import _compute, _name
    pm = env["pm"]
    for n in hs.pre:
        sc = n.attrs.get("scalar")
        if isinstance(sc, sympy.Expr) and sc.free_symbols:  # x * S: a size parameter
            n = replace(n, attrs={**n.attrs, "scalar": pm.to_ir(sc)})
        env[n.output] = OPS[n.op].lower(n, [env[v] for v in n.inputs], pm.shape(
            n.output.shape))
    mm = hs.matmul
    a, w = (env[v] for v in mm.inputs)
    kax = dsl.reduce_axis(a.shape[-1], f"k_{mm.name}")
    q0 = 0 if hs.parts == 1 else 1

    def rows(i):                 # a (*P, S, K), or (S, K) when every P is 1 (below)
        return (tuple(i[q0:-3]) if len(a.shape) > 2 else ()) + (i[-2], kax)
    if hs.parts == 1:
        def body(i):             # i = (*P, h, s, d)
            return dsl.sum(a[rows(i)] * w[(kax, i[-3], i[-1])], axis=kax)
    else:
        def body(i):             # i = (t, *P, h, s, d); w (K, T*H, D)
            return dsl.sum(a[rows(i)] * w[(kax, i[0] * hs.heads + i[-3], i[-1])], axis=kax)
    cur = _compute(out_shape, body, name=_name(mm), dtype=mm.output.dtype)
    env[mm.output] = cur
    for n in group.nodes[len(hs.pre) + 1:-2]:
        cur = OPS[n.op].lower(n, [env[v] for v in n.inputs], out_shape)
        env[n.output] = cur
    env[group.nodes[-1].output] = cur
    return cur


_LAYOUT_OPS = ("reshape", "transpose", "permute")

#: the highest rank of a transpose / permute that :func:`folded_layout` reads in place
#: (the head merge's ``(B, H, S, D)``): ViT's patches, ``reshape(N, C, 14, 16, 14, 16) ->
#: permute(0, 2, 4, 1, 3, 5) -> reshape(N, 196, 768)`` before the patch GEMM
#: (``graph/rewrite.py`` ``patchify_convs``), took 9.6 ms read in place against 5.8 ms
#: staged (one Zen 3 core, the GEMM included, best of 15)
FOLD_MAX_RANK = 4


def folded_layout(group: Group, outputs: list[Value]) -> set[Node]:
    """The layout operators of ``group`` read in place by a GEMM's left operand: no stage
    of their own (:class:`_LayoutView`), or the empty set.

    Assumes shapes are propagated.  A ``transpose``, ``permute`` or quasi-affine
    ``reshape`` (not a runtime view) qualifies when its result is no output of the group
    and every operator of the group reading it is a ``matmul`` reading it as its left
    operand only, or another qualifying layout operator -- the head merge ``reshape ->
    transpose -> reshape`` between attention and its output projection.  The ``matmul``
    then reads ``src[f(i)]`` for ``a[i]``, ``f`` the composition of the operators' index
    maps (``a[.., s, k] = att[.., k // D, s, k mod D]``, quasi-affine): the CPU GEMM packs
    its ``X`` blocks straight from the attention output (the packing copy reads the
    layout; the micro-kernel reads the packed block as before).  Only where the chain
    holds a transpose or permute, of rank at most :data:`FOLD_MAX_RANK`: a ``reshape``
    alone (GPT-2's ``view(B*S, K)`` of a layer norm before ``addmm``) stays a stage,
    whose 2-d result the GEMM reads in place (``in_place_operands``); read through the
    view it measured 5845 -> 6476 us (128 x 768 x 3072 with its layer norm, one Zen 4
    core).  Guarantees: the same elements as
    the staged operators (each map is the operator's own index function)."""
    out = set(outputs)
    users: dict[Value, list[tuple[Node, int]]] = {}
    for n in group.nodes:
        for q, v in enumerate(n.inputs):
            users.setdefault(v, []).append((n, q))
    folded: set[Node] = set()
    for n in reversed(group.nodes):
        if n.op not in _LAYOUT_OPS or n.output in out or is_runtime_view(n):
            continue
        if n.op != "reshape" and len(n.output.shape) > FOLD_MAX_RANK:
            continue    # a patchify's 6-d permute: the staged copy measured faster
        us = users.get(n.output, [])
        if us and all((u.op == "matmul" and q == 0 and u.inputs[1] is not n.output)
                      or u in folded for u, q in us):
            folded.add(n)
    if not any(n.op != "reshape" for n in folded):
        return set()    # reshapes alone: the staged copy measured faster (see the doc)
    return folded


class _LayoutView:
    """A layout operator's result read in place (:func:`folded_layout`): indexing it
    indexes its operand through the operator's index map.  Quacks as much of
    :class:`~polycomp.frontend.dsl.Tensor` as ``matmul``'s lowering uses (``shape``,
    ``ndim``, ``dtype``, ``name``, ``[]``)."""

    def __init__(self, node: Node, src, shape: tuple):
        self.node, self.src, self.shape = node, src, shape
        self.ndim, self.dtype, self.name = len(shape), src.dtype, src.name

    def __getitem__(self, idx):
        n = self.node
        if n.op == "reshape":
            return self.src[reshape_index(n.inputs[0].shape, n.output.shape, idx)]
        from .opdefs import _perm
        p = _perm(n, len(idx))
        inv = [p.index(k) for k in range(len(p))]
        return self.src[tuple(idx[inv[k]] for k in range(len(p)))]


#: 1x1 convolutions whose output rows are narrower than this run over flattened pixels
#: (:func:`pixel_flat`; measured on AVX-512, 1 thread: 320->1280 at 7x7 1.15 -> 0.76 ms,
#: 960->160 0.40 -> 0.30 ms; at 14x14 and wider even, so those keep the width form)
PIXEL_FLAT_WIDTH = 8


def _pointwise_conv(n: Node) -> bool:
    """A 1x1 convolution of stride 1, no padding, groups 1 (a GEMM over pixels)."""
    def pair(key: str, default: int) -> tuple:
        v = n.attrs.get(key, default)
        return (v, v) if isinstance(v, int) else tuple(v)
    return n.op == "conv2d" and int(n.attrs.get("groups", 1)) == 1 and \
        all(d == 1 for d in n.inputs[1].shape[2:]) and pair("stride", 1) == (1, 1) and \
        pair("padding", 0) == (0, 0) and pair("dilation", 1) == (1, 1)


def pixel_flat(group: Group) -> dict[Value, Shape] | None:
    """The flattened shape of every value a group reads or writes when the group can run
    over flattened pixels, else ``None``: the group holds one 1x1 stride-1 unpadded
    groups-1 ``conv2d`` (MobileNet's expansions and projections) with constant output
    rows narrower than ``PIXEL_FLAT_WIDTH``, and otherwise only
    elementwise operators, and every value it touches is either of the convolution's
    output form ``(N, X, H, W)`` (same ``N, H, W``; becomes ``(N, X, H*W)``) or the
    convolution's weight / bias.  The convolution is then ``out[n, f, p] = sum_c w[f, c]
    * x[n, c, p]``, a GEMM over ``p`` (the CPU backend's packed micro-kernel, full vectors
    along ``H*W`` instead of 7-wide rows on a 7x7 image).  Guarantees: every operator
    computes the same elements on the flattened shapes (elementwise operators and a
    1x1 window read no neighbour pixel)."""
    convs = [n for n in group.nodes if n.op == "conv2d"]
    if len(convs) != 1 or not _pointwise_conv(convs[0]):
        return None
    conv = convs[0]
    N, _, H, W = conv.output.shape
    if not (W.is_Integer and int(W) < PIXEL_FLAT_WIDTH):
        return None
    params = set(conv.inputs[1:])
    flat: dict[Value, Shape] = {}
    for n in group.nodes:
        if n is not conv and OPS[n.op].kind != "elementwise":
            return None
        for v in [*n.inputs, n.output]:
            if v in params and n is conv:
                continue
            s = tuple(v.shape)
            if len(s) != 4 or s[0] != N or s[2] != H or s[3] != W:
                return None
            flat[v] = (N, s[1], H * W)
    return flat


#: a constant convolution weight (F, C, KH, KW) as the CPU channel form reads it:
#: ``w.transpose(CONV_WEIGHT_AXES)``, (C, KH, KW, F)
CONV_WEIGHT_AXES = (1, 2, 3, 0)


def conv_weight_layouts(group: Group, inputs: list[Value],
                        prepack: list[Value] | None = None) -> dict[Value, np.ndarray]:
    """Constant convolution weights of ``group`` laid out ``(C, KH, KW, F)`` at compile
    time: every ``conv2d`` with ``groups == 1`` whose weight is a graph constant (an
    input of the group) read by no other operator of the group.  The kernel declares the
    new shape and reads ``w[c, kh, kw, f]`` (attribute ``weight_layout="chwf"``), so the
    CPU backend's channel form reads each vector of ``NR`` output channels in place:
    no per-call packing pass over the weights (ResNet-18's 512->512 3x3: 9.4 MB per
    call).  Guarantees: the same products and sums as the ``(F, C, KH, KW)`` form.

    With a ``prepack`` list, the weights of more than ``FEW_CHANNELS`` input channels
    (those the channel form takes) are appended to it instead, left ``(F, C, KH, KW)``:
    the caller names them in option ``prepack`` and packs each as the kernel's
    :class:`~polycomp.scheduler.promotion.record.PrepackedInput` says (panels of ``NR``
    output channels in the micro-kernel's loop order, ``(F/NR, KH, KW, C, NR)``)."""
    from polycomp.scheduler.cpu.backbone_tile import FEW_CHANNELS
    def conv_weight(n: Node, q: int) -> bool:
        return n.op == "conv2d" and q == 1 and int(n.attrs.get("groups", 1)) == 1
    other = {v for n in group.nodes for q, v in enumerate(n.inputs) if not conv_weight(n, q)}
    out: dict[Value, np.ndarray] = {}
    for n in group.nodes:
        w = n.inputs[1] if conv_weight(n, 1) else None
        if w is None or w.const is None or w not in inputs or w in other or w in out:
            continue
        if prepack is not None and int(w.shape[1]) > FEW_CHANNELS:
            if w not in prepack:
                prepack.append(w)
            continue
        out[w] = np.ascontiguousarray(np.asarray(w.const).transpose(CONV_WEIGHT_AXES))
    return out


def group_kernel(part: Partition, group: Group, flatten_rows: bool = True,
                 conv_layout: bool = False, conv_prepack: bool = False) -> GroupKernel:
    """The group as one multi-stage kernel; ``flatten_rows`` lowers a qualifying group over
    flattened rows (:func:`row_flat`); ``conv_layout`` hands constant convolution weights
    to the kernel laid out for the CPU backend (:func:`conv_weight_layouts`), with
    ``conv_prepack`` those of more than ``FEW_CHANNELS`` input channels as they are, for
    the kernel to read pre-packed (:attr:`GroupKernel.prepack`)."""
    inputs, outputs = part.inputs_of(group), part.outputs_of(group)
    pm = ParamMap()
    heads = head_split(group, outputs) if flatten_rows and head_fold_enabled() else None
    if heads is not None:
        return _head_split_kernel(part, group, heads, inputs, outputs, pm)
    flat = (row_flat(group) if flatten_rows else None) or {}
    pixels = not flat and flatten_rows and pixel_flat(group) is not None
    if pixels:
        flat = pixel_flat(group) or {}
    pre: list[Value] = []
    laid = conv_weight_layouts(group, inputs, pre if conv_prepack else None) \
        if conv_layout and not pixels else {}

    def shape_of(v: Value) -> Shape:
        if v in laid:
            return tuple(sympy.Integer(d) for d in laid[v].shape)
        return flat.get(v, v.shape)
    types = {argname(v): Tensor[pm.shape(shape_of(v)), v.dtype]  # type: ignore
             for v in inputs}

    views = folded_layout(group, outputs) if flatten_rows and head_fold_enabled() \
        and not flat else set()

    def fn(*args):
        env: dict[Value, Tensor] = dict(zip(inputs, args))
        for n in group.nodes:
            if n in views:      # read in place by the GEMM's operand
                env[n.output] = _LayoutView(  # type: ignore[assignment]
                    n, env[n.inputs[0]], pm.shape(n.output.shape))
                continue
            node = _flat_node(n) if flat else n
            if pixels and n.op == "conv2d":
                node = replace(node, attrs={**node.attrs, "pixels_flat": True})
            if n.op == "conv2d" and n.inputs[1] in laid:
                node = replace(node, attrs={**node.attrs, "weight_layout": "chwf"})
            s = n.attrs.get("scalar")
            if isinstance(s, sympy.Expr) and s.free_symbols:  # x * S: a size parameter
                node = replace(node, attrs={**node.attrs, "scalar": pm.to_ir(s)})
            env[n.output] = OPS[n.op].lower(node, [env[v] for v in n.inputs],
                                            pm.shape(shape_of(n.output)))
        return tuple(env[v] for v in outputs)

    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in types])
    fn.__name__ = f"{part.graph.name}_{group.name}"
    kernel = Kernel(fn, f"{_clean(part.graph.name)}_{group.name}", types)
    _ = kernel.graph  # trace now: errors surface at compile time
    for v in outputs:  # output extents may introduce parameters (B*S from a matmul)
        pm.shape(shape_of(v))
    key = structural_key(group, inputs, outputs) + ("|views" if views else "") + \
        ("|pixels" if pixels else "|rows"
                                                    if flat else "") + \
        ("|chwf" + ",".join(str(inputs.index(v)) for v in laid) if laid else "") + \
        ("|wpk" + ",".join(str(inputs.index(v)) for v in pre) if pre else "")
    args = {v: flat[v] for v in [*inputs, *outputs] if v in flat}
    return GroupKernel(kernel, inputs, outputs, pm, key, args, laid, pre,
                       folded=", ".join(n.name for n in group.nodes if n in views))


def head_fold_enabled() -> bool:
    """The head split / merge folded into the projections (:func:`head_split`);
    ``POLYCOMP_HEAD_FOLD=0`` keeps the separate layout stages (for comparisons)."""
    import os
    return os.environ.get("POLYCOMP_HEAD_FOLD", "1") != "0"


def _head_split_kernel(part: Partition, group: Group, hs: HeadSplit, inputs: list[Value],
                       outputs: list[Value], pm: ParamMap) -> GroupKernel:
    """:func:`group_kernel` of a :class:`HeadSplit` group."""
    w = hs.matmul.inputs[1]
    k = w.shape[0]
    one, h, d = sympy.Integer(1), sympy.Integer(hs.heads), sympy.Integer(hs.dim)
    out = group.nodes[-1].output
    shapes: dict[Value, Shape] = {w: (k, sympy.Integer(hs.parts * hs.heads), d)}
    for v in hs.vectors:        # (H, 1, D), stacked (T, 1, .., 1, H, 1, D): broadcasts
        shapes[v] = (h, one, d) if hs.parts == 1 else \
            (sympy.Integer(hs.parts),) + (one,) * (len(out.shape) - 4) + (h, one, d)
    a = hs.matmul.inputs[0]
    if a in inputs and all(e == 1 for e in a.shape[:-2]):
        # batch 1 (static shapes): the rows passed as their zero-copy (S, K) reshape, a
        # plain 2-d X the CPU GEMM reads where it lies (backbone_tile.in_place_operands)
        # instead of packing it per call
        shapes[a] = tuple(a.shape[-2:])
    types = {argname(v): Tensor[pm.shape(shapes.get(v, v.shape)), v.dtype]  # type: ignore
             for v in inputs}

    def fn(*args):
        env: dict = dict(zip(inputs, args))
        env["pm"] = pm
        _head_split_lower(hs, group, env, pm.shape(out.shape))
        return tuple(env[v] for v in outputs)

    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in types])
    fn.__name__ = f"{part.graph.name}_{group.name}"
    kernel = Kernel(fn, f"{_clean(part.graph.name)}_{group.name}", types)
    _ = kernel.graph
    for v in outputs:
        pm.shape(v.shape)
    key = structural_key(group, inputs, outputs) + "|heads"
    return GroupKernel(kernel, inputs, outputs, pm, key, {v: shapes[v] for v in shapes},
                       heads=hs, folded="split")


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
