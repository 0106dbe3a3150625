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
from polycomp.hw.cpu.build import array_address

from .ir import Graph, Value, numel, shape_str
from .opdefs import flops
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
    # what of its layout the step's GEMM took over (graph/lower.py): "split" (the head
    # split, ``head_split``), else the names of the layout operators its left operand
    # reads in place (``folded_layout``, the head merge), "" for none
    folded: str = ""


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
        g = self.graph
        # the constants a call passes as their own arrays (read by a step that has no
        # packed / laid-out copy of them, or graph outputs); the others only through
        # those copies (``Step.packed``, ``Step.arg_arrays``)
        read = self.constants_read()
        self._constants: dict[Value, np.ndarray] = {
            c: c.const for c in g.constants if c in read}  # type: ignore[misc]
        # the addresses of the C-contiguous constants (the same arrays at every call, also
        # when updated in place); the others are copied at each call, as a kernel call was
        self._const_addr = {c: a.ctypes.data for c, a in self._constants.items()
                            if a.flags.c_contiguous}
        # outputs that are inputs or constants: returned as copies
        self._fresh = {k for k, v in enumerate(g.outputs) if v.is_const or v.is_input}
        self._slot_dtypes = [dt.to_numpy(d) for d in self.plan.dtypes]
        self._out_dtypes = [dt.to_numpy(v.dtype) for v in g.outputs]
        # one ShapePlan per signature of the inputs (shapes, dtypes) called before
        self._plans: dict[tuple, ShapePlan] = {}
        # input shapes for which values_hold found the size-expression guards true, and
        # scalar_results per binding of the dims (both bounded by MAX_SHAPE_PLANS)
        self._exprs_hold: set[tuple] = set()
        self._scalar_memo: dict[tuple, list] = {}

    def constants_read(self) -> set[Value]:
        """The graph's constants some call reads as their own arrays: an input of a
        step that has no packed or laid-out copy of it, or a graph output."""
        out = {v for v in self.graph.outputs if v.is_const}
        for s in self.steps:
            out |= {v for v in s.inputs
                    if v.is_const and v not in s.packed and v not in s.arg_arrays}
        return out

    def held_bytes(self) -> HeldBytes:
        """The bytes of the constant arrays this compiled graph keeps alive (each array
        counted once, however many steps or values share it)."""
        seen: set[tuple[int, int]] = set()

        def size(arrays) -> int:
            n = 0
            for a in arrays:
                key = (a.__array_interface__["data"][0], a.nbytes)
                if a.nbytes and key not in seen:
                    seen.add(key)
                    n += a.nbytes
            return n
        g = self.graph
        return HeldBytes(
            size([*self._constants.values(),
                  *(c.const for c in g.constants if c.const is not None)]),
            size(a for s in self.steps for a in s.packed.values()),
            size(a for s in self.steps for a in s.arg_arrays.values()))

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
        self._check_values(arrays)
        for e, want in g.expr_guards:
            got = _number(e, env)
            if not _same_value(got, want):
                raise ArgumentError(f"the size expression {e} was {want!r} when the graph was "
                                    f"compiled (used as a number), it is {got!r} for "
                                    f"{_fmt(env)}: compile again", user_location())
        return env

    def _scalars(self, env: dict) -> list[tuple[int, Any]]:
        """``graph.scalar_results`` evaluated for ``env`` (once per binding)."""
        key = tuple(env.items())
        got = self._scalar_memo.get(key)
        if got is None:
            got = [(k, tuple(_number(d, env) for d in e) if isinstance(e, tuple)
                    else _number(e, env)) for k, e in self.graph.scalar_results]
            if len(self._scalar_memo) >= MAX_SHAPE_PLANS:
                self._scalar_memo.clear()
            self._scalar_memo[key] = got
        return got

    def _check_values(self, arrays: list[np.ndarray]) -> None:
        """The 0-d inputs read as numbers at compile time still hold those numbers."""
        g = self.graph
        for v, want in g.value_guards:
            got = arrays[g.inputs.index(v)].item()
            if not _same_value(got, want):
                raise ArgumentError(f"input {v.name!r} was read as {want!r} when the graph was "
                                    f"compiled (a 0-d tensor used as a number), got {got!r}: "
                                    f"compile again", user_location())

    def values_hold(self, inputs: list[Any]) -> bool:
        """Do the values read at compile time (``graph.value_guards``, ``expr_guards``)
        still hold?  (For the Dynamo backend, before a call: else it runs eagerly.)"""
        g = self.graph
        if not all(_same_value(inputs[g.inputs.index(v)].item(), want)
                   for v, want in g.value_guards):
            return False
        if not g.expr_guards:
            return True
        shapes = tuple(tuple(a.shape) for a in inputs)
        if shapes in self._exprs_hold:       # they depend on the shapes only
            return True
        env: dict = {}
        for v, a in zip(g.inputs, inputs):
            for d, n in zip(v.shape, a.shape):
                if isinstance(d, sympy.Symbol):
                    env.setdefault(d, int(n))
        ok = all(_same_value(_number(e, env), want) for e, want in g.expr_guards)
        if ok:
            if len(self._exprs_hold) >= MAX_SHAPE_PLANS:
                self._exprs_hold.clear()
            self._exprs_hold.add(shapes)
        return ok

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
            for k, n in self._scalars(env):
                result.insert(k, n)
        return tuple(result) if len(result) != 1 else result[0]

    def run(self, arrays: list[np.ndarray], outs: list[np.ndarray] | None = None) -> list:
        """Run the steps on numpy arrays; returns the results (``graph.results``) and
        writes the graph's input mutations back into ``arrays``."""
        return self._execute(arrays, outs)[0]

    def _execute(self, arrays: list[np.ndarray], outs: list[np.ndarray] | None):
        g = self.graph
        key = _signature(arrays)
        if outs is not None and len(outs) != len(g.results):
            raise ArgumentError(f"graph {g.name!r} returns {len(g.results)} value(s), got "
                                f"{len(outs)} out= array(s)", user_location())
        plan = self._plans.get(key) if key is not None else None
        if plan is not None and outs is not None and _overlap(outs, arrays):
            plan = None          # the checked path: the kernels copy an overlapped input
        if plan is not None:
            self._check_values(arrays)
            if outs is not None:
                self._check_outs(outs, plan.out_shapes)
            return self._run_plan(plan, arrays, outs), plan.env
        env = self.bind(arrays)
        vals: dict[Value, np.ndarray] = dict(zip(g.inputs, arrays))
        vals.update(self._constants)
        slots = self._slots(env)
        record = key is not None
        calls: list[StepCall] = []
        fresh = self._outputs(vals, env, outs)
        for s in self.steps:
            c = _step_call(s, env, self.plan)
            if s.fn is None:
                src, dst = s.inputs[0], s.outputs[0]
                if dst in vals:  # a view that is a graph output: copy
                    np.copyto(vals[dst], c.view(vals[src]))
                else:
                    vals[dst] = c.view(vals[src])
            else:
                for v, o in zip(s.outputs, c.out_views):
                    if v not in vals and o is not None:
                        vals[v] = slots[o[0]][:o[1]].reshape(o[2])
                ins, kouts, back = c.arrays(vals)
                if record:
                    prepare = getattr(s.fn, "prepare", None)
                    if prepare is not None:
                        c.prepare(prepare(ins, c.params, c.work_s))
                s.fn(*ins, out=kouts, **c.params)
                for o, t in back:
                    np.copyto(o, t)
            calls.append(c)
        if record and key is not None:
            if len(self._plans) >= MAX_SHAPE_PLANS:
                self._plans.pop(next(iter(self._plans)))
            self._plans[key] = ShapePlan(env, [len(sl) for sl in slots],
                                         [tuple(vals[v].shape) for v in g.outputs], calls)
        return self._results(vals, arrays, fresh), env

    def _outputs(self, vals: dict, env: dict, outs: list[np.ndarray] | None) -> set[int]:
        """Put the graph's outputs into ``vals``: the caller's ``out=`` arrays (checked)
        or new arrays; returns the indices of outputs that are inputs or constants
        (returned as copies)."""
        fresh: set[int] = set()
        if outs is not None:
            self._check_outs(outs, [tuple(_ev(d, env) for d in v.shape)
                                    for v in self.graph.outputs[:len(outs)]])
        for k, v in enumerate(self.graph.outputs):
            shape = tuple(_ev(d, env) for d in v.shape)
            if outs is not None and k < len(outs):
                o = outs[k]
                if v in vals:
                    np.copyto(o, vals[v])
                vals[v] = o
            elif v not in vals:
                vals[v] = np.empty(shape, dt.to_numpy(v.dtype))
            elif v.is_const or v.is_input:
                fresh.add(k)
        return fresh

    def _check_outs(self, outs: list[np.ndarray], shapes: list[tuple]) -> None:
        """Each ``out=`` array is writable, has its output's shape (``shapes``) and
        dtype and is C-contiguous (the kernels write it in place)."""
        for k, (o, shape) in enumerate(zip(outs, shapes)):
            if not o.flags.writeable:
                raise ArgumentError(f"out[{k}] is read-only: the graph writes its output "
                                    f"{self.graph.outputs[k].name!r} into it", user_location())
            if o.shape != shape or o.dtype != self._out_dtypes[k] or \
                    not o.flags.c_contiguous:
                v = self.graph.outputs[k]
                raise ShapeMismatchError(f"out[{k}] must be a C-contiguous {v.dtype} "
                                         f"array of shape {shape}", user_location())

    def _take_outs(self, vals: dict, outs: list[np.ndarray]) -> set[int]:
        """Put the ``out=`` arrays into ``vals`` as :meth:`_outputs` does (an output
        that is an input or a constant copied into its array); the indices of the
        outputs returned as copies."""
        for v, o in zip(self.graph.outputs, outs):
            if v in vals:
                np.copyto(o, vals[v])
            vals[v] = o
        return {k for k in self._fresh if k >= len(outs)}

    def _run_plan(self, plan: ShapePlan, arrays: list[np.ndarray],
                  outs: list[np.ndarray] | None = None) -> list:
        """A call of a shape seen before (its guards, shapes and every kernel's
        arguments checked then): the steps with their evaluated sizes, arrays made
        C-contiguous once, each kernel through its prepared call.  ``outs``: the
        caller's ``out=`` arrays (checked by :meth:`_check_outs`, none overlapping an
        input or another: :func:`_overlap`), written in place as the checked path
        writes them (an output that is an input or a constant copied
        into its array first)."""
        g = self.graph
        vals: dict[Value, np.ndarray] = {
            v: a if a.flags.c_contiguous else np.ascontiguousarray(a)
            for v, a in zip(g.inputs, arrays)}
        for cv, a in self._constants.items():
            vals[cv] = a if cv in self._const_addr else np.ascontiguousarray(a)
        fresh = self._fresh if outs is None else self._take_outs(vals, outs)
        slots = [np.empty(n, dtype=d) for n, d in zip(plan.slot_sizes, self._slot_dtypes)]
        for v, shape, d in zip(g.outputs, plan.out_shapes, self._out_dtypes):
            if v not in vals:
                vals[v] = np.empty(shape, d)
        # every array here is C-contiguous, its reshapes and slot views too: a value's
        # address is its array's (slot views start at their slot)
        addr = dict(self._const_addr)
        for v, a in vals.items():
            if v not in addr:
                addr[v] = array_address(a)
        slot_addr = [array_address(sl) for sl in slots]
        for c in plan.calls:
            s = c.step
            if s.fn is None:
                src, dst = s.inputs[0], s.outputs[0]
                if dst in vals:
                    np.copyto(vals[dst], c.view(vals[src]))
                else:
                    vals[dst] = c.view(vals[src])
                    addr[dst] = addr[src] + c.view_bytes
                continue
            for v, o in zip(s.outputs, c.out_views):
                if v not in vals and o is not None:
                    vals[v] = slots[o[0]][:o[1]].reshape(o[2])
                    addr[v] = slot_addr[o[0]]
            if c.kernel is not None:
                c.kernel.call(c.kernel.head + [addr[v] if a is None else a
                                               for v, a in c.arg_addr])
                continue
            ins, kouts, back = c.arrays(vals)
            s.fn(*ins, out=kouts, **c.params)
            for o, t in back:
                np.copyto(o, t)
        return self._results(vals, arrays, fresh)

    def _results(self, vals: dict, arrays: list[np.ndarray], fresh: set[int]) -> list:
        """The graph's results (outputs that are inputs or constants as copies), after
        writing its input mutations back into ``arrays``."""
        g = self.graph
        res = [vals[v].copy() if k in fresh else vals[v] for k, v in enumerate(g.outputs)]
        for v, k in g.mutations:  # in-place updates of inputs, after every read of them
            a = arrays[g.inputs.index(v)]
            if not a.flags.writeable:
                raise ArgumentError(f"input {v.name!r} is updated in place by the graph but "
                                    f"the array passed is read-only", user_location())
            np.copyto(a, res[k])
        return res[:len(g.results)]

    def call_plan(self, *inputs: Any) -> str:
        """How a call with these inputs' shapes runs (after such a call: its cached
        :class:`ShapePlan`): per kernel step the evaluated sizes, the estimated
        one-thread time and whether it runs on one thread (``hw/cpu/build.py``
        ``ONE_THREAD_BELOW_S``)."""
        from polycomp.dlpack import from_caller
        arrays, _ = from_caller(inputs, [v.name for v in self.graph.inputs])
        plan = self._plans.get(_signature(arrays))  # type: ignore[arg-type]
        if plan is None:
            self.run(arrays)
            plan = self._plans[_signature(arrays)]  # type: ignore[index]
        lines = [f"graph {self.graph.name!r} for {_fmt(plan.env) or 'its fixed shapes'}:"]
        for c in plan.calls:
            if c.step.fn is None:
                continue
            sizes = ", ".join(f"{k}={v}" for k, v in c.params.items())
            threads = ("1 thread" if c.kernel is not None and c.kernel.one_thread
                       else "all threads" if c.kernel is not None else "its own call")
            lines.append(f"  {c.step.group.name}({sizes}): ~{c.work_s * 1e6:.1f} us of "
                         f"work on one thread -> {threads}")
        return "\n".join(lines)

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
            if s.folded == "split":
                head = shape_str(s.group.nodes[-1].output.shape)
                lines.append(f"  {s.group.name}: head split folded into the GEMM (its tiles "
                             f"written as {head}): " + ", ".join(
                                 f"{v.name}{shape_str(v.shape)} read as {shape_str(sh)}"
                                 for v, sh in s.arg_shapes.items()))
            elif s.folded:
                lines.append(f"  {s.group.name}: read in place by the GEMM's operand (no "
                             f"stage): {s.folded}")
            if s.arg_shapes and s.folded != "split":
                vs = ", ".join(f"{v.name}{shape_str(v.shape)} as {shape_str(sh)}"
                               for v, sh in s.arg_shapes.items())
                lines.append(f"  {s.group.name}: over flattened rows: {vs}")
        return "\n".join(lines)


