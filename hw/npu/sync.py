"""Pipe synchronisation placed by dependence analysis between pipes (the NPU IR pass
``npu-sync``, :mod:`.passes`).

The lowering emits its instructions without flags; :func:`place_flags` adds every
``SetFlag``/``WaitFlag`` the program needs, and no other:

* the accesses of each on-chip buffer (reads and writes, per instruction and pipe)
  are grouped at their **innermost common loop** ``L`` (the top level when none): each
  item of ``L``'s body (an instruction, or a loop holding some of the accesses) is one
  access of one pipe; consecutive items of one pipe form a *run*;
* a **dependence** joins a run to a later run of another pipe when one of them writes:
  a read depends on the last write before it, a write on every run since the last
  write (that write included) — read after write, write after read, write after write
  — unless an earlier run of the consumer's pipe depends on that run already (the pipe's
  own order then carries it);
* a dependence inside one iteration of ``L`` becomes ``SetFlag<P->Q>(e)`` right after
  the producer run's last item and ``WaitFlag<P->Q>(e)`` right before the consumer
  run's first item (hoisted out of the loops below ``L`` that hold them);
* a dependence from one iteration of ``L`` to a later one (the same ping-pong slot,
  ``copies`` iterations later) is the same pair from the end of the body to its
  start, with one ``SetFlag`` per slot before the program and one ``WaitFlag`` per slot
  after it (each slot's flag is then set and waited alternately);
* the event ``e`` is the buffer's slot index plus a base that keeps the flags of one
  pipe pair apart; buffers whose dependences join the same pipes in the same loop with
  the same slot index share one flag when a set after the last producer and a wait
  before the first consumer serve them all (``l1A`` and ``l1B``: one MTE2->MTE1 pair).

Assumes: a buffer's accesses at the level of their common loop come from one pipe per
item (else :class:`~polycomp.errors.PolycompInternalError`), and all use the same slot
index.  Guarantees: every cross-pipe access pair of a buffer slot is ordered by a
set/wait chain (the simulator's race check proves it on every run), flags are balanced
(none left set, none waited without a set), and each placed pair orders some
dependence no other placed flag orders (``tests/test_npu_sync.py`` removes each pair in
turn and expects the simulator to report a race).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from polycomp.errors import PolycompInternalError

from .program import (
    Barrier,
    CopyIm2Col,
    CopyIn,
    CopyOut,
    DataCopyGm2L1,
    DataCopyNd2Nz,
    DataCopyPadIn,
    DataCopyPadOut,
    FixpipeCall,
    Ix,
    Kernel,
    Load2D,
    LoadData2D,
    LoadData3D,
    LoadDataTranspose,
    Loop,
    Mmad,
    MmadCall,
    Program,
    SetFlag,
    Slot,
    TransData5HD,
    VecCall,
    VecOp,
    WaitFlag,
    ix,
)
from .target import EVENT_IDS

Path = tuple[int, ...]


def accesses(s) -> list[tuple[Slot, bool]]:
    """``(slot, is_write)`` of each on-chip operand of instruction ``s``."""
    if isinstance(s, (CopyIn, DataCopyNd2Nz, DataCopyPadIn, DataCopyGm2L1)):
        return [(s.dst, True)]
    if isinstance(s, (Load2D, CopyIm2Col, LoadData2D, LoadDataTranspose, LoadData3D,
                      TransData5HD)):
        return [(s.src, False), (s.dst, True)]
    if isinstance(s, (Mmad, MmadCall)):
        return [(s.a, False), (s.b, False), (s.c, True)]
    if isinstance(s, CopyOut) and s.quant is not None:
        return [(s.src, False), (s.quant, False)]
    if isinstance(s, FixpipeCall) and s.cbuf is not None:
        return [(s.src, False), (s.cbuf, False)]
    if isinstance(s, (CopyOut, FixpipeCall, DataCopyPadOut)):
        return [(s.src, False)]
    if isinstance(s, (VecOp, VecCall)):
        return [*((x, False) for x in s.srcs if isinstance(x, Slot)), (s.dst, True)]
    return []


def strip_flags(body: tuple) -> tuple:
    """``body`` without any SetFlag/WaitFlag."""
    out: list = []
    for s in body:
        if isinstance(s, Loop):
            out.append(dataclasses.replace(s, body=strip_flags(s.body)))
        elif not isinstance(s, (SetFlag, WaitFlag, Barrier)):
            out.append(s)
    return tuple(out)


@dataclass(frozen=True)
class _Run:
    pipe: str
    first: int        # item indices in the common loop's body
    last: int
    writes: bool


@dataclass(frozen=True)
class Flag:
    """One placed set/wait pair: in the body at ``path``, set after item ``after`` (-1:
    before the program, one per slot) and wait before item ``before`` (len: after the
    program); ``slot`` the event's slot part, ``copies`` the slots."""
    path: Path
    src: str
    dst: str
    after: int
    before: int
    slot: Ix
    copies: int
    carried: bool


def _collect(body: tuple, path: Path, out: dict) -> None:
    for k, s in enumerate(body):
        if isinstance(s, Loop):
            _collect(s.body, (*path, k), out)
            continue
        for slot, w in accesses(s):
            out.setdefault(slot.buf.name, []).append(((*path, k), s.pipe, w, slot))


