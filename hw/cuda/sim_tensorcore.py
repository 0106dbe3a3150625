"""Tensor Core and asynchronous-copy intrinsics of the CUDA simulator (lane-exact).

Registered in :data:`~polycomp.hw.cuda.sim_intrinsics.INTRINSICS` (see
:mod:`polycomp.hw.cuda.ptx` for the IR calls and how they print):

* ``ptx_ldmatrix(dst, src, num, trans)`` — ``ldmatrix.sync.aligned.m8n8.x{num}[.trans]
  .shared.b16``.  ``dst`` and ``src`` are ``Load`` nodes used as addresses: ``dst`` a
  per-thread ``int32`` register array (``num`` consecutive 32-bit registers are written),
  ``src`` the shared element each lane points at.  Lanes ``8m .. 8m+7`` give the row
  addresses (16 bytes each, 16-byte aligned) of matrix ``m``; lane ``l`` receives, in
  register ``m``, the elements ``(l >> 2, 2(l & 3))`` and ``(l >> 2, 2(l & 3) + 1)`` of
  matrix ``m`` (of its transpose with ``.trans``), the first in the low half.
* ``ptx_mma_m16n8k16_f16`` / ``ptx_mma_m16n8k16_bf16(d, a, b)`` —
  ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`` with ``D = C = d``
  (4 floats per lane), ``a`` (4 registers, elements ``a0..a7``) and ``b`` (2 registers,
  ``b0..b3``) in the PTX ISA fragment layouts: with ``g = lane >> 2``, ``t = lane & 3``,
  ``a_i`` is ``A[g + 8*((i >> 1) & 1), 2t + (i & 1) + 8*(i >> 2)]``, ``b_i`` is
  ``B[2t + (i & 1) + 8*(i >> 1), g]`` and ``c_i`` is ``C[g + 8*(i >> 1), 2t + (i & 1)]``.
  Products are exact and the sum is formed in float64, then rounded to float32.
* ``ptx_cp_async(dst, src, src_bytes)`` — ``cp.async.cg.shared.global [dst], [src], 16,
  src_bytes``: 16 bytes, the first ``src_bytes`` from global memory, the rest zero.  Both
  addresses must be 16-byte aligned.  The copy is *queued* in the issuing thread: the
  source is read at issue (kernels never write a buffer they copy from), the shared
  destination is written only when the copy's group completes.
* ``ptx_cp_async_commit()`` closes the thread's open group; ``ptx_cp_async_wait(n)``
  completes all of the thread's committed groups except the newest ``n`` (their shared
  writes happen then, race-checked as stores of that thread).
* ``pc_pack_f16x2(lo, hi)`` / ``pc_pack_bf16x2``: both values rounded to the 16-bit
  type (nearest even) and packed into one int32, ``lo`` in the low half.
* ``pc_xor(a, b)``: bitwise exclusive or of integers (the shared-memory swizzle).
* ``pc_st4(dst, v0, v1, v2, v3)``: one vector store of 4 consecutive elements (16 bytes
  of float32, 8 of float16/bfloat16) that must be aligned to its size; counted as one
  global store request.

Warp-collective instructions (``ldmatrix``, ``mma``) must be executed by all 32
threads of a warp (``.sync.aligned``), else a ``warp-sync`` finding.  Reading or
writing a shared element whose ``cp.async`` has not completed (no ``wait_group`` of
the issuing thread covered it yet) is an ``async-copy`` finding
(:class:`AsyncCopyHazardError`), by ``ldmatrix`` as by an ordinary load or store.

Counters: ``ldmatrix`` adds one shared-load request per 8x8 matrix (a quarter-warp
phase of 8 rows of 16 bytes; the ideal is one wavefront each, so any extra wavefront is
a bank conflict); a ``cp.async`` adds one shared-store request per quarter warp (8 lanes
of 16 bytes) and its global bytes/sectors to the global load counters; ``mma`` adds
``2*16*8*16`` flops per warp.
"""
from __future__ import annotations

import numpy as np

from polycomp import dtypes as dt

from .sim_counters import global_sectors, shared_wavefronts
from .sim_intrinsics import WARP, intrinsic
from .sim_report import FINDING_ERRORS, SimulatorError


class AsyncCopyHazardError(SimulatorError):
    """A shared element was read or written while a ``cp.async`` into it was still in
    flight (its group had not been waited for)."""


FINDING_ERRORS.setdefault("async-copy", AsyncCopyHazardError)

