"""The NPU IR pass ``npu-ub-banks`` (option ``ub_banks``): UB buffers placed so that
the sources of a vector call read different bank groups.

On the A2 generation UB is 16 bank groups of 32-byte blocks, block ``b`` in group
``b % 16`` (docs/npu.md: the address format ``{BANK, BANK_DEPTH, BG, BANK_WIDTH}``);
a group serves one read a cycle.  A repeat of a contiguous operand (the first-n form,
or block stride 1 and repeat stride 8) reads 8 consecutive blocks: one half of the
groups, which half set by the operand's address modulo 512.  Two contiguous sources
whose addresses are equal modulo 512 collide in every repeat (a read-read conflict:
the simulator charges a cycle per repeat, :func:`~.vector_ops.bank_conflicts`); 256
bytes apart they never do.  The sequential placement gives two inputs of equal size
``S`` (a multiple of 256 B) with two copies each addresses ``2S`` apart: the same
half, always.

Assumes: a program of API calls after ``npu-double-buffer`` (copies final).
Guarantees: every UB buffer that a vector call reads in one repeat with another
buffer (both contiguous — or stepping a tile row of the padded pitch a repeat,
``ceildiv(CP * itemsize, 32)`` blocks, which the host makes an odd multiple of 8 where
``bank_pitch`` pads — their offsets a multiple of 256 bytes apart that is constant
modulo 512 over the loop variables), and the destination of a call with one such
source (constrained to the other half from it), gets a
``bank_phase`` (0 or 256: its address modulo 512, at most 256 bytes of padding; its
copies a multiple of 512 bytes apart), chosen by local search to minimise the calls
whose two such sources share a half of the groups (a 2-colouring where one exists).
Other buffers keep the sequential placement.  A program whose buffers all have
constant sizes keeps its placement when the padding would overflow UB; the host
tiling of a vector program counts that padding.  Nothing but addresses changes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from polycomp.errors import NpuCapacityError

from .lower_vector import pitch_itemsize
from .program import (
    ITEMSIZE,
    Ix,
    Kernel,
    LocalBuf,
    Loop,
    Program,
    Slot,
    VecCall,
    ceildiv,
    ix,
    map_slots,
    simplify_ix,
)
from .target import UB_BANK_PERIOD

_HALF = UB_BANK_PERIOD // 2
#: calls whose operands the hardware does not read as 256-byte repeats of one type
_SKIP = {"Compare", "Compares", "Select", "Brcb", "ReduceRepeat"}


@dataclass
class _Pairs:
    """Weighted parity constraints ``phase(a) xor phase(b) == want`` (phases in units
    of 256 bytes)."""
    w: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def add(self, a: str, b: str, want: int) -> None:
        if a > b:
            a, b = b, a
        key = (a, b, want)
        self.w[key] = self.w.get(key, 0) + 1


def _contiguous(s: VecCall, k: int, odd: Ix | None = None) -> bool:
    """Operand ``k`` (0: the destination) of ``s`` reads whole consecutive repeats, or
    (``odd``: the repeat stride of a tile row, which the host pads to an odd multiple
    of 256 bytes, ``bank_pitch``) rows that alternate between the halves of the bank
    groups in step with such repeats."""
    if s.count is not None:
        return True
    assert s.rep is not None
    blk, rep = s.rep.strides[k]
    return blk.is_const(1) and (rep.is_const(8) or (odd is not None and rep == odd))


def _vars(e: Ix) -> set[str]:
    if e.op == "var":
        return {e.args[0]}
    return set() if e.op == "const" else {v for a in e.args for v in _vars(a)}


def _phase_gap(d: Ix) -> int | None:
    """``d`` modulo 512 when it is the same multiple of 256 for every value of its
    variables (checked at 0 and 1 of each: affine offsets of loop iterators), else
    None."""
    names = sorted(_vars(d))
    if len(names) > 3:
        return None
    vals = set()
    for m in range(1 << len(names)):
        v = d.eval({n: (m >> i) & 1 for i, n in enumerate(names)})
        vals.add(v % UB_BANK_PERIOD)
    if len(vals) != 1 or next(iter(vals)) % _HALF:
        return None
    return vals.pop()


def _collect(body: tuple, out: _Pairs, odd: Ix | None = None) -> None:
    for s in body:
        if isinstance(s, Loop):
            _collect(s.body, out, odd)
            continue
        if not isinstance(s, VecCall) or s.api in _SKIP or s.dst.buf.level != "UB":
            continue
        ops = [(k + 1, x) for k, x in enumerate(x for x in s.srcs if isinstance(x, Slot))]
        if s.api == "FusedMulAdd":                  # the destination is read too
            ops.append((0, s.dst))
        srcs = [(x.buf, simplify_ix(x.offset * ITEMSIZE[x.buf.dtype]))
                for k, x in ops if x.buf.level == "UB" and _contiguous(s, k, odd)]
        pairs = [(a, oa, b, ob) for i, (a, oa) in enumerate(srcs) for b, ob in srcs[i + 1:]]
        one = {(b.name, ob) for b, ob in srcs}
        if len(one) == 1 and s.api != "FusedMulAdd" and _contiguous(s, 0, odd) and \
                s.dst.buf.level == "UB" and s.dst.buf.itemsize == srcs[0][0].itemsize:
            # one source: the destination's writes in the other half of the groups
            pairs.append((s.dst.buf, simplify_ix(s.dst.offset * ITEMSIZE[s.dst.buf.dtype]),
                          *srcs[0]))
        for a, oa, b, ob in pairs:
            gap = _phase_gap(simplify_ix(oa - ob))
            if a.name == b.name or gap is None:
                continue
            # a + oa and b + ob in different halves: pa - pb = 256 - d (mod 512)
            out.add(a.name, b.name, (1 + gap // _HALF) % 2)


def _solve(pairs: _Pairs) -> dict[str, int]:
    """Phases (0/1) minimising the weight of the violated constraints: start from 0,
    flip single buffers while that lowers it."""
    names = sorted({n for a, b, _ in pairs.w for n in (a, b)})
    ph = {n: 0 for n in names}

    def cost() -> int:
        return sum(w for (a, b, want), w in pairs.w.items() if ph[a] ^ ph[b] != want)
    best = cost()
    for _ in range(4 * len(names)):
        moved = False
        for n in names:
            ph[n] ^= 1
            c = cost()
            if c < best:
                best, moved = c, True
            else:
                ph[n] ^= 1
        if not moved:
            break
    return ph


def place_program(prog: Program, capacity: int = 0) -> Program:
    """``prog`` with ``bank_phase`` set on the buffers the constraints name (module
    docstring)."""
    pairs = _Pairs()
    isz = pitch_itemsize(prog)
    _collect(prog.body, pairs,
             simplify_ix(ceildiv(ix("CP") * isz, 32)) if isz and prog.tiling.cols is not None
             else None)
    if not pairs.w:
        return prog
    ph = _solve(pairs)
    new = {b.name: dataclasses.replace(b, bank_phase=ph[b.name] * _HALF)
           for b in prog.buffers if b.name in ph}
    out = _rebind(prog, new)
    if capacity and all(isinstance(v, int) for b in out.buffers for v in (b.rows, b.cols)):
        from .sim import allocate_level
        try:
            allocate_level(out.buffers, "UB", capacity)
        except NpuCapacityError:
            return prog
    return out


def _rebind(prog: Program, new: dict[str, LocalBuf]) -> Program:
    def slot(s: Slot) -> Slot:
        b = new.get(s.buf.name)
        return s if b is None else dataclasses.replace(s, buf=b)
    return dataclasses.replace(prog, buffers=tuple(new.get(b.name, b) for b in prog.buffers),
                               body=map_slots(prog.body, slot))


def place_kernel(k: Kernel, capacity: int = 0) -> Kernel:
    return k.map_programs(lambda p: place_program(p, capacity))


__all__ = ["place_kernel", "place_program"]
