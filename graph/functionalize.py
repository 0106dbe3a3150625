"""Functionalisation of a ``torch.fx`` graph: every in-place op becomes its out-of-place
form, so that the graph polycomp compiles (and the eager pieces of a split graph) are
pure functions of their inputs -- what AOTAutograd's functionalisation does, on the
torch-level ops the importer reads.

* ``y.add_(1)``, ``y += 1`` (``operator.iadd``), ``torch.relu_(y)``,
  ``F.relu(y, inplace=True)``, an ``nn.ReLU(inplace=True)`` module: the op is replaced by
  ``y.add(1)`` (``operator.add``, ``torch.relu``, ``inplace=False``, a copy of the module
  with ``inplace=False``); every later use of ``y`` (and of the op's own result) reads
  the new value.  The new value is cast back to ``y``'s dtype (``type_as``) when the
  out-of-place op may promote (``int_tensor.add_(0.5)`` keeps int).
  ``y.copy_(s)``, ``y.fill_(v)``, ``y.zero_()`` become :func:`copy`, :func:`fill`,
  :func:`zero` below.
  Whether a value is a view comes from Dynamo's example values (its ``_base`` is an
  argument or the argument's base, or it is the very tensor of an argument:
  ``x.float()`` of a float32 ``x``); a graph without them
  (``symbolic_trace``) is judged conservatively (:data:`FRESH`).
* A mutated graph *input* gets its final value as an extra graph output; the caller
  (the Dynamo backend, or the graph runtime through ``Graph.mutations``) writes it back
  into the caller's tensor after the call, so the caller sees eager's mutation.

What cannot be made functional raises :class:`UnsupportedOpError` (the whole graph then
runs eagerly, with the message as its reason), never a silently different result:

* an in-place op on a *view* (``x[0].add_(1)``, ``x.view(-1).mul_(2)``, item assignment
  ``x[0] = v``), or on a tensor whose views are used after the mutation -- the update
  would have to reach every alias;
* an in-place op that changes metadata (``unsqueeze_``, ``resize_``, ``set_``) on an
  input, an op without an out-of-place form (``uniform_``), an ``out=`` argument;
* an update of a parameter (captured as a constant) or a module attribute (``get_attr``);
* ``batch_norm`` / ``instance_norm`` in training mode (they update the running
  statistics in place).
"""
from __future__ import annotations

import copy as _copy
import inspect
import operator
from dataclasses import dataclass, field
from typing import Any

from polycomp.errors import UnsupportedOpError

INPLACE_OPERATORS = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.iand: operator.and_,
    operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
    operator.imatmul: operator.matmul,
}

# Methods/functions whose result never shares storage with an argument.  Anything else is
# taken to possibly alias its tensor arguments (a view), which only costs an eager
# fallback when such a value is mutated.
FRESH = frozenset({
    "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
    "matmul", "bmm", "mm", "addmm", "baddbmm", "linear", "neg", "negative", "abs", "exp",
    "log", "sigmoid", "tanh", "relu", "gelu", "silu", "sqrt", "rsqrt", "erf", "softmax",
    "log_softmax", "layer_norm", "sum", "mean", "amax", "amin", "maximum", "minimum",
    "clone", "masked_fill", "where", "lt", "le", "gt", "ge", "eq", "ne", "logical_not",
    "logical_and", "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "cumsum",
    "scaled_dot_product_attention", "cat", "stack", "zeros_like", "ones_like",
    "full_like", "empty_like", "rand_like", "randn_like", "arange", "zeros", "ones",
    "full", "clamp", "clip", "hardtanh", "relu6", "leaky_relu", "embedding", "conv2d",
    "batch_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "square",
    "reciprocal", "sin", "cos", "floor", "ceil", "round", "sign", "copy", "fill", "zero",
    "truediv", "floordiv", "mod", "and_", "or_", "xor", "invert", "lshift", "rshift",
})

FRESH_MODULES = frozenset({"Linear", "LayerNorm", "GELU", "ReLU", "Tanh", "Softmax", "Sigmoid",
                           "SiLU", "Conv1d", "Conv2d", "BatchNorm1d", "BatchNorm2d",
                           "Embedding", "ReLU6", "Hardtanh", "LeakyReLU"})

# in-place methods that change a tensor's metadata: fine on an intermediate (functional
# form), impossible to write back into a caller's tensor
METADATA_INPLACE = frozenset({"unsqueeze_", "squeeze_", "transpose_", "t_", "swapdims_",
                              "swapaxes_", "resize_", "resize_as_", "as_strided_", "set_",
                              "detach_"})