_LANE = np.arange(WARP)
_G = _LANE >> 2
_T = _LANE & 3


# --------------------------------------------------------------------------- helpers


def _converged(sim, name, active) -> np.ndarray:
    """Warps (bool per warp) executing ``name``; checks that whole warps execute it."""
    g = sim.geom
    act = active.reshape(-1, WARP)
    valid = g.valid.reshape(-1, WARP)
    warps = act.any(axis=1)
    partial = warps & ((act != valid).any(axis=1) | ~valid.all(axis=1))
    if partial.any():
        w = int(np.argmax(partial))
        missing = int(np.argmax(valid[w] & ~act[w])) if (valid[w] & ~act[w]).any() else 0
        sim.finding("warp-sync", f"{name}: a .sync.aligned warp-wide instruction executed by "
                                 f"{int(act[w].sum())} of the 32 threads of a warp "
                                 f"({g.describe(w * WARP + missing)} does not execute it)",
                    int(partial.sum()))
    return warps


def _pointer(sim, arg, active, what, scope=None):
    """(memory, element offset per lane) of a Load node used as an address."""
    from polycomp import ir
    if not isinstance(arg, ir.Load):
        sim.fail(f"{what}: an address argument must be a buffer element, got "
                 f"{type(arg).__name__}")
    mem = sim._memory(arg.buffer, what)
    if scope is not None and mem.scope != scope:
        sim.fail(f"{what}: {arg.buffer.name} is in {mem.scope} memory, {scope} is needed")
    off = sim._offsets(mem, arg.buffer, arg.indices, sim.st, active, what)
    return mem, off


def _check_range(sim, mem, off, count, active, what):
    bad = active & (off + count > mem.size)
    if bad.any():
        from .sim_report import OutOfBoundsError
        j = int(np.argmax(bad))
        raise OutOfBoundsError(f"kernel {sim.stats.name}: {what} of {mem.buffer.name} by "
                               f"{sim.geom.describe(j)}: elements {int(off[j])}.."
                               f"{int(off[j]) + count - 1} exceed its {mem.size} elements")


def _check_aligned(sim, mem, off, active, what):
    bad = active & ((off * mem.itemsize) % 16 != 0)
    if bad.any():
        j = int(np.argmax(bad))
        sim.fail(f"{what}: {sim.geom.describe(j)} gives a {mem.scope} address "
                 f"{mem.buffer.name}[{int(off[j])}] that is not 16-byte aligned")


def _u16(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint16).astype(np.uint32)


def _from_u16(bits: np.ndarray, dtype: str) -> np.ndarray:
    return bits.astype(np.uint16).view(dt.to_numpy(dtype))


# --------------------------------------------------------------------------- cp.async state


class _AsyncState:
    """Per chunk of blocks: queued copies and each thread's committed-group count."""

    def __init__(self, geom):
        self.geom = geom
        self.records: list = []       # [mem, pos (lanes, 8), values (lanes, 8), lanes, group]
        self.committed = np.zeros(geom.n_lanes, dtype=np.int64)


def _state(sim) -> _AsyncState:
    st = sim.__dict__.get("_tc_async")
    if st is None or st.geom is not sim.geom:
        st = sim.__dict__["_tc_async"] = _AsyncState(sim.geom)
    hooks = sim.__dict__.setdefault("shared_access_hooks", [])
    if _pending_hook not in hooks:
        hooks.append(_pending_hook)
    return st


def _pending(mem) -> np.ndarray:
    p = getattr(mem, "async_pending", None)
    if p is None:
        p = np.full(mem.data.shape[0], -1, dtype=np.int64)
        mem.async_pending = p
    return p


def _pending_hook(sim, mem, pos, offsets, active, write: bool) -> None:
    """Called for every ordinary shared load/store: is the element still in flight?"""
    p = getattr(mem, "async_pending", None)
    if p is None:
        return
    _report_pending(sim, mem, p, pos, offsets, active, "stores to" if write else "reads")


def _report_pending(sim, mem, p, pos, offsets, active, verb) -> None:
    hit = active & (p[np.where(active, pos, 0)] >= 0)
    if hit.any():
        j = int(np.argmax(hit))
        t = int(p[pos[j]])
        sim.finding("async-copy",
                    f"{sim.geom.describe(j)} {verb} {mem.buffer.name}[{int(offsets[j])}] "
                    f"while a cp.async of thread {sim.geom.thread_xyz(t)} into it has not "
                    f"completed (no cp.async.wait_group covered its group)", int(hit.sum()))


