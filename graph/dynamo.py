"""The Dynamo backend: ``torch.compile(model, backend="polycomp")`` (CPU).

Registered through the ``torch_dynamo_backends`` entry point (pyproject) and by
:func:`register` on import of this module.  A graph with an op polycomp cannot compile
runs eagerly, with a one-line report naming the unsupported ops.  With
``dynamic=True`` one compilation serves every value of Dynamo's symbolic sizes;
``options={"target": "c"}`` picks the polycomp target (default ``cpu``).
"""
from __future__ import annotations

import sys

from polycomp.errors import PolycompError, UnsupportedOpError

from .compile import compile_graph
from .fx import import_fx

TARGET = "cpu"


def polycomp_backend(gm, example_inputs, **kwargs):
    import torch
    try:
        graph = import_fx(gm, example_inputs=example_inputs, name="dynamo")
        opts = kwargs.get("options") or {}  # torch.compile(..., options={"target": "c"})
        cg = compile_graph(graph, opts.get("target", TARGET))
    except UnsupportedOpError as e:
        print(f"polycomp: running a graph eagerly: {e.message}", file=sys.stderr)
        return gm.forward
    except PolycompError as e:
        print(f"polycomp: running a graph eagerly: {type(e).__name__}: "
              f"{e.message.splitlines()[0]}", file=sys.stderr)
        return gm.forward
    picks = [k for k, ex in enumerate(example_inputs)
             if isinstance(ex, torch.Tensor) and not isinstance(ex, torch.nn.Parameter)
             and ex.ndim > 0]

    def run(*args):
        res = cg(*[args[k] for k in picks])
        return tuple(res) if isinstance(res, tuple) else (res,)
    run.compiled_graph = cg  # type: ignore[attr-defined]
    return run


def register() -> None:
    from torch._dynamo import list_backends, register_backend
    if "polycomp" not in list_backends(exclude_tags=()):
        register_backend(name="polycomp")(polycomp_backend)
