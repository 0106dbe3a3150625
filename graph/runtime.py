"""The runtime of a compiled graph: a callable over numpy arrays (or any ``__dlpack__``
tensor), with shape guards once per call, buffers planned by liveness and one
compilation for every value of the symbolic dims.

Buffer plan (computed once, at compile time): values that are neither graph inputs,
constants nor graph outputs get a *slot*; a slot is reused by a later value once every
reader of the previous one has run (greedy interval colouring in execution order, one
dtype per slot).  At a call each slot is allocated once with the largest size its values
need for the bound dims; zero-copy ``view`` steps alias their source's slot.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import sympy

from polycomp import dtypes as dt
from polycomp.errors import ArgumentError, PolycompError, ShapeMismatchError, user_location

from .ir import Graph, Value, numel, shape_str
from .partition import Group, Partition


@dataclass
class Step:
    group: Group
    fn: Callable | None           # None: a zero-copy view
    inputs: list[Value]
    outputs: list[Value]
    params: dict[str, sympy.Expr]
    # values the kernel reads or writes under another shape (row-flattened groups,
    # graph/lower.py ``row_flat``): passed as zero-copy reshapes of contiguous arrays
    arg_shapes: dict[Value, tuple] = field(default_factory=dict)
    # constants the kernel reads pre-packed (graph/compile.py): passed packed, once made
    packed: dict[Value, np.ndarray] = field(default_factory=dict)
    # constants the kernel takes laid out otherwise (``graph/lower.py``
    # ``conv_weight_layouts``): the array passed instead of the value's own
    arg_arrays: dict[Value, np.ndarray] = field(default_factory=dict)


@dataclass
class BufferPlan:
    slot_of: dict[Value, int] = field(default_factory=dict)
    alias_of: dict[Value, Value] = field(default_factory=dict)
    dtypes: list[str] = field(default_factory=list)

    @property
    def nslots(self) -> int:
        return len(self.dtypes)


def plan_buffers(graph: Graph, steps: list[Step]) -> BufferPlan:
    plan = BufferPlan()
    keep = set(graph.inputs) | set(graph.constants) | set(graph.outputs)
    for s in steps:  # views alias their source
        if s.fn is None and s.outputs[0] not in keep:
            src = s.inputs[0]
            plan.alias_of[s.outputs[0]] = plan.alias_of.get(src, src)
    last: dict[Value, int] = {}
    for k, s in enumerate(steps):
        for v in s.inputs:
            last[plan.alias_of.get(v, v)] = k
    free: list[int] = []
    for k, s in enumerate(steps):
        if s.fn is not None:
            for v in s.outputs:
                if v in keep:
                    continue
                slot = next((f for f in free if plan.dtypes[f] == v.dtype), None)
                if slot is None:
                    plan.dtypes.append(v.dtype)
                    slot = len(plan.dtypes) - 1
                else:
                    free.remove(slot)
                plan.slot_of[v] = slot
        for v, end in last.items():
            if end == k and v in plan.slot_of:
                free.append(plan.slot_of[v])
    return plan


class CompiledGraph:
    """Call with the graph's inputs (positionally); returns the output(s) as numpy
    arrays, or as the caller's tensor type when the inputs came through DLPack."""

    def __init__(self, part: Partition, steps: list[Step], kernels: int, target: str):
        self.partition = part
        self.graph = part.graph
        self.steps = steps
        self.kernel_count = kernels
        self.target = target
        self.plan = plan_buffers(self.graph, steps)
        check_dims_bound(self.graph)

    def bind(self, arrays: list[np.ndarray]) -> dict[sympy.Symbol, int]:
        """Shape guards: bind every dim symbol from the inputs and check each extent, each
        dtype and each recorded constraint once."""
        g = self.graph
        if len(arrays) != len(g.inputs):
            raise ShapeMismatchError(f"graph {g.name!r} takes {len(g.inputs)} input(s), got "
                                     f"{len(arrays)}", user_location())
        env: dict[sympy.Symbol, int] = {}
        for k, (v, a) in enumerate(zip(g.inputs, arrays)):
            if a.ndim != len(v.shape):
                raise ShapeMismatchError(f"input {v.name!r} (argument {k + 1}) must have "
                                         f"shape {shape_str(v.shape)}, got {a.shape}",
                                         user_location())
            for d, n in zip(v.shape, a.shape):
                if isinstance(d, sympy.Symbol) and d not in env:
                    env[d] = int(n)
        for k, (v, a) in enumerate(zip(g.inputs, arrays)):
            want = tuple(_ev(d, env) for d in v.shape)
            if want != a.shape:
                bound = f" = {want} for {_fmt(env)}" if env else ""
                raise ShapeMismatchError(
                    f"input {v.name!r} (argument {k + 1}) must have shape "
                    f"{shape_str(v.shape)}{bound}, got {a.shape}", user_location())
            if _dtype_name(a) != v.dtype:
                raise ArgumentError(f"input {v.name!r} (argument {k + 1}) must be {v.dtype}, "
                                    f"got {_dtype_name(a)} (the graph was compiled for "
                                    f"{v.dtype}: cast the input or compile again)",
                                    user_location())
        for c in (g.constraints.recorded if g.constraints else ()):
            if _ev(c.lhs, env) != _ev(c.rhs, env):
                raise ShapeMismatchError(f"shape constraint {c} fails for {_fmt(env)}",
                                         user_location())
        for v, want in g.value_guards:
            got = arrays[g.inputs.index(v)].item()
            if not _same_value(got, want):
                raise ArgumentError(f"input {v.name!r} was read as {want!r} when the graph was "
                                    f"compiled (a 0-d tensor used as a number), got {got!r}: "
                                    f"compile again", user_location())
        for e, want in g.expr_guards:
            got = _number(e, env)
            if not _same_value(got, want):
                raise ArgumentError(f"the size expression {e} was {want!r} when the graph was "
                                    f"compiled (used as a number), it is {got!r} for "
                                    f"{_fmt(env)}: compile again", user_location())
        return env

    def values_hold(self, inputs: list[Any]) -> bool:
        """Do the values read at compile time (``graph.value_guards``, ``expr_guards``)
        still hold?  (For the Dynamo backend, before a call: else it runs eagerly.)"""
        g = self.graph
        if not all(_same_value(inputs[g.inputs.index(v)].item(), want)
                   for v, want in g.value_guards):
            return False
        if not g.expr_guards:
            return True
        env: dict = {}
        for v, a in zip(g.inputs, inputs):
            for d, n in zip(v.shape, a.shape):
                if isinstance(d, sympy.Symbol):
                    env.setdefault(d, int(n))
        return all(_same_value(_number(e, env), want) for e, want in g.expr_guards)

    def __call__(self, *inputs: Any, out: Any = None):
        from polycomp.dlpack import from_caller, to_caller
        g = self.graph
        arrays, kind = from_caller(inputs, [v.name for v in g.inputs])
        outs = list(out) if isinstance(out, (list, tuple)) else ([out] if out is not None
                                                                  else None)
        result, env = self._execute(arrays, None if outs is None else from_caller(
            outs, written=True)[0])
        if outs is not None:
            return out
        result = to_caller(result, kind)
        if g.scalar_results:
            result = list(result)
            for k, e in g.scalar_results:
                result.insert(k, tuple(_number(d, env) for d in e) if isinstance(e, tuple)
                              else _number(e, env))
        return tuple(result) if len(result) != 1 else result[0]

    def run(self, arrays: list[np.ndarray], outs: list[np.ndarray] | None = None) -> list:
        """Run the steps on numpy arrays; returns the results (``graph.results``) and
        writes the graph's input mutations back into ``arrays``."""
        return self._execute(arrays, outs)[0]

    def _execute(self, arrays: list[np.ndarray], outs: list[np.ndarray] | None):
        env = self.bind(arrays)
        g = self.graph
        if outs is not None and len(outs) != len(g.results):
            raise ArgumentError(f"graph {g.name!r} returns {len(g.results)} value(s), got "
                                f"{len(outs)} out= array(s)", user_location())
        vals: dict[Value, np.ndarray] = dict(zip(g.inputs, arrays))
        vals.update({c: c.const for c in g.constants})  # type: ignore[misc]
        slots = self._slots(env)
        fresh: set[int] = set()  # outputs that are inputs/constants: returned as copies
        for k, v in enumerate(g.outputs):
            shape = tuple(_ev(d, env) for d in v.shape)
            if outs is not None and k < len(outs):
                o = outs[k]
                if o.shape != shape or str(o.dtype) != v.dtype or not o.flags.c_contiguous:
                    raise ShapeMismatchError(f"out[{k}] must be a C-contiguous {v.dtype} "
                                             f"array of shape {shape}", user_location())
                if v in vals:
                    np.copyto(o, vals[v])
                vals[v] = o
            elif v not in vals:
                vals[v] = np.empty(shape, dt.to_numpy(v.dtype))
            elif v.const is not None or v.is_input:
                fresh.add(k)
        for s in self.steps:
            if s.fn is None:
                src, dst = s.inputs[0], s.outputs[0]
                shape = tuple(_ev(d, env) for d in dst.shape)
                if dst in vals:  # a view that is a graph output: copy
                    np.copyto(vals[dst], vals[src].reshape(shape))
                else:
                    vals[dst] = vals[src].reshape(shape)
                continue
            for v in s.outputs:
                if v not in vals:
                    vals[v] = _view(slots[self.plan.slot_of[v]], v, env)
            params = {name: _ev(e, env) for name, e in s.params.items()}
            _call(s, vals, env, params)
        res = [vals[v].copy() if k in fresh else vals[v] for k, v in enumerate(g.outputs)]
        for v, k in g.mutations:  # in-place updates of inputs, after every read of them
            a = arrays[g.inputs.index(v)]
            if not a.flags.writeable:
                raise ArgumentError(f"input {v.name!r} is updated in place by the graph but "
                                    f"the array passed is read-only", user_location())
            np.copyto(a, res[k])
        return res[:len(g.results)], env

    def _slots(self, env) -> list[np.ndarray]:
        need = [0] * self.plan.nslots
        for v, k in self.plan.slot_of.items():
            need[k] = max(need[k], numel(v.shape, env))
        return [np.empty(n, dtype=dt.to_numpy(d)) for n, d in zip(need, self.plan.dtypes)]

    def explain(self) -> str:
        """The partition, then one line per row-flattened kernel (``graph/lower.py``
        ``row_flat``: its GEMM runs over ``prod(P)`` rows, no batch loop around it)."""
        lines = [self.partition.explain()]
        for s in self.steps:
            if s.arg_shapes:
                vs = ", ".join(f"{v.name}{shape_str(v.shape)} as {shape_str(sh)}"
                               for v, sh in s.arg_shapes.items())
                lines.append(f"  {s.group.name}: over flattened rows: {vs}")
        return "\n".join(lines)