# --------------------------------------------------------------------------- handlers


@intrinsic("pc_xor")
def xor(sim, call, active):
    a = np.asarray(sim.eval(call.args[0], active)).astype(np.int64)
    b = np.asarray(sim.eval(call.args[1], active)).astype(np.int64)
    return np.bitwise_xor(a, b)


def _pack(sim, call, active, dtype):
    n = sim.geom.n_lanes
    lo, hi = (np.broadcast_to(np.asarray(sim.eval(a, active), dtype=np.float32), (n,))
              for a in call.args)
    bits = _u16(lo.astype(dt.to_numpy(dtype))) | (_u16(hi.astype(dt.to_numpy(dtype))) << 16)
    return bits.astype(np.uint32).view(np.int32)


@intrinsic("pc_pack_f16x2")
def pack_f16x2(sim, call, active):
    return _pack(sim, call, active, "float16")


@intrinsic("pc_pack_bf16x2")
def pack_bf16x2(sim, call, active):
    return _pack(sim, call, active, "bfloat16")


@intrinsic("ptx_ldmatrix")
def ldmatrix(sim, call, active):
    dst, src, num, trans = call.args
    num, trans = int(num.value), bool(trans.value)
    if num not in (1, 2, 4):
        sim.fail(f"ldmatrix: .x{num} does not exist (x1, x2, x4)")
    warps = _converged(sim, "ldmatrix", active)
    if not warps.any():
        return 0
    g = sim.geom
    smem, soff = _pointer(sim, src, active, "ldmatrix source", "shared")
    lmem, loff = _pointer(sim, dst, active, "ldmatrix destination", "local")
    if smem.itemsize != 2 or lmem.itemsize != 4:
        sim.fail("ldmatrix: needs a 16-bit shared buffer and 32-bit registers")
    _check_range(sim, lmem, loff, num, active, "ldmatrix destination")
    supplies = active & (g.warp_lane < 8 * num)
    _check_aligned(sim, smem, soff, supplies, "ldmatrix")
    _check_range(sim, smem, soff, 8, supplies, "ldmatrix")
    wl = np.flatnonzero(warps)
    rows = soff.reshape(-1, WARP)[wl, :8 * num]                      # (w, 8num) elements
    base = smem.base.reshape(-1, WARP)[wl, :1]
    pos = base + rows                                                # (w, 8num)
    elems = pos[:, :, None] + np.arange(8)                           # (w, 8num, 8)
    for e in range(8):                                               # reads, per row giver
        p = np.zeros(g.n_lanes, dtype=np.int64)
        p.reshape(-1, WARP)[wl, :8 * num] = elems[:, :, e]
        o = np.zeros(g.n_lanes, dtype=np.int64)
        o.reshape(-1, WARP)[wl, :8 * num] = rows + e
        pend = getattr(smem, "async_pending", None)
        if pend is not None:
            _report_pending(sim, smem, pend, p, o, supplies, "reads (ldmatrix)")
        sim._race_check(smem, p, o, supplies)
    data = _u16(smem.data[elems]).reshape(len(wl), num, 8, 8)       # [w, m, row, col]
    if trans:
        data = data.transpose(0, 1, 3, 2)
    lo = data[:, :, _G, 2 * _T]                                      # (w, num, 32)
    hi = data[:, :, _G, 2 * _T + 1]
    regs = (lo | (hi << 16)).astype(np.uint32).view(np.int32)        # (w, num, 32)
    regs = regs.transpose(0, 2, 1)                                   # (w, 32, num)
    lanes = (wl[:, None] * WARP + _LANE).reshape(-1)
    lp = lmem.positions(loff)[lanes]
    for m in range(num):
        lmem.data[lp + m] = regs[:, :, m].reshape(-1)
    # counters: one request per 8x8 matrix (8 rows of 16 bytes), ideal one wavefront
    byte = (rows * smem.itemsize).reshape(len(wl) * num, 8)
    r, wf, nb = shared_wavefronts(byte, np.ones_like(byte, dtype=bool), 16)
    sim.stats.shared_load.add(r, wf, nb)
    return 0


