"""Graph IR: values with symbolic shapes (sympy expressions over named dims), operator
nodes, and a Python builder API.

A :class:`Graph` is a DAG of :class:`Node` operators over :class:`Value` edges.  A value
is a graph input (shape given by the user, dims may be names such as ``"B"``), a
constant (a numpy array: weights, masks) or the single output of a node.  Shapes of node
outputs are not written by the builder: :func:`polycomp.graph.shapes.propagate` derives
them (TSCompiler's worklist) and records the constraints it needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import sympy

from polycomp.errors import SourceLocation, user_location

if TYPE_CHECKING:
    from polycomp.scheduler.promotion.record import PrepackedInput

Shape = tuple  # tuple[sympy.Expr, ...]


def dim(d: Any) -> sympy.Expr:
    """A dimension: an int, a dim name ("B") or a sympy expression over dim symbols."""
    if isinstance(d, sympy.Expr):
        return d
    if isinstance(d, str):
        return sympy.Symbol(d, positive=True, integer=True)
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        return sympy.Integer(int(d))
    raise TypeError(f"a dimension must be an int, a name or a sympy expression, got {d!r}")


def numel(shape: Any, env: dict) -> int:
    """The element count of ``shape`` with dims bound by ``env``."""
    n = 1
    for d in shape:
        n *= int(sympy.sympify(d).xreplace(env))
    return n


def shape_str(shape: Shape | None) -> str:
    if shape is None:
        return "(?)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


@dataclass(frozen=True, eq=False)
class HeldCopy:
    """The one copy of a graph constant a compiled graph keeps, in the layout its kernel
    reads (``graph/compile.py``: a GEMM or convolution weight packed in the
    micro-kernel's panels, a convolution weight laid out ``(C, KH, KW, F)``), when no
    kernel reads the constant's own array: the graph then drops that array
    (:attr:`Value.const` is None,
    :attr:`Value.held` this record) and :meth:`original` rebuilds it on demand (a
    later compilation of the same graph)."""
    array: np.ndarray
    prepacked: "PrepackedInput | None" = None   # array = prepacked.pack(original)
    axes: tuple[int, ...] = ()                  # else: array = original.transpose(axes)
    # the constant's shape when the kernel reads a reshape of it (a weight (K, H*D)
    # packed as (K, H, D) for a head-split projection); () for its own shape
    shape: tuple[int, ...] = ()

    def original(self) -> np.ndarray:
        """The constant's array (a new one, C-contiguous) from the held copy."""
        if self.prepacked is not None:
            a = self.prepacked.unpack(self.array)
            return a.reshape(self.shape) if self.shape else a
        return np.ascontiguousarray(self.array.transpose(np.argsort(self.axes)))


@dataclass(eq=False)
class Value:
    """An edge: one tensor.  ``producer`` is None for inputs and constants.  ``shape`` is a
    tuple of sympy extents once known (None until shape propagation reaches it).  A
    constant's array is ``const``, or -- dropped by a compiled graph that holds it only
    in its kernel's layout (graph owning its constants, :attr:`Graph.owns_constants`) --
    ``held`` (``const`` None then; :meth:`Graph.restore_constants` puts it back)."""
    name: str
    dtype: str = "float32"
    shape: Any = None
    producer: "Node | None" = None
    const: np.ndarray | None = None
    is_input: bool = False
    held: HeldCopy | None = None

    def __repr__(self) -> str:
        return f"%{self.name}{shape_str(self.shape)}:{self.dtype}"

    @property
    def is_const(self) -> bool:
        """A graph constant (its array in ``const``, or dropped and ``held``)."""
        return self.const is not None or self.held is not None

    def origin(self) -> str:
        """Who produced this value, for error messages."""
        if self.producer is not None:
            return f"{self.producer.op} {self.producer.name!r}"
        return "constant" if self.is_const else "input"


@dataclass(eq=False)
class Node:
    op: str
    name: str
    inputs: list[Value]
    attrs: dict[str, Any]
    output: Value
    location: SourceLocation | None = None

    def __repr__(self) -> str:
        args = ", ".join(f"%{v.name}" for v in self.inputs)
        at = "".join(f", {k}={v}" for k, v in self.attrs.items())
        return f"%{self.output.name} = {self.op}({args}{at})"


@dataclass(eq=False)
class Graph:
    name: str = "graph"
    inputs: list[Value] = field(default_factory=list)
    constants: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    constraints: Any = None  # shapes.Constraints after propagation
    # In-place updates of inputs (``x.mul_(2)`` on a graph input): (input, index k in
    # ``outputs``) -- after a call the runtime writes ``outputs[k]`` into that input.
    # The caller's results are ``outputs[:n_results]`` (the rest only feed mutations).
    mutations: list[tuple[Value, int]] = field(default_factory=list)
    n_results: int | None = None  # None: every output is a result
    # Values read at compile time, checked per call (CompiledGraph.values_hold; the
    # runtime refuses a call where one differs): 0-d inputs read as numbers
    # (``eps.item()``) as (input, value), and size expressions used as numbers
    # (``x / math.sqrt(D)`` under dynamic shapes) as (expr over the dims, value).
    value_guards: list[tuple[Value, Any]] = field(default_factory=list)
    expr_guards: list[tuple[Any, Any]] = field(default_factory=list)
    # Results that are numbers (a size, or a shape, a piece of a split graph hands on):
    # (position among the results, sympy expression over the dims or a tuple of them),
    # evaluated per call.
    scalar_results: list[tuple[int, Any]] = field(default_factory=list)
    # Numbers the torch.fx importer read from the caller's non-tensor arguments (a piece
    # of a split graph is handed a float): (argument position, value); the Dynamo
    # backend runs the piece eagerly when a call brings another value.
    arg_guards: list[tuple[int, Any]] = field(default_factory=list)
    # Positions of the torch.fx importer's placeholders captured as constants (parameters,
    # batch-norm running statistics): the Dynamo backend does not pass them to a call.
    captured_args: list[int] = field(default_factory=list)
    # The constants' arrays are the graph's own (the importers' copies of parameters and
    # initialisers), not the caller's: a compiled graph that holds a constant only in its
    # kernel's layout drops the graph's array (``Value.held``), so weights are held once.
    owns_constants: bool = False

    def restore_constants(self) -> None:
        """Put back every constant array a compiled graph dropped (``Value.held``): made
        from the held copy, for a compilation that reads the arrays again."""
        for v in self.constants:
            if v.held is not None:
                v.const, v.held = v.held.original(), None

    @property
    def results(self) -> list[Value]:
        """The values a call returns (``outputs`` less those that only feed mutations)."""
        return self.outputs if self.n_results is None else self.outputs[:self.n_results]

    def consumers(self) -> dict[Value, list[Node]]:
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def dims(self) -> list[sympy.Symbol]:
        """The symbolic dims of the inputs, in order of appearance."""
        seen: dict[sympy.Symbol, None] = {}
        for v in self.inputs:
            for d in v.shape or ():
                for s in sorted(d.free_symbols, key=str):
                    seen.setdefault(s, None)
        return list(seen)

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(repr(v) for v in self.inputs)})"]
        lines += [f"  {n!r}  # {shape_str(n.output.shape)}" for n in self.nodes]
        lines.append(f"  return {', '.join('%' + v.name for v in self.results)}")
        lines += [f"  {v.name} <- %{self.outputs[k].name}" for v, k in self.mutations]
        return "\n".join(lines)


