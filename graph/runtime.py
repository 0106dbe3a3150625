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

from polycomp.errors import ShapeMismatchError, user_location

from .ir import Graph, Value, numel, shape_str
from .partition import Group, Partition


@dataclass
class Step:
    group: Group
    fn: Callable | None           # None: a zero-copy view
    inputs: list[Value]
    outputs: list[Value]
    params: dict[str, sympy.Expr]


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

    def bind(self, arrays: list[np.ndarray]) -> dict[sympy.Symbol, int]:
        """Shape guards: bind every dim symbol from the inputs and check each extent and
        each recorded constraint once."""
        g = self.graph
        if len(arrays) != len(g.inputs):
            raise ShapeMismatchError(f"graph {g.name!r} takes {len(g.inputs)} input(s), got "
                                     f"{len(arrays)}", user_location())
        env: dict[sympy.Symbol, int] = {}
        for v, a in zip(g.inputs, arrays):
            if a.ndim != len(v.shape):
                raise ShapeMismatchError(f"input {v.name!r} must have shape "
                                         f"{shape_str(v.shape)}, got {a.shape}", user_location())
            for d, n in zip(v.shape, a.shape):
                if isinstance(d, sympy.Symbol) and d not in env:
                    env[d] = int(n)
        for v, a in zip(g.inputs, arrays):
            want = tuple(_ev(d, env) for d in v.shape)
            if want != a.shape or str(a.dtype) != v.dtype:
                raise ShapeMismatchError(
                    f"input {v.name!r} must be {v.dtype} {shape_str(v.shape)} = {want} with "
                    f"{_fmt(env)}, got {a.dtype} {a.shape}", user_location())
        for c in (g.constraints.recorded if g.constraints else ()):
            if _ev(c.lhs, env) != _ev(c.rhs, env):
                raise ShapeMismatchError(f"shape constraint {c} fails for {_fmt(env)}",
                                         user_location())
        return env

    def __call__(self, *inputs: Any, out: Any = None):
        from .dlpack import from_caller, to_caller
        arrays, kind = from_caller(inputs)
        outs = list(out) if isinstance(out, (list, tuple)) else ([out] if out is not None
                                                                  else None)
        result = self.run(arrays, None if outs is None else from_caller(outs)[0])
        if outs is not None:
            return out
        return to_caller(result if len(result) > 1 else result[0], kind)

    def run(self, arrays: list[np.ndarray], outs: list[np.ndarray] | None = None) -> list:
        env = self.bind(arrays)
        g = self.graph
        vals: dict[Value, np.ndarray] = dict(zip(g.inputs, arrays))
        vals.update({c: c.const for c in g.constants})  # type: ignore[misc]
        slots = self._slots(env)
        for k, v in enumerate(g.outputs):
            shape = tuple(_ev(d, env) for d in v.shape)
            if outs is not None:
                o = outs[k]
                if o.shape != shape or str(o.dtype) != v.dtype or not o.flags.c_contiguous:
                    raise ShapeMismatchError(f"out[{k}] must be a C-contiguous {v.dtype} "
                                             f"array of shape {shape}", user_location())
                vals[v] = o
            elif v not in vals:
                vals[v] = np.empty(shape, v.dtype)
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
            s.fn(*[vals[v] for v in s.inputs], out=[vals[v] for v in s.outputs], **params)
        return [vals[v] for v in g.outputs]

    def _slots(self, env) -> list[np.ndarray]:
        need = [0] * self.plan.nslots
        for v, k in self.plan.slot_of.items():
            need[k] = max(need[k], numel(v.shape, env))
        return [np.empty(n, dtype=d) for n, d in zip(need, self.plan.dtypes)]

    def explain(self) -> str:
        return self.partition.explain()


def _view(slot: np.ndarray, v: Value, env) -> np.ndarray:
    shape = tuple(_ev(d, env) for d in v.shape)
    return slot[:numel(shape, {})].reshape(shape)


def _ev(e, env) -> int:
    return int(sympy.sympify(e).xreplace(env)) if not isinstance(e, int) else e


def _fmt(env) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())
