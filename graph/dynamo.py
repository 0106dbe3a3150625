"""The Dynamo backend: ``torch.compile(model, backend="polycomp")`` (CPU).

Registered through the ``torch_dynamo_backends`` entry point (pyproject) and by
:func:`register` on import of this module.  A graph with ops polycomp cannot compile is
split at them (``torch.fx`` ``split_module``): the unsupported ops run eagerly, the
pieces between them are compiled; one line on stderr names the ops and the count.  With
``dynamic=True`` one compilation serves every value of Dynamo's symbolic sizes;
``options={"target": "c"}`` picks the polycomp target (default ``cpu``).
"""
from __future__ import annotations

import sys
from typing import Any

from polycomp.errors import PolycompError, UnsupportedOpError

from .compile import compile_graph
from .fx import import_fx

TARGET = "cpu"


def polycomp_backend(gm, example_inputs, **kwargs):
    import torch
    opts = kwargs.get("options") or {}  # torch.compile(..., options={"target": "c"})
    try:
        graph = import_fx(gm, example_inputs=example_inputs, name="dynamo")
        cg = compile_graph(graph, opts.get("target", TARGET))
    except UnsupportedOpError as e:
        fwd, done, pieces = _split(gm, getattr(e, "nodes", []), opts.get("target", TARGET),
                                   example_inputs)
        print(f"polycomp: running eagerly: {e.message} ({done} of {pieces} pieces of the "
              f"graph compiled by polycomp)", file=sys.stderr)
        return fwd
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


def _split(gm: Any, bad: list[str], target: str, example_inputs: Any):
    """Split ``gm`` at the unsupported nodes (``torch.fx`` ``split_module``): the runs of
    supported nodes are compiled by polycomp, the rest runs eagerly.  A run that does not
    compile stays eager too."""
    import torch
    from torch.fx.passes.split_module import split_module
    ids: dict[str, int] = {}
    compiled_part: dict[int, bool] = {}
    part, prev = 0, None
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        ok = n.name not in bad and n.op != "get_attr"
        if prev is not None and ok != prev:
            part += 1
        ids[n.name], prev = part, ok
        compiled_part[part] = ok
    if not any(compiled_part.values()):
        return gm.forward, 0, 1
    split = split_module(gm, gm, lambda n: ids[n.name])
    real = {n.name: ex for n, ex in zip(gm.graph.find_nodes(op="placeholder"), example_inputs)}
    done = 0
    sub: Any
    for name, sub in list(split.named_children()):
        k = int(name.rsplit("_", 1)[-1])
        if not compiled_part.get(k) or not any(
                n.op in ("call_function", "call_method", "call_module") for n in sub.graph.nodes):
            continue
        exs = [real.get(p.name, p.meta.get("example_value"))
               for p in sub.graph.find_nodes(op="placeholder")]
        try:
            cg = compile_graph(import_fx(sub, example_inputs=exs, name=f"dynamo_{name}"), target)
        except (PolycompError, TypeError, AttributeError, RuntimeError):
            continue
        setattr(split, name, _compiled_module(cg, torch))
        done += 1
    return split.forward, done, len(list(split.named_children()))


def _compiled_module(cg, torch):
    """A compiled piece in place of a split submodule (same calling convention)."""

    class Compiled(torch.nn.Module):
        def forward(self, *args):
            return cg(*[a for a in args if isinstance(a, torch.Tensor) and a.ndim > 0
                        and not isinstance(a, torch.nn.Parameter)])
    m = Compiled()
    m.compiled_graph = cg
    return m


def register() -> None:
    from torch._dynamo import list_backends, register_backend
    if "polycomp" not in list_backends(exclude_tags=()):
        register_backend(name="polycomp")(polycomp_backend)