def _mma(sim, call, active, dtype):
    d, a, b = call.args
    warps = _converged(sim, call.name, active)
    if not warps.any():
        return 0
    dmem, doff = _pointer(sim, d, active, "mma accumulator", "local")
    amem, aoff = _pointer(sim, a, active, "mma A fragment", "local")
    bmem, boff = _pointer(sim, b, active, "mma B fragment", "local")
    _check_range(sim, dmem, doff, 4, active, "mma accumulator")
    _check_range(sim, amem, aoff, 4, active, "mma A fragment")
    _check_range(sim, bmem, boff, 2, active, "mma B fragment")
    if dmem.buffer.dtype != "float32" or amem.itemsize != 4 or bmem.itemsize != 4:
        sim.fail(f"{call.name}: needs float32 accumulators and 32-bit fragment registers")
    wl = np.flatnonzero(warps)
    lanes = (wl[:, None] * WARP + _LANE).reshape(-1)
    nw = len(wl)
    dp = dmem.positions(doff)[lanes]
    ap = amem.positions(aoff)[lanes]
    bp = bmem.positions(boff)[lanes]
    areg = amem.data[ap[:, None] + np.arange(4)].view(np.uint32)     # (lanes, 4)
    breg = bmem.data[bp[:, None] + np.arange(2)].view(np.uint32)
    acc = dmem.data[dp[:, None] + np.arange(4)].astype(np.float64)   # (lanes, 4)

    def halves(regs):                                                # -> (lanes, 2*regs)
        lo, hi = regs & 0xFFFF, regs >> 16
        out = np.stack([lo, hi], axis=2).reshape(len(regs), -1)
        return _from_u16(out, dtype).astype(np.float64)
    av, bv = halves(areg).reshape(nw, WARP, 8), halves(breg).reshape(nw, WARP, 4)
    i8, i4 = np.arange(8), np.arange(4)
    ar = _G[:, None] + 8 * ((i8 >> 1) & 1)                          # (32, 8)
    ac = 2 * _T[:, None] + (i8 & 1) + 8 * (i8 >> 2)
    br = 2 * _T[:, None] + (i4 & 1) + 8 * (i4 >> 1)                 # (32, 4)
    bc = np.broadcast_to(_G[:, None], (WARP, 4))
    cr = _G[:, None] + 8 * (i4 >> 1)
    cc = 2 * _T[:, None] + (i4 & 1)
    A = np.zeros((nw, 16, 16))
    B = np.zeros((nw, 16, 8))
    C = np.zeros((nw, 16, 8))
    A[:, ar, ac] = av
    B[:, br, bc] = bv
    C[:, cr, cc] = acc.reshape(nw, WARP, 4)
    D = (A @ B + C).astype(np.float32)
    out = D[:, cr, cc].reshape(-1, 4)                                # (lanes, 4)
    for i in range(4):
        dmem.data[dp + i] = out[:, i]
    sim.stats.flops += 2 * 16 * 8 * 16 * nw
    return 0


@intrinsic("ptx_mma_m16n8k16_f16")
def mma_f16(sim, call, active):
    return _mma(sim, call, active, "float16")


@intrinsic("ptx_mma_m16n8k16_bf16")
def mma_bf16(sim, call, active):
    return _mma(sim, call, active, "bfloat16")