@dataclass(frozen=True)
class HeldBytes:
    """:meth:`CompiledGraph.held_bytes`: the constants' own arrays (those a call reads,
    and those the graph still holds), the packed GEMM weights (``Step.packed``) and the
    laid-out convolution weights (``Step.arg_arrays``)."""
    constants: int
    packed: int
    laid_out: int

    @property
    def total(self) -> int:
        return self.constants + self.packed + self.laid_out


#: shape signatures a compiled graph keeps a :class:`ShapePlan` for (oldest dropped)
MAX_SHAPE_PLANS = 64

#: one core's rates for the one-thread time estimate ``StepCall.work_s`` (the basis of
#: the one-thread decision, ``hw/cpu/build.py`` ``ONE_THREAD_BELOW_S``): measured on the
#: development host (Zen 4, AVX-512, one thread, a step's operands cache-resident as in
#: a model's repeated calls; ``scripts/one_thread_threshold.py``, docs/cpu_backend.md
#: *Threads*): GEMMs ran at 90-110 GFLOP/s, elementwise and row-reduction steps moved
#: 20-25 GB/s.  (The partition's 2-core cost-model rates, halved -- 25 GFLOP/s, 5 GB/s --
#: overstated the kernels' time 3-10x, so steps of 10-15 us ran on two threads.)
ONE_CORE_FLOPS = 100e9
ONE_CORE_BYTES = 25e9