def copy(dst, src):
    """``dst.copy_(src)`` out of place: ``src`` broadcast to ``dst``'s shape, ``dst``'s
    dtype."""
    return src.to(dst.dtype).expand_as(dst).clone()


def fill(dst, value):
    """``dst.fill_(value)`` out of place."""
    import torch
    if isinstance(value, torch.Tensor):
        return value.to(dst.dtype).expand_as(dst).clone()
    return torch.full_like(dst, value)


def zero(dst):
    """``dst.zero_()`` out of place."""
    import torch
    return torch.zeros_like(dst)


SPECIAL_METHODS = {"copy_": copy, "fill_": fill, "zero_": zero}


@dataclass
class Functional:
    """The functional graph module and what it returns: the original outputs
    (``n_outputs`` of them, a tuple when ``tuple_output``) followed by the final values of
    the placeholders at the positions ``mutated``."""
    gm: Any
    mutated: list[int] = field(default_factory=list)
    n_outputs: int = 1
    tuple_output: bool = True


def _name(target) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def _is_inplace_name(name: str) -> bool:
    return name.endswith("_") and not name.endswith("__") and not name.startswith("_")


def _example(n) -> Any:
    return n.meta.get("example_value", n.meta.get("val"))


class _Pass:
    def __init__(self, gm, example_inputs):
        import torch
        import torch.fx as fx
        self.torch, self.fx, self.gm = torch, fx, gm
        self.graph = fx.Graph()
        self.val: dict[Any, Any] = {}           # original node -> new node
        self.origs: dict[Any, list] = {}        # new node -> original nodes it stands for
        self.bases: dict[Any, frozenset] = {}   # new node -> roots it may alias
        self.ident: dict[Any, Any] = {}         # new node -> the storage it is a value of
        self.pos = {n: k for k, n in enumerate(gm.graph.nodes)}
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.examples = list(example_inputs) if example_inputs is not None else \
            [_example(p) for p in self.placeholders]
        self.final: dict[Any, Any] = {}         # new placeholder -> its final value
        self.new_placeholders: list = []
        self.changed = False

    # ------------------------------------------------------------------ analysis
    def tensorish(self, n) -> bool:
        """Is the (new) node a tensor, or a tuple of them (``split``)?  From Dynamo's
        example value where there is one."""
        ex = _example(n)
        if ex is not None:
            return bool(_tensors([ex]))
        if n.op in ("placeholder", "get_attr"):
            return True
        name = _name(n.target)
        if name in ("size", "dim", "numel", "item", "tolist", "getattr", "sym_size",
                    "__len__", "len"):
            return False
        args = _nodes(n.args, n.kwargs)
        return not args or any(self.tensorish(a) for a in args)

    def fresh(self, n) -> bool:
        """Does (new) node ``n`` return new storage?  From Dynamo's example values where
        they exist (a view, or one of the arguments itself, e.g. ``x.float()`` of a
        float32 ``x``), else from the op (:data:`FRESH`)."""
        if n.op in ("placeholder", "get_attr"):
            return True
        ex = _example(n)
        args = [_example(a) for a in _nodes(n.args, n.kwargs)]
        if isinstance(ex, self.torch.Tensor) and all(a is not None for a in args):
            return not any(_aliases(ex, a) for a in _tensors(args))
        if n.op == "call_module":
            return type(self.gm.get_submodule(n.target)).__name__ in FRESH_MODULES
        name = _name(n.target)
        if name in ("dropout", "alpha_dropout", "feature_alpha_dropout"):  # x in eval mode
            return False
        return name in FRESH

    def add_bases(self, n) -> None:
        if not self.tensorish(n):
            self.bases[n] = frozenset()
        elif self.fresh(n):
            self.bases[n] = frozenset({n})
        else:
            acc: frozenset = frozenset()
            for a in _nodes(n.args, n.kwargs):
                acc |= self.bases.get(a, frozenset())
            self.bases[n] = acc or frozenset({n})
        self.ident.setdefault(n, n)

    def is_parameter(self, p) -> bool:
        k = self.placeholders.index(p) if p in self.placeholders else -1
        ex = self.examples[k] if 0 <= k < len(self.examples) else None
        return isinstance(ex, self.torch.nn.Parameter)

    # ------------------------------------------------------------------ mutation
    def check_mutable(self, t, at, what: str, metadata: bool) -> None:
        """``t`` (a new node) is updated in place by the original node ``at``."""
        if self.bases.get(t) != frozenset({t}):
            raise UnsupportedOpError(f"{what}: an in-place update of a view of another "
                                     f"tensor (it would have to reach every alias)")
        root = self.ident[t]
        if root.op == "get_attr" or (root.op == "placeholder" and self.is_parameter(
                self._orig_placeholder(root))):
            raise UnsupportedOpError(f"{what}: an in-place update of a parameter or module "
                                     f"attribute (captured as a constant)")
        if metadata and root.op == "placeholder":
            raise UnsupportedOpError(f"{what}: an in-place change of an input's shape")
        here = self.pos[at]
        for a, roots in self.bases.items():
            if a is t or t not in roots:
                continue
            for o in self.origs.get(a, ()):
                if any(self.pos[u] > here for u in o.users):
                    raise UnsupportedOpError(f"{what}: an in-place update of a tensor whose "
                                             f"view {o.name!r} is used afterwards")

    def _orig_placeholder(self, new_p):
        for o in self.origs.get(new_p, ()):
            return o
        return None

    def replace(self, n, t, op: str, target, args, kwargs, cast_back: bool) -> None:
        """Emit the functional form of the in-place node ``n`` mutating ``t``."""
        g = self.graph
        f = g.create_node(op, target, args, kwargs)
        ex = _example(n)
        if cast_back:  # the out-of-place op may promote; the in-place one keeps t's dtype
            self.bases[f] = frozenset({f})
            self.ident[f] = f
            f = g.create_node("call_method", "type_as", (f, t), {})
        if ex is not None:
            f.meta["example_value"] = ex
        self.bases[f] = frozenset({f})
        self.ident[f] = self.ident[t]
        for o, v in list(self.val.items()):
            if v is t:
                self.val[o] = f
        self.val[n] = f
        self.origs.setdefault(f, []).extend([n, *self.origs.get(t, [])])
        if self.ident[t].op == "placeholder":
            self.final[self.ident[t]] = f
        self.changed = True

    def inplace_of(self, n):
        """(functional op, target, cast_back, metadata) for an in-place node, else None;
        :class:`UnsupportedOpError` for an update that cannot be made functional."""
        if n.op == "call_function" and n.target in INPLACE_OPERATORS:
            if n.args and _is_node(n.args[0]) and self.tensorish(self.val[n.args[0]]):
                return ("call_function", INPLACE_OPERATORS[n.target], True, False)
            return None
        if n.op == "call_function" and n.target is operator.setitem:
            raise UnsupportedOpError(f"{n.name}: item assignment (x[...] = v) updates a view "
                                     f"in place")
        if n.kwargs.get("out") is not None:
            raise UnsupportedOpError(f"{_name(n.target)}(..., out=...) writes its result into "
                                     f"an existing tensor")
        if n.op == "call_method" and _is_inplace_name(n.target):
            return self._inplace_method(n.target)
        if n.op == "call_function":
            return self._inplace_function(n)
        if n.op == "call_module":
            m = self.gm.get_submodule(n.target)
            if getattr(m, "inplace", False) is True:
                return ("call_module", n.target, False, False)
        return None

    def _inplace_method(self, name: str):
        if name in SPECIAL_METHODS:
            return ("call_function", SPECIAL_METHODS[name], False, False)
        base = getattr(self.torch.Tensor, name[:-1], None)
        if name == "requires_grad_" or not callable(base):
            raise UnsupportedOpError(f".{name}(): an in-place op without an out-of-place form")
        return ("call_method", name[:-1], True, name in METADATA_INPLACE)

    def _inplace_function(self, n):
        torch = self.torch
        name = _name(n.target)
        if name in ("batch_norm", "instance_norm") and _training_norm(n):
            raise UnsupportedOpError(f"{name} in training mode updates its running "
                                     f"statistics in place")
        if _is_inplace_name(name):
            for ns in (torch, torch.nn.functional, torch.Tensor):
                if getattr(ns, name, None) is n.target:  # torch.relu_, F.relu_, ...
                    fn = getattr(ns, name[:-1], None)
                    if not callable(fn):
                        raise UnsupportedOpError(f"{name}(): an in-place op without an "
                                                 f"out-of-place form")
                    return ("call_function", fn, True, name in METADATA_INPLACE)
        if _inplace_kwarg(n):
            return ("call_function", n.target, False, False)
        return None

    # ------------------------------------------------------------------ the pass
    def run(self) -> Functional:
        fx = self.fx
        g = self.graph
        outputs: Any = None
        for n in self.gm.graph.nodes:
            if n.op == "output":
                outputs = n.args[0]
                continue
            spec = self.inplace_of(n)
            if spec is None:
                new = g.node_copy(n, lambda a: self.val[a])
                if n.op == "placeholder":
                    self.new_placeholders.append(new)
                self.val[n] = new
                self.origs.setdefault(new, []).append(n)
                self.add_bases(new)
                continue
            op, target, cast_back, metadata = spec
            args = fx.node.map_arg(n.args, lambda a: self.val[a])
            kwargs = dict(fx.node.map_arg(n.kwargs, lambda a: self.val[a]))
            if op == "call_module":
                target = self._module_copy(n.target)
                t = args[0]
            elif op == "call_function" and target is n.target:  # inplace=True keyword
                t, args, kwargs = _drop_inplace(n, args, kwargs)
            else:
                t = args[0]
            self.check_mutable(t, n, f"{n.name} ({_name(n.target)})", metadata)
            self.replace(n, t, op, target, args, kwargs, cast_back)
        if not self.changed:
            return Functional(self.gm, [], *_out_count(outputs))
        mutated = [k for k, p in enumerate(self.new_placeholders) if p in self.final]
        finals = [self.final[self.new_placeholders[k]] for k in mutated]
        n_out, is_tuple = _out_count(outputs)
        outs = fx.node.map_arg(outputs, lambda a: self.val[a])
        flat = list(outs) if is_tuple else [outs]
        g.output(tuple(flat + finals) if (finals or is_tuple) else outs)
        gm = fx.GraphModule(self.gm, g)
        return Functional(gm, mutated, n_out, is_tuple or bool(finals))

    def _module_copy(self, target: str) -> str:
        m = _copy.copy(self.gm.get_submodule(target))
        m.inplace = False
        name = f"{target.replace('.', '_')}_functional"
        self.gm.add_submodule(name, m)
        return name


