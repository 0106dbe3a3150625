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
from .opdefs import OPS
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

    def fn(*args):
        env: dict[Value, Tensor] = dict(zip(inputs, args))
        for n in group.nodes:
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
    key = structural_key(group, inputs, outputs) + ("|pixels" if pixels else "|rows"
                                                    if flat else "") + \
        ("|chwf" + ",".join(str(inputs.index(v)) for v in laid) if laid else "") + \
        ("|wpk" + ",".join(str(inputs.index(v)) for v in pre) if pre else "")
    args = {v: flat[v] for v in [*inputs, *outputs] if v in flat}
    return GroupKernel(kernel, inputs, outputs, pm, key, args, laid, pre)


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
