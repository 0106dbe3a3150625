"""Fusion partition: backbone-prioritised groups, reduce-level groups, memory-intensive
stitching, and a DP over the topological order that decides which neighbouring groups
merge (cost model below; docs/graph.md states it).

Phases (TSCompiler's prioritised fusion, AStitch's stitching, AutoGTCO's DP):

1. **backbone**: every ``matmul`` seeds a group and takes its *epilogue* (the chain of
   elementwise/injective single consumers) and its injective *prologue* (transposes,
   slices, affine reshapes and elementwise ops with a single consumer);
2. **reduce**: every remaining reduction seeds a group with its elementwise prologue and
   epilogue (the dominant op of an AStitch subgraph);
3. **stitch**: the rest are singleton memory-intensive groups; a non-affine reshape is a
   ``view`` group (zero-copy at runtime); an ``attention`` node is a ``chain`` group of
   its own (its kernel must be the chain alone for ``scheduler/chain`` to fuse it: it
   takes no prologue or epilogue and never merges);
4. **DP**: over groups in topological order, ``best[i] = min_j best[j] + cost(g_j..g_i-1)``
   where a merged group is legal when it holds at most one backbone, no view, at most
   ``MAX_NODES`` operators, and stays convex (no path leaves it and comes back), and
   does not join a reduction to a 1x1 convolution that runs over flattened pixels
   alone (:func:`_flat_pointwise_with_reduce`).

Cost of a group (seconds, dims bound to ``COST_DIMS``):
``ALPHA + bytes(inputs + outputs) / BANDWIDTH + flops / PEAK`` -- values internal to a
group are not counted (the multi-stage kernel keeps them in cache or contracts them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .ir import Graph, Node, Value, numel, shape_str
from .opdefs import flops, kind_of

ALPHA = 5e-6          # s per kernel call (ctypes call, OpenMP fork/join)
BANDWIDTH = 10e9      # bytes/s, DRAM, 2 cores
PEAK = 50e9           # flop/s, 2 cores AVX2 FMA
MAX_NODES = 12        # keeps each multi-stage kernel's schedule tractable
COST_DIMS = 128       # every symbolic dim is bound to this in the cost model


@dataclass(eq=False)
class Group:
    kind: str
    nodes: list[Node] = field(default_factory=list)
    name: str = ""

    def node_set(self) -> set[Node]:
        return set(self.nodes)


@dataclass
class Partition:
    graph: Graph
    groups: list[Group]
    cost: float

    def inputs_of(self, g: Group) -> list[Value]:
        inside = {n.output for n in g.nodes}
        seen: dict[Value, None] = {}
        for n in g.nodes:
            for v in n.inputs:
                if v not in inside:
                    seen.setdefault(v, None)
        return list(seen)

    def outputs_of(self, g: Group) -> list[Value]:
        cons = self.graph.consumers()
        mine = g.node_set()
        return [n.output for n in g.nodes
                if n.output in self.graph.outputs
                or any(c not in mine for c in cons.get(n.output, ()))]

    def explain(self) -> str:
        lines = [f"partition of {self.graph.name}: {len(self.graph.nodes)} ops -> "
                 f"{len(self.groups)} groups ({sum(g.kind != 'view' for g in self.groups)} "
                 f"kernels), est. cost {self.cost * 1e6:.1f} us at dims={COST_DIMS}"]
        for g in self.groups:
            ins = ", ".join(v.name for v in self.inputs_of(g))
            outs = ", ".join(f"{v.name}{shape_str(v.shape)}" for v in self.outputs_of(g))
            lines.append(f"  {g.name} [{g.kind}] {' -> '.join(n.op for n in g.nodes)}")
            lines.append(f"      in: {ins}")
            lines.append(f"      out: {outs}")
        return "\n".join(lines)

    def dot(self) -> str:
        """Graphviz dot text: one cluster per group."""
        out = [f'digraph "{self.graph.name}" {{', "  rankdir=TB; node [shape=box];"]
        for v in [*self.graph.inputs]:
            out.append(f'  "{v.name}" [shape=ellipse, label="{v.name}\\n{shape_str(v.shape)}"];')
        for k, g in enumerate(self.groups):
            out.append(f'  subgraph cluster_{k} {{ label="{g.name} ({g.kind})"; style=rounded;')
            for n in g.nodes:
                out.append(f'    "{n.name}" [label="{n.op}\\n{shape_str(n.output.shape)}"];')
            out.append("  }")
        for n in self.graph.nodes:
            for v in n.inputs:
                if not v.is_const:
                    src = v.producer.name if v.producer is not None else v.name
                    out.append(f'  "{src}" -> "{n.name}";')
        out.append("}")
        return "\n".join(out)


def _numel(v: Value, env: dict) -> int:
    return numel(v.shape, env)


def group_cost(g: Group, graph: Graph, cons: dict, env: dict) -> float:
    mine = g.node_set()
    inside = {n.output for n in g.nodes}
    io = {v for n in g.nodes for v in n.inputs if v not in inside}
    io |= {n.output for n in g.nodes if n.output in graph.outputs
           or any(c not in mine for c in cons.get(n.output, ()))}
    nbytes = 4 * sum(_numel(v, env) for v in io)
    fl = sum(flops(n, env) for n in g.nodes)
    return ALPHA + nbytes / BANDWIDTH + fl / PEAK


def _convex(nodes: set[Node], order: dict[Node, int], cons: dict) -> bool:
    """No path from the group through an outside node back into it."""
    hi = max(order[n] for n in nodes)
    frontier = [c for n in nodes for c in cons.get(n.output, ()) if c not in nodes]
    seen: set[Node] = set()
    while frontier:
        c = frontier.pop()
        if c in seen or order[c] > hi:
            continue
        seen.add(c)
        for d in cons.get(c.output, ()):
            if d in nodes:
                return False
            frontier.append(d)
    return True


def _absorb(seed: Node, free: set[Node], graph: Graph, cons: dict, order: dict,
            prologue_kinds: tuple[str, ...], kinds: dict[Node, str]) -> list[Node]:
    group = {seed}
    changed = True
    while changed:
        changed = False
        for n in sorted(group, key=order.__getitem__):  # epilogue: single consumer chain
            cs = cons.get(n.output, [])
            if len(cs) == 1 and cs[0] in free and cs[0] not in group \
                    and kinds[cs[0]] in ("elementwise", "injective") \
                    and n.output not in graph.outputs and len(group) < MAX_NODES \
                    and _convex(group | {cs[0]}, order, cons):
                group.add(cs[0])
                changed = True
        for n in sorted(group, key=order.__getitem__):  # prologue
            for v in n.inputs:
                p = v.producer
                if p is not None and p in free and p not in group \
                        and kinds[p] in prologue_kinds and v not in graph.outputs \
                        and all(c in group for c in cons.get(v, [])) \
                        and len(group) < MAX_NODES and _convex(group | {p}, order, cons):
                    group.add(p)
                    changed = True
    return sorted(group, key=order.__getitem__)


def partition(graph: Graph, fuse: bool = True) -> Partition:
    """Partition ``graph`` into fusion groups (see the module docstring)."""
    cons = graph.consumers()
    order = {n: k for k, n in enumerate(graph.nodes)}
    env = {s: COST_DIMS for s in graph.dims()}
    free = set(graph.nodes)
    # each node's kind, once (kind_of of a reshape asks sympy whether its shapes keep
    # a common prefix: milliseconds, and the loops below asked it up to four times)
    kinds = {n: kind_of(n) for n in graph.nodes}
    groups: list[Group] = []
    if fuse:
        for kind, prologue in (("backbone", ("injective",)),
                               ("reduce", ("elementwise", "injective"))):
            for n in graph.nodes:
                if n in free and kinds[n] == kind:
                    members = _absorb(n, free, graph, cons, order, prologue, kinds)
                    free -= set(members)
                    groups.append(Group(kind, members))
    for n in graph.nodes:
        if n in free:
            nk = kinds[n]
            groups.append(Group("view" if nk == "view" else
                                {"backbone": "backbone", "reduce": "reduce",
                                 "chain": "chain"}.get(nk, "stitch"),
                                [n]))
    groups.sort(key=lambda g: order[g.nodes[0]])
    if fuse:
        groups = _dp(groups, graph, cons, order, env)
    for k, g in enumerate(groups):
        g.name = f"g{k}"
    total = sum(group_cost(g, graph, cons, env) for g in groups if g.kind != "view")
    return Partition(graph, groups, total)


def _merge_kind(gs: list[Group]) -> str | None:
    kinds = [g.kind for g in gs]
    if ("view" in kinds or "chain" in kinds) and len(gs) > 1:
        return None   # a view is no kernel; a chain kernel is the chain alone
    if kinds.count("backbone") > 1:
        return None
    for k in ("backbone", "reduce", "view", "chain"):
        if k in kinds:
            return k
    return "stitch"


def _flat_pointwise_with_reduce(seg: list[Group]) -> bool:
    """Whether ``seg`` joins a reduction to a backbone group that runs over flattened
    pixels alone (``graph/lower.py`` ``pixel_flat``: a 1x1 convolution on an image
    narrower than ``PIXEL_FLAT_WIDTH``).  Such a merge is refused: with the reduction
    (MobileNet-V2's last 320->1280 convolution and its global average pool) the group
    keeps 7-wide rows, 1.37 ms against 0.89 ms for the flattened convolution alone and a
    pool of 1280 x 49 floats (1 thread, CPU time, eager 0.90 ms for both).
    ``POLYCOMP_FLAT_SPLIT=0`` allows the merge (for comparisons)."""
    import os
    if os.environ.get("POLYCOMP_FLAT_SPLIT", "1") == "0":
        return False
    from .lower import pixel_flat
    return any(g.kind == "reduce" for g in seg) and \
        any(g.kind == "backbone" and pixel_flat(g) is not None for g in seg)


def _dp(groups: list[Group], graph: Graph, cons: dict, order: dict, env: dict) -> list[Group]:
    n = len(groups)
    best = [0.0] + [math.inf] * n
    choice = [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(i - 1, -1, -1):
            seg = groups[j:i]
            kind = _merge_kind(seg)
            size = sum(len(g.nodes) for g in seg)
            if kind is None or (len(seg) > 1 and size > MAX_NODES):
                break
            nodes = sorted({m for g in seg for m in g.nodes}, key=order.__getitem__)
            if len(seg) > 1 and not _convex(set(nodes), order, cons):
                continue
            if len(seg) > 1 and kind == "backbone" and _flat_pointwise_with_reduce(seg):
                continue
            g = Group(kind, nodes)
            c = best[j] + (0.0 if kind == "view" else group_cost(g, graph, cons, env))
            if c < best[i]:
                best[i], choice[i] = c, j
    out: list[Group] = []
    i = n
    while i > 0:
        j = choice[i]
        seg = groups[j:i]
        kind = _merge_kind(seg) or "stitch"
        out.append(Group(kind, sorted({m for g in seg for m in g.nodes},
                                      key=order.__getitem__)))
        i = j
    return out[::-1]
