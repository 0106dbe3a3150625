"""``compile_graph``: propagate shapes, partition, lower each group to one kernel, build
it for the target (identical groups are built once) and return a
:class:`~polycomp.graph.runtime.CompiledGraph`."""
from __future__ import annotations

from polycomp.driver import build

from .ir import Graph
from .lower import group_kernel
from .partition import Group, Partition, partition
from .runtime import CompiledGraph, Step
from .shapes import propagate


def _topo_groups(part: Partition) -> list[Group]:
    """Groups in an order where every group runs after its producers."""
    owner = {n.output: g for g in part.groups for n in g.nodes}
    done: set[int] = set()
    out: list[Group] = []

    def visit(g: Group):
        if id(g) in done:
            return
        done.add(id(g))
        for v in part.inputs_of(g):
            if v in owner:
                visit(owner[v])
        out.append(g)
    for g in part.groups:
        visit(g)
    return out


def compile_graph(graph: Graph, target: str = "cpu", fuse: bool = True,
                  options: dict | None = None) -> CompiledGraph:
    if any(v.shape is None for n in graph.nodes for v in (n.output,)):
        propagate(graph)
    part = partition(graph, fuse=fuse)
    part.groups = _topo_groups(part)
    built: dict[str, object] = {}
    steps = []
    for g in part.groups:
        if g.kind == "view":
            steps.append(Step(g, None, part.inputs_of(g), part.outputs_of(g), {}))
            continue
        gk = group_kernel(part, g)
        if gk.key not in built:
            built[gk.key] = build(gk.kernel, target, options=options)
        steps.append(Step(g, built[gk.key], gk.inputs, gk.outputs,  # type: ignore[arg-type]
                          dict(gk.params.exprs)))
    return CompiledGraph(part, steps, len(built), target)
