"""The Dynamo backend: ``torch.compile(model, backend="polycomp")`` (CPU).

Registered through the ``torch_dynamo_backends`` entry point (pyproject) and by
:func:`register` on import of this module.  What it does with a graph Dynamo hands it,
decided once, at compile time (a failure at run time is a bug):

1. **autograd**: when grad mode is on and an input (a parameter included) requires grad,
   the graph runs eagerly -- polycomp kernels record no autograd, and a compiled result
   would silently lose ``requires_grad`` (Dynamo recompiles when grad mode changes, so
   the same model under ``torch.no_grad()`` is compiled);
2. **in-place ops** are made functional (:mod:`.functionalize`); the final values of
   mutated inputs are copied back into the caller's tensors after each call (eager's
   semantics); an update that cannot be made functional (of a view, of a parameter,
   batch-norm statistics in training mode) makes the whole graph run eagerly;
3. the functional graph is imported and compiled; a graph with ops polycomp cannot
   compile is split at them (``torch.fx`` ``split_module``): those ops run eagerly, the
   pieces between them are compiled;
4. anything else that fails (a bug in polycomp) makes the graph run eagerly.

Parameters are compiled in as constants; a call that finds one updated since (its
version counter or storage changed: ``load_state_dict``, an optimizer step under
``no_grad``) compiles the graph again first (one line on stderr), so no call computes
with stale weights.

Every eager decision prints one line on stderr beginning with ``polycomp: running``
and stating the reason; the callable returned carries it (``polycomp_report``).  With
``dynamic=True`` one compilation serves every value of Dynamo's symbolic sizes;
``options={"target": "c"}`` picks the polycomp target (default ``cpu``);
``options={"strict": True}`` re-raises internal errors instead of running eagerly (the
model-level fuzzer uses it).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from polycomp.errors import PolycompError, UnsupportedOpError

from .compile import compile_graph
from .functionalize import functionalize
from .fx import import_fx, is_module_buffer

TARGET = "cpu"


@dataclass
class Report:
    """What the backend did with one Dynamo graph."""
    compiled: int = 0            # pieces compiled by polycomp
    pieces: int = 1              # pieces of the graph (1 unless split)
    eager: list[str] = field(default_factory=list)   # the reasons for eager execution

    def say(self, line: str) -> None:
        self.eager.append(line)
        print(f"polycomp: {line}", file=sys.stderr)


def polycomp_backend(gm, example_inputs, **kwargs):
    opts = dict(kwargs.get("options") or {})  # torch.compile(..., options={"target": "c"})
    target, strict = opts.pop("target", TARGET), bool(opts.pop("strict", False))
    report = Report()
    inner = _compile_or_eager(gm, example_inputs, target, strict, report)
    params = _Parameters(example_inputs, gm)
    state = {"inner": inner}

    def run(*args):
        if params.changed(args):  # weights updated in place since they were captured
            report.say("parameters changed since the graph was compiled (their values are "
                       "compiled in): compiling it again")
            state["inner"] = _compile_or_eager(gm, args, target, strict, report)
            params.snapshot(args)
        return state["inner"](*args)
    run.polycomp_report = report  # type: ignore[attr-defined]
    run.compiled_graph = getattr(inner, "compiled_graph", None)  # type: ignore[attr-defined]
    return run


def _compile_or_eager(gm, example_inputs, target: str, strict: bool, report: Report):
    try:
        return _compile(gm, example_inputs, target, strict, report)
    except Exception as e:  # a polycomp bug: never a crash of the user's model
        if strict:
            raise
        report.compiled = 0
        report.say(f"running a graph eagerly: internal error ({type(e).__name__}: "
                   f"{str(e).splitlines()[0] if str(e) else ''}); please report it")
        return gm.forward


class _Parameters:
    """The parameters Dynamo hands the graph (captured as constants at compile time) and
    their version counters and storage: an in-place update (``optimizer.step()`` under
    ``no_grad``, ``load_state_dict``) or a new ``.data`` shows as a change."""

    def __init__(self, example_inputs, gm=None):
        import torch
        phs = list(gm.graph.find_nodes(op="placeholder")) if gm is not None else []
        self.positions = [k for k, ex in enumerate(example_inputs)
                          if isinstance(ex, torch.nn.Parameter) or (
                              k < len(phs) and isinstance(ex, torch.Tensor)
                              and is_module_buffer(phs[k]))]
        self.snapshot(example_inputs)

    def _state(self, args) -> list:
        return [(args[k]._version, args[k].data_ptr()) for k in self.positions]

    def snapshot(self, args) -> None:
        self.seen = self._state(args)

    def changed(self, args) -> bool:
        return bool(self.positions) and self._state(args) != self.seen


def _grad_needed(example_inputs) -> bool:
    import torch
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


def _compile(gm, example_inputs, target: str, strict: bool, report: Report):
    import torch
    if _grad_needed(example_inputs):
        report.say("running a graph eagerly: autograd: grad mode is on and inputs or "
                   "parameters require grad (polycomp kernels record no gradients; call "
                   "the model under torch.no_grad() or torch.inference_mode() to compile it)")
        return gm.forward
    try:
        fn = functionalize(gm, example_inputs)
    except UnsupportedOpError as e:
        report.say(f"running a graph eagerly: {e.message}")
        return gm.forward
    fgm = fn.gm
    try:
        graph = import_fx(fgm, example_inputs=example_inputs, name="dynamo")
        cg = compile_graph(graph, target)
    except UnsupportedOpError as e:
        nodes = getattr(e, "nodes", None)
        if not nodes:  # not a node's fault (an output, an input dtype): all eager
            report.say(f"running a graph eagerly: {e.message}")
            return gm.forward
        ops = list(getattr(e, "reasons", [e.message]))
        other: list[str] = []
        split, report.compiled, report.pieces = _split(fgm, nodes, target, example_inputs,
                                                       strict, ops, other)
        inner = split.forward
        extra = "".join(f"; {w}" for w in dict.fromkeys(other))
        report.say(f"running eagerly: unsupported ops: {', '.join(dict.fromkeys(ops))} "
                   f"({report.compiled} of {report.pieces} pieces of the graph compiled by "
                   f"polycomp{extra})")
    except PolycompError as e:
        if strict and "disagrees" in e.message:
            raise
        report.say(f"running a graph eagerly: {type(e).__name__}: "
                   f"{e.message.splitlines()[0]}")
        return gm.forward
    else:
        report.compiled = 1
        picks = [k for k, ex in enumerate(example_inputs)
                 if isinstance(ex, torch.Tensor) and not isinstance(ex, torch.nn.Parameter)
                 and k not in graph.captured_args]

        def inner(*args):
            xs = [args[k] for k in picks]
            if not _guards_hold(cg, args, xs):  # a value read at compile time changed
                return gm.forward(*args)
            res = _torch_results(cg(*xs))
            return tuple(res) if isinstance(res, tuple) else (res,)
        inner.compiled_graph = cg  # type: ignore[attr-defined]
    if not fn.mutated:
        return inner
    return _writing_back(inner, fn.mutated, fn.n_outputs, gm)


def _writing_back(inner, mutated: list[int], n_out: int, gm):
    """Call ``inner`` (which returns the outputs followed by the new values of the
    inputs at ``mutated``) and copy those values into the caller's tensors.  When a
    mutated input shares storage with another input, the original graph runs eagerly
    (the functional form assumed distinct storage)."""

    def run(*args):
        import torch
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) > 1:
            ptrs = [t.untyped_storage().data_ptr() for t in tensors]
            if any(ptrs.count(args[k].untyped_storage().data_ptr()) > 1 for k in mutated):
                return gm.forward(*args)
        res = inner(*args)
        with torch.no_grad():
            for k, v in zip(mutated, res[n_out:]):
                args[k].copy_(v)
        return tuple(res[:n_out])
    run.compiled_graph = getattr(inner, "compiled_graph", None)  # type: ignore[attr-defined]
    return run


def _split(gm: Any, bad: list[str], target: str, example_inputs: Any, strict: bool,
           ops: list[str], other: list[str], depth: int = 0):
    """Split ``gm`` (functional: no in-place ops) at the unsupported nodes (``torch.fx``
    ``split_module``): the runs of supported nodes are compiled by polycomp, the rest
    runs eagerly.  A run in which the import finds more unsupported nodes (fed by one
    that runs eagerly, they were not tried before) is split again at them; a run that
    does not compile stays eager.  Returns (the split module, pieces compiled, pieces);
    the unsupported ops found are added to ``ops``, other reasons to ``other``."""
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
        return gm, 0, 1
    split = split_module(gm, gm, lambda n: ids[n.name])
    real = {n.name: ex for n, ex in zip(gm.graph.find_nodes(op="placeholder"), example_inputs)}
    done, pieces = 0, len(list(split.named_children()))
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
        except PolycompError as e:
            if strict and "disagrees" in e.message:
                raise
            nodes = getattr(e, "nodes", None)
            if nodes and depth < 8:  # split this run again at what its import found
                ops += getattr(e, "reasons", [])
                inner, d, p = _split(sub, nodes, target, exs, strict, ops, other, depth + 1)
                if d:
                    setattr(split, name, inner)
                    done, pieces = done + d, pieces + p - 1
            else:
                other.append(e.message.splitlines()[0])
            continue
        setattr(split, name, _compiled_module(cg, torch, exs, sub))
        done += 1
    return split, done, pieces


def _torch_results(res):
    """A piece's results as torch tensors: a piece with no tensor input (position ids
    from ``arange`` with constant shapes) gets numpy arrays back from the runtime."""
    import numpy as np

    from polycomp.dlpack import to_caller
    if isinstance(res, tuple):
        return tuple(to_caller(r, "torch") if isinstance(r, np.ndarray) else r for r in res)
    return to_caller(res, "torch") if isinstance(res, np.ndarray) else res


def _compiled_module(cg, torch, examples, eager):
    """A compiled piece in place of a split submodule (same calling convention)."""
    picks = [k for k, ex in enumerate(examples)
             if isinstance(ex, torch.Tensor) and not isinstance(ex, torch.nn.Parameter)
             and k not in cg.graph.captured_args]

    # torch is the module the caller imported (lazily): mypy sees a parameter
    class Compiled(torch.nn.Module):  # type: ignore[name-defined]
        def forward(self, *args):
            xs = [args[k] for k in picks]
            if not _guards_hold(cg, args, xs):  # a value read at compile time changed
                return eager(*args)
            return _torch_results(cg(*xs))
    m = Compiled()
    m.compiled_graph = cg
    return m


def _guards_hold(cg, args, xs) -> bool:
    """Do the numbers read at compile time still hold (the non-tensor arguments, the 0-d
    inputs and size expressions read as numbers)?"""
    return all(args[k] == v for k, v in cg.graph.arg_guards) and cg.values_hold(xs)


def register() -> None:
    from torch._dynamo import list_backends, register_backend
    if "polycomp" not in list_backends(exclude_tags=()):
        register_backend(name="polycomp")(polycomp_backend)
