"""torch.fx importer: a ``GraphModule`` (from ``torch.fx.symbolic_trace`` or Dynamo) to a
:class:`~polycomp.graph.ir.Graph`.  torch is imported lazily (the ``torch`` extra).

Parameters and buffers become constants (``nn.Linear`` weights are stored transposed so
the contraction reads them row-major); ``size()`` / ``shape`` results are sympy
expressions, so ``x.view(B * S, H)`` keeps its relation to ``B`` and ``S``.  An op with no
mapping raises :class:`UnsupportedOpError` listing every unsupported op of the graph.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np
import sympy

from polycomp.errors import UnsupportedOpError

from .ir import Graph, GraphBuilder, Value, dim

_SCALAR = (int, float, sympy.Expr)


def _np(t) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy().copy()


def _fetch_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class _Importer:
    def __init__(self, gm, name: str):
        import torch
        import torch.nn.functional as F
        self.torch, self.F, self.gm = torch, F, gm
        self.g = GraphBuilder(name)
        self.env: dict[Any, Any] = {}
        self.unsupported: list[str] = []
        self.unsupported_nodes: list[str] = []
        self._consts: dict[int, Value] = {}
        nn = torch.nn
        self.modules = {nn.Linear: self._linear_mod, nn.LayerNorm: self._ln_mod,
                        nn.GELU: lambda m, x: self.g.gelu(x, approximate=m.approximate),
                        nn.ReLU: lambda m, x: self.g.relu(x), nn.Tanh: lambda m, x: self.g.tanh(x),
                        nn.Softmax: lambda m, x: self.g.softmax(x, axis=m.dim),
                        nn.Dropout: lambda m, x: x, nn.Identity: lambda m, x: x}
        self.functions = {
            operator.add: "add", torch.add: "add", operator.iadd: "add",
            operator.sub: "sub", torch.sub: "sub", operator.mul: "mul", torch.mul: "mul",
            operator.truediv: "div", torch.div: "div", operator.matmul: "matmul",
            torch.matmul: "matmul", torch.bmm: "matmul", F.linear: "linear",
            F.gelu: "gelu", F.relu: "relu", torch.relu: "relu", torch.tanh: "tanh",
            torch.exp: "exp", torch.sigmoid: "sigmoid", torch.rsqrt: "rsqrt",
            torch.sqrt: "sqrt", torch.erf: "erf", F.softmax: "softmax",
            torch.softmax: "softmax", F.layer_norm: "layer_norm", F.dropout: "identity",
            torch.transpose: "transpose", torch.permute: "permute", torch.reshape: "reshape",
            operator.getitem: "getitem", operator.floordiv: "floordiv", math.sqrt: "msqrt",
            torch.neg: "neg", operator.neg: "neg", torch.narrow: "narrow",
            torch._C._nn.linear: "linear",
        }

    # ------------------------------------------------------------------ helpers
    def const(self, t) -> Value:
        key = id(t)
        if key not in self._consts:
            self._consts[key] = self.g.constant("c", _np(t))
        return self._consts[key]

    def val(self, a):
        import torch.fx as fx
        if isinstance(a, fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.val(x) for x in a)
        if isinstance(a, self.torch.Tensor):
            return self.const(a)
        return a

    def _linear_mod(self, m, x):
        return self.linear(x, m.weight, m.bias)

    def linear(self, x, w, b):
        g = self.g
        if isinstance(w, Value):  # a weight that is a graph input: (N, K), read transposed
            y = g.matmul(x, g.transpose(w, dim0=0, dim1=1))
        else:
            key = ("T", id(w))
            if key not in self._consts:
                self._consts[key] = g.constant("wT", _np(w).T.copy())  # type: ignore[index]
            y = g.matmul(x, self._consts[key])  # type: ignore[index]
        if b is not None:
            y = g.add(y, b if isinstance(b, Value) else self.const(b))
        return y

    def _ln_mod(self, m, x):
        return self.g.layernorm(x, self.const(m.weight), self.const(m.bias), eps=m.eps)

    def binary(self, op: str, a, b):
        if isinstance(a, _SCALAR) and isinstance(b, _SCALAR):
            return {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                    "div": operator.truediv}[op](a, b)
        if isinstance(b, _SCALAR):
            return self.g.op(op, a, scalar=float(b))
        if isinstance(a, _SCALAR):
            return self.g.op(op, b, scalar=float(a), reverse=True)
        return self.g.op(op, a, b)

    def getitem(self, x, idx):
        if not isinstance(x, Value):
            return x[idx]
        idx = idx if isinstance(idx, tuple) else (idx,)
        for axis, s in enumerate(idx):
            if s is Ellipsis or not isinstance(s, slice):
                raise UnsupportedOpError(f"tensor indexing with {s!r}")
            if s == slice(None):
                continue
            if s.step not in (None, 1):
                raise UnsupportedOpError("strided slicing")
            x = self.g.slice(x, axis=axis, start=s.start or 0, end=s.stop)
        return x

    # ------------------------------------------------------------------ dispatch
    def call(self, kind: str, target, args, kwargs):
        if kind == "call_module":
            m = self.gm.get_submodule(target)
            f = self.modules.get(type(m))
            if f is None:
                raise UnsupportedOpError(f"module {type(m).__name__}")
            return f(m, *args)
        if kind == "call_method":
            return self.method(target, args, kwargs)
        name = self.functions.get(target)
        if name is None:
            sym = getattr(target, "__name__", str(target))
            if sym in ("sym_size", "sym_size.int") or "sym_size" in str(target):
                return args[0].shape[args[1]]
            raise UnsupportedOpError(f"function {sym}")
        return self.function(name, args, kwargs)

    def function(self, name: str, args, kwargs):
        g = self.g
        if name in ("add", "sub", "mul", "div"):
            return self.binary(name, args[0], args[1])
        if name == "linear":
            return self.linear(args[0], args[1], args[2] if len(args) > 2 else kwargs.get("bias"))
        if name == "gelu":
            return g.gelu(args[0], approximate=kwargs.get("approximate", "none"))
        if name == "softmax":
            return g.softmax(args[0], axis=kwargs.get("dim", args[1] if len(args) > 1 else -1))
        if name == "layer_norm":
            w, b = (args[2], args[3]) if len(args) > 3 else (kwargs.get("weight"),
                                                             kwargs.get("bias"))
            eps = args[4] if len(args) > 4 else kwargs.get("eps", 1e-5)
            return g.layernorm(args[0], w, b, eps=eps)
        if name == "narrow":
            x, axis, start, length = args[:4]
            return g.slice(x, axis=axis, start=start, end=start + length)
        if name == "identity":
            return args[0]
        if name == "transpose":
            return g.transpose(args[0], dim0=args[1], dim1=args[2])
        if name == "permute":
            return g.permute(args[0], perm=tuple(args[1]))
        if name == "reshape":
            return g.reshape(args[0], shape=tuple(args[1]))
        if name == "getitem":
            return self.getitem(args[0], args[1])
        if name == "floordiv":
            return args[0] // args[1]
        if name == "msqrt":
            return math.sqrt(args[0])
        if name == "matmul":
            return g.matmul(args[0], args[1])
        return g.op(name, args[0])

    def method(self, name: str, args, kwargs):
        g = self.g
        x = args[0]
        if name == "size":
            return x.shape[args[1]] if len(args) > 1 else tuple(x.shape)
        if name in ("view", "reshape"):
            shape = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
            return g.reshape(x, shape=tuple(shape))
        if name == "transpose":
            return g.transpose(x, dim0=args[1], dim1=args[2])
        if name == "permute":
            perm = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
            return g.permute(x, perm=tuple(perm))
        if name == "item" and isinstance(x, _SCALAR):
            return x
        if name in ("contiguous", "float"):
            return x
        if name == "softmax":
            return g.softmax(x, axis=kwargs.get("dim", args[1] if len(args) > 1 else -1))
        if name in ("add", "sub", "mul", "div"):
            return self.binary(name, x, args[1])
        if name in ("relu", "tanh", "exp", "sigmoid", "sqrt", "rsqrt"):
            return g.op(name, x)
        raise UnsupportedOpError(f"method .{name}()")


def _symdim(d) -> Any:
    """A Dynamo extent (int or SymInt such as ``s0`` or ``2*s0``) as a dim."""
    s = str(d)
    if s.lstrip("-").isdigit():
        return int(s)
    if s.isidentifier():
        return dim(s)
    expr = sympy.sympify(s)
    return expr.xreplace({x: dim(str(x)) for x in expr.free_symbols})


def import_fx(gm, input_shapes: Sequence[Sequence] | None = None,
              example_inputs: Sequence | None = None, name: str = "fx") -> Graph:
    """Import ``gm``.  Input shapes come from ``input_shapes`` (dims may be names such as
    ``"B"``) or from ``example_inputs`` (a SymInt extent, as Dynamo's ``dynamic=True``
    gives, becomes the symbol of the same name; an ``nn.Parameter`` becomes a constant)."""
    imp = _Importer(gm, name)
    torch = imp.torch
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    outputs: list = []
    for k, n in enumerate(placeholders):
        ex = example_inputs[k] if example_inputs is not None else n.meta.get("example_value")
        if isinstance(ex, torch.nn.Parameter):
            imp.env[n] = imp.const(ex)
        elif isinstance(ex, torch.SymInt):
            imp.env[n] = _symdim(ex)
        elif isinstance(ex, int):
            imp.env[n] = ex
        elif isinstance(ex, torch.Tensor) and ex.ndim == 0:  # Dynamo's dynamic float attrs
            imp.env[n] = float(ex)
        else:
            fake = n.meta.get("example_value", ex)  # Dynamo: SymInt extents live here
            shape = input_shapes[k] if input_shapes is not None else \
                [_symdim(d) for d in fake.shape]
            imp.env[n] = imp.g.input(n.name, shape)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            outs = n.args[0]
            outputs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            continue
        if n.op == "get_attr":
            imp.env[n] = imp.const(_fetch_attr(gm, n.target))
            continue
        try:
            imp.env[n] = imp.call(n.op, n.target, imp.val(n.args), imp.val(n.kwargs))
        except UnsupportedOpError as e:
            imp.unsupported.append(e.message)
            imp.unsupported_nodes.append(n.name)
            imp.env[n] = None
        except TypeError as e:  # an input of this op is already unsupported
            if "got None" not in str(e):
                imp.unsupported.append(f"{n.op} {n.target} ({e})")
            imp.env[n] = None
        except (KeyError, AttributeError) as e:
            imp.unsupported.append(f"{n.op} {n.target} ({e})")
            imp.env[n] = None
    if imp.unsupported:
        err = UnsupportedOpError("unsupported ops: " + ", ".join(dict.fromkeys(imp.unsupported)))
        err.nodes = list(imp.unsupported_nodes)  # type: ignore[attr-defined]
        raise err
    outs = [imp.val(o) for o in outputs]
    return imp.g.build(*outs)


def import_module(module, input_shapes: Sequence[Sequence], name: str | None = None) -> Graph:
    """``torch.fx.symbolic_trace`` ``module`` (in eval mode) and import it."""
    import torch.fx
    gm = torch.fx.symbolic_trace(module.eval())
    return import_fx(gm, input_shapes=input_shapes, name=name or type(module).__name__)
