"""torch.fx importer: a ``GraphModule`` (from ``torch.fx.symbolic_trace`` or Dynamo) to a
:class:`~polycomp.graph.ir.Graph`.  torch is imported lazily (the ``torch`` extra).

Parameters and buffers become constants (``nn.Linear`` weights are stored transposed so
the contraction reads them row-major); ``size()`` / ``shape`` results are sympy
expressions, so ``x.view(B * S, H)`` keeps its relation to ``B`` and ``S``.  An op with no
mapping raises :class:`UnsupportedOpError` listing every unsupported op of the graph (and
naming the nodes, so that the Dynamo backend can run just those eagerly).

Semantics kept from eager PyTorch:

* **in-place ops** are made functional first (:mod:`.functionalize`); an updated input
  is written back after each call (``Graph.mutations``);
* **dtypes**: inputs keep their dtype (float16/bfloat16/float32/float64, int8/int32/
  int64, bool; anything else is unsupported); binary ops follow torch's promotion
  (``torch.result_type``: an int tensor plus a Python float is float32, a float16 tensor
  times a Python float stays float16, true division of integers is float32) by explicit
  ``cast`` nodes; ``.float()``, ``.to(dtype)``, ``.type_as(t)`` are casts.  Where Dynamo
  recorded the dtype and rank of a node (its example value), the imported value is
  checked against them: a disagreement makes that op run eagerly (never a silently
  different dtype);
* **training mode**: ``dropout`` with ``training=True`` and ``p > 0`` is random, so it
  runs eagerly (it is the identity in eval mode); ``batch_norm`` in training mode updates
  its running statistics (the functionalisation refuses it: the graph runs eagerly).
"""
from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np
import sympy

from polycomp.errors import PolycompError, UnsupportedOpError

from .ir import Graph, GraphBuilder, Value, dim
from .opdefs import window_extent

_SCALAR = (int, float, sympy.Expr)

# torch dtype name -> polycomp dtype name (the dtypes a graph value may have)
TORCH_DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16",
                "torch.float32": "float32", "torch.float64": "float64",
                "torch.int8": "int8", "torch.int32": "int32", "torch.int64": "int64",
                "torch.bool": "bool"}


def pdtype(torch_dtype: Any) -> str:
    """The polycomp dtype of a torch dtype, or :class:`UnsupportedOpError`."""
    d = TORCH_DTYPES.get(str(torch_dtype))
    if d is None:
        raise UnsupportedOpError(f"dtype {torch_dtype} (polycomp graphs take "
                                 f"{', '.join(TORCH_DTYPES.values())})")
    return d


def torch_dtype(d: str):
    import torch
    return getattr(torch, d)


def _np(t) -> np.ndarray:
    """A copy of a (CPU) torch tensor as a numpy array (bfloat16 through its bits)."""
    import torch
    t = t.detach().cpu().resolve_neg().resolve_conj().contiguous()
    pdtype(t.dtype)
    if t.dtype == torch.bfloat16:
        from polycomp.dtypes import to_numpy
        return t.view(torch.int16).numpy().copy().view(to_numpy("bfloat16"))
    return t.numpy().copy()


def _fetch_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


_CAST_METHODS = {"float": "float32", "double": "float64", "half": "float16",
                 "bfloat16": "bfloat16", "long": "int64", "int": "int32", "bool": "bool",
                 "char": "int8"}
_DROPOUTS = ("dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d",
             "dropout3d")