def _common(paths: list[Path]) -> Path:
    """The path of the innermost loop holding all ``paths`` (instructions)."""
    n = min(len(p) for p in paths) - 1
    cp: list[int] = []
    for i in range(n):
        if len({p[i] for p in paths}) != 1:
            break
        cp.append(paths[0][i])
    return tuple(cp)


def _runs(items: list[tuple[int, str, bool]], buf: str) -> list[_Run]:
    per: dict[int, tuple[str, bool]] = {}
    for j, pipe, w in items:
        if j in per and per[j][0] != pipe:
            raise PolycompInternalError(f"npu flag placement: buffer {buf} is used by two "
                                        f"pipes inside one item; not placeable")
        per[j] = (pipe, per.get(j, (pipe, False))[1] or w)
    runs: list[_Run] = []
    for j in sorted(per):
        pipe, w = per[j]
        if runs and runs[-1].pipe == pipe:
            r = runs[-1]
            runs[-1] = _Run(pipe, r.first, j, r.writes or w)
        else:
            runs.append(_Run(pipe, j, j, w))
    return runs


def _deps(runs: list[_Run]) -> list[tuple[int, int]]:
    """``(i, k)``: run k depends on run i (indices into ``runs``), i < k, and no run
    ``j`` of k's pipe between them depends on i already (the pipe runs its instructions
    in order: the flag ordering ``i`` before ``j`` orders it before ``k`` too)."""
    out: list[tuple[int, int]] = []
    last_w = None
    for k, r in enumerate(runs):
        if r.writes:
            start = last_w if last_w is not None else 0
            cand = [i for i in range(start, k) if runs[i].pipe != r.pipe]
            last_w = k
        elif last_w is not None and runs[last_w].pipe != r.pipe:
            cand = [last_w]
        else:
            cand = []
        out += [(i, k) for i in cand
                if not any((i, j) in out and runs[j].pipe == r.pipe for j in range(i + 1, k))]
    return out


def _flags_of(buf: str, accs: list) -> set[Flag]:
    slots = {a[3].index for a in accs}
    if len(slots) != 1:
        raise PolycompInternalError(f"npu flag placement: buffer {buf} is used with "
                                    f"different slot indices")
    slot = accs[0][3]
    copies, idx = slot.buf.copies, slot.index if slot.buf.copies > 1 else ix(0)
    paths = [a[0] for a in accs]
    cp = _common(paths)
    runs = _runs([(a[0][len(cp)], a[1], a[2]) for a in accs], buf)
    flags = set()
    for i, k in _deps(runs):
        flags.add(Flag(cp, runs[i].pipe, runs[k].pipe, runs[i].last, runs[k].first, idx,
                       copies, False))
    if cp and len(runs) > 1:     # from one iteration of the common loop to a later one
        n = len(runs)
        for i, k in _deps(runs + runs):
            if i < n <= k:
                flags.add(Flag(cp, runs[i].pipe, runs[k - n].pipe, runs[i].last,
                               runs[k - n].first, idx, copies, True))
    return flags


def _insert(body: tuple, path: Path, ins: dict, mark: bool = False) -> tuple:
    """``body`` with the flags of ``ins`` inserted (``mark``: as ``(item index or None,
    instruction)`` pairs, the index of the original item each came with)."""
    out: list = []
    before, after = ins.get(("b", path), {}), ins.get(("a", path), {})
    for k, s in enumerate(body):
        out += [(None, x) if mark else x for x in before.get(k, [])]
        if isinstance(s, Loop):
            s = dataclasses.replace(s, body=_insert(s.body, (*path, k), ins))
        out.append((k, s) if mark else s)
        out += [(None, x) if mark else x for x in after.get(k, [])]
    return tuple(out)


def _merge(flags: set[Flag]) -> set[Flag]:
    """One flag for the dependences of several buffers between the same pipes, slot and
    loop when one set (after the last producer) and one wait (before the first
    consumer) serve them all."""
    groups: dict[tuple, list[Flag]] = {}
    for f in flags:
        groups.setdefault((f.path, f.src, f.dst, f.slot, f.carried, f.copies), []).append(f)
    out: set[Flag] = set()
    for fs in groups.values():
        a, b = max(f.after for f in fs), min(f.before for f in fs)
        if (b <= a) if fs[0].carried else (a < b):
            out.add(dataclasses.replace(fs[0], after=a, before=b))
        else:
            out |= set(fs)
    return out


def plan_flags(body: tuple) -> list[Flag]:
    """The flags :func:`place_flags` places in ``body`` (flags stripped), in order."""
    groups: dict = {}
    _collect(strip_flags(body), (), groups)
    flags: set[Flag] = set()
    for buf, accs in groups.items():
        flags |= _flags_of(buf, accs)
    return sorted(_merge(flags), key=lambda f: (len(f.path), f.path, f.after, f.before,
                                                f.src, f.dst, f.carried, repr(f.slot)))


