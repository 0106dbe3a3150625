"""Lowering a fused chain's marked nest to a kernel: what the three code-generation
passes (:mod:`.codegen` for batch-matmul chains and :mod:`.conv_codegen` for conv
chains on the CPU targets, :mod:`.cuda_codegen` on CUDA) share.

* :func:`replace_marked_nest` (:func:`lower_to_call` for the C kernels): the nest under
  the tree pass's mark becomes one statement (a call of the generated C kernel, or the
  CUDA kernel's region), and the allocations nothing reads, writes or passes any more
  (the intermediate, the softmax's arrays) are dropped.
* :func:`stage_inputs`, :func:`input_strides`, :func:`elementwise_lines`: the arrays
  other than the chain's own that the elementwise stages between the two products read
  (a bias, a mask, ...), their row-major strides as C expressions, and the stages as C
  lines ``v = ..;`` of the fused C kernels.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from polycomp import ir
from polycomp.scheduler.chain.detect import MiddleStage, _loads

__all__ = ["buffers_used", "c_safe", "elementwise_lines", "has_mark",
           "input_strides", "lower_to_call", "replace_marked_nest", "stage_inputs"]


def c_safe(name: str) -> bool:
    """``name`` is printed unchanged by the C printer (so a pointer argument named like
    the buffer stays the buffer)."""
    from polycomp.hw.cpu.lowp import _c_safe as safe
    return bool(safe(name))


def buffers_used(s: ir.Stmt) -> set[str]:
    """The names of the buffers ``s`` loads, stores or passes by name (an ``ir.Var`` of
    dtype ``handle``, as a kernel call's pointer argument)."""
    used: set[str] = set()

    def visit(n):
        if isinstance(n, (ir.Load, ir.Store)):
            used.add(n.buffer.name)
        if isinstance(n, ir.Var) and n.dtype == "handle":
            used.add(n.name)
    ir.walk(s, visit)
    return used


def has_mark(body: ir.Stmt, mark: str) -> bool:
    """Whether ``body`` holds an ``AttrStmt`` of key ``mark`` (a marked nest)."""
    found: list[ir.AttrStmt] = []
    ir.walk(body, lambda n: found.append(n)
            if isinstance(n, ir.AttrStmt) and n.key == mark else None)
    return bool(found)


def replace_marked_nest(body: ir.Stmt, mark: str, new: ir.Stmt,
                        droppable: Callable[[ir.Buffer], bool] = lambda b: True
                        ) -> tuple[ir.Stmt, int]:
    """``body`` with every ``AttrStmt`` of key ``mark`` (and the nest under it) replaced
    by ``new``, then every ``Allocate`` of a ``droppable`` buffer that the result no
    longer uses (:func:`buffers_used`, by name) unwrapped (its body kept); and how many
    marks were replaced.

    Assumes: the marked nest writes nothing that outlives it but what ``new`` writes
    (the tree passes fuse only a kernel made of the chain alone), so only buffers private
    to the nest lose their uses.  Guarantees: with 0 marks replaced the statements are
    unchanged (callers then keep their function); nothing but the marked nests and
    unused allocations changes."""

    class _Replace(ir.Mutator):
        count = 0

        def visit_AttrStmt(self, s):
            if s.key != mark:
                return self.generic(s)
            self.count += 1
            return new

    r = _Replace()
    out = r.visit(body)
    used = buffers_used(out)

    class _DropAlloc(ir.Mutator):
        def visit_Allocate(self, s):
            inner = self.visit(s.body)
            if droppable(s.buffer) and s.buffer.name not in used:
                return inner
            return ir.Allocate(s.buffer, inner)

    return _DropAlloc().visit(out), r.count


def lower_to_call(func: ir.LoweredFunc, state, mark: str, name: str, args: tuple,
                  source: Callable[[], str]) -> ir.LoweredFunc | None:
    """``func`` with the ``mark`` nests replaced by ``name(args)`` (a call of the
    generated C function, :func:`replace_marked_nest`, every unused allocation dropped)
    and ``source()`` recorded as ``name``'s C source in ``state.generated``; None, and
    nothing recorded, when ``func`` has no such mark.  Assumes ``args`` match the
    function's parameters (the caller's spec)."""
    body, count = replace_marked_nest(func.body, mark,
                                      ir.Evaluate(ir.Call(name, args, "void", pure=False)))
    if not count:
        return None
    state.generated.add(name, source())
    return dataclasses.replace(func, body=body)


def stage_inputs(stages: Sequence[MiddleStage]) -> list[ir.Buffer]:
    """The arrays the elementwise ``stages`` read besides each one's ``prev``: each once
    (by identity), in order of first read (stage order, then the loads' walk order).
    These become extra pointer arguments of the fused kernel, in this order."""
    extra: list[ir.Buffer] = []
    for e in stages:
        for ld in _loads(e.stage.body):
            if ld.buffer is not e.prev and all(ld.buffer is not b for b in extra):
                extra.append(ld.buffer)
    return extra


def input_strides(stages: Sequence[MiddleStage], buf: ir.Buffer, t_shape: Sequence,
                  axis_names: Sequence[str], same: Callable[[Any, Any], bool]
                  ) -> tuple[ir.Load, list[str]] | None:
    """The first load of ``buf`` in ``stages`` and ``buf``'s row-major strides as C
    expressions, or None when one of its extents differs (``same``) from the
    intermediate's (``t_shape``) along the axis that indexes it.

    Assumes: ``buf`` is read by one of ``stages``, and each index of that first load is
    one of its stage's iterators (``StopIteration`` otherwise), axis ``k`` of extent
    ``t_shape[k]`` named ``axis_names[k]`` in the kernel's C.  Guarantees: the stride of
    dimension ``p`` is the product of the names of the later dimensions' axes, those
    named ``""`` left out (``"1"`` when none is left) — e.g. a batch axis the kernel
    strides separately."""
    e0 = next(e for e in stages if any(ld.buffer is buf for ld in _loads(e.stage.body)))
    ld = next(n for n in _loads(e0.stage.body) if n.buffer is buf)
    kinds = []
    for pos, idx in enumerate(ld.indices):
        k = next(i for i, v in enumerate(e0.iters) if v is idx)
        if not same(buf.shape[pos], t_shape[k]):
            return None
        kinds.append(axis_names[k])
    return ld, [" * ".join(x for x in kinds[p + 1:] if x) or "1" for p in range(len(kinds))]


def elementwise_lines(stages: Sequence[MiddleStage],
                      value: Callable[[MiddleStage], str]) -> tuple[str, ...] | str:
    """The C lines ``v = <value(e)>;`` of ``stages`` in order, or why one is not printable
    (the printer's ``ValueError``, ``StopIteration`` or ``KeyError``)."""
    lines = []
    try:
        for e in stages:
            lines.append(f"v = {value(e)};")
    except (ValueError, StopIteration, KeyError) as exc:
        return f"elementwise stage not printable ({exc})"
    return tuple(lines)