@dataclass
class StepCall:
    """One step of a :class:`ShapePlan`: what the step's call needs at one binding of the
    dims, evaluated once (no sympy at a call)."""
    step: Step
    params: dict[str, int] = field(default_factory=dict)  # the kernel's size keywords
    in_fixed: list = field(default_factory=list)    # packed / laid-out array, or None
    in_shapes: list = field(default_factory=list)   # the kernel's shape (reshape), or None
    out_views: list = field(default_factory=list)   # (slot, numel, shape) of a slot value
    out_shapes: list = field(default_factory=list)  # the kernel's shape, or None
    view_shape: tuple = ()                          # a view step's shape
    # a ``select`` view step: the block of the leading axis, and its byte offset
    view_index: int | None = None
    view_bytes: int = 0
    work_s: float = 0.0                             # estimated one-thread time (s)
    kernel: Any = None        # the prepared call (``fn.prepare``), or None: ``fn(...)``
    # the prepared call's array arguments: (value, None) for a value's address at the
    # call, (value, address) for a fixed (packed / laid-out) array
    arg_addr: list[tuple[Value, int | None]] = field(default_factory=list)

    def view(self, a: np.ndarray) -> np.ndarray:
        """A view step's result on its operand ``a`` (C-contiguous, and so the result)."""
        return a.reshape(self.view_shape) if self.view_index is None else a[self.view_index]

    def prepare(self, kernel: Any) -> None:
        """Use ``kernel`` (a prepared call, or None) at later calls of this shape.  Its
        arguments are addresses: the fixed arrays' now, the others' at each call (a
        value the kernel sees reshaped has its array's address: the runtime's arrays are
        C-contiguous)."""
        if kernel is None:
            return
        s = self.step
        for k, f in enumerate(self.in_fixed):
            if f is not None and not f.flags.c_contiguous:
                self.in_fixed[k] = np.ascontiguousarray(f)
        self.kernel = kernel
        self.arg_addr = [(v, None if f is None else f.ctypes.data)
                         for v, f in zip(s.inputs, self.in_fixed)]
        self.arg_addr += [(v, None) for v in s.outputs]

    def arrays(self, vals: dict) -> tuple[list, list, list]:
        """The kernel's input and output arrays (values in ``step.arg_shapes`` reshaped
        to the kernel's shapes: views of contiguous arrays; an output that is not
        contiguous is computed into a temporary copied back: ``back``)."""
        s = self.step
        ins = [f if f is not None else (vals[v] if sh is None else vals[v].reshape(sh))
               for v, f, sh in zip(s.inputs, self.in_fixed, self.in_shapes)]
        outs, back = [], []
        for v, sh in zip(s.outputs, self.out_shapes):
            o = vals[v]
            if sh is None:
                outs.append(o)
                continue
            if not o.flags.c_contiguous:
                t = np.empty(o.shape, o.dtype)
                back.append((o, t))
                o = t
            outs.append(o.reshape(sh))
        return ins, outs, back