def _tensors(xs) -> list:
    """The tensors in ``xs`` and in the tuples/lists it holds (``split``'s result)."""
    import torch
    out: list = []
    for x in xs:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (tuple, list)):
            out += _tensors(x)
    return out


def _aliases(ex, a) -> bool:
    """Does example tensor ``ex`` share storage with argument example ``a``?  (A view
    whose base is a temporary inside the op, as ``matmul`` of a 3-d and a 2-d tensor
    returns, is new storage.)"""
    if ex is a:
        return True
    b = ex._base
    return b is not None and (b is a or (a._base is not None and b is a._base))


def _is_node(a) -> bool:
    import torch.fx as fx
    return isinstance(a, fx.Node)


def _nodes(args, kwargs):
    import torch.fx as fx
    out: list = []
    fx.node.map_arg((args, kwargs), lambda a: out.append(a))
    return out


def _signature_bind(n):
    try:
        return inspect.signature(n.target).bind(*n.args, **n.kwargs)
    except (TypeError, ValueError):
        return None


def _inplace_kwarg(n) -> bool:
    if n.kwargs.get("inplace") is True:
        return True
    b = _signature_bind(n)
    return b is not None and b.arguments.get("inplace") is True


def _drop_inplace(n, args, kwargs):
    """``f(x, ..., inplace=True)`` -> (x, args, kwargs with ``inplace=False``)."""
    b = inspect.signature(n.target).bind(*args, **kwargs)
    b.arguments["inplace"] = False
    first = next(iter(b.arguments.values()))
    return first, tuple(b.args), dict(b.kwargs)


def _training_norm(n) -> bool:
    b = _signature_bind(n)
    if b is None:
        return True  # cannot tell: assume the worst
    b.apply_defaults()
    a = b.arguments
    if "training" in a:
        return bool(a["training"])
    return bool(a.get("use_input_stats")) and a.get("running_mean") is not None


def _out_count(outputs) -> tuple[int, bool]:
    if isinstance(outputs, (tuple, list)):
        return len(outputs), True
    return 1, False


def functionalize(gm, example_inputs=None) -> Functional:
    """Rewrite ``gm`` without in-place ops (see the module docstring); ``gm`` itself is
    returned when it has none.  Raises :class:`UnsupportedOpError` when an update cannot
    be made functional."""
    return _Pass(gm, example_inputs).run()
