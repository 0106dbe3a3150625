"""The NPU IR pass ``npu-ub-reuse``: UB tiles of the vector pipe share storage where
their live ranges do not overlap.

The vector lowering gives every expression node a tile of its own and ``npu-isa`` adds
its temporaries, so a layernorm over rows of 4096 fp16 values holds seven fp32 tiles
of which at most three are live at once; without sharing one row does not fit UB.

Assumes: a program of API calls (after ``npu-isa``); a buffer whose value is carried
from one iteration of a loop to the next is accessed outside that loop too (it is
initialised before it: a carried reduction's ``Duplicate``, a chain's running max).
Guarantees: two UB buffers of the same level, type, shape and layout, with one copy,
not ``pingpong``, accessed only by vector calls (pipe V, in order), become one when the
first's last access precedes the second's first access in program order, where an
access inside a loop that does not hold every access of the buffer counts as an access
over the whole loop.  Nothing else changes: the same calls on the same elements, fewer
buffers.  Run before ``npu-double-buffer`` and ``npu-sync`` (a write into a reused
tile after a read of its earlier value is ordered by the vector pipe's own order; a
write after a write gets the ``PipeBarrier`` that pass places).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .program import Kernel, LocalBuf, Loop, Program, Slot, TransData5HD, VecCall, map_slots


@dataclass
class _Ranges:
    """Per buffer name: its access positions and, for each, the loops around it (as
    their [first, last] positions)."""
    pos: dict[str, list[int]] = field(default_factory=dict)
    loops: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    spans: list[list[int]] = field(default_factory=list)
    other: set[str] = field(default_factory=set)     # touched by a non-vector call
    n: int = 0


def _names(s) -> list[str]:
    """The buffers instruction ``s`` touches."""
    names: list[str] = []

    def note(x: Slot) -> Slot:
        names.append(x.buf.name)
        return x
    map_slots((s,), note)
    return names


def _scan(body: tuple, r: _Ranges, outer: tuple[int, ...]) -> None:
    for s in body:
        if isinstance(s, Loop):
            lid = len(r.spans)
            r.spans.append([r.n, r.n])
            _scan(s.body, r, outer + (lid,))
            r.spans[lid][1] = max(r.n - 1, r.spans[lid][0])
            continue
        for name in _names(s):
            r.pos.setdefault(name, []).append(r.n)
            r.loops.setdefault(name, []).append(outer)
            if not isinstance(s, (VecCall, TransData5HD)):
                r.other.add(name)
        r.n += 1


def _live(r: _Ranges, name: str) -> tuple[int, int]:
    """The live range of ``name``: its first and last access, widened to every loop
    that holds some but not all of its accesses."""
    ps = r.pos[name]
    first, last = min(ps), max(ps)
    lo, hi = first, last
    # a loop holds every access iff its span holds the first and the last (each loop
    # looked at once: the loops of every access, each tested against every access, were
    # quadratic in a long program's accesses)
    for lid in {lid for stack in r.loops[name] for lid in stack}:
        a, b = r.spans[lid]
        if not (a <= first and last <= b):
            lo, hi = min(lo, a), max(hi, b)
    return lo, hi


def reuse_program(prog: Program) -> Program:
    """``prog`` with UB vector tiles sharing storage (module docstring)."""
    r = _Ranges()
    _scan(prog.body, r, ())

    def key(b: LocalBuf):
        return (b.level, b.dtype, b.rows, b.cols, b.layout)
    cands = [b for b in prog.buffers if b.level == "UB" and b.copies == 1 and not b.pingpong
             and b.name in r.pos and b.name not in r.other]
    live = {b.name: _live(r, b.name) for b in cands}
    # greedy: in order of first access, into the first same-shape tile free by then
    owners: list[tuple[LocalBuf, int]] = []          # (representative, its last access)
    into: dict[str, LocalBuf] = {}
    for b in sorted(cands, key=lambda b: live[b.name]):
        lo, hi = live[b.name]
        for i, (rep, last) in enumerate(owners):
            if key(rep) == key(b) and last < lo:
                owners[i] = (rep, hi)
                into[b.name] = rep
                break
        else:
            owners.append((b, hi))
    if not into:
        return prog

    def slot(s: Slot) -> Slot:
        rep = into.get(s.buf.name)
        return s if rep is None else dataclasses.replace(s, buf=rep)
    return dataclasses.replace(prog, body=map_slots(prog.body, slot),
                               buffers=tuple(b for b in prog.buffers if b.name not in into))


def reuse_kernel(k: Kernel) -> Kernel:
    return k.map_programs(reuse_program)


__all__ = ["reuse_kernel", "reuse_program"]
