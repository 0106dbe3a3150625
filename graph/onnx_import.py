"""ONNX importer (the optional ``onnx`` extra, imported lazily): an ``onnx.ModelProto``
(or a path) to a :class:`~polycomp.graph.ir.Graph`.

Symbolic input extents (``dim_param`` such as ``"B"``, ``"S"``) become the graph's dims;
shape arithmetic (``Shape``, ``Gather``, ``Unsqueeze``, ``Concat``, ``Constant``) is
evaluated at import as sympy expressions, so ``Reshape`` keeps the relation to ``B``
and ``S``; ``Gather`` / ``GatherElements`` of tensors are the graph's ``index`` /
``gather`` ops (negative indices count from the end).  Inputs keep their element type
(``int64`` token ids).  Initializers become constants (integer and bool ones keep their
dtype).  The ops transformers' exported mask builders and attention use (``Cast``,
``Range``, comparisons, ``And`` / ``Or`` / ``Not``, ``Where``, ``Expand``,
``ConstantOfShape``, ``IsNaN``, ``Split``, ``Concat``, ``Unsqueeze`` / ``Squeeze``,
one-axis reductions) are graph ops, or evaluated at import on shape values.  Ops with no
mapping raise :class:`UnsupportedOpError` listing all of them; an op fed by one is not
tried.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import sympy

from polycomp.errors import UnsupportedOpError, UsageError

from .ir import Graph, GraphBuilder, Value, dim

_BIN = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
_UN = {"Erf": "erf", "Tanh": "tanh", "Relu": "relu", "Sqrt": "sqrt", "Exp": "exp",
       "Sigmoid": "sigmoid", "Neg": "neg"}


# ONNX TensorProto element types -> numpy
_ONNX_DTYPES = {1: np.float32, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_,
                10: np.float16, 11: np.float64}


_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "amax"}
_CMP_ONNX = {"Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt",
             "GreaterOrEqual": "ge"}
_PY_CMP = {"Equal": lambda a, b: a == b, "Less": lambda a, b: a < b,
           "LessOrEqual": lambda a, b: a <= b, "Greater": lambda a, b: a > b,
           "GreaterOrEqual": lambda a, b: a >= b}


def _divide(x: Any, y: Any) -> Any:
    """ONNX ``Div`` at import: integer division of integers (shape arithmetic), true
    division of floats (a scale computed from a shape: ``1 / sqrt(E)``)."""
    ints = all(isinstance(v, (int, np.integer)) or (isinstance(v, sympy.Expr) and v.is_integer)
               for v in (x, y))
    return x // y if ints else x / y


class _ShapeVal(list):
    """A 1-d int tensor computed from shapes: a list of sympy extents."""


def _is_scalar(x: Any) -> bool:
    return not isinstance(x, list) and np.asarray(x, dtype=object).size == 1


def _flat(x: Any) -> list:
    """Shape-arithmetic operand as a list of ints / sympy extents."""
    if isinstance(x, list):
        return list(x)
    if isinstance(x, np.ndarray):
        return [int(v) if np.issubdtype(x.dtype, np.integer) else v for v in x.reshape(-1)]
    return [x]


def _attrs(node) -> dict[str, Any]:
    import onnx
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class _OnnxImporter:
    def __init__(self, name: str):
        self.g = GraphBuilder(name)
        self.env: dict[str, Any] = {}
        self.n_outputs = 1  # of the node being imported

    def tensor(self, x: Any) -> Value:
        """``x`` as a graph value: an array or a number becomes a constant (integer and
        bool ones keep their dtype -- position ids, masks --, others are float32)."""
        if isinstance(x, Value):
            return x
        if isinstance(x, sympy.Expr) or (isinstance(x, list) and any(
                isinstance(d, sympy.Expr) and not d.is_number for d in x)):
            raise UnsupportedOpError(f"a symbolic size used as a tensor ({x})")
        a = np.asarray(x)
        if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
            a = a.astype(np.float32)
        v = self.g.constant("c", a.reshape(-1) if a.ndim == 0 else a)
        return self.g.reshape(v, shape=()) if a.ndim == 0 else v

    def binary(self, op: str, a: Any, b: Any) -> Any:
        if not isinstance(a, Value) and not isinstance(b, Value):  # shape arithmetic
            f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
                 "mul": lambda x, y: x * y, "div": _divide}[op]
            xs, ys = _flat(a), _flat(b)
            n = max(len(xs), len(ys))
            out = [f(xs[k % len(xs)], ys[k % len(ys)]) for k in range(n)]
            return out[0] if _is_scalar(a) and _is_scalar(b) else _ShapeVal(out)
        for x, y, rev in ((a, b, False), (b, a, True)):
            if isinstance(x, Value) and isinstance(y, list) and len(y) == 1 and x.shape:
                y = y[0]  # a one-element shape value: broadcast as the number
            if isinstance(x, Value) and isinstance(y, np.ndarray) and y.size == 1 and \
                    y.ndim <= len(x.shape):
                return self.g.op(op, x, scalar=y.reshape(()).item(), reverse=rev)
            if isinstance(x, Value) and isinstance(y, (int, float, sympy.Expr)):
                if isinstance(y, sympy.Expr) and not y.is_integer:  # (a size: a kernel
                    raise UnsupportedOpError(f"arithmetic with the size {y}")  # parameter)
                return self.g.op(op, x, scalar=int(y) if isinstance(y, sympy.Integer)
                                 else y, reverse=rev)
        return self.g.op(op, self.tensor(a), self.tensor(b))

    def node(self, n) -> Any:
        at = _attrs(n)
        self.n_outputs = len(n.output)
        ins: list[Any] = [self.env[i] if i else None for i in n.input]
        res = self.shape_op(n.op_type, ins, at)
        return res if res is not None else self.tensor_op(n.op_type, ins, at)

    def shape_op(self, op: str, ins: list[Any], at: dict[str, Any]) -> Any:
        """Ops on shape values and constants (evaluated at import), else None."""
        if op == "Identity":
            return ins[0]
        if op == "Constant":
            import onnx.numpy_helper as nh
            return nh.to_array(at["value"])
        if op == "Shape":
            if isinstance(ins[0], Value):
                return _ShapeVal(ins[0].shape)
            return _ShapeVal([len(ins[0])] if isinstance(ins[0], list)
                             else list(np.shape(ins[0])))
        if op == "Cast" and isinstance(ins[0], (list, sympy.Expr)):  # shape arithmetic
            return ins[0]
        if op == "Cast" and not isinstance(ins[0], Value):  # a constant (Clip bounds)
            return np.asarray(ins[0]).astype(_ONNX_DTYPES.get(int(at["to"]), np.float32))
        if op == "ConstantOfShape":
            return self.constant_of_shape(ins[0], at)
        if not any(isinstance(x, Value) for x in ins):
            return self.shape_list_op(op, ins, at)
        return None

    def shape_list_op(self, op: str, ins: list[Any], at: dict[str, Any]) -> Any:
        """Shape arithmetic on 1-d shape values (``_ShapeVal``), numbers and constants,
        evaluated at import, else None."""
        if op == "Slice" and isinstance(ins[0], list):  # x.shape[a:b] (1-d)
            st, en = int(_flat(ins[1])[0]), int(_flat(ins[2])[0])
            step = int(_flat(ins[4])[0]) if len(ins) > 4 and ins[4] is not None else 1
            return _ShapeVal(ins[0][slice(st, en, step)])
        if op == "Sqrt" and all(isinstance(v, (int, float, np.number)) or (
                isinstance(v, sympy.Expr) and v.is_number) for v in _flat(ins[0])):
            a = np.asarray([float(v) for v in _flat(ins[0])])  # a scale from a shape
            r = np.sqrt(a)
            return r.reshape(np.shape(ins[0])) if not isinstance(ins[0], list) else list(r)
        if op == "Reshape" and isinstance(ins[0], list):  # a 1-d shape value stays 1-d
            return ins[0]
        if op in _CMP_ONNX:
            xs, ys = _flat(ins[0]), _flat(ins[1])
            n = max(len(xs), len(ys))
            out = [bool(_PY_CMP[op](xs[k % len(xs)], ys[k % len(ys)])) for k in range(n)]
            return out[0] if _is_scalar(ins[0]) and _is_scalar(ins[1]) else _ShapeVal(out)
        if op == "Where":
            c, xs, ys = _flat(ins[0]), _flat(ins[1]), _flat(ins[2])
            n = max(len(c), len(xs), len(ys))
            return _ShapeVal(xs[k % len(xs)] if c[k % len(c)] else ys[k % len(ys)]
                             for k in range(n))
        if op == "Gather" and isinstance(ins[0], _ShapeVal):
            idx = np.asarray(ins[1])
            return ins[0][int(idx)] if idx.ndim == 0 else _ShapeVal(ins[0][int(i)] for i in idx)
        if op == "Unsqueeze":
            return _ShapeVal([ins[0]] if not isinstance(ins[0], list) else ins[0])
        if op == "Squeeze":
            a = np.asarray(ins[0], dtype=object)
            return a.reshape(()).item() if a.size == 1 else ins[0]
        if op == "Concat":
            out = _ShapeVal()
            for x in ins:
                out.extend(x if isinstance(x, list) else np.asarray(x).reshape(-1).tolist())
            return out
        return None

    def gather(self, op: str, ins: list[Any], at: dict[str, Any]) -> Value:
        """``Gather`` (the graph's ``index`` along ``axis``) and ``GatherElements``
        (``gather``); indices may be negative (from the end, as ONNX says)."""
        g = self.g
        x, idx = self.tensor(ins[0]), ins[1]
        if not isinstance(idx, Value):
            arr = np.asarray(idx, np.int64)
            idx = g.constant("idx", arr.reshape(-1))   # (a 0-d one: reshaped back)
            idx = g.reshape(idx, shape=arr.shape) if arr.ndim != 1 else idx
        if idx.dtype not in ("int32", "int64"):
            raise UnsupportedOpError(f"ONNX op {op} with {idx.dtype} indices")
        axis = int(at.get("axis", 0))
        if op == "Gather":
            return g.index(x, idx, axes=(axis,), wrap=True)
        return g.gather(x, idx, axis=axis, wrap=True)

    def tensor_op(self, op: str, ins: list[Any], at: dict[str, Any]) -> Any:
        g = self.g
        if op == "Reshape":
            x = ins[0]
            target = [sympy.sympify(d) for d in (ins[1] if isinstance(ins[1], list)
                                                 else np.asarray(ins[1]).tolist())]
            target = [x.shape[k] if d == 0 else d for k, d in enumerate(target)]
            return g.reshape(x, shape=tuple(target))
        if op in _BIN:
            return self.binary(_BIN[op], ins[0], ins[1])
        if op in _UN:
            return g.op(_UN[op], ins[0])
        if op == "MatMul":
            return g.matmul(self.tensor(ins[0]), self.tensor(ins[1]))
        if op == "Softmax":
            return g.softmax(ins[0], axis=at.get("axis", -1))
        if op == "LayerNormalization" and at.get("axis", -1) in (-1, len(ins[0].shape) - 1):
            return g.layernorm(ins[0], self.tensor(ins[1]), self.tensor(ins[2]),
                               eps=at.get("epsilon", 1e-5))
        if op == "Slice":
            starts, ends = _flat(ins[1]), _flat(ins[2])
            axes = _flat(ins[3]) if len(ins) > 3 and ins[3] is not None else \
                list(range(len(starts)))
            if len(ins) > 4 and ins[4] is not None and any(int(v) != 1 for v in _flat(ins[4])):
                raise UnsupportedOpError("ONNX op Slice with steps")
            x = self.tensor(ins[0])
            for a, st, en in zip(axes, starts, ends):
                x = g.slice(x, axis=int(a), start=int(st), end=en)
            return x
        if op in ("Gather", "GatherElements"):
            return self.gather(op, ins, at)
        mask = self.mask_op(op, ins, at)
        if mask is not None:
            return mask
        if op == "Transpose":
            return g.permute(ins[0], perm=tuple(at["perm"]))
        if op == "Pow" and np.asarray(ins[1]).size == 1 and float(np.asarray(ins[1])) in (2, 3):
            x = ins[0]
            y = g.mul(x, x)
            return g.mul(y, x) if float(np.asarray(ins[1])) == 3 else y
        conv = self.conv_op(op, ins, at)
        if conv is not None:
            return conv
        raise UnsupportedOpError(f"ONNX op {op}")

    def constant_of_shape(self, shape: Any, at: dict[str, Any]) -> Any:
        """``ConstantOfShape``: a numpy array for a constant shape, else a one-element
        constant expanded to the symbolic shape."""
        import onnx.numpy_helper as nh
        fill = nh.to_array(at["value"]).reshape(-1) if "value" in at else \
            np.zeros(1, np.float32)
        dims = [sympy.sympify(d) for d in _flat(shape)]
        if all(d.is_Integer for d in dims):
            return np.full(tuple(int(d) for d in dims), fill[0], dtype=fill.dtype)
        one = self.g.constant("fill", fill)
        one = self.g.reshape(one, shape=(1,) * len(dims)) if len(dims) != 1 else one
        return self.g.expand(one, shape=tuple(dims))

    def mask_op(self, op: str, ins: list[Any], at: dict[str, Any]) -> Any:
        """The ops an exported attention mask is built from (``Cast``, ``Range``,
        comparisons, ``And`` / ``Or`` / ``Not``, ``Where``, ``Expand``, ``IsNaN``), else
        None.  Operands that are not graph values (numbers, sizes) become constants."""
        g = self.g
        if op == "Cast":
            return g.cast(ins[0], dtype=str(np.dtype(_ONNX_DTYPES.get(int(at["to"]),
                                                                       np.float32))))
        if op == "Range":
            start, end, step = (_flat(x)[0] for x in ins[:3])
            if isinstance(start, (sympy.Expr, np.ndarray)) or isinstance(step, sympy.Expr):
                raise UnsupportedOpError("ONNX op Range with a symbolic start or step")
            dt = str(np.asarray(ins[0]).dtype) if not isinstance(ins[0], list) else "int64"
            return g.iota(start=int(start), end=sympy.sympify(end), step=int(step), dtype=dt)
        if op in _CMP_ONNX:
            return g.op(_CMP_ONNX[op], self.tensor(ins[0]), self.tensor(ins[1]))
        if op in ("And", "Or"):
            return g.op("mul" if op == "And" else "add", self.tensor(ins[0]),  # (bool)
                        self.tensor(ins[1]))
        if op == "Not":
            return g.eq(ins[0], self.tensor(np.zeros(1, np.bool_)))
        if op == "Where":
            return g.where(self.tensor(ins[0]), self.tensor(ins[1]), self.tensor(ins[2]))
        if op == "IsNaN":
            return g.ne(ins[0], ins[0])
        return self.layout_op(op, ins, at)

    def layout_op(self, op: str, ins: list[Any], at: dict[str, Any]) -> Any:
        """``ReduceSum`` / ``ReduceMean`` / ``ReduceMax`` over one axis, ``Split``,
        ``Concat``, ``Unsqueeze`` / ``Squeeze`` and ``Expand`` of graph values, else None."""
        g = self.g
        if op not in _REDUCE and op not in ("Split", "Unsqueeze", "Squeeze"):
            return self.concat_expand(op, ins, at)
        # the axes (Split: the sizes): an input, or an attribute in older opsets
        ints = [int(a) for a in (_flat(ins[1]) if len(ins) > 1 and ins[1] is not None
                                 else at.get("axes", at.get("split", [])))]
        if op in _REDUCE:  # one axis (``axes`` an input from opset 18, ReduceSum's 13)
            if len(ints) != 1:
                raise UnsupportedOpError(f"ONNX op {op} over several axes (or all of them)")
            return g.op(_REDUCE[op], ins[0], axis=ints[0], keepdim=bool(at.get("keepdims", 1)))
        if op == "Split":
            return self.split(ins[0], int(at.get("axis", 0)), ints,
                              int(at.get("num_outputs", 0)) or self.n_outputs)
        shape = list(ins[0].shape)  # Unsqueeze / Squeeze
        if op == "Unsqueeze":
            n = len(shape) + len(ints)
            for a in sorted(a + n if a < 0 else a for a in ints):
                shape.insert(a, sympy.Integer(1))
        else:
            n = len(shape)
            drop = {a + n if a < 0 else a for a in ints} if ints else {
                k for k, d in enumerate(shape) if d == 1}
            shape = [d for k, d in enumerate(shape) if k not in drop]
        return g.reshape(ins[0], shape=tuple(shape))

    def concat_expand(self, op: str, ins: list[Any], at: dict[str, Any]) -> Any:
        """``Concat`` and ``Expand`` of graph values, else None."""
        if op == "Concat":
            return self.g.cat(*[self.tensor(x) for x in ins], axis=int(at["axis"]))
        if op == "Expand":
            return self.expand(self.tensor(ins[0]), [sympy.sympify(d) for d in _flat(ins[1])])
        return None

    def split(self, x: Value, axis: int, sizes: list, parts: int) -> tuple:
        """``Split`` into ``sizes`` (or ``parts`` equal parts) along ``axis``: slices."""
        axis = axis + len(x.shape) if axis < 0 else axis
        if not sizes:
            sizes = [sympy.ceiling(x.shape[axis] / parts)] * parts
        out, start = [], sympy.Integer(0)
        for size in sizes:
            end = sympy.Min(start + size, x.shape[axis])
            if not start.is_Integer:
                raise UnsupportedOpError("ONNX op Split of a symbolic extent")
            out.append(self.g.slice(x, axis=axis, start=int(start), end=end))
            start = end
        return tuple(out)

    def expand(self, x: Value, target: list) -> Value:
        """``Expand`` (bidirectional broadcast: a target extent 1 keeps x's)."""
        n = max(len(target), len(x.shape))
        xs = [sympy.Integer(1)] * (n - len(x.shape)) + list(x.shape)
        target = [sympy.Integer(1)] * (n - len(target)) + target
        out = tuple(a if b == 1 else b for a, b in zip(xs, target))
        if len(xs) != len(x.shape):
            x = self.g.reshape(x, shape=tuple(xs))
        return x if out == tuple(xs) else self.g.expand(x, shape=out)

    def conv_op(self, op: str, ins: list[Any], at: dict[str, Any]) -> Any:
        """Convolutional-network ops (``Conv``, ``BatchNormalization`` in inference mode --
        folded into the convolution as the torch.fx importer does --, ``MaxPool``,
        ``AveragePool``, ``GlobalAveragePool``, ``Flatten``, ``Gemm``, ``Clip``), else
        None."""
        g = self.g
        if op == "Conv":
            x, w = ins[0], self.tensor(ins[1])
            if len(x.shape) != 4:
                raise UnsupportedOpError("ONNX op Conv that is not 2-d")
            pads = _window(op, at, 2)
            ins3 = [x, w] + ([self.tensor(ins[2])] if len(ins) > 2 and ins[2] is not None
                             else [])
            return g.conv2d(*ins3, stride=tuple(at.get("strides", (1, 1))), padding=pads,
                            dilation=tuple(at.get("dilations", (1, 1))),
                            groups=int(at.get("group", 1)))
        if op == "BatchNormalization":
            if at.get("training_mode", 0):
                raise UnsupportedOpError("ONNX op BatchNormalization in training mode")
            from .fx import batch_norm_constant
            x = ins[0]
            arrs = [_const_array(v) for v in ins[1:5]]
            if any(a is None for a in arrs) or not x.shape[1].is_Integer:
                raise UnsupportedOpError("ONNX op BatchNormalization with statistics that "
                                         "are not initializers")
            sc, b, mean, var = arrs
            return batch_norm_constant(g, x, mean, var, sc, b, float(at.get("epsilon", 1e-5)))
        if op in ("MaxPool", "AveragePool"):
            return self.pool(op, ins, at)
        if op == "GlobalAveragePool":
            return g.adaptive_avg_pool2d(ins[0], out=(1, 1))
        if op == "Flatten":
            x = ins[0]
            a = int(at.get("axis", 1))
            a = a + len(x.shape) if a < 0 else a
            return g.reshape(x, shape=(sympy.Mul(*x.shape[:a]), sympy.Mul(*x.shape[a:])))
        if op == "Gemm":
            return self.gemm(ins, at)
        if op == "Clip":
            lo = ins[1] if len(ins) > 1 and ins[1] is not None else at.get("min", -np.inf)
            hi = ins[2] if len(ins) > 2 and ins[2] is not None else at.get("max", np.inf)
            if isinstance(lo, Value) or isinstance(hi, Value):
                raise UnsupportedOpError("ONNX op Clip with tensor bounds")
            return g.hardtanh(ins[0], lo=float(np.asarray(lo)), hi=float(np.asarray(hi)))
        return None

    def pool(self, op: str, ins: list[Any], at: dict[str, Any]) -> Value:
        if at.get("ceil_mode", 0) or len(ins[0].shape) != 4:
            raise UnsupportedOpError(f"ONNX op {op} with ceil_mode or not 2-d")
        attrs: dict[str, Any] = dict(kernel=tuple(at["kernel_shape"]),
                                     stride=tuple(at.get("strides", (1, 1))),
                                     padding=_window(op, at, 2))
        if op == "MaxPool":
            attrs["dilation"] = tuple(at.get("dilations", (1, 1)))
            return self.g.max_pool2d(ins[0], **attrs)
        attrs["count_include_pad"] = bool(at.get("count_include_pad", 0))
        return self.g.avg_pool2d(ins[0], **attrs)

    def gemm(self, ins: list[Any], at: dict[str, Any]) -> Value:
        """``alpha * A' B' + beta * C`` (a constant ``B`` is transposed at import)."""
        g = self.g
        a, b = ins[0], ins[1]
        if at.get("transA", 0):
            a = g.transpose(a, dim0=0, dim1=1)
        if isinstance(b, Value) and b.const is not None and at.get("transB", 0):
            b = g.constant("wT", np.ascontiguousarray(b.const.T))
        elif at.get("transB", 0):
            b = g.transpose(self.tensor(b), dim0=0, dim1=1)
        y = g.matmul(a, self.tensor(b))
        alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
        if alpha != 1.0:
            y = g.op("mul", y, scalar=alpha)
        if len(ins) > 2 and ins[2] is not None and beta != 0.0:
            c = self.tensor(ins[2])
            y = g.add(y, c if beta == 1.0 else g.op("mul", c, scalar=beta))
        return y


def _window(op: str, at: dict[str, Any], nd: int) -> tuple:
    """The symmetric padding of an ONNX window op (``pads`` is begins then ends)."""
    if at.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise UnsupportedOpError(f"ONNX op {op} with auto_pad={at['auto_pad']!r}")
    pads = list(at.get("pads", [0] * 2 * nd))
    if pads[:nd] != pads[nd:]:
        raise UnsupportedOpError(f"ONNX op {op} with asymmetric pads {pads}")
    return tuple(int(p) for p in pads[:nd])


def _const_array(v: Any):
    """An initializer's array (a constant value or a small numpy array), else None."""
    if isinstance(v, Value):
        return v.const
    return None if v is None else np.asarray(v)


def import_onnx(model: Any, name: str | None = None) -> Graph:
    """Import an ONNX model: a ``ModelProto``, a file path (``str`` or ``os.PathLike``),
    the serialised bytes (``f.getvalue()`` after ``torch.onnx.export`` into a ``BytesIO``)
    or a binary file object; anything else is a ``UsageError``."""
    import onnx
    import onnx.numpy_helper as nh
    if isinstance(model, (str, os.PathLike)) or hasattr(model, "read"):
        model = onnx.load(model)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        model = onnx.load_from_string(bytes(model))
    if not isinstance(model, onnx.ModelProto):
        raise UsageError(f"import_onnx takes an ONNX ModelProto, a file path, bytes or a "
                            f"binary file, not a {type(model).__name__}")
    imp = _OnnxImporter(name or model.graph.name or "onnx")
    inits = {t.name: nh.to_array(t) for t in model.graph.initializer}
    for name_, arr in inits.items():
        imp.env[name_] = imp.g.constant(name_, arr) if arr.ndim > 0 and arr.size > 1 else arr
    for i in model.graph.input:
        if i.name in inits:
            continue
        shape = [dim(d.dim_param) if d.dim_param else int(d.dim_value)
                 for d in i.type.tensor_type.shape.dim]
        elem = i.type.tensor_type.elem_type
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else "float32"
        imp.env[i.name] = imp.g.input(i.name, shape, dtype)
    bad: list[str] = []
    for n in model.graph.node:
        if any(i and imp.env.get(i, 0) is None for i in n.input):
            for o in n.output:  # fed by an unsupported op: not tried (its missing value
                imp.env[o] = None  # would flow on as a bogus constant)
            continue
        try:
            res = imp.node(n)
        except UnsupportedOpError as e:
            bad.append(e.message)
            res = None
        except (TypeError, AttributeError):
            bad.append(f"ONNX op {n.op_type} on these inputs")
            res = None
        outs = res if isinstance(res, tuple) and len(n.output) > 1 else (res,) * len(n.output)
        for o, r in zip(n.output, outs):  # (``Split``: one value per output)
            imp.env[o] = r
    if bad:
        raise UnsupportedOpError("unsupported ops: " + ", ".join(dict.fromkeys(bad)))
    g = imp.g.build(*[imp.env[o.name] for o in model.graph.output])
    g.owns_constants = True  # the initialisers' arrays, made here (``to_array``)
    return g