class GraphBuilder:
    """Build a graph op by op::

        g = GraphBuilder("mlp")
        x = g.input("x", ("B", "S", 64))
        w = g.constant("w", np.ones((64, 32), np.float32))
        y = g.gelu(g.matmul(x, w))
        graph = g.build(y)          # runs shape propagation
    """

    def __init__(self, name: str = "graph"):
        self.graph = Graph(name)
        self._names: set[str] = set()

    def _fresh(self, base: str) -> str:
        base = "".join(c if c.isalnum() else "_" for c in base) or "v"
        if base[0].isdigit():
            base = "v" + base
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        self._names.add(name)
        return name

    def input(self, name: str, shape: Sequence, dtype: str = "float32") -> Value:
        from polycomp.dtypes import canonical
        v = Value(self._fresh(name), canonical(dtype), tuple(dim(d) for d in shape),
                  is_input=True)
        self.graph.inputs.append(v)
        return v

    def constant(self, name: str, array: np.ndarray) -> Value:
        a = np.ascontiguousarray(array)
        v = Value(self._fresh(name), str(a.dtype), tuple(sympy.Integer(n) for n in a.shape),
                  const=a)
        self.graph.constants.append(v)
        return v

    def op(self, op: str, *inputs: Value, name: str | None = None, **attrs: Any) -> Value:
        from .opdefs import OPS
        if op not in OPS:
            from polycomp.errors import UnsupportedOpError
            raise UnsupportedOpError(f"graph op {op!r} is not supported (known: "
                                     f"{', '.join(sorted(OPS))})", user_location())
        for v in inputs:
            if not isinstance(v, Value):
                raise TypeError(f"{op}(): inputs must be graph values, got {v!r}")
        nname = self._fresh(name or op)
        out = Value(nname, inputs[0].dtype if inputs else "float32")
        node = Node(op, nname, list(inputs), dict(attrs), out, user_location())
        out.producer = node
        out.dtype = OPS[op].dtype(node)
        self.graph.nodes.append(node)
        if all(v.shape is not None for v in inputs):  # eager propagation: sizes are usable
            from .shapes import Constraints
            self._cs = getattr(self, "_cs", None) or Constraints()
            out.shape = self._cs.apply_shape(OPS[op].shape(node, self._cs))
        return out

    def __getattr__(self, op: str):
        from .opdefs import OPS
        if op in OPS:
            return lambda *a, **k: self.op(op, *a, **k)
        raise AttributeError(op)

    def build(self, *outputs: Value,
              mutations: Sequence[tuple[Value, Value]] = ()) -> Graph:
        """Finish the graph: ``outputs`` are what a call returns; ``mutations`` pairs
        (input, new value) are written back into those inputs after each call (an
        in-place update of an input, as eager PyTorch does it).  Nodes no output depends
        on are dropped (a kernel computes only what is used); runs shape propagation."""
        from .shapes import propagate
        g = self.graph
        g.outputs, g.n_results = list(outputs), len(outputs)
        for v, new in mutations:
            if not v.is_input:
                raise TypeError(f"only graph inputs can be mutated, not {v!r}")
            if new not in g.outputs:
                g.outputs.append(new)
            g.mutations.append((v, g.outputs.index(new)))
        live: set[Node] = set()
        stack = list(g.outputs)
        while stack:
            p = stack.pop().producer
            if p is not None and p not in live:
                live.add(p)
                stack.extend(p.inputs)
        g.nodes = [n for n in g.nodes if n in live]
        used = {v for n in g.nodes for v in n.inputs} | set(g.outputs)
        g.constants = [c for c in g.constants if c in used]
        propagate(g)
        return g