def _call(s: Step, vals: dict, env, params: dict) -> None:
    """Call a step's kernel; the values in ``s.arg_shapes`` (a row-flattened kernel) are
    reshaped to the kernel's shapes (views of contiguous arrays; an output that is not
    contiguous is computed into a temporary and copied back)."""
    def shaped(v: Value) -> np.ndarray:
        if v in s.packed:
            return s.packed[v]
        if v in s.arg_arrays:
            return s.arg_arrays[v]
        a = vals[v]
        if v not in s.arg_shapes:
            return a
        return a.reshape(tuple(_ev(d, env) for d in s.arg_shapes[v]))
    outs = []
    back = []
    for v in s.outputs:
        o = vals[v]
        if v in s.arg_shapes and not o.flags.c_contiguous:
            t = np.empty(o.shape, o.dtype)
            back.append((o, t))
            o = t
        outs.append(o if v not in s.arg_shapes
                    else o.reshape(tuple(_ev(d, env) for d in s.arg_shapes[v])))
    assert s.fn is not None  # view steps are handled by the caller
    s.fn(*[shaped(v) for v in s.inputs], out=outs, **params)
    for o, t in back:
        np.copyto(o, t)


def _view(slot: np.ndarray, v: Value, env) -> np.ndarray:
    shape = tuple(_ev(d, env) for d in v.shape)
    return slot[:numel(shape, {})].reshape(shape)


