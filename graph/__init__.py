"""polycomp.graph: a graph compiler above kernels.

Graph IR with symbolic shapes (:mod:`.ir`), shape propagation with constraints
(:mod:`.shapes`), the operator table (:mod:`.opdefs`), fusion partition (:mod:`.partition`),
lowering of each group to one multi-stage kernel (:mod:`.lower`), the runtime
(:mod:`.runtime`), DLPack interop (:mod:`polycomp.dlpack`), and the torch importers
(:mod:`.fx`, :mod:`.dynamo`; torch is imported lazily).  docs/graph.md is the guide.
"""
from .compile import compile_graph
from .ir import Graph, GraphBuilder, Node, Value
from .partition import Partition, partition
from .runtime import CompiledGraph
from .shapes import propagate

__all__ = ["Graph", "GraphBuilder", "Node", "Value", "compile_graph", "CompiledGraph",
           "Partition", "partition", "propagate"]