class _Importer:
    def __init__(self, gm, name: str):
        import torch
        import torch.nn.functional as F
        self.torch, self.F, self.gm = torch, F, gm
        self.g = GraphBuilder(name)
        self.env: dict[Any, Any] = {}
        self.unsupported: list[str] = []
        self.unsupported_nodes: list[str] = []
        self._consts: dict[Any, Value] = {}
        self.scalars: dict[Value, Any] = {}  # 0-d inputs with a real example: its value
        self.hints: dict[sympy.Symbol, int] = {}  # dim symbol -> its size in the example
        self.arg_guards: list[tuple[int, Any]] = []  # placeholder k read as a number
        self._handlers: dict[str, Any] = {}
        nn = torch.nn
        self.modules = {nn.Linear: self._linear_mod, nn.LayerNorm: self._ln_mod,
                        nn.GELU: lambda m, x: self.g.gelu(x, approximate=m.approximate),
                        nn.ReLU: lambda m, x: self.g.relu(x), nn.Tanh: lambda m, x: self.g.tanh(x),
                        nn.SiLU: lambda m, x: self.silu(x),
                        nn.LogSoftmax: lambda m, x: self.log_softmax(x, m.dim),
                        nn.Softmax: lambda m, x: self.softmax(x, m.dim),
                        nn.Dropout: lambda m, x: self.dropout(x, m.p, m.training),
                        nn.Identity: lambda m, x: x,
                        nn.Conv2d: self._conv_mod, nn.BatchNorm2d: self._bn_mod,
                        nn.BatchNorm1d: self._bn_mod,
                        nn.ReLU6: lambda m, x: self.hardtanh(x, 0.0, 6.0),
                        nn.Hardtanh: lambda m, x: self.hardtanh(x, m.min_val, m.max_val),
                        nn.MaxPool2d: lambda m, x: self.pool(
                            "max_pool2d", x, m.kernel_size, m.stride, m.padding, m.dilation,
                            m.ceil_mode, return_indices=m.return_indices),
                        nn.AvgPool2d: lambda m, x: self.pool(
                            "avg_pool2d", x, m.kernel_size, m.stride, m.padding, 1,
                            m.ceil_mode, m.count_include_pad, m.divisor_override),
                        nn.AdaptiveAvgPool2d: lambda m, x: self.adaptive_avg_pool(
                            x, m.output_size),
                        nn.Flatten: lambda m, x: self._h_flatten(
                            "flatten", (x, m.start_dim, m.end_dim), {})}
        self.functions = {
            operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub",
            operator.mul: "mul", torch.mul: "mul", operator.truediv: "div", torch.div: "div",
            torch.true_divide: "div", operator.matmul: "matmul", torch.matmul: "matmul",
            torch.bmm: "matmul", F.linear: "linear", F.gelu: "gelu", F.relu: "relu",
            torch.relu: "relu", torch.tanh: "tanh", torch.exp: "exp", torch.sigmoid: "sigmoid",
            torch.log: "log", F.silu: "silu", F.log_softmax: "log_softmax",
            torch.log_softmax: "log_softmax",
            torch.rsqrt: "rsqrt", torch.sqrt: "sqrt", torch.erf: "erf", F.softmax: "softmax",
            torch.softmax: "softmax", F.layer_norm: "layer_norm", F.dropout: "dropout",
            torch.dropout: "dropout", F.alpha_dropout: "dropout",
            F.feature_alpha_dropout: "dropout", F.dropout1d: "dropout", F.dropout2d: "dropout",
            F.dropout3d: "dropout",
            torch.transpose: "transpose", torch.permute: "permute", torch.reshape: "reshape",
            operator.getitem: "getitem", operator.floordiv: "floordiv", math.sqrt: "msqrt",
            operator.pow: "pow", torch.pow: "pow", getattr(torch, "_sym_sqrt", math.sqrt): "msqrt",
            torch.neg: "neg", operator.neg: "neg", torch.narrow: "narrow",
            torch._C._nn.linear: "linear", torch.sum: "sum", torch.mean: "mean",
            torch.amax: "amax", torch.maximum: "maximum", torch.clone: "identity",
            torch.Tensor.contiguous: "identity",
            torch.addmm: "addmm", torch.baddbmm: "baddbmm", torch.unsqueeze: "unsqueeze",
            torch.flatten: "flatten", torch.cat: "cat", torch.concat: "cat",
            torch.concatenate: "cat", torch.split: "split", torch.chunk: "chunk",
            torch.arange: "arange", F.scaled_dot_product_attention: "sdpa",
            torch.where: "where", torch.masked_fill: "masked_fill",
            operator.lt: "lt", operator.le: "le", operator.gt: "gt", operator.ge: "ge",
            torch.lt: "lt", torch.le: "le", torch.gt: "gt", torch.ge: "ge",
            torch.eq: "eq", torch.ne: "ne", operator.eq: "eq", operator.ne: "ne",
            operator.and_: "and_", operator.or_: "or_", torch.logical_and: "and_",
            torch.logical_or: "or_", torch.ones: "ones", torch.zeros: "zeros",
            torch.full: "full", torch.Size: "Size", torch.empty: "empty",
            torch.tensor: "tensor", torch.as_tensor: "tensor",
            torch.scalar_tensor: "scalar_tensor",
            torch.conv2d: "conv2d", F.conv2d: "conv2d", F.batch_norm: "batch_norm",
            F.max_pool2d: "max_pool2d", torch.max_pool2d: "max_pool2d",
            F.avg_pool2d: "avg_pool2d", F.adaptive_avg_pool2d: "adaptive_avg_pool2d",
            torch._C._nn.adaptive_avg_pool2d: "adaptive_avg_pool2d",
            F.hardtanh: "hardtanh", F.relu6: "relu6", torch.clamp: "clamp",
            torch.clip: "clamp",
            F.embedding: "embedding", torch.embedding: "embedding",
            torch.index_select: "index_select", torch.gather: "gather",
        }
        import torch._refs  # Dynamo records torch.tensor(<a SymInt>) as torch._refs.tensor
        self.functions[torch._refs.tensor] = "tensor"

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
        if isinstance(a, dict):  # keyword arguments (a Node may be one)
            return {k: self.val(x) for k, x in a.items()}
        if isinstance(a, slice):  # x[:, 0:s0]: a bound may be a size node
            return slice(self.val(a.start), self.val(a.stop), self.val(a.step))
        if isinstance(a, self.torch.Tensor):
            return self.const(a)
        return a

    def cast(self, x: Value, d: str) -> Value:
        return x if x.dtype == d else self.g.cast(x, dtype=d)

    def _dummy(self, x):
        """A stand-in for ``torch.result_type``: a tensor of x's dtype and rank, or the
        Python scalar."""
        if isinstance(x, Value):
            return self.torch.empty((1,) * len(x.shape), dtype=torch_dtype(x.dtype))
        if isinstance(x, sympy.Expr):
            return 1 if x.is_integer else _number(x)  # (only its kind matters here)
        if isinstance(x, (bool, int, float)):
            return x
        raise UnsupportedOpError(f"an operand of type {type(x).__name__}")

    def number(self, x):
        """A scalar operand of a tensor op: a number, an integer size expression over the
        dims (``x * S``: it becomes a kernel parameter), or -- for another expression
        (``x / math.sqrt(D)`` under dynamic shapes) -- its value in the example, guarded
        per call (``Graph.expr_guards``)."""
        if not isinstance(x, sympy.Expr) or x.is_number or x.is_integer:
            return x
        v = x.xreplace(self.hints)
        if not v.is_number:
            raise UnsupportedOpError(f"arithmetic between a tensor and the size {x} (no "
                                     f"example value)")
        v = int(v) if v.is_integer else float(v)
        self.g.graph.expr_guards.append((x, v))
        return v

    def result_dtype(self, a, b) -> str:
        return pdtype(self.torch.result_type(self._dummy(a), self._dummy(b)))

    def item(self, x: Value):
        """``t.item()`` of a 0-d input (Dynamo passes unspecialised Python floats, such as
        a layer norm's ``eps``, as 0-d tensors): the example's value, guarded -- a call
        with another value is refused by the runtime's value guard."""
        if x not in self.scalars:
            raise UnsupportedOpError(".item() of a computed tensor (a data-dependent value)")
        v = self.scalars[x]
        self.g.graph.value_guards.append((x, v))
        return v

    def _linear_mod(self, m, x):
        return self.linear(x, m.weight, m.bias)

    def linear(self, x, w, b):
        g = self.g
        if isinstance(w, Value) and w.const is not None and len(w.shape) == 2:
            w = w.const  # a parameter Dynamo lifted (a constant): transposed once, below
        if isinstance(w, Value):  # a weight that is a graph input: (N, K), read transposed
            y = self.matmul(x, g.transpose(w, dim0=0, dim1=1))
        else:
            key = ("T", id(w))
            if key not in self._consts:
                wn = w if isinstance(w, np.ndarray) else _np(w)
                self._consts[key] = g.constant("wT", wn.T.copy())  # type: ignore[index]
            y = self.matmul(x, self._consts[key])  # type: ignore[index]
        if b is not None:
            y = self.binary("add", y, b if isinstance(b, Value) else self.const(b))
        return y

    def matmul(self, a, b):
        if not (isinstance(a, Value) and isinstance(b, Value)):
            raise UnsupportedOpError("matmul of a non-tensor")
        if a.dtype != b.dtype:  # torch refuses mixed dtypes
            raise UnsupportedOpError(f"matmul of {a.dtype} and {b.dtype}")
        return self.g.matmul(a, b)

    def _ln_mod(self, m, x):
        return self.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps)

    def layer_norm(self, x, shape, w, b, eps):
        if len(tuple(shape)) != 1:
            raise UnsupportedOpError("layer_norm over several axes")
        td = torch_dtype(x.dtype)  # no affine: weight 1, bias 0 over the normalised axis
        w = self._h_full("ones", (tuple(shape),), {"dtype": td}) if w is None else w
        b = self._h_full("zeros", (tuple(shape),), {"dtype": td}) if b is None else b
        w = w if isinstance(w, Value) else self.const(w)
        b = b if isinstance(b, Value) else self.const(b)
        if not (x.dtype == w.dtype == b.dtype):
            raise UnsupportedOpError(f"layer_norm of {x.dtype} with {w.dtype} weights")
        return self.g.layernorm(x, w, b, eps=eps)

    def softmax(self, x, axis, dtype=None):
        if dtype is not None:
            x = self.cast(x, pdtype(dtype))
        return self.g.softmax(x, axis=axis)

    def log_softmax(self, x, axis, dtype=None):
        """``x - m - log(sum(exp(x - m)))`` with ``m`` the row's max (torch's formula)."""
        if axis is None:
            raise UnsupportedOpError("log_softmax without a dim")
        if dtype is not None:
            x = self.cast(x, pdtype(dtype))
        if not isinstance(x, Value) or x.dtype not in ("float32", "float64"):
            raise UnsupportedOpError("log_softmax of a tensor that is not float32/float64")
        g = self.g
        shifted = g.sub(x, g.amax(x, axis=axis, keepdim=True))
        return g.sub(shifted, g.log(g.sum(g.exp(shifted), axis=axis, keepdim=True)))

    def silu(self, x):
        """``x * sigmoid(x)``."""
        if not isinstance(x, Value):
            raise UnsupportedOpError(f"silu of a {type(x).__name__}")
        return self.g.mul(x, self.g.sigmoid(x))

    def dropout(self, x, p, training):
        if training and p > 0:
            raise UnsupportedOpError("dropout in training mode (random, runs eagerly; it is "
                                     "the identity in eval mode)")
        return x

    def binary(self, op: str, a, b, alpha=1):
        if alpha != 1:
            raise UnsupportedOpError(f"{op} with alpha={alpha}")
        if isinstance(a, _SCALAR) and isinstance(b, _SCALAR):
            return {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                    "div": operator.truediv}[op](a, b)
        a, b = self.number(a), self.number(b)
        d = self.result_dtype(a, b)
        if op == "div" and d not in ("float16", "bfloat16", "float32", "float64"):
            d = pdtype(self.torch.get_default_dtype())
        if d == "bool" and op == "sub":
            raise UnsupportedOpError("sub of bool tensors")
        if isinstance(b, _SCALAR):
            return self.g.op(op, self.cast(a, d), scalar=_number(b))
        if isinstance(a, _SCALAR):
            return self.g.op(op, self.cast(b, d), scalar=_number(a), reverse=True)
        return self.g.op(op, self.cast(a, d), self.cast(b, d))

    def unary(self, op: str, x, **attrs):
        if op == "neg" and isinstance(x, _SCALAR):  # -S of a size
            return -x
        if not isinstance(x, Value):
            raise UnsupportedOpError(f"{op} of a {type(x).__name__}")
        return self.g.op(op, x, **attrs)

    def reduce(self, op: str, x, dim_=None, keepdim=False, dtype=None):
        if dim_ is None or (isinstance(dim_, (tuple, list)) and len(dim_) == 0):
            raise UnsupportedOpError(f"{op} over all axes")
        if dtype is not None:
            x = self.cast(x, pdtype(dtype))
        if not isinstance(dim_, (tuple, list)) or len(dim_) == 1:
            axis = dim_[0] if isinstance(dim_, (tuple, list)) else dim_
            return self.g.op(op, x, axis=axis, keepdim=bool(keepdim))
        # several axes (``x.mean((2, 3))``): one axis after the other, the last first (so
        # the others keep their index), kept as extent 1 and dropped at the end
        if not isinstance(x, Value):
            raise UnsupportedOpError(f"{op} of a {type(x).__name__}")
        n = len(x.shape)
        axes = sorted({int(a) + n if int(a) < 0 else int(a) for a in dim_}, reverse=True)
        y = x
        for a in axes:
            y = self.g.op(op, y, axis=a, keepdim=True)
        if keepdim:
            return y
        return self.g.reshape(y, shape=tuple(d for k, d in enumerate(y.shape) if k not in axes))

    def to(self, x, args, kwargs):
        """``x.to(...)`` / ``x.type(...)``: a cast, or nothing (``.to("cpu")``)."""
        torch = self.torch
        target = None
        for a in (*args, kwargs.get("dtype"), kwargs.get("device")):
            if isinstance(a, torch.dtype):
                target = pdtype(a)
            elif isinstance(a, Value):
                target = a.dtype
            elif isinstance(a, (str, torch.device)):
                dev = torch.device(a) if not (isinstance(a, str) and a.startswith("torch.")) \
                    else None
                if dev is None:  # .type("torch.FloatTensor")
                    raise UnsupportedOpError(f".type({a!r})")
                if dev.type != "cpu":
                    raise UnsupportedOpError(f".to({a!r}): polycomp graphs run on the CPU")
        return x if target is None else self.cast(x, target)

    def getitem(self, x, idx):
        if not isinstance(x, Value):
            return x[idx]
        idx = idx if isinstance(idx, tuple) else (idx,)
        if any(isinstance(s, Value) for s in idx):    # x[idx]: advanced indexing (a gather)
            return self.advanced_index(x, idx)
        if sum(s is Ellipsis for s in idx) == 1:  # x[..., :3]: ``...`` is the full slices
            k = idx.index(Ellipsis)
            fill = len(x.shape) - sum(s is not None and s is not Ellipsis for s in idx)
            idx = idx[:k] + (slice(None),) * max(fill, 0) + idx[k + 1:]
        axis = -1
        for s in idx:
            axis += 1
            if s is None:  # x[:, None]: a new axis of extent 1
                shape = list(x.shape)
                shape.insert(axis, 1)
                x = self.g.reshape(x, shape=tuple(shape))
                continue
            if isinstance(s, int) and not isinstance(s, bool):  # x[:, 0]: the axis goes
                n = x.shape[axis] if axis < len(x.shape) else None
                if n is None or not (n.is_Integer or s >= 0):
                    raise UnsupportedOpError(f"tensor indexing with {s} of the extent {n}")
                k = s + int(n) if s < 0 else s
                if n.is_Integer and not 0 <= k < int(n):
                    raise UnsupportedOpError(f"index {s} out of range for the extent {n}")
                # (a symbolic extent: the slice records k + 1 <= n, a per-call guard)
                x = self.g.slice(x, axis=axis, start=k, end=k + 1)
                x = self.g.reshape(x, shape=tuple(d for j, d in enumerate(x.shape)
                                                  if j != axis))
                axis -= 1
                continue
            if s is Ellipsis or not isinstance(s, slice):
                raise UnsupportedOpError(f"tensor indexing with {s!r}")
            if s == slice(None):
                continue
            if s.step not in (None, 1):
                raise UnsupportedOpError("strided slicing")
            start = s.start or 0
            if not isinstance(start, int) or start < 0 or (
                    isinstance(s.stop, int) and s.stop < 0):
                raise UnsupportedOpError("slicing with a negative or symbolic start")
            x = self.g.slice(x, axis=axis, start=start, end=s.stop)
        return x

    # ------------------------------------------------------------------ convolutional nets
    def _conv_mod(self, m, x):
        if m.padding_mode != "zeros":
            raise UnsupportedOpError(f"Conv2d with padding_mode={m.padding_mode!r}")
        return self.conv2d(x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)

    def _h_conv2d(self, name, args, kwargs):
        return self.conv2d(args[0], _arg(args, kwargs, 1, "weight", None),
                           _arg(args, kwargs, 2, "bias", None),
                           _arg(args, kwargs, 3, "stride", 1),
                           _arg(args, kwargs, 4, "padding", 0),
                           _arg(args, kwargs, 5, "dilation", 1),
                           _arg(args, kwargs, 6, "groups", 1))

    def conv2d(self, x, w, b, stride, padding, dilation, groups):
        """``conv2d`` of a batched NCHW tensor (bias, stride, padding -- ``"valid"``, or
        ``"same"`` with an even total --, dilation, groups)."""
        w = self.val(w) if not isinstance(w, Value) else w
        b = self.val(b) if b is not None and not isinstance(b, Value) else b
        if not all(isinstance(v, Value) for v in (x, w)) or (
                b is not None and not isinstance(b, Value)):
            raise UnsupportedOpError("conv2d of a non-tensor")
        if len(x.shape) != 4:
            raise UnsupportedOpError(f"conv2d of a rank-{len(x.shape)} input (batched NCHW "
                                     f"only)")
        if len({v.dtype for v in (x, w, b) if v is not None}) != 1:
            raise UnsupportedOpError("conv2d of mixed dtypes")
        st, dl = _pair(stride), _pair(dilation)
        if isinstance(padding, str):
            if padding == "valid":
                pd = (0, 0)
            else:
                tot = [d * (int(k) - 1) for d, k in zip(dl, w.shape[2:])]
                if padding != "same" or any(t % 2 for t in tot):
                    raise UnsupportedOpError(f"conv2d with padding={padding!r} (asymmetric)")
                pd = (tot[0] // 2, tot[1] // 2)
        else:
            pd = _pair(padding)
        if not isinstance(groups, int):
            raise UnsupportedOpError(f"conv2d with groups={groups!r}")
        ins = [x, w] + ([b] if b is not None else [])
        return self.g.conv2d(*ins, stride=st, padding=pd, dilation=dl, groups=groups)

    def _bn_mod(self, m, x):
        return self.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias,
                               m.training or not m.track_running_stats, m.eps)

    def _h_batch_norm(self, name, args, kwargs):
        return self.batch_norm(args[0], _arg(args, kwargs, 1, "running_mean", None),
                               _arg(args, kwargs, 2, "running_var", None),
                               _arg(args, kwargs, 3, "weight", None),
                               _arg(args, kwargs, 4, "bias", None),
                               _arg(args, kwargs, 5, "training", False),
                               _arg(args, kwargs, 7, "eps", 1e-5))

    def batch_norm(self, x, mean, var, w, b, training, eps):
        """Eval-mode ``batch_norm``: with constant statistics the per-channel affine
        ``x * scale + shift`` (``scale = w / sqrt(var + eps)``, ``shift = b - mean *
        scale``, computed at compile time in float64), folded into the weights and bias of
        the convolution that produces ``x`` when there is one; with statistics that are
        graph inputs, the same formula as graph ops."""
        if training or mean is None or var is None:
            raise UnsupportedOpError("batch_norm in training mode (it normalises with the "
                                     "batch's statistics and updates the running ones)")
        vals = [self.val(t) if t is not None and not isinstance(t, Value) else t
                for t in (mean, var, w, b)]
        if not isinstance(x, Value) or len(x.shape) < 2 or not all(
                v is None or isinstance(v, Value) for v in vals):
            raise UnsupportedOpError("batch_norm of a non-tensor or of rank < 2")
        if x.dtype not in ("float16", "bfloat16", "float32", "float64"):
            raise UnsupportedOpError(f"batch_norm of {x.dtype}")
        c = x.shape[1]
        eps = float(self.number(eps))
        bshape = (c,) + (1,) * (len(x.shape) - 2)
        if all(v is None or v.const is not None for v in vals):
            if not c.is_Integer:
                raise UnsupportedOpError(f"batch_norm of the symbolic channel extent {c}")
            mu, va, wt, bi = (None if v is None else v.const for v in vals)
            return batch_norm_constant(self.g, x, mu, va, wt, bi, eps)
        g = self.g
        mean_v, var_v, w_v, b_v = (None if v is None else self.cast(v, x.dtype) for v in vals)
        assert mean_v is not None and var_v is not None
        inv = g.rsqrt(g.op("add", var_v, scalar=eps))
        if w_v is not None:
            inv = g.mul(inv, w_v)
        y = g.mul(g.sub(x, g.reshape(mean_v, shape=bshape)), g.reshape(inv, shape=bshape))
        return g.add(y, g.reshape(b_v, shape=bshape)) if b_v is not None else y

    def _h_pool(self, name, args, kwargs):
        x, k = args[0], _arg(args, kwargs, 1, "kernel_size", None)
        stride = _arg(args, kwargs, 2, "stride", None)
        pad = _arg(args, kwargs, 3, "padding", 0)
        if name == "max_pool2d":
            return self.pool(name, x, k, stride, pad, _arg(args, kwargs, 4, "dilation", 1),
                             _arg(args, kwargs, 5, "ceil_mode", False),
                             return_indices=_arg(args, kwargs, 6, "return_indices", False))
        return self.pool(name, x, k, stride, pad, 1, _arg(args, kwargs, 4, "ceil_mode", False),
                         _arg(args, kwargs, 5, "count_include_pad", True),
                         _arg(args, kwargs, 6, "divisor_override", None))

    def pool(self, op, x, kernel, stride, padding, dilation, ceil_mode,
             count_include_pad=True, divisor=None, return_indices=False):
        if not isinstance(x, Value) or len(x.shape) != 4:
            raise UnsupportedOpError(f"{op} of a non-tensor or an unbatched input")
        if x.dtype not in ("float16", "bfloat16", "float32", "float64"):
            raise UnsupportedOpError(f"{op} of {x.dtype}")
        if return_indices:
            raise UnsupportedOpError(f"{op} with return_indices=True")
        kh, kw = _pair(kernel)
        st = _pair(stride) if stride not in (None, (), []) else (kh, kw)
        pd, dl = _pair(padding), _pair(dilation)
        if any(2 * p > k for p, k in zip(pd, (kh, kw))):
            raise UnsupportedOpError(f"{op} with padding {pd} over half the window")
        if ceil_mode:
            for size, k, s, p, d in zip(x.shape[2:], (kh, kw), st, pd, dl):
                floor_ext = window_extent(size, k, s, p, d)
                ceil_ext = _ceil_extent(size, k, s, p, d)
                if floor_ext != ceil_ext:
                    raise UnsupportedOpError(f"{op} with ceil_mode=True where it changes the "
                                             f"output extent ({size} -> {ceil_ext})")
        attrs: dict[str, Any] = dict(kernel=(kh, kw), stride=st, padding=pd)
        if op == "max_pool2d":
            attrs["dilation"] = dl
        else:
            attrs["count_include_pad"] = bool(count_include_pad)
            if divisor is not None:
                attrs["divisor"] = int(divisor)
        return self.g.op(op, x, **attrs)

    def adaptive_avg_pool(self, x, out):
        if not isinstance(x, Value) or len(x.shape) != 4:
            raise UnsupportedOpError("adaptive_avg_pool2d of a non-tensor or an unbatched "
                                     "input")
        if x.dtype not in ("float16", "bfloat16", "float32", "float64"):
            raise UnsupportedOpError(f"adaptive_avg_pool2d of {x.dtype}")
        o = (out, out) if not isinstance(out, (tuple, list)) else tuple(out)
        sizes = []
        for size, e in zip(x.shape[2:], o):
            if e is None:
                if not size.is_Integer:
                    raise UnsupportedOpError(f"adaptive_avg_pool2d keeping the symbolic "
                                             f"extent {size}")
                e = int(size)
            if not isinstance(e, int) or e < 1:
                raise UnsupportedOpError(f"adaptive_avg_pool2d to the size {e!r}")
            if e != 1 and not size.is_Integer:
                raise UnsupportedOpError(
                    f"adaptive_avg_pool2d to {e} of the symbolic extent {size} (the bins "
                    f"floor(i*{size}/{e}) are not affine; output 1 or integer extents)")
            sizes.append(e)
        return self.g.adaptive_avg_pool2d(x, out=tuple(sizes))

    def hardtanh(self, x, lo, hi):
        if not isinstance(x, Value) or x.dtype not in ("float16", "bfloat16", "float32",
                                                       "float64"):
            raise UnsupportedOpError("hardtanh / relu6 / clamp of a non-float tensor")
        if not all(isinstance(v, (int, float)) for v in (lo, hi)):
            raise UnsupportedOpError("hardtanh / clamp with tensor bounds")
        return self.g.hardtanh(x, lo=float(lo), hi=float(hi))

    def clamp(self, x, lo, hi):
        if lo is None and hi is None:
            raise UnsupportedOpError("clamp without bounds")
        return self.hardtanh(x, -math.inf if lo is None else lo,
                             math.inf if hi is None else hi)

    def advanced_index(self, x, idx: tuple):
        """``x[..., idx_1, ..., idx_m, ...]`` with integer index tensors: the slices
        beside them first (they keep their axes), then the ``index`` op along the
        tensors' axes, negative indices counted from the end (torch's semantics).  Bool
        masks (data-dependent shapes), ``None``, integers and ``...`` beside a tensor
        index are not supported."""
        axes, tensors = [], []
        for axis, s in enumerate(idx):
            if isinstance(s, Value):
                if s.dtype not in ("int32", "int64"):
                    raise UnsupportedOpError(f"tensor indexing with a {s.dtype} tensor "
                                             f"(a mask: its result's shape depends on data)")
                axes.append(axis)
                tensors.append(s)
            elif not isinstance(s, slice):
                raise UnsupportedOpError(f"tensor indexing mixing index tensors with {s!r}")
        if len(idx) > len(x.shape):
            raise UnsupportedOpError(f"too many indices for a tensor of rank {len(x.shape)}")
        x = self.getitem(x, tuple(slice(None) if isinstance(s, Value) else s for s in idx))
        return self.g.index(x, *tensors, axes=tuple(axes), wrap=True)

    def _h_embedding(self, name, args, kwargs):
        """``F.embedding(input, weight, padding_idx, max_norm, ...)``: rows of ``weight``
        (``padding_idx`` only affects gradients; ``max_norm`` renormalises the weight in
        place: eager)."""
        idx, w = args[0], args[1]
        if _arg(args, kwargs, 3, "max_norm", None) is not None:
            raise UnsupportedOpError("embedding with max_norm (it updates the weight)")
        w = w if isinstance(w, Value) else self.const(w)
        if not isinstance(idx, Value) or idx.dtype not in ("int32", "int64"):
            raise UnsupportedOpError("embedding of indices that are not an int tensor")
        return self.g.index(w, idx, axes=(0,))

    def _h_index_select(self, name, args, kwargs):
        x, d, idx = args[0], _arg(args, kwargs, 1, "dim", 0), _arg(args, kwargs, 2, "index",
                                                                      None)
        if not (isinstance(x, Value) and isinstance(idx, Value)) or len(idx.shape) > 1:
            raise UnsupportedOpError("index_select needs a tensor and a 1-d index tensor")
        if len(idx.shape) == 0:
            idx = self.g.reshape(idx, shape=(1,))
        return self.g.index(x, idx, axes=(d,))

    def _h_gather(self, name, args, kwargs):
        x, d, idx = args[0], _arg(args, kwargs, 1, "dim", 0), _arg(args, kwargs, 2, "index",
                                                                      None)
        if kwargs.get("sparse_grad"):
            raise UnsupportedOpError("gather with sparse_grad")
        if not (isinstance(x, Value) and isinstance(idx, Value)):
            raise UnsupportedOpError("gather of non-tensors")
        if len(x.shape) != len(idx.shape):
            raise UnsupportedOpError("gather with an index of another rank")
        return self.g.gather(x, idx, axis=d)

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

    # Handlers by op name, shared by functions (``torch.softmax(x, -1)``) and methods
    # (``x.softmax(-1)``: the tensor is args[0]); each takes (name, args, kwargs).
    def function(self, name: str, args, kwargs):
        h = self.handlers.get(name)
        return h(name, args, kwargs) if h is not None else self.unary(name, args[0])

    def method(self, name: str, args, kwargs):
        x = args[0]
        if name == "size":
            return x.shape[args[1]] if len(args) > 1 else tuple(x.shape)
        if not isinstance(x, Value):
            if name == "item" and isinstance(x, _SCALAR):
                return x
            raise UnsupportedOpError(f"method .{name}() of a {type(x).__name__}")
        if name in _CAST_METHODS:
            return self.cast(x, _CAST_METHODS[name])
        h = self.handlers.get(name)
        if h is None or name in _NOT_METHODS:
            raise UnsupportedOpError(f"method .{name}()")
        return h(name, args, kwargs)

    @property
    def handlers(self) -> dict[str, Any]:
        h = self._handlers
        if not h:
            for k in ("add", "sub", "mul", "div"):
                h[k] = self._h_arith
            for k in ("relu", "tanh", "exp", "log", "sigmoid", "sqrt", "rsqrt", "neg"):
                h[k] = lambda name, a, kw: self.unary(name, a[0])
            for k in ("sum", "mean", "amax"):
                h[k] = self._h_reduce
            for k in ("contiguous", "clone", "detach", "identity"):
                h[k] = lambda name, a, kw: a[0]
            h.update(maximum=lambda name, a, kw: self.binary_values(name, a[0], a[1]),
                     linear=lambda name, a, kw: self.linear(
                         a[0], a[1], a[2] if len(a) > 2 else kw.get("bias")),
                     gelu=lambda name, a, kw: self.unary(
                         name, a[0], approximate=kw.get("approximate", "none")),
                     softmax=lambda name, a, kw: self.softmax(
                         a[0], _arg(a, kw, 1, "dim", -1), _arg(a, kw, 2, "dtype", None)),
                     log_softmax=lambda name, a, kw: self.log_softmax(
                         a[0], _arg(a, kw, 1, "dim", -1), _arg(a, kw, 2, "dtype", None)),
                     silu=lambda name, a, kw: self.silu(a[0]),
                     layer_norm=self._h_layer_norm, dropout=self._h_dropout,
                     narrow=lambda name, a, kw: self.g.slice(a[0], axis=a[1], start=a[2],
                                                             end=a[2] + a[3]),
                     transpose=lambda name, a, kw: self.g.transpose(a[0], dim0=a[1],
                                                                    dim1=a[2]),
                     permute=lambda name, a, kw: self.g.permute(a[0], perm=_varargs(a)),
                     reshape=self._h_reshape, view=self._h_reshape,
                     getitem=lambda name, a, kw: self.getitem(a[0], a[1]),
                     floordiv=self._h_floordiv, msqrt=self._h_msqrt, pow=self._h_pow,
                     matmul=lambda name, a, kw: self.matmul(a[0], a[1]),
                     dim=lambda name, a, kw: len(a[0].shape),
                     item=lambda name, a, kw: self.item(a[0]),
                     to=lambda name, a, kw: self.to(a[0], a[1:], kw),
                     type=lambda name, a, kw: self.to(a[0], a[1:], kw),
                     type_as=lambda name, a, kw: self.cast(a[0], a[1].dtype),
                     addmm=self._h_addmm, baddbmm=self._h_addmm,
                     unsqueeze=self._h_unsqueeze, flatten=self._h_flatten,
                     expand=lambda name, a, kw: self.expand(a[0], _varargs(a)),
                     expand_as=lambda name, a, kw: self.expand(a[0], a[1].shape),
                     cat=self._h_cat, split=self._h_split, chunk=self._h_chunk,
                     embedding=self._h_embedding, index_select=self._h_index_select,
                     gather=self._h_gather,
                     arange=self._h_arange, sdpa=self._h_sdpa, where=self._h_where,
                     masked_fill=lambda name, a, kw: self.where(
                         a[1], _arg(a, kw, 2, "value", None), a[0], keep=True),
                     conv2d=self._h_conv2d, batch_norm=self._h_batch_norm,
                     max_pool2d=self._h_pool, avg_pool2d=self._h_pool,
                     adaptive_avg_pool2d=lambda name, a, kw: self.adaptive_avg_pool(
                         a[0], _arg(a, kw, 1, "output_size", None)),
                     hardtanh=lambda name, a, kw: self.hardtanh(
                         a[0], _arg(a, kw, 1, "min_val", -1.0), _arg(a, kw, 2, "max_val", 1.0)),
                     relu6=lambda name, a, kw: self.hardtanh(a[0], 0.0, 6.0),
                     clamp=lambda name, a, kw: self.clamp(
                         a[0], _arg(a, kw, 1, "min", None), _arg(a, kw, 2, "max", None)),
                     clip=lambda name, a, kw: self.clamp(
                         a[0], _arg(a, kw, 1, "min", None), _arg(a, kw, 2, "max", None)))
            for k in ("lt", "le", "gt", "ge", "eq", "ne"):
                h[k] = self._h_compare
            for k in ("and_", "or_", "logical_and", "logical_or"):
                h[k] = self._h_logical
            for k in ("ones", "zeros", "full", "new_ones", "new_zeros", "new_full", "empty",
                      "new_empty"):
                h[k] = self._h_full
            h["Size"] = lambda name, a, kw: tuple(a[0])
            h["tensor"] = h["scalar_tensor"] = self._h_tensor
        return h

    def _h_logical(self, name, args, kwargs):
        """``a & b`` / ``a | b`` (and ``logical_and`` / ``logical_or``) of bool tensors."""
        a, b = args[0], args[1]
        if not all(isinstance(v, Value) and v.dtype == "bool" for v in (a, b)):
            raise UnsupportedOpError(f"{name.rstrip('_')} of tensors that are not both bool")
        return self.g.op("mul" if "and" in name else "add", a, b)

    def _h_full(self, name, args, kwargs):
        """``ones / zeros / full(size, [value])`` and ``x.new_ones(size)`` etc.: a
        one-element constant expanded to the (possibly symbolic) size (``empty``: zeros,
        its contents are unspecified; an empty one is a constant of no elements)."""
        rest = list(args[1:]) if name.startswith("new_") else list(args)
        src = args[0] if name.startswith("new_") else None
        if name.endswith("full"):
            value = rest.pop() if len(rest) >= 2 else kwargs.get("fill_value")
        else:
            value = 1 if name.endswith("ones") else 0
        size = rest[0] if len(rest) == 1 and isinstance(rest[0], (tuple, list)) else rest
        size = tuple(kwargs.get("size", size))
        if isinstance(value, Value) or not all(
                isinstance(d, (int, sympy.Expr)) for d in size):
            raise UnsupportedOpError(f"{name} of a size or value that is a tensor")
        value = self.number(value)
        d = kwargs.get("dtype")
        if d is not None:
            dtype = pdtype(d)
        elif src is not None:
            dtype = src.dtype
        elif isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int) and name.endswith("full"):
            dtype = "int64"
        else:
            dtype = pdtype(self.torch.get_default_dtype())
        if any(isinstance(n, int) and n == 0 for n in size) and all(
                isinstance(n, int) for n in size):
            return self.g.constant("c", np.zeros(size, dtype=_np_dtype(dtype)))
        c = self.g.constant("c", np.full((1,) * len(size), value, dtype=_np_dtype(dtype)))
        return self.expand(c, size) if size else self.g.reshape(c, shape=())

    def _h_tensor(self, name, args, kwargs):
        """``torch.tensor(data)`` / ``as_tensor`` / ``scalar_tensor`` of Python numbers or
        nested lists of them (``torch.tensor([])``: GPT-2's empty KV cache, which ``cat``
        then skips): a graph constant built by torch itself (so the dtype is torch's:
        int64 for ints, bool, the default float dtype, or ``dtype=``).  A 0-d tensor of an
        integer size expression is ``0 + s`` (``s`` a kernel parameter); data holding
        tensors or other size expressions runs eagerly."""
        data = _arg(args, kwargs, 0, "data", None)
        d = kwargs.get("dtype")
        if isinstance(data, sympy.Expr) and not data.is_number:
            if not data.is_integer:
                raise UnsupportedOpError(f"{name} of the size expression {data} (not an "
                                         f"integer)")
            zero = self._h_tensor(name, (0,), {"dtype": d if d is not None else
                                               self.torch.int64})
            return self.binary("add", zero, data)  # 0 + s: s is a kernel parameter

        def plain(x) -> bool:
            if isinstance(x, (list, tuple)):
                return all(plain(y) for y in x)
            return isinstance(x, (bool, int, float)) or (
                isinstance(x, sympy.Expr) and x.is_number)
        if not plain(data):
            raise UnsupportedOpError(f"{name} of data that is not Python numbers "
                                     f"(tensors or size expressions)")

        def py(x):
            if isinstance(x, (list, tuple)):
                return [py(y) for y in x]
            if isinstance(x, sympy.Expr):
                return int(x) if x.is_integer else float(x)
            return x
        t = self.torch.tensor(py(data), dtype=d)
        if t.ndim == 0:  # a graph constant has at least one axis: reshaped to 0-d
            return self.g.reshape(self.g.constant("c", _np(t.reshape(1))), shape=())
        return self.g.constant("c", _np(t))

    def _h_addmm(self, name, args, kwargs):
        """``addmm(input, m1, m2, beta=1, alpha=1)`` / ``baddbmm``: ``beta * input +
        alpha * (m1 @ m2)`` (torch needs one dtype for all three)."""
        inp, a, b = args[:3]
        beta, alpha = _arg(args, kwargs, 3, "beta", 1), _arg(args, kwargs, 4, "alpha", 1)
        if not all(isinstance(v, Value) for v in (inp, a, b)) or len(
                {inp.dtype, a.dtype, b.dtype}) != 1:
            raise UnsupportedOpError(f"{name} of mixed dtypes or non-tensors")
        if name == "addmm" and (len(a.shape) != 2 or len(b.shape) != 2):
            raise UnsupportedOpError("addmm of operands that are not matrices")
        if name == "baddbmm" and (len(a.shape) != 3 or len(b.shape) != 3):
            raise UnsupportedOpError("baddbmm of operands that are not 3-d")
        y = self.matmul(a, b)
        if alpha != 1:
            y = self.binary("mul", y, alpha)
        if beta == 0:  # torch: input is ignored (nan and inf in it are not propagated)
            return self.expand(y, y.shape)
        return self.binary("add", y, inp if beta == 1 else self.binary("mul", inp, beta))

    def _h_unsqueeze(self, name, args, kwargs):
        x, d = args[0], _arg(args, kwargs, 1, "dim", None)
        n = len(x.shape)
        a = d + n + 1 if d < 0 else d
        if not 0 <= a <= n:
            raise UnsupportedOpError(f"unsqueeze dim {d} out of range for rank {n}")
        shape = list(x.shape)
        shape.insert(a, 1)
        return self.g.reshape(x, shape=tuple(shape))

    def _h_flatten(self, name, args, kwargs):
        x = args[0]
        n = len(x.shape)
        lo = _arg(args, kwargs, 1, "start_dim", 0)
        hi = _arg(args, kwargs, 2, "end_dim", -1)
        lo, hi = (v + n if v < 0 else v for v in (lo, hi))
        if n == 0:
            return self.g.reshape(x, shape=(1,))
        if not 0 <= lo <= hi < n:
            raise UnsupportedOpError(f"flatten({lo}, {hi}) of rank {n}")
        if lo == hi:
            return x
        shape = (*x.shape[:lo], sympy.Mul(*x.shape[lo:hi + 1]), *x.shape[hi + 1:])
        return self.g.reshape(x, shape=shape)

    def expand(self, x, sizes):
        if not isinstance(x, Value):
            raise UnsupportedOpError(f"expand of a {type(x).__name__}")
        sizes = tuple(sympy.Integer(-1) if isinstance(d, int) and d == -1 else d
                      for d in sizes)
        for d in sizes:
            if not isinstance(d, (int, sympy.Expr)) or (isinstance(d, int) and d < -1):
                raise UnsupportedOpError(f"expand to the size {d!r}")
        return self.g.expand(x, shape=sizes)

    def _h_cat(self, name, args, kwargs):
        xs = list(_arg(args, kwargs, 0, "tensors", ()))
        axis = _arg(args, kwargs, 1, "dim", 0)
        if not xs or not all(isinstance(v, Value) for v in xs):
            raise UnsupportedOpError("cat of non-tensors")
        d = xs[0].dtype
        for v in xs[1:]:
            d = self.result_dtype(self.cast(xs[0], d), v)
        # torch skips 1-d empty operands (an empty KV cache) whatever the other ranks
        kept = [v for v in xs if not (len(v.shape) == 1 and v.shape[0] == 0)]
        xs = kept or xs[:1]
        if len(xs) == 1:
            return self.cast(xs[0], d)
        return self.g.cat(*[self.cast(v, d) for v in xs], axis=axis)

    def _sections(self, x, sizes, axis):
        n = len(x.shape)
        a = axis + n if axis < 0 else axis
        if not 0 <= a < n:
            raise UnsupportedOpError(f"split dim {axis} out of range for rank {n}")
        out, start = [], 0
        for sz in sizes:
            if not isinstance(start, int):
                raise UnsupportedOpError("split with symbolic section starts")
            out.append(self.g.slice(x, axis=a, start=start, end=start + sz))
            start = start + sz
        if sympy.simplify(sympy.sympify(start) - x.shape[a]) != 0:
            raise UnsupportedOpError(f"split sections sum to {start}, not {x.shape[a]}")
        return tuple(out)

    def _h_split(self, name, args, kwargs):
        x = args[0]
        size = _arg(args, kwargs, 1, "split_size_or_sections",
                    kwargs.get("split_size", kwargs.get("split_size_or_sections")))
        axis = _arg(args, kwargs, 2, "dim", 0)
        n = len(x.shape)
        ext = x.shape[axis + n if axis < 0 else axis] if -n <= axis < n else None
        if isinstance(size, (list, tuple)):
            return self._sections(x, list(size), axis)
        if ext is None or not ext.is_Integer or not isinstance(size, int) or size <= 0:
            raise UnsupportedOpError(f"split by {size!r} of the extent {ext} (needs integers)")
        e = int(ext)
        return self._sections(x, [min(size, e - k) for k in range(0, e, size)] or [0], axis)

    def _h_chunk(self, name, args, kwargs):
        x, k = args[0], _arg(args, kwargs, 1, "chunks", None)
        axis = _arg(args, kwargs, 2, "dim", 0)
        n = len(x.shape)
        if not -n <= axis < n:
            raise UnsupportedOpError(f"chunk dim {axis} out of range for rank {n}")
        ext = x.shape[axis + n if axis < 0 else axis]
        if not ext.is_Integer or not isinstance(k, int) or k <= 0:
            raise UnsupportedOpError(f"chunk of the extent {ext} into {k!r} (needs integers)")
        e = int(ext)
        size = -(-e // k) if e else 1
        return self._sections(x, [min(size, e - j) for j in range(0, e, size)] or [0], axis)

    def _h_arange(self, name, args, kwargs):
        """``arange([start,] end[, step])``: integer bounds (``end`` may be a size)."""
        nums = [a for a in args if not isinstance(a, Value)]
        if len(nums) == 1:
            start, end, step = 0, nums[0], 1
        else:
            start, end = nums[0], nums[1]
            step = nums[2] if len(nums) > 2 else 1
        start = kwargs.get("start", start)
        end = kwargs.get("end", end)
        step = kwargs.get("step", step)
        for v in (start, end, step):
            if not (isinstance(v, int) or (isinstance(v, sympy.Expr) and v.is_integer)):
                raise UnsupportedOpError(f"arange with the bound {v!r} (integer bounds only)")
        start, step = _number(sympy.sympify(start)), _number(sympy.sympify(step))
        if not isinstance(start, int) or not isinstance(step, int) or step == 0:
            raise UnsupportedOpError("arange with a symbolic start or step")
        n = sympy.ceiling((sympy.sympify(end) - start) / step)
        if not n.is_number and n.has(sympy.ceiling, sympy.floor):
            raise UnsupportedOpError(f"arange whose length {n} is not a polynomial in the "
                                     f"sizes")
        d = kwargs.get("dtype")
        return self.g.iota(start=start, end=end, step=step,
                           dtype=pdtype(d) if d is not None else "int64")

    def _h_sdpa(self, name, args, kwargs):
        """``scaled_dot_product_attention`` composed from graph ops: ``softmax(q k^T *
        scale + mask) v`` (a bool mask and ``is_causal`` keep the selected scores and set
        the others to -inf, as torch's math reference does)."""
        q, k, v = args[:3]
        mask = _arg(args, kwargs, 3, "attn_mask", None)
        p = _arg(args, kwargs, 4, "dropout_p", 0.0)
        causal = _arg(args, kwargs, 5, "is_causal", False)
        scale = kwargs.get("scale")
        if p:
            raise UnsupportedOpError("scaled_dot_product_attention with dropout_p > 0")
        if kwargs.get("enable_gqa"):
            raise UnsupportedOpError("scaled_dot_product_attention with enable_gqa")
        if not all(isinstance(t, Value) for t in (q, k, v)) or len(
                {q.dtype, k.dtype, v.dtype}) != 1 or q.dtype not in (
                    "float32", "float64", "float16", "bfloat16"):
            raise UnsupportedOpError("scaled_dot_product_attention needs q, k, v of one "
                                     "float dtype")
        low = q.dtype if q.dtype in ("float16", "bfloat16") else None
        if low is not None:  # computed in float32, rounded once (torch's CPU kernels
            if isinstance(mask, Value) and mask.dtype not in ("bool", low):  # accumulate
                raise UnsupportedOpError(f"attention mask of {mask.dtype} for {low}")
            q, k, v = (self.cast(t, "float32") for t in (q, k, v))  # in float too)
            if isinstance(mask, Value) and mask.dtype == low:
                mask = self.cast(mask, "float32")
        if not len(q.shape) == len(k.shape) == len(v.shape) >= 2:
            raise UnsupportedOpError("scaled_dot_product_attention of unequal ranks")
        if causal and mask is not None:
            raise UnsupportedOpError("scaled_dot_product_attention with both a mask and "
                                     "is_causal")
        if scale is None:
            scale = 1.0 / sympy.sqrt(q.shape[-1])
        scale = self.number(sympy.sympify(scale))
        if isinstance(mask, Value) and mask.dtype not in ("bool", q.dtype):
            raise UnsupportedOpError(f"attention mask of {mask.dtype} for {q.dtype}")
        if low is not None:
            return self.cast(self._sdpa(q, k, v, mask, bool(causal), scale), low)
        return self._sdpa(q, k, v, mask, bool(causal), scale)

    def _sdpa(self, q: Value, k: Value, v: Value, mask, causal: bool, scale) -> Value:
        """``_h_sdpa`` for q, k, v of one float32/float64 dtype."""
        g = self.g
        if _same_batch(q, k, v):
            return self._sdpa_chain(q, k, v, mask, causal, float(scale))
        n = len(k.shape)
        s = self.matmul(q, g.transpose(k, dim0=n - 2, dim1=n - 1))
        s = g.op("mul", s, scalar=float(scale))
        ninf = g.constant("ninf", np.full((1,), -np.inf, dtype=s.dtype))
        if causal:
            rows = g.reshape(g.iota(start=0, end=q.shape[-2], step=1, dtype="int64"),
                             shape=(q.shape[-2], 1))
            cols = g.reshape(g.iota(start=0, end=k.shape[-2], step=1, dtype="int64"),
                             shape=(1, k.shape[-2]))
            s = g.where(g.le(cols, rows), s, ninf)
        elif mask is not None:
            if not isinstance(mask, Value):
                raise UnsupportedOpError("scaled_dot_product_attention with a non-tensor mask")
            if mask.dtype == "bool":
                s = g.where(mask, s, ninf)
            elif mask.dtype == s.dtype:
                s = g.add(s, mask)
            else:
                raise UnsupportedOpError(f"attention mask of {mask.dtype} for {s.dtype}")
        p = g.softmax(s, axis=-1)
        if mask is not None:  # torch's CPU kernel: a row with every score -inf gives 0
            m = g.amax(s, axis=-1, keepdim=True)
            zero = g.constant("zero", np.zeros((1,), dtype=s.dtype))
            p = g.where(g.ne(m, ninf), p, zero)
        return self.matmul(p, v)

    def _sdpa_chain(self, q: Value, k: Value, v: Value, mask, causal: bool,
                    scale: float) -> Value:
        """``scaled_dot_product_attention`` as one ``attention`` node: the chain the CPU
        and CUDA chain fusion (``scheduler/chain``) turn into one kernel with an online
        softmax.  A bool mask becomes the additive ``where(mask, 0, -inf)``; the mask is
        reshaped (zero-copy) so that the chain reads it by its iterators alone: no leading
        axes of extent 1 (``(1, 1, L, S)`` -> ``(L, S)``, a row mask ``(.., 1, S)`` ->
        ``(.., S)`` read for every row), batch axes of extent 1 where q has more expanded
        to q's (``(B, 1, L, S)`` -> ``(B, H, L, S)``, an extra pass over the mask).  With a
        mask, a row whose every score is -inf gives 0 as torch's CPU kernel does, not the
        softmax's NaN: ``where(amax(mask) != -inf, attention, 0)`` (from the mask alone:
        finite scores cannot make a row -inf)."""
        g = self.g
        if mask is None:
            return g.op("attention", q, k, v, scale=scale, causal=causal)
        if not isinstance(mask, Value):
            raise UnsupportedOpError("scaled_dot_product_attention with a non-tensor mask")
        d = q.dtype
        ninf = g.constant("ninf", np.full((1,), -np.inf, dtype=_np_dtype(d)))
        zero = g.constant("zero", np.zeros((1,), dtype=_np_dtype(d)))
        mf = g.where(mask, zero, ninf) if mask.dtype == "bool" else mask
        n, ms = len(q.shape), tuple(mask.shape)
        if len(ms) > n:
            raise UnsupportedOpError("scaled_dot_product_attention with a mask of higher "
                                     "rank than q")
        ms = (sympy.Integer(1),) * (n - len(ms)) + ms
        rowless = ms[-2] == 1 and q.shape[-2] != 1
        keep = ms[-1:] if rowless else ms[-2:]

        def reshape(x: Value, shape: tuple) -> Value:
            same = len(x.shape) == len(shape) and all(
                sympy.simplify(a - b) == 0 for a, b in zip(x.shape, shape))
            return x if same else g.reshape(x, shape=shape)
        if all(e == 1 for e in ms[:-2]):
            mc = reshape(mf, keep)
        else:
            full = tuple(q.shape[:-2]) + (ms[-2], ms[-1])
            mc = reshape(g.expand(reshape(mf, ms), shape=full), tuple(q.shape[:-2]) + keep)
        att = g.op("attention", q, k, v, mc, scale=scale, causal=causal, rowless=rowless)
        rowok = g.ne(g.amax(mf, axis=-1, keepdim=True), ninf)
        return g.where(rowok, att, zero)

    def where(self, cond, a, b, keep: bool = False):
        """``torch.where(cond, a, b)`` (promoted as torch does); ``keep``: masked_fill,
        the result has ``b``'s dtype."""
        if not isinstance(cond, Value) or cond.dtype != "bool":
            raise UnsupportedOpError("where / masked_fill with a condition that is not a "
                                     "bool tensor")
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise UnsupportedOpError("where of two numbers")
        a, b = self.number(a), self.number(b)
        d = b.dtype if keep and isinstance(b, Value) else self.result_dtype(a, b)
        vals = []
        for x in (a, b):
            if isinstance(x, Value):
                vals.append(self.cast(x, d))
            else:
                vals.append(self.g.constant("c", np.full((1,), x, dtype=_np_dtype(d))))
        return self.g.where(cond, *vals)

    def _h_where(self, name, args, kwargs):
        if len(args) + len(kwargs) < 3:
            raise UnsupportedOpError("where(cond) with one argument (data-dependent shape)")
        return self.where(args[0], _arg(args, kwargs, 1, "input", None),
                          _arg(args, kwargs, 2, "other", None))

    def _h_compare(self, name, args, kwargs):
        a, b = args[0], _arg(args, kwargs, 1, "other", None)
        if isinstance(a, _SCALAR) and isinstance(b, _SCALAR):
            f = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
                 "eq": operator.eq, "ne": operator.ne}[name]
            return f(a, b)
        a, b = self.number(a), self.number(b)
        d = self.result_dtype(a, b)
        if isinstance(b, _SCALAR):
            return self.g.op(name, self.cast(a, d), scalar=_number(b))
        if isinstance(a, _SCALAR):
            flip = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
            return self.g.op(flip[name], self.cast(b, d), scalar=_number(a))
        return self.g.op(name, self.cast(a, d), self.cast(b, d))

    def _h_arith(self, name, args, kwargs):
        if name == "div" and kwargs.get("rounding_mode") is not None:
            raise UnsupportedOpError(f"div with rounding_mode={kwargs['rounding_mode']!r}")
        return self.binary(name, args[0], _arg(args, kwargs, 1, "other", None),
                           kwargs.get("alpha", 1))

    def _h_reduce(self, name, args, kwargs):
        return self.reduce(name, args[0], _arg(args, kwargs, 1, "dim", None),
                           _arg(args, kwargs, 2, "keepdim", False), kwargs.get("dtype"))

    def _h_layer_norm(self, name, args, kwargs):
        return self.layer_norm(args[0], _arg(args, kwargs, 1, "normalized_shape", None),
                               _arg(args, kwargs, 2, "weight", None),
                               _arg(args, kwargs, 3, "bias", None),
                               _arg(args, kwargs, 4, "eps", 1e-5))

    def _h_dropout(self, name, args, kwargs):
        training = kwargs.get("train", True)  # torch.dropout(x, p, train)
        return self.dropout(args[0], _arg(args, kwargs, 1, "p", 0.5),
                            _arg(args, kwargs, 2, "training", training))

    def _h_reshape(self, name, args, kwargs):
        if len(args) == 2 and not isinstance(args[1], (tuple, list, int, sympy.Expr)):
            raise UnsupportedOpError(f"{name} to a {type(args[1]).__name__}")
        return self.g.reshape(args[0], shape=_varargs(args))

    def _h_msqrt(self, name, args, kwargs):
        x = args[0]
        return sympy.sqrt(x) if isinstance(x, sympy.Expr) else math.sqrt(x)

    def _h_pow(self, name, args, kwargs):
        """``a ** b`` of numbers (sizes stay sympy), or of a tensor by 1, 2, 3, 4 (products),
        0.5, -0.5 (``sqrt``, ``rsqrt``)."""
        x, e = args[0], args[1] if len(args) > 1 else kwargs["exponent"]
        if isinstance(x, _SCALAR) and isinstance(e, _SCALAR):
            return x ** e
        if not isinstance(x, Value) or isinstance(e, Value):
            raise UnsupportedOpError("pow of a number by a tensor, or of two tensors")
        e = self.number(e)
        if e == 1:
            return self.cast(x, self.result_dtype(x, e))
        if e in (2, 3, 4):
            y = self.cast(x, self.result_dtype(x, e))
            acc = y
            for _ in range(int(e) - 1):
                acc = self.binary("mul", acc, y)
            return acc
        if e in (0.5, -0.5):
            y = self.cast(x, self.result_dtype(x, e))
            return self.g.op("sqrt" if e > 0 else "rsqrt", y)
        raise UnsupportedOpError(f"pow by {e}")

    def _h_floordiv(self, name, args, kwargs):
        if isinstance(args[0], Value) or isinstance(args[1], Value):
            raise UnsupportedOpError("floor division of tensors")
        return args[0] // args[1]

    def binary_values(self, op: str, a, b):
        if not (isinstance(a, Value) and isinstance(b, Value)):
            raise UnsupportedOpError(f"{op} with a non-tensor operand")
        d = self.result_dtype(a, b)
        return self.g.op(op, self.cast(a, d), self.cast(b, d))