def place_kernel_flags(k: Kernel) -> Kernel:
    """Every program of ``k`` with its flags (:func:`place_flags`) and its barriers
    within a pipe (:func:`place_barriers`) placed."""
    def one(p: Program) -> Program:
        q = place_flags(p)
        return dataclasses.replace(q, body=place_barriers(q.body))
    return k.map_programs(one)


#: Mmads accumulating into an L0C tile of fewer than this many 16x16 fractals need a
#: PipeBarrier<PIPE_M> between them (docs: Mmad, "同步优化说明")
SMALL_MMAD_FRACTALS = 10


def _needs_barrier(s, pipe: str) -> bool:
    if pipe == "V":
        return True
    m, n = s.m, s.n
    return not (m.is_const() and n.is_const()) or \
        (m.args[0] // 16) * (n.args[0] // 16) < SMALL_MMAD_FRACTALS


def _written(body: tuple, pipes: tuple) -> dict:
    out: dict = {p: set() for p in pipes}
    for s in body:
        if isinstance(s, Loop):
            for p, w in _written(s.body, pipes).items():
                out[p] |= w
        elif getattr(s, "pipe", None) in pipes:
            out[s.pipe] |= {slot.buf.name for slot, w in accesses(s) if w}
    return out


def place_barriers(body: tuple, pipes: tuple = ("V", "M")) -> tuple:
    """``body`` with a ``PipeBarrier`` before every vector instruction that reads or
    writes a buffer an earlier vector instruction wrote since the last barrier (the
    vector unit is pipelined: the Ascend C docs ask for ``PipeBarrier<PIPE_V>`` between
    dependent vector instructions), and the same for Mmads accumulating into a small
    L0C tile (``PipeBarrier<PIPE_M>``, docs: Mmad).  A loop's body starts as if its own
    writes were pending (the dependence from one iteration to the next)."""
    def visit(items: tuple, dirty: dict) -> tuple[tuple, dict]:
        out: list = []
        for s in items:
            if isinstance(s, Loop):
                written = _written(s.body, pipes)
                entry = {p: dirty[p] | written[p] for p in pipes}
                inner, after = visit(s.body, entry)
                out.append(dataclasses.replace(s, body=inner))
                dirty = {p: dirty[p] | after[p] for p in pipes}
                continue
            p = getattr(s, "pipe", None)
            if isinstance(p, str) and p in pipes and \
                    not isinstance(s, (SetFlag, WaitFlag, Barrier)):
                acc = accesses(s)
                if {slot.buf.name for slot, _ in acc} & dirty[p] and _needs_barrier(s, p):
                    out.append(Barrier(p))
                    dirty = {**dirty, p: set()}
                dirty = {**dirty, p: dirty[p] | {slot.buf.name for slot, w in acc if w}}
            out.append(s)
        return tuple(out), dirty
    return visit(body, {p: set() for p in pipes})[0]


def place_flags(prog: Program, skip: frozenset = frozenset()) -> Program:
    """``prog`` with its flags placed by dependence analysis (module docstring);
    ``skip``: flags of :func:`plan_flags` left out (tests inject a missing flag).

    Event ids: the flags between top-level items take the first ids of their pipe
    pair; the flags of each top-level loop the ids after those, the loops one after
    the other reusing them (a loop's flags are all waited for when it ends: the set
    before the loop of a dependence carried by one of its loops, one per slot, is
    placed right before it and the wait right after it)."""
    body = strip_flags(prog.body)
    flags = plan_flags(body)
    top: dict[tuple[str, str], int] = {}
    for f in flags:
        if not f.path:
            top[(f.src, f.dst)] = top.get((f.src, f.dst), 0) + f.copies
    bases: dict[int, dict] = {}
    ins: dict = {}
    pro: dict[int, list] = {}
    epi: dict[int, list] = {}
    for f in flags:
        group = f.path[0] if f.path else -1
        base = bases.setdefault(group, dict(top) if group >= 0 else {})
        b = base.get((f.src, f.dst), 0)
        base[(f.src, f.dst)] = b + f.copies
        if b + f.copies > EVENT_IDS:
            raise PolycompInternalError(f"npu flag placement: program {prog.name} needs "
                                        f"more than {EVENT_IDS} event ids for "
                                        f"{f.src}_{f.dst}")
        if f in skip:
            continue
        ev = f.slot + b if b else f.slot
        ins.setdefault(("a", f.path), {}).setdefault(f.after, []).append(
            SetFlag(f.src, f.dst, ev))
        ins.setdefault(("b", f.path), {}).setdefault(f.before, []).append(
            WaitFlag(f.src, f.dst, ev))
        if f.carried:
            pro.setdefault(group, []).extend(SetFlag(f.src, f.dst, ix(b + e))
                                             for e in range(f.copies))
            epi.setdefault(group, []).extend(WaitFlag(f.src, f.dst, ix(b + e))
                                             for e in range(f.copies))
    out: list = []
    for item in _insert(body, (), ins, mark=True):
        out += pro.get(item[0], []) if item[0] is not None else []
        out.append(item[1])
        out += epi.get(item[0], []) if item[0] is not None else []
    return dataclasses.replace(prog, body=tuple(out))