@intrinsic("ptx_cp_async")
def cp_async(sim, call, active):
    dst, src, nbytes = call.args
    if not active.any():
        return 0
    g = sim.geom
    state = _state(sim)
    smem, soff = _pointer(sim, dst, active, "cp.async destination", "shared")
    gmem, goff = _pointer(sim, src, active, "cp.async source", "global")
    if smem.itemsize != gmem.itemsize:
        sim.fail("cp.async: source and destination element sizes differ")
    per = 16 // smem.itemsize
    nb = np.broadcast_to(np.asarray(sim.eval(nbytes, active)).astype(np.int64), (g.n_lanes,))
    bad = active & ((nb < 0) | (nb > 16) | (nb % smem.itemsize != 0))
    if bad.any():
        j = int(np.argmax(bad))
        sim.fail(f"cp.async: {g.describe(j)} copies {int(nb[j])} source bytes (0..16, "
                 f"whole elements)")
    reads = active & (nb > 0)
    _check_aligned(sim, smem, soff, active, "cp.async destination")
    _check_aligned(sim, gmem, goff, reads, "cp.async source")
    _check_range(sim, smem, soff, per, active, "cp.async destination")
    ncopy = nb // smem.itemsize
    for e in range(per):                       # source elements actually read
        m = reads & (ncopy > e)
        if m.any():
            _check_range(sim, gmem, goff + e, 1, m, "cp.async source")
    lanes = np.flatnonzero(active)
    gpos = np.where(reads, goff, 0)[lanes][:, None] + np.arange(per)
    valid = np.arange(per)[None, :] < ncopy[lanes][:, None]
    vals = gmem.data[np.where(valid, gpos, 0)]
    vals = np.where(valid, vals, np.zeros((), dtype=vals.dtype))
    spos = smem.positions(soff)[lanes][:, None] + np.arange(per)
    pend = _pending(smem)
    if (pend[spos] >= 0).any():
        j = lanes[int(np.argmax((pend[spos] >= 0).any(axis=1)))]
        sim.finding("async-copy", f"{g.describe(j)} starts a cp.async into "
                                  f"{smem.buffer.name}[{int(soff[j])}] while an earlier one "
                                  f"into it has not completed", 1)
    pend[spos] = g.thread[lanes][:, None]
    state.records.append([smem, spos, vals, lanes, state.committed[lanes].copy(), soff[lanes]])
    # counters
    byte = np.where(reads, goff * gmem.itemsize, 0).reshape(-1, WARP)
    r, s, _ = global_sectors(byte, reads.reshape(-1, WARP), 16)
    sim.stats.global_load.add(r, s, int(nb[reads].sum()))
    sbyte = (soff * smem.itemsize).reshape(-1, 8)
    sact = active.reshape(-1, 8)
    r, wf, b = shared_wavefronts(sbyte, sact, 16)
    sim.stats.shared_store.add(r, wf, b)
    return 0


@intrinsic("ptx_cp_async_commit")
def cp_async_commit(sim, call, active):
    state = _state(sim)
    state.committed[active] += 1
    return 0


@intrinsic("ptx_cp_async_wait")
def cp_async_wait(sim, call, active):
    n = int(call.args[0].value)
    state = _state(sim)
    g = sim.geom
    keep = []
    for rec in state.records:
        smem, spos, vals, lanes, group, soff = rec
        done = active[lanes] & (group < state.committed[lanes] - n)
        if done.any():
            idx = np.flatnonzero(done)
            sel = np.zeros(g.n_lanes, dtype=bool)
            sel[lanes[idx]] = True
            pend = _pending(smem)
            pend[spos[idx]] = -1
            for e in range(spos.shape[1]):
                pos = np.zeros(g.n_lanes, dtype=np.int64)
                pos[lanes[idx]] = spos[idx, e]
                off = np.zeros(g.n_lanes, dtype=np.int64)
                off[lanes[idx]] = soff[idx] + e
                new = np.zeros(g.n_lanes, dtype=smem.data.dtype)
                new[lanes[idx]] = vals[idx, e]
                sim._race_check(smem, pos, off, sel, new)
                smem.data[spos[idx, e]] = vals[idx, e]
            rest = ~done
            if rest.any():
                keep.append([smem, spos[rest], vals[rest], lanes[rest], group[rest],
                             soff[rest]])
        else:
            keep.append(rec)
    state.records = keep
    return 0


@intrinsic("pc_st4")
def store4(sim, call, active):
    from polycomp.lowering.interpreter import store_value
    if not active.any():
        return 0
    g = sim.geom
    mem, off = _pointer(sim, call.args[0], active, "vector store")
    width = 4 * mem.itemsize
    bad = active & ((off * mem.itemsize) % width != 0)
    if bad.any():
        j = int(np.argmax(bad))
        sim.fail(f"vector store: {g.describe(j)} stores {width} bytes at "
                 f"{mem.buffer.name}[{int(off[j])}], not {width}-byte aligned")
    _check_range(sim, mem, off, 4, active, "vector store")
    pos = mem.positions(off)
    for e in range(4):
        v = np.broadcast_to(np.asarray(sim.eval(call.args[1 + e], active)), (g.n_lanes,))
        new = store_value(v, mem.data.dtype)
        if mem.scope != "local":
            sim._race_check(mem, pos + e, off + e, active, new)
        lanes = np.flatnonzero(active)
        mem.data[(pos + e)[lanes]] = new[lanes]
    if mem.scope == "global":
        byte = (np.where(active, off, 0) * mem.itemsize).reshape(-1, WARP)
        sim.stats.global_store.add(*global_sectors(byte, active.reshape(-1, WARP), width))
    elif mem.scope == "shared":
        byte = (off * mem.itemsize).reshape(-1, 8)
        sim.stats.shared_store.add(*shared_wavefronts(byte, active.reshape(-1, 8), width))
    return 0