def _ev(e, env) -> int:
    return int(sympy.sympify(e).xreplace(env)) if not isinstance(e, int) else e


def check_dims_bound(g: Graph) -> None:
    """Every dim symbol the graph uses must be bound by a call: be an input's extent (a
    size handed in as a number from elsewhere could not be read); else a clear error at
    compile time, not a failure at run time."""
    bound = {d for v in g.inputs for d in v.shape if isinstance(d, sympy.Symbol)}
    used: set = set()
    for v in [*g.inputs, *(n.output for n in g.nodes)]:
        for d in v.shape:
            used |= sympy.sympify(d).free_symbols
    for e, _ in g.expr_guards:
        used |= sympy.sympify(e).free_symbols
    for _, e in g.scalar_results:
        for d in (e if isinstance(e, tuple) else (e,)):
            used |= sympy.sympify(d).free_symbols
    for n in g.nodes:
        if isinstance(n.attrs.get("scalar"), sympy.Expr):
            used |= n.attrs["scalar"].free_symbols
    free = sorted(map(str, used - bound))
    if free:
        from polycomp.errors import UnsupportedOpError
        raise UnsupportedOpError(f"graph {g.name!r}: the size(s) {', '.join(free)} are not "
                                 f"the extent of any input, so a call cannot bind them")


def _number(e, env) -> int | float:
    """A size expression (or number) evaluated for the bound dims, as a Python number."""
    v = sympy.sympify(sympy.sympify(e).xreplace(env))
    return int(v) if v.is_integer else float(v)


def _same_value(a, b) -> bool:
    return a == b or (a != a and b != b)  # NaN equals NaN here


def _dtype_name(a: np.ndarray) -> str:
    try:
        return dt.canonical(a.dtype)
    except PolycompError:
        return str(a.dtype)


def _fmt(env) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())
