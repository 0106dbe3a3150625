"""Intrinsics of the CUDA simulator: a table ``name -> handler(sim, call, active)``.

A handler gets the :class:`~polycomp.hw.cuda.simulator.Simulator`, the ``ir.Call`` and
the bool lane mask of the threads executing it, and returns the call's value (a scalar
or one value per lane).  It evaluates arguments with ``sim.eval(expr, active)``, finds
lane geometry in ``sim.geom`` (:class:`~polycomp.hw.cuda.simulator.LaneGeometry`: lanes
are threads, 32 consecutive lanes one warp), counts into ``sim.stats`` and reports
violations with ``sim.finding(kind, message, count)``.  New intrinsics (Tensor Core
``mma``/``ldmatrix`` with PTX fragment layouts, ``cp.async`` groups) are added by
registering more handlers with :func:`intrinsic`.

Implemented here:

* ``__syncthreads()``: checks that every thread of each arriving block arrives (else a
  ``barrier-divergence`` finding) and clears the shared-memory race state of those
  blocks;
* ``__syncwarp(mask)``: member-mask check; clears race state within each synced warp;
* ``__shfl_sync``, ``__shfl_up_sync``, ``__shfl_down_sync``, ``__shfl_xor_sync``
  ``(mask, value, lane/delta/laneMask[, width])`` with the CUDA programming guide's
  source-lane rules (a source outside the caller's ``width`` segment returns the
  caller's own value; ``__shfl_sync`` takes the source lane modulo ``width``).  A read
  from a lane that does not execute the shuffle is undefined: the result is poisoned
  (NaN / 0xAA..) and counted in ``SimReport.undefined_shuffle_reads``;
* ``__ballot_sync``, ``__any_sync``, ``__all_sync``, ``__activemask``.

Every ``*_sync`` intrinsic checks its member mask: each executing thread must be in
its own mask, and every existing thread named in the mask must execute it (else a
``warp-sync`` finding).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from polycomp import dtypes as dt

WARP = 32
FULL_MASK = 0xFFFFFFFF

INTRINSICS: dict[str, Callable] = {}
#: IR attributes with execution semantics: ``key -> handler(sim, attr_stmt, state)`` (the
#: warp-specialised roles of sm_90a kernels, :mod:`.sim_hopper`); other attributes only
#: run their body
ATTR_HANDLERS: dict[str, Callable] = {}


def intrinsic(*names: str):
    """Register the decorated function as the handler of ``names``."""
    def deco(fn):
        for n in names:
            INTRINSICS[n] = fn
        return fn
    return deco


# --------------------------------------------------------------------------- helpers


def _lanes(sim, x) -> np.ndarray:
    return np.broadcast_to(np.asarray(x), (sim.geom.n_lanes,))


def _pack(bits: np.ndarray) -> np.ndarray:
    """(n_warps, 32) bools -> one 32-bit mask (as int64) per warp."""
    return (bits.astype(np.int64) << np.arange(WARP, dtype=np.int64)).sum(axis=1)


def _member_masks(sim, call, k, active) -> np.ndarray:
    v = sim.eval(call.args[k], active) if len(call.args) > k else FULL_MASK
    return _lanes(sim, np.asarray(v).astype(np.int64) & FULL_MASK)


def check_warp_sync(sim, name: str, members: np.ndarray, active: np.ndarray) -> None:
    """The member-mask rules of the ``*_sync`` intrinsics (see the module docstring)."""
    g = sim.geom
    own = (members >> g.warp_lane) & 1
    stray = active & (own == 0)
    if stray.any():
        j = int(np.argmax(stray))
        sim.finding("warp-sync", f"{name}: {g.describe(j)} executes it with member mask "
                                 f"{int(members[j]):#010x}, which does not include itself",
                    int(stray.sum()))
    named = np.bitwise_or.reduce(np.where(active, members, 0).reshape(-1, WARP), axis=1)
    arrived = _pack(active.reshape(-1, WARP))
    exists = _pack(g.valid.reshape(-1, WARP))
    missing = named & exists & ~arrived
    bad = (missing != 0) & (arrived != 0)
    if bad.any():
        w = int(np.argmax(bad))
        lane = int(np.argmax((int(missing[w]) >> np.arange(WARP)) & 1))
        sim.finding("warp-sync", f"{name}: {g.describe(w * WARP + lane)} is named in the "
                                 f"member mask {int(named[w]):#010x} of its warp but does "
                                 f"not execute it (divergent warp)", int(bad.sum()))


def _poison_value(dtype: str):
    if dt.is_float(dtype):
        return np.nan
    return {"int8": -0x56, "int32": -0x55555556, "bool": True}.get(dtype, -0x5555555555555556)


# --------------------------------------------------------------------------- barriers


@intrinsic("__syncthreads")
def syncthreads(sim, call, active):
    g = sim.geom
    per_block = active.reshape(g.n_blocks, g.stride).sum(axis=1)
    arrived = per_block > 0
    partial = arrived & (per_block < g.threads)
    if partial.any():
        b = int(np.argmax(partial))
        lanes = slice(b * g.stride, (b + 1) * g.stride)
        missing = g.valid[lanes] & ~active[lanes]
        j = b * g.stride + int(np.argmax(missing))
        sim.finding("barrier-divergence",
                    f"__syncthreads() reached by {int(per_block[b])} of {g.threads} threads "
                    f"of block {g.block_index(j)} ({g.describe(j)} does not reach it: the "
                    f"barrier is under thread-dependent control flow)",
                    int(partial.sum()))
    sim.stats.barriers += int(arrived.sum())
    sim.block_barrier(np.flatnonzero(arrived))
    return 0


@intrinsic("__syncwarp")
def syncwarp(sim, call, active):
    members = _member_masks(sim, call, 0, active)
    check_warp_sync(sim, "__syncwarp", members, active)
    g = sim.geom
    synced = active.reshape(g.n_blocks, g.warps_per_block, WARP).any(axis=2)
    for mem in sim.live_shared():
        mem.tracker.reset_warps(synced)
    return 0


@intrinsic("__trap")
def trap(sim, call, active):
    """``__trap()``: the kernel aborts (a check of its code's assumptions failed)."""
    if active.any():
        j = int(np.argmax(active))
        sim.fail(f"__trap() executed by {sim.geom.describe(j)}: an assumption of the "
                 f"kernel's code does not hold for these sizes (a row-length check: the "
                 f"kernel was compiled for row lengths that are a multiple of its vector "
                 f"width and within its bound)")
    return 0


@intrinsic("gather_index")
def gather_index(sim, call, active):
    """:data:`polycomp.ir.GATHER_INDEX`: the index read by a gather, checked against
    its dimension in the active threads (out of range: ``IndexOutOfRangeError``, what the
    compiled kernel reports through ``pc_index_error``); inactive threads read 0."""
    from polycomp.lowering.interpreter import gather_index as check
    value = _lanes(sim, sim.eval(call.args[0], active))
    extent = sim.eval(call.args[1], active)
    n = int(np.asarray(extent).reshape(-1)[0]) if np.ndim(extent) else int(extent)
    return check(value, n, active)


# --------------------------------------------------------------------------- shuffles


def _shuffle(sim, call, active, source):
    name = call.name
    if len(call.args) not in (3, 4):
        sim.fail(f"{name} takes (mask, value, lane[, width]), got {len(call.args)} arguments")
    g = sim.geom
    members = _member_masks(sim, call, 0, active)
    check_warp_sync(sim, name, members, active)
    value = _lanes(sim, sim.eval(call.args[1], active))
    x = _lanes(sim, sim.eval(call.args[2], active)).astype(np.int64)
    width = sim.eval(call.args[3], active) if len(call.args) == 4 else WARP
    if np.ndim(width):
        w = np.asarray(width)[active]
        if w.size and not np.all(w == w[0]):
            sim.fail(f"{name}: the width argument differs between threads")
        width = int(w[0]) if w.size else WARP
    width = int(width)
    if width < 1 or width > WARP or width & (width - 1):
        sim.fail(f"{name}: width {width} is not a power of two in [1, 32]")
    lane = g.warp_lane
    src = source(lane, x, width)
    src_lane = (g.lane - lane) + src                    # the source's simulator lane
    out = value[src_lane]
    undefined = active & ~active[src_lane]
    sim.stats.shuffles += int(active.reshape(-1, WARP).any(axis=1).sum())
    if undefined.any():
        sim.report.undefined_shuffle_reads += int(undefined.sum())
        out = np.where(undefined, _poison_value(call.dtype), out)
    return out.astype(value.dtype, copy=False)


def _segment(lane, width):
    return lane - lane % width


@intrinsic("__shfl_sync")
def shfl_sync(sim, call, active):
    return _shuffle(sim, call, active,
                    lambda lane, x, w: _segment(lane, w) + np.mod(x, w))


@intrinsic("__shfl_up_sync")
def shfl_up_sync(sim, call, active):
    return _shuffle(sim, call, active,
                    lambda lane, x, w: np.where(lane % w - x >= 0, lane - x, lane))


@intrinsic("__shfl_down_sync")
def shfl_down_sync(sim, call, active):
    return _shuffle(sim, call, active,
                    lambda lane, x, w: np.where(lane % w + x < w, lane + x, lane))


@intrinsic("__shfl_xor_sync")
def shfl_xor_sync(sim, call, active):
    def src(lane, x, w):
        s = lane ^ (x & (WARP - 1))
        return np.where(s < _segment(lane, w) + w, s, lane)
    return _shuffle(sim, call, active, src)


# --------------------------------------------------------------------------- votes


def _vote(sim, call, active):
    if len(call.args) != 2:
        sim.fail(f"{call.name} takes (mask, predicate), got {len(call.args)} arguments")
    members = _member_masks(sim, call, 0, active)
    check_warp_sync(sim, call.name, members, active)
    pred = _lanes(sim, sim.eval(call.args[1], active)).astype(bool) & active
    ballot = _pack(pred.reshape(-1, WARP))
    sim.stats.shuffles += int(active.reshape(-1, WARP).any(axis=1).sum())
    per_lane = np.repeat(ballot, WARP) & members
    return per_lane, members


def _as_dtype(values: np.ndarray, dtype: str):
    if dtype == "int32":
        return values.astype(np.uint32).view(np.int32)
    if dtype == "bool":
        return values != 0
    return values.astype(dt.to_numpy(dt.compute_dtype(dtype)))


@intrinsic("__ballot_sync")
def ballot_sync(sim, call, active):
    per_lane, _ = _vote(sim, call, active)
    return _as_dtype(per_lane, call.dtype)


@intrinsic("__any_sync")
def any_sync(sim, call, active):
    per_lane, _ = _vote(sim, call, active)
    return _as_dtype((per_lane != 0).astype(np.int64), call.dtype)


@intrinsic("__all_sync")
def all_sync(sim, call, active):
    per_lane, members = _vote(sim, call, active)
    voters = members & np.repeat(_pack(active.reshape(-1, WARP)), WARP)
    return _as_dtype((per_lane == voters).astype(np.int64), call.dtype)


@intrinsic("__activemask")
def activemask(sim, call, active):
    return _as_dtype(np.repeat(_pack(active.reshape(-1, WARP)), WARP), call.dtype)