@dataclass
class ShapePlan:
    """A compiled graph's call at one signature of its inputs (shapes and dtypes),
    recorded by the first (fully checked) call with it: the bound dims, the slots'
    sizes, the outputs' shapes and one :class:`StepCall` per step.  A later call with
    the same signature checks only what can change between calls of one shape (the
    inputs' number, shapes and dtypes through the signature, 0-d inputs read as
    numbers, read-only mutated inputs, the kernels' flags)."""
    env: dict
    slot_sizes: list[int]
    out_shapes: list[tuple]
    calls: list[StepCall]


def _overlap(outs: list[np.ndarray], arrays: list[np.ndarray]) -> bool:
    """Whether an ``out=`` array may share memory with an input or another ``out=``
    array (bounds only: numpy's ``may_share_memory``)."""
    for k, o in enumerate(outs):
        for a in (*arrays, *outs[k + 1:]):
            if np.may_share_memory(o, a):
                return True
    return False


def _signature(arrays: list) -> tuple | None:
    """The inputs' shapes and dtypes (the key of a :class:`ShapePlan`), or None when an
    argument is not an array (the checked path reports it)."""
    try:
        return tuple((a.shape, a.dtype) for a in arrays)
    except AttributeError:
        return None


def _step_call(s: Step, env: dict, plan: BufferPlan) -> StepCall:
    """A step's :class:`StepCall` at the dims ``env``."""
    def shape(sh) -> tuple:
        return tuple(_ev(d, env) for d in sh)
    if s.fn is None:
        c = StepCall(s, view_shape=shape(s.outputs[0].shape))
        n = s.group.nodes[0]
        if n.op == "select":     # x[k]: k blocks of prod(view_shape) elements in
            c.view_index = int(n.attrs["index"])
            c.view_bytes = c.view_index * int(np.prod(c.view_shape, dtype=np.int64)) * \
                np.dtype(dt.to_numpy(s.outputs[0].dtype)).itemsize
        return c
    c = StepCall(s, {name: _ev(e, env) for name, e in s.params.items()})
    for v in s.inputs:
        fixed = s.packed.get(v)
        if fixed is None:
            fixed = s.arg_arrays.get(v)
        c.in_fixed.append(fixed)
        c.in_shapes.append(shape(s.arg_shapes[v]) if fixed is None and v in s.arg_shapes
                           else None)
    for v in s.outputs:
        sh = shape(v.shape)
        slot = plan.slot_of.get(v)
        c.out_views.append(None if slot is None else (slot, numel(sh, {}), sh))
        c.out_shapes.append(shape(s.arg_shapes[v]) if v in s.arg_shapes else None)
    nbytes = sum(numel(v.shape, env) * dt.to_numpy(v.dtype).itemsize
                 for v in (*s.inputs, *s.outputs))
    c.work_s = nbytes / ONE_CORE_BYTES + sum(flops(n, env) for n in s.group.nodes) / ONE_CORE_FLOPS
    return c


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