# handlers that are functions only (``x.linear()`` is no method)
# (``x.pow(2)`` is a method too; ``x.where(cond, y)`` is ``torch.where(cond, x, y)``)
_NOT_METHODS = ("linear", "layer_norm", "dropout", "narrow", "getitem", "floordiv", "msqrt",
                "identity", "maximum", "matmul", "cat", "arange", "sdpa", "where", "embedding",
                "conv2d", "batch_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                "hardtanh", "relu6")


def _np_dtype(d: str):
    from polycomp.dtypes import to_numpy
    return to_numpy(d)


def batch_norm_constant(g: GraphBuilder, x: Value, mean, var, w, b, eps: float) -> Value:
    """Eval-mode batch norm with constant statistics (numpy arrays; ``w`` / ``b`` may be
    None): ``x * scale + shift`` per channel (axis 1), ``scale = w / sqrt(var + eps)``,
    ``shift = b - mean * scale`` computed in float64.  When ``x`` is a convolution with
    constant weights (and bias) the result is a new convolution with weights ``w[f] *
    scale[f]`` and bias ``b[f] * scale[f] + shift[f]`` (the old one is dropped when
    nothing else uses it); shared by the torch.fx and ONNX importers."""
    c = int(x.shape[1])
    scale = 1.0 / np.sqrt(np.asarray(var, np.float64).reshape(-1) + eps)
    if w is not None:
        scale = scale * np.asarray(w, np.float64).reshape(-1)
    shift = -np.asarray(mean, np.float64).reshape(-1) * scale
    if b is not None:
        shift = shift + np.asarray(b, np.float64).reshape(-1)
    if scale.shape != (c,) or shift.shape != (c,):
        raise UnsupportedOpError(f"batch_norm statistics of shape {scale.shape} for {c} "
                                 f"channels")
    p = x.producer
    if p is not None and p.op == "conv2d" and all(v.const is not None for v in p.inputs[1:]):
        wc = p.inputs[1].const
        nd = wc.dtype  # type: ignore[union-attr]
        w2 = (wc.astype(np.float64) * scale[:, None, None, None]).astype(nd)  # type: ignore
        b0 = p.inputs[2].const.astype(np.float64) if len(p.inputs) > 2 else 0.0  # type: ignore
        return g.conv2d(p.inputs[0], g.constant("w_bn", w2),
                        g.constant("b_bn", (b0 * scale + shift).astype(nd)), **p.attrs)
    bshape = (c,) + (1,) * (len(x.shape) - 2)
    nd = _np_dtype(x.dtype)
    y = g.mul(x, g.constant("bn_scale", scale.reshape(bshape).astype(nd)))
    return g.add(y, g.constant("bn_shift", shift.reshape(bshape).astype(nd)))


def _pair(v) -> tuple[int, int]:
    """An int or a pair (torch's ``_pair``) as a pair of ints."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = (v[0], v[0])
        if len(v) != 2 or not all(isinstance(e, int) for e in v):
            raise UnsupportedOpError(f"a window parameter {v!r} (two integers)")
        return int(v[0]), int(v[1])
    if not isinstance(v, int):
        raise UnsupportedOpError(f"a window parameter {v!r} (an integer)")
    return int(v), int(v)


def _ceil_extent(size, k: int, s: int, p: int, d: int):
    """torch's ``ceil_mode=True`` output extent (the last window must start inside the
    input or its left padding)."""
    size = sympy.sympify(size)
    e = sympy.ceiling((size + 2 * p - d * (k - 1) - 1) / s) + 1
    if e.is_number and (int(e) - 1) * s >= size + p:
        e = e - 1
    return e


def _same_batch(q: Value, k: Value, v: Value) -> bool:
    """q, k, v of one float32/float64 dtype and rank with the same batch extents (no
    broadcasting between them): what the ``attention`` node takes."""
    if not len(q.shape) == len(k.shape) == len(v.shape) >= 2:
        return False
    return q.dtype in ("float32", "float64") and all(
        sympy.simplify(a - b) == 0 and sympy.simplify(a - c) == 0
        for a, b, c in zip(q.shape[:-2], k.shape[:-2], v.shape[:-2]))


def _arg(args, kwargs, k: int, name: str, default):
    """Argument ``k`` (or keyword ``name``) of a call."""
    return args[k] if len(args) > k else kwargs.get(name, default)


def _varargs(args) -> tuple:
    """``x.view(2, 3)`` or ``x.view((2, 3))`` -> ``(2, 3)``."""
    if len(args) == 2 and isinstance(args[1], (tuple, list)):
        return tuple(args[1])
    return tuple(args[1:])


def _is_fake(t) -> bool:
    return type(t).__name__ in ("FakeTensor", "FunctionalTensor") or t.device.type == "meta"


def _number(s):
    """A number (sympy numbers as Python ones); an integer size expression stays."""
    if isinstance(s, sympy.Expr) and s.is_number:
        return int(s) if s.is_integer else float(s)
    return s


def _symdim(d) -> Any:
    """A Dynamo extent (int or SymInt such as ``s0`` or ``2*s0``) as a dim."""
    s = str(d)
    if s.lstrip("-").isdigit():
        return int(s)
    if s.isidentifier():
        return dim(s)
    expr = sympy.sympify(s)
    return expr.xreplace({x: dim(str(x)) for x in expr.free_symbols})


def _check_against_example(n, value) -> None:
    """The imported value must have the dtype and rank torch recorded for the node."""
    import torch
    if "example_value" not in n.meta:  # a node the functionalisation added
        return
    ex = n.meta["example_value"]
    if not isinstance(ex, torch.Tensor):
        if isinstance(value, Value):
            raise UnsupportedOpError(f"{n.name}: polycomp made a tensor of what torch "
                                     f"records as {type(ex).__name__} (import disagrees)")
        return
    if not isinstance(value, Value):
        raise UnsupportedOpError(f"{n.name}: a {type(value).__name__} where torch has a "
                                 f"tensor (import disagrees)")
    want = TORCH_DTYPES.get(str(ex.dtype))
    if want != value.dtype or ex.ndim != len(value.shape or ()):
        raise UnsupportedOpError(f"{n.name}: import disagrees with torch: {value.dtype} rank "
                                 f"{len(value.shape or ())} vs {ex.dtype} rank {ex.ndim}")


def import_fx(gm, input_shapes: Sequence[Sequence] | None = None,
              example_inputs: Sequence | None = None, name: str = "fx") -> Graph:
    """Import ``gm``.  Input shapes come from ``input_shapes`` (dims may be names such as
    ``"B"``) or from ``example_inputs`` (a SymInt extent, as Dynamo's ``dynamic=True``
    gives, becomes the symbol of the same name; an ``nn.Parameter`` becomes a constant).
    In-place ops are made functional (:func:`.functionalize.functionalize`); updated
    inputs are written back by the runtime (``Graph.mutations``)."""
    from .functionalize import functionalize
    fn = functionalize(gm, example_inputs)
    gm = fn.gm
    imp = _Importer(gm, name)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, n in enumerate(placeholders):
        ex = example_inputs[k] if example_inputs is not None else n.meta.get("example_value")
        try:
            imp.env[n] = _placeholder(imp, k, n, ex, None if input_shapes is None
                                      else input_shapes[k])
        except UnsupportedOpError as e:
            imp.unsupported.append(f"input {n.name}: {e.message}")
            imp.env[n] = None
    outputs: list = []
    live = _live_nodes(gm)
    for n in gm.graph.nodes:
        if n.op == "output":
            outs = n.args[0]
            outputs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        elif n.op != "placeholder" and n in live:  # dead code is not imported
            _import_node(imp, gm, n)
    if imp.unsupported:
        reasons = list(dict.fromkeys(imp.unsupported))
        err = UnsupportedOpError("unsupported ops: " + ", ".join(reasons))
        err.nodes = list(imp.unsupported_nodes)  # type: ignore[attr-defined]
        err.reasons = reasons  # type: ignore[attr-defined]
        raise err
    outs = [imp.val(o) for o in outputs]
    scalars = []
    for k, o in enumerate(outs[:fn.n_outputs]):
        if _is_size(o) or _is_read_number(o):  # a size: evaluated per call; a number
            scalars.append((k, sympy.sympify(o)))  # read at compile time (guarded)
        elif isinstance(o, tuple) and all(_is_size(d) for d in o):
            scalars.append((k, tuple(sympy.sympify(d) for d in o)))  # a shape
        elif not isinstance(o, Value):
            raise UnsupportedOpError(f"the graph returns a {type(o).__name__}, not a tensor")
    for o in outs[fn.n_outputs:]:
        if not isinstance(o, Value):
            raise UnsupportedOpError("an in-place update of a non-tensor")
    phs = [imp.env[p] for p in placeholders]
    mutations = [(phs[k], new) for k, new in zip(fn.mutated, outs[fn.n_outputs:])]
    for v, _ in mutations:
        if not isinstance(v, Value) or not v.is_input:
            raise UnsupportedOpError("an in-place update of a parameter (captured as a "
                                     "constant)")
    g = imp.g.build(*[o for o in outs[:fn.n_outputs] if isinstance(o, Value)],
                    mutations=[(v, new) for v, new in mutations if new is not v])
    g.scalar_results = scalars
    g.arg_guards = imp.arg_guards
    g.owns_constants = True  # every constant is the importer's copy (``_np``)
    return g


def _is_read_number(o) -> bool:
    """A Python number the graph returns: a value read at compile time (``t.item()`` of
    a 0-d input, guarded by ``value_guards``) or a constant."""
    return isinstance(o, (int, float)) and not isinstance(o, bool)


def _is_size(o) -> bool:
    return isinstance(o, (int, sympy.Expr)) and not isinstance(o, bool) and (
        not isinstance(o, sympy.Expr) or bool(o.is_integer))


def _live_nodes(gm) -> set:
    """The nodes the outputs depend on (the graph is functional: nothing else counts)."""
    import torch.fx as fx
    live: set = set()
    stack = [n for n in gm.graph.nodes if n.op == "output"]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        fx.node.map_arg((n.args, n.kwargs), stack.append)
    return live


def is_module_buffer(n) -> bool:
    """Is placeholder ``n`` a module buffer (Dynamo's source ``..._buffers['name']``)?"""
    ga = n.meta.get("grapharg")
    src = getattr(ga, "source", None)
    while src is not None:
        if getattr(src, "member", None) == "_buffers":
            return True
        src = getattr(src, "base", None)
    return False


def captured_buffer(n, ex) -> bool:
    """A module buffer read only by ``batch_norm`` (its running statistics): captured as
    a constant like a parameter (so eval-mode batch norm folds into the convolution);
    the Dynamo backend watches it for updates as it watches parameters."""
    import torch
    if not isinstance(ex, torch.Tensor) or _is_fake(ex) or not is_module_buffer(n):
        return False
    return bool(n.users) and all(
        u.op == "call_function" and getattr(u.target, "__name__", "") == "batch_norm"
        for u in n.users)


def _placeholder(imp: _Importer, k: int, n, ex, shape):
    """The graph value (or Python number) of placeholder ``n``; ``ex`` is its example."""
    torch = imp.torch
    if isinstance(ex, torch.nn.Parameter) or captured_buffer(n, ex):
        imp.g.graph.captured_args.append(k)
        return imp.const(ex)
    if isinstance(ex, torch.SymInt):
        d = _symdim(ex)
        hint = getattr(ex.node, "hint", None)
        if isinstance(d, sympy.Symbol) and isinstance(hint, int):
            imp.hints[d] = hint
        return d
    if isinstance(ex, (tuple, list)) and all(isinstance(d, (int, torch.SymInt)) for d in ex):
        if all(isinstance(d, int) for d in ex):  # a shape handed in (x.size() of a piece
            imp.arg_guards.append((k, tuple(ex)))  # before): its value, guarded
            return tuple(ex)
        return tuple(_symdim(d) for d in ex)  # sizes of Dynamo's symbols
    if isinstance(ex, (int, float, torch.SymFloat)):  # a number handed in (a piece of a
        v = ex if not isinstance(ex, torch.SymFloat) else ex.node.hint  # split graph):
        if not isinstance(v, (int, float)):                        # its value now, and
            raise UnsupportedOpError("a number without an example value")  # a guard
        imp.arg_guards.append((k, v))
        return v
    fake = n.meta.get("example_value", ex)  # Dynamo: SymInt extents live here
    if shape is None and not hasattr(fake, "shape"):
        raise UnsupportedOpError(f"a {type(fake).__name__}, not a tensor")
    if shape is None:
        shape = [_symdim(d) for d in fake.shape]
    src = fake if fake is not None else ex
    dtype = pdtype(src.dtype) if src is not None and hasattr(src, "dtype") else "float32"
    v = imp.g.input(n.name, shape, dtype)
    if isinstance(ex, torch.Tensor) and not _is_fake(ex):
        if ex.ndim == 0:
            imp.scalars[v] = ex.item()
        for d, size in zip(v.shape, ex.shape):
            if isinstance(d, sympy.Symbol):
                imp.hints.setdefault(d, int(size))
    return v


def _import_node(imp: _Importer, gm, n) -> None:
    """Import one node into ``imp.env`` (None: it runs eagerly; its reason and name are
    recorded in ``imp.unsupported`` / ``imp.unsupported_nodes``)."""
    imp.env[n] = None
    if n.op == "get_attr":
        try:
            imp.env[n] = imp.const(_fetch_attr(gm, n.target))
        except UnsupportedOpError as e:
            imp.unsupported.append(f"attribute {n.target}: {e.message}")
            imp.unsupported_nodes.append(n.name)
        return
    deps: list = []
    imp.torch.fx.node.map_arg((n.args, n.kwargs), deps.append)
    if any(imp.env.get(d) is None for d in deps):  # fed by an op that runs eagerly: a
        # piece of its own after a split; the unpacking of an eager op's tuple stays with
        # that op, the unpacking of an op only downstream of one stays with its own op
        src = getattr(n.args[0], "name", None) if n.args else None
        if n.target is operator.getitem and src in imp.unsupported_nodes:
            imp.unsupported_nodes.append(n.name)
        return
    try:
        v = imp.call(n.op, n.target, imp.val(n.args), imp.val(n.kwargs))
        _check_against_example(n, v)
        imp.env[n] = v
    except PolycompError as e:
        imp.unsupported.append(e.message.splitlines()[0])
        imp.unsupported_nodes.append(n.name)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as e:
        imp.unsupported.append(f"{n.op} {getattr(n.target, '__name__', n.target)} "
                               f"({type(e).__name__}: {e})")
        imp.unsupported_nodes.append(n.name)


def import_module(module, input_shapes: Sequence[Sequence], name: str | None = None) -> Graph:
    """``torch.fx.symbolic_trace`` ``module`` (in eval mode) and import it."""
    import torch.fx
    gm = torch.fx.symbolic_trace(module.eval())
    return import_fx(gm, input_shapes=input_shapes, name=name or type(module).__name__)
