"""ONNX importer (the optional ``onnx`` extra, imported lazily): an ``onnx.ModelProto``
(or a path) to a :class:`~polycomp.graph.ir.Graph`.

Symbolic input extents (``dim_param`` such as ``"B"``, ``"S"``) become the graph's dims;
shape arithmetic (``Shape``, ``Gather``, ``Unsqueeze``, ``Concat``, ``Constant``) is
evaluated at import as sympy expressions, so ``Reshape`` keeps the relation to ``B``
and ``S``; ``Gather`` / ``GatherElements`` of tensors are the graph's ``index`` /
``gather`` ops (negative indices count from the end).  Inputs keep their element type
(``int64`` token ids).  Initializers become constants.  Ops with no mapping raise
:class:`UnsupportedOpError` listing all of them.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from polycomp.errors import UnsupportedOpError

from .ir import Graph, GraphBuilder, Value, dim

_BIN = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
_UN = {"Erf": "erf", "Tanh": "tanh", "Relu": "relu", "Sqrt": "sqrt", "Exp": "exp",
       "Sigmoid": "sigmoid", "Neg": "neg"}


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

    def tensor(self, x: Any) -> Value:
        if isinstance(x, Value):
            return x
        return self.g.constant("c", np.asarray(x, np.float32))

    def binary(self, op: str, a: Any, b: Any) -> Any:
        if not isinstance(a, Value) and not isinstance(b, Value):  # shape arithmetic
            f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
                 "mul": lambda x, y: x * y, "div": lambda x, y: x // y}[op]
            xs, ys = _flat(a), _flat(b)
            n = max(len(xs), len(ys))
            out = [f(xs[k % len(xs)], ys[k % len(ys)]) for k in range(n)]
            return out[0] if _is_scalar(a) and _is_scalar(b) else _ShapeVal(out)
        for x, y, rev in ((a, b, False), (b, a, True)):
            if isinstance(x, Value) and isinstance(y, np.ndarray) and y.size == 1:
                return self.g.op(op, x, scalar=float(y.reshape(())), reverse=rev)
        return self.g.op(op, self.tensor(a), self.tensor(b))

    def node(self, n) -> Any:
        at = _attrs(n)
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
            return _ShapeVal(ins[0].shape)
        if op == "Gather" and isinstance(ins[0], _ShapeVal):
            idx = np.asarray(ins[1])
            return ins[0][int(idx)] if idx.ndim == 0 else _ShapeVal(ins[0][int(i)] for i in idx)
        if op == "Unsqueeze" and not isinstance(ins[0], Value):
            return _ShapeVal([ins[0]] if not isinstance(ins[0], list) else ins[0])
        if op == "Concat" and not any(isinstance(x, Value) for x in ins):
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
            x = ins[0]
            for a, st, en in zip(axes, starts, ends):
                x = g.slice(x, axis=int(a), start=int(st), end=en)
            return x
        if op in ("Gather", "GatherElements"):
            return self.gather(op, ins, at)
        if op == "Transpose":
            return g.permute(ins[0], perm=tuple(at["perm"]))
        if op == "Pow" and np.asarray(ins[1]).size == 1 and float(np.asarray(ins[1])) in (2, 3):
            x = ins[0]
            y = g.mul(x, x)
            return g.mul(y, x) if float(np.asarray(ins[1])) == 3 else y
        raise UnsupportedOpError(f"ONNX op {op}")


def import_onnx(model: Any, name: str | None = None) -> Graph:
    """Import an ONNX model (a ``ModelProto`` or a file path)."""
    import onnx
    import onnx.numpy_helper as nh
    if isinstance(model, str):
        model = onnx.load(model)
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
        try:
            res = imp.node(n)
        except UnsupportedOpError as e:
            bad.append(e.message)
            res = None
        except (TypeError, AttributeError):
            if not any(imp.env.get(x, 0) is None for x in n.input):
                bad.append(f"ONNX op {n.op_type} on these inputs")
            res = None
        for o in n.output:
            imp.env[o] = res
    if bad:
        raise UnsupportedOpError("unsupported ops: " + ", ".join(dict.fromkeys(bad)))
    return imp.g.build(*[imp.env[o.name] for o in model.graph.output])
