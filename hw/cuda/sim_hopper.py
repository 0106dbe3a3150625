"""sm_90a semantics in the CUDA simulator: ``mbarrier``, TMA tile copies, ``wgmma``, and
warp-specialised roles run as coroutines, with hazard detection.

Registered in :data:`~polycomp.hw.cuda.sim_intrinsics.INTRINSICS` (the IR calls and how
they print: :mod:`polycomp.hw.cuda.ptx_hopper`).

**Shared addresses.**  Instructions that take shared-memory *addresses* (``wgmma``
descriptors) need byte addresses: each shared buffer of the block gets one when first
used by an sm_90a intrinsic, the next free multiple of 1024 in order of first use (the
printed kernel aligns its dynamic shared buffers to 1024 bytes the same way, so the
swizzle patterns, which the hardware applies to address bits, agree).

**mbarrier** (one element of a shared ``int64`` buffer, per block): ``init(count)``
sets the expected arrival count, phase 0; ``arrive`` decrements the pending count,
``expect_tx(n)`` adds ``n`` to the transaction count, a TMA copy's completion subtracts
its bytes; when both reach zero the phase completes (the phase number increments, the
pending count is reset).  ``try_wait.parity(p)`` succeeds when the phase of parity ``p``
has completed, i.e. when the current phase number's parity differs from ``p`` (so a
fresh barrier "has completed" the phase of parity 1).  A wait that cannot succeed
suspends its role (below); with no role able to run, the kernel is deadlocked
(``mbarrier`` finding, :class:`MbarrierError`).

**TMA** (``ptx_tma_load``): each executing thread copies one box: element ``q`` of the
box (row-major in the tensor's dimension order) is read from the tensor at the box
coordinates plus its offsets, zero where any coordinate is outside the tensor, and
written at shared byte address ``dst + q * itemsize`` with the swizzle applied to the
address: for a span of ``S`` bytes (32, 64, 128) the 16-byte chunk bits
``[4, 4 + log2(S/16))`` are XORed with the bits ``[7, 7 + log2(S/16))``.  The
destination must be aligned to the pattern (``TensorCopy.pattern_alignment``: 1024 B
for 128-byte swizzle), the box's innermost dimension a multiple of 16 bytes and at
most ``S``; then the copy's bytes complete on the barrier.

**wgmma** (``ptx_wgmma_{f16,bf16}``): executed by whole warpgroups (4 aligned warps,
all 128 threads, uniform descriptors), ``D[64 x N] (+)= A[64 x 16] B[16 x N]`` with
products exact and sums in float64 rounded to float32.  ``A`` and ``B`` are read
through their descriptors (start address, LBO, SBO, swizzle mode) in the PTX ISA's
canonical layouts: K-major (``trans = 0``) rows of the operand (M for A, N for B) in
groups of 8 at SBO, each row ``S`` bytes apart, K contiguous; MN-major (``trans = 1``)
``S/2`` elements of M/N contiguous per 16-bit row, blocks of them LBO apart, K rows
``S`` bytes apart in groups of 8 at SBO (``S = 0``: the interleaved forms with 16-byte
core-matrix rows), every address swizzled as for TMA.  Accumulator ``i`` of thread
``32 w + l`` is ``D[16 w + l/4 + 8 ((i/2) mod 2), 8 (i/4) + 2 (l mod 4) + i mod 2]``.

**Roles.**  ``AttrStmt("warp_roles", ..)`` over a block of ``if (role_i) body_i``: each
role runs as a coroutine (a Python thread holding the one baton), until it finishes
or waits on an mbarrier phase that has not completed; the next role whose wait can
succeed (round robin) takes over.  Roles may not allocate storage.

**Findings** (``strict`` raises the first):

* ``mbarrier``: a thread reads shared data delivered by TMA (or by generic stores
  released through an mbarrier ``arrive``) before it has observed (waited for) the
  barrier phase that delivered it — a consumer reading a stage before its barrier
  completed; a TMA copy or store overwrites delivered data no thread has read yet (a
  producer running ahead of its consumers); a use of an uninitialised barrier; a
  deadlock;
* ``wgmma``: a store or TMA copy into shared data that an issued ``wgmma`` whose group
  has not been waited for reads; a load or store of accumulator registers of such a
  ``wgmma``; accumulators written by ordinary instructions and then used by ``wgmma``
  without a ``wgmma.fence`` in between; ``wgmma`` read of shared data written by
  ordinary stores of another thread that no ``arrive``/``__syncthreads`` released, or
  without ``fence.proxy.async`` by the writer (async-proxy visibility); a ``wgmma`` not
  executed by whole aligned warpgroups, or with descriptors that differ within one.

Counters: ``wgmma`` adds ``2 * 64 * N * 16`` flops per warpgroup; a TMA copy adds one
global load request with the box's bytes (32-byte sectors of its rows).
"""
from __future__ import annotations

import threading

import numpy as np

from polycomp import dtypes as dt

from .sim_intrinsics import ATTR_HANDLERS, INTRINSICS, intrinsic
from .sim_report import FINDING_ERRORS, SimulatorError

WARPGROUP = 128
SMEM_ALIGN = 1024
WARP_ROLES = "warp_roles"        # polycomp.scheduler.common.marks.WARP_ROLES


class MbarrierError(SimulatorError):
    """mbarrier misuse: data read before its barrier phase was observed, delivered data
    overwritten unread, an uninitialised barrier, or a deadlock."""


class WgmmaError(SimulatorError):
    """A wgmma hazard: operands or accumulators touched while an issued wgmma has not
    completed, a missing wgmma.fence / fence.proxy.async, or a partial warpgroup."""


FINDING_ERRORS.setdefault("mbarrier", MbarrierError)
FINDING_ERRORS.setdefault("wgmma", WgmmaError)


# --------------------------------------------------------------------------- state


class _Barriers:
    """mbarrier state of one shared int64 buffer (one entry per element per block)."""

    def __init__(self, mem, stride: int, index: int):
        n = mem.data.shape[0]
        self.mem, self.index = mem, index
        self.init = np.zeros(n, dtype=bool)
        self.count = np.zeros(n, dtype=np.int64)
        self.pending = np.zeros(n, dtype=np.int64)
        self.tx = np.zeros(n, dtype=np.int64)
        self.phase = np.zeros(n, dtype=np.int64)
        self.observed = np.full((n, stride), -1, dtype=np.int64)   # [barrier, thread]


class _Tags:
    """Per element of a shared buffer the async proxies read or write: who delivered
    it (barrier key and phase), whether it was read since, unreleased generic stores,
    pending proxy fences and in-flight wgmma reads."""

    def __init__(self, mem):
        n = mem.data.shape[0]
        self.bar = np.full(n, -1, dtype=np.int64)
        self.phase = np.zeros(n, dtype=np.int64)
        self.unread = np.zeros(n, dtype=bool)
        self.writer = np.full(n, -1, dtype=np.int64)      # unreleased generic store
        self.fence_writer = np.full(n, -1, dtype=np.int64)  # store awaiting fence.proxy.async
        self.wg_reads = np.zeros(n, dtype=np.int64)


class _Acc:
    """Per element of a wgmma accumulator (local) buffer: issued, not yet waited for;
    written by ordinary stores since the thread's last wgmma.fence."""

    def __init__(self, mem):
        n = mem.data.shape[0]
        self.pending = np.zeros(n, dtype=bool)
        self.unfenced = np.zeros(n, dtype=bool)


class _HopperState:
    def __init__(self, sim):
        g = sim.geom
        self.geom = g
        self.addr: dict = {}            # SharedMemory -> byte address
        self.next_addr = 0
        self.barriers: dict = {}        # SharedMemory -> _Barriers
        self.barrier_list: list = []
        self.tags: dict = {}            # SharedMemory -> _Tags
        self.acc: dict = {}             # LocalMemory -> _Acc
        self.committed = np.zeros(g.n_lanes, dtype=np.int64)
        self.records: list = []         # in-flight wgmma: [lanes, group, reads, acc]
        self.async_buffers, self.acc_buffers = _scan(sim.func)


def _scan(func) -> tuple[set, set]:
    """Names of the shared buffers TMA/wgmma address and of the wgmma accumulators."""
    from polycomp import ir
    shared: set = set()
    acc: set = set()

    def fn(n):
        if isinstance(n, ir.Call):
            if n.name == "ptx_tma_load":
                shared.add(n.args[0].buffer.name)
            elif n.name == "pc_wgmma_desc":
                shared.add(n.args[0].buffer.name)
            elif n.name in ("ptx_wgmma_f16", "ptx_wgmma_bf16"):
                acc.add(n.args[0].buffer.name)
    ir.walk(func.body, fn)
    return shared, acc


def _state(sim) -> _HopperState:
    st = sim.__dict__.get("_hopper")
    if st is None or st.geom is not sim.geom:
        st = sim.__dict__["_hopper"] = _HopperState(sim)
    if _shared_hook not in sim.shared_access_hooks:
        sim.shared_access_hooks.append(_shared_hook)
    if _local_hook not in sim.local_access_hooks:
        sim.local_access_hooks.append(_local_hook)
    return st


def _current(sim) -> _HopperState | None:
    st = sim.__dict__.get("_hopper")
    return st if st is not None and st.geom is sim.geom else None


def smem_address(sim, mem) -> int:
    """The byte address of shared buffer ``mem`` (assigned on first use)."""
    st = _state(sim)
    a = st.addr.get(mem)
    if a is None:
        a = st.addr[mem] = st.next_addr
        size = mem.size * mem.itemsize
        st.next_addr = -(-(a + size) // SMEM_ALIGN) * SMEM_ALIGN
    return a


def _decode(sim, addr: np.ndarray, what: str):
    """(SharedMemory, element offsets) of byte addresses ``addr`` (all in one buffer)."""
    st = _state(sim)
    a0 = int(addr.min())
    for mem, base in st.addr.items():
        if base <= a0 < base + mem.size * mem.itemsize:
            off = addr - base
            if (off < 0).any() or (off >= mem.size * mem.itemsize).any():
                sim.fail(f"{what}: the addressed bytes leave shared buffer {mem.buffer.name}")
            if (off % mem.itemsize).any():
                sim.fail(f"{what}: an address inside an element of {mem.buffer.name}")
            return mem, off // mem.itemsize
    sim.fail(f"{what}: shared address {a0:#x} is in no buffer of this block")
    raise AssertionError


def _tags(st: _HopperState, mem) -> _Tags:
    t = st.tags.get(mem)
    if t is None:
        t = st.tags[mem] = _Tags(mem)
    return t


def _barriers(sim, st: _HopperState, mem) -> _Barriers:
    b = st.barriers.get(mem)
    if b is None:
        if mem.scope != "shared" or mem.itemsize != 8:
            sim.fail(f"mbarrier: {mem.buffer.name} is not a shared 64-bit buffer")
        b = st.barriers[mem] = _Barriers(mem, sim.geom.stride, len(st.barrier_list))
        st.barrier_list.append(b)
    return b


def swizzle(addr, span: int):
    """The physical byte address of ``addr`` under a ``span``-byte swizzle."""
    if span == 0:
        return addr
    bits = {32: 1, 64: 2, 128: 3}[span]
    mask = (1 << bits) - 1
    return addr ^ (((addr >> 7) & mask) << 4)


# --------------------------------------------------------------------------- helpers


def _pointer(sim, arg, active, what, scope=None):
    from .sim_tensorcore import _pointer as pointer
    return pointer(sim, arg, active, what, scope)


def _lanes_of(sim, x) -> np.ndarray:
    return np.broadcast_to(np.asarray(x), (sim.geom.n_lanes,))


def _bar_args(sim, bar, active, what):
    mem, off = _pointer(sim, bar, active, what, "shared")
    st = _state(sim)
    b = _barriers(sim, st, mem)
    pos = mem.positions(off)
    bad = active & ~b.init[np.where(active, pos, 0)]
    if bad.any() and what != "mbarrier.init":
        j = int(np.argmax(bad))
        sim.finding("mbarrier", f"{what} on {mem.buffer.name}[{int(off[j])}] by "
                                f"{sim.geom.describe(j)}: the barrier is not initialised")
    return st, b, pos


def _complete(sim, b: _Barriers, positions: np.ndarray) -> None:
    """Complete the phases of the barriers at ``positions`` whose arrivals and
    transactions are all in."""
    p = np.unique(positions)
    done = p[(b.pending[p] == 0) & (b.tx[p] == 0)]
    if len(done):
        b.phase[done] += 1
        b.pending[done] = b.count[done]
    over = p[b.pending[p] < 0]
    if len(over):
        sim.finding("mbarrier", f"more arrivals on {b.mem.buffer.name} than its count "
                                f"in one phase")


def _key(b: _Barriers, pos) -> np.ndarray:
    return (np.int64(b.index) << np.int64(32)) + np.asarray(pos, dtype=np.int64)


def _release(sim, st: _HopperState, b: _Barriers, pos: np.ndarray, lanes: np.ndarray):
    """Generic shared stores of the threads ``lanes`` not yet released become delivered
    by the barrier phase at ``pos`` (per lane) that their arrive belongs to."""
    if not len(lanes):
        return
    g = sim.geom
    for mem, t in st.tags.items():
        w = np.flatnonzero(t.writer >= 0)
        if not len(w):
            continue
        eblock = w // mem.size
        ethread = t.writer[w]
        # the arriving threads, by (block slot, thread)
        arr = np.full((g.n_blocks, g.stride), -1, dtype=np.int64)
        arr[g.block_slot[lanes], g.thread[lanes]] = np.arange(len(lanes))
        who = arr[eblock, ethread]
        hit = who >= 0
        if not hit.any():
            continue
        e = w[hit]
        li = who[hit]
        t.bar[e] = _key(b, pos[lanes[li]])
        t.phase[e] = b.phase[pos[lanes[li]]]
        t.unread[e] = True
        t.writer[e] = -1


def _observed_ok(sim, st: _HopperState, t: _Tags, elems: np.ndarray,
                 lanes: np.ndarray) -> np.ndarray:
    """Per (lane, element) pair: has the reading thread observed the delivery of the
    element?  ``elems`` and ``lanes`` have the same length."""
    ok = np.ones(len(elems), dtype=bool)
    keyed = t.bar[elems] >= 0
    if not keyed.any():
        return ok
    g = sim.geom
    k = t.bar[elems[keyed]]
    bidx, bpos = k >> 32, k & 0xFFFFFFFF
    obs = np.empty(len(k), dtype=np.int64)
    for i in np.unique(bidx):
        sel = bidx == i
        b = st.barrier_list[int(i)]
        obs[sel] = b.observed[bpos[sel], g.thread[lanes[keyed][sel]]]
    ok[keyed] = obs >= t.phase[elems[keyed]]
    return ok


def _check_reads(sim, st, mem, elems: np.ndarray, lanes: np.ndarray, who: str) -> None:
    """Hazards of reads of ``mem`` elements ``elems`` by ``lanes`` (paired arrays)."""
    t = st.tags.get(mem)
    if t is None or not len(elems):
        return
    g = sim.geom
    ok = _observed_ok(sim, st, t, elems, lanes)
    if not ok.all():
        j = int(np.argmax(~ok))
        e = int(elems[j])
        k = int(t.bar[e])
        b = st.barrier_list[k >> 32]
        sim.finding("mbarrier",
                    f"{who} by {g.describe(int(lanes[j]))} reads {mem.buffer.name}"
                    f"[{e % mem.size}] before it observed the completion of phase "
                    f"{int(t.phase[e])} of mbarrier {b.mem.buffer.name}"
                    f"[{(k & 0xFFFFFFFF) % b.mem.size}] that delivers it (a read of a "
                    f"stage before its barrier completed)", int((~ok).sum()))
    t.unread[elems] = False


def _check_group_reads(sim, st, mem, elems: np.ndarray, lanes: np.ndarray,
                       who: str) -> None:
    """Hazards of an async-proxy read of ``mem`` elements ``elems`` on behalf of all the
    threads ``lanes`` (a warpgroup): each must have observed the delivering phase."""
    t = st.tags.get(mem)
    if t is None or not len(elems):
        return
    g = sim.geom
    keyed = elems[t.bar[elems] >= 0]
    if len(keyed):
        keys = t.bar[keyed]
        for k in np.unique(keys):
            b = st.barrier_list[int(k >> 32)]
            bpos = int(k & 0xFFFFFFFF)
            need = int(t.phase[keyed[keys == k]].max())
            obs = b.observed[bpos, g.thread[lanes]]
            if (obs < need).any():
                j = int(lanes[int(np.argmax(obs < need))])
                e = int(keyed[keys == k][0])
                sim.finding("mbarrier",
                            f"{who} for {g.describe(j)} reads {mem.buffer.name}"
                            f"[{e % mem.size}] before that thread observed the completion of "
                            f"phase {need} of mbarrier {b.mem.buffer.name}"
                            f"[{bpos % b.mem.size}] that delivers it (a read of a stage "
                            f"before its barrier completed)", int((obs < need).sum()))
    own = t.writer[elems]
    bad = own >= 0
    if bad.any():
        j = int(np.argmax(bad))
        sim.finding("wgmma", f"{who} for {g.describe(int(lanes[0]))} reads "
                             f"{mem.buffer.name}[{int(elems[j]) % mem.size}] stored by thread "
                             f"{g.thread_xyz(int(own[j]))} with no mbarrier arrive or "
                             f"__syncthreads() in between", int(bad.sum()))
    nf = t.fence_writer[elems] >= 0
    if nf.any():
        j = int(np.argmax(nf))
        sim.finding("wgmma", f"{who} (async proxy) reads {mem.buffer.name}"
                             f"[{int(elems[j]) % mem.size}], written by ordinary stores of "
                             f"thread {g.thread_xyz(int(t.fence_writer[elems[j]]))} that "
                             f"executed no fence.proxy.async after them", int(nf.sum()))
    t.unread[elems] = False


def _check_overwrite(sim, mem, t: _Tags, elems: np.ndarray, who: str) -> None:
    if not len(elems):
        return
    busy = t.wg_reads[elems] > 0
    if busy.any():
        e = int(elems[int(np.argmax(busy))])
        sim.finding("wgmma", f"{who} overwrites {mem.buffer.name}[{e % mem.size}] while an "
                             f"issued wgmma that reads it has not completed (no "
                             f"wgmma.wait_group covered it)", int(busy.sum()))
    lost = t.unread[elems]
    if lost.any():
        e = int(elems[int(np.argmax(lost))])
        sim.finding("mbarrier", f"{who} overwrites {mem.buffer.name}[{e % mem.size}], "
                                f"delivered through an mbarrier phase and never read (a "
                                f"producer running ahead of its consumers: missing wait "
                                f"on the stage's empty barrier?)", int(lost.sum()))


# --------------------------------------------------------------------------- hooks


def _shared_hook(sim, mem, pos, offsets, active, write: bool) -> None:
    st = _current(sim)
    if st is None or mem.buffer.name not in st.async_buffers:
        return
    lanes = np.flatnonzero(active)
    elems = pos[lanes]
    t = _tags(st, mem)
    if write:
        _check_overwrite(sim, mem, t, elems, "a store")
        thr = sim.geom.thread[lanes]
        t.writer[elems] = thr
        t.fence_writer[elems] = thr
        t.bar[elems] = -1
        t.unread[elems] = False
    else:
        _check_reads(sim, st, mem, elems, lanes, "a load")


def _local_hook(sim, mem, pos, offsets, active, write: bool) -> None:
    st = _current(sim)
    if st is None or mem.buffer.name not in st.acc_buffers:
        return
    a = st.acc.get(mem)
    if a is None:
        a = st.acc[mem] = _Acc(mem)
    lanes = np.flatnonzero(active)
    p = pos[lanes]
    busy = a.pending[p]
    if busy.any():
        j = int(lanes[int(np.argmax(busy))])
        sim.finding("wgmma", f"{'a store to' if write else 'a load of'} accumulator "
                             f"{mem.buffer.name}[{int(offsets[j])}] by {sim.geom.describe(j)} "
                             f"while the wgmma writing it has not completed (no "
                             f"wgmma.wait_group)", int(busy.sum()))
    if write:
        a.unfenced[p] = True


def _syncthreads_release(sim, active) -> None:
    """``__syncthreads()``: the generic stores of the synchronised blocks are released
    to every thread of the block (delivered, observed by all)."""
    st = _current(sim)
    if st is None:
        return
    blocks = np.unique(sim.geom.block_slot[active])
    for mem, t in st.tags.items():
        e = np.flatnonzero(t.writer >= 0)
        if len(e):
            e = e[np.isin(e // mem.size, blocks)]
            t.writer[e] = -1


_BASE_SYNCTHREADS = INTRINSICS["__syncthreads"]


@intrinsic("__syncthreads")
def syncthreads(sim, call, active):
    r = _BASE_SYNCTHREADS(sim, call, active)
    _syncthreads_release(sim, active)
    return r


# --------------------------------------------------------------------------- mbarrier


@intrinsic("ptx_mbarrier_init")
def mbarrier_init(sim, call, active):
    if not active.any():
        return 0
    st, b, pos = _bar_args(sim, call.args[0], active, "mbarrier.init")
    n = _lanes_of(sim, sim.eval(call.args[1], active)).astype(np.int64)
    lanes = np.flatnonzero(active)
    if (n[lanes] < 1).any():
        sim.fail("mbarrier.init: the expected arrival count must be at least 1")
    p = pos[lanes]
    b.init[p] = True
    b.count[p] = n[lanes]
    b.pending[p] = n[lanes]
    b.tx[p] = 0
    b.phase[p] = 0
    b.observed[p] = -1
    return 0


@intrinsic("ptx_fence_mbarrier_init")
def fence_mbarrier_init(sim, call, active):
    _state(sim)
    return 0


def _arrive(sim, call, active, tx: bool):
    if not active.any():
        return 0
    what = "mbarrier.arrive.expect_tx" if tx else "mbarrier.arrive"
    st, b, pos = _bar_args(sim, call.args[0], active, what)
    lanes = np.flatnonzero(active)
    _release(sim, st, b, pos, lanes)
    if tx:
        n = _lanes_of(sim, sim.eval(call.args[1], active)).astype(np.int64)
        np.add.at(b.tx, pos[lanes], n[lanes])
    np.subtract.at(b.pending, pos[lanes], 1)
    _complete(sim, b, pos[lanes])
    return 0


@intrinsic("ptx_mbarrier_arrive")
def mbarrier_arrive(sim, call, active):
    return _arrive(sim, call, active, False)


@intrinsic("ptx_mbarrier_arrive_tx")
def mbarrier_arrive_tx(sim, call, active):
    return _arrive(sim, call, active, True)


@intrinsic("ptx_mbarrier_wait")
def mbarrier_wait(sim, call, active):
    if not active.any():
        return 0
    st, b, pos = _bar_args(sim, call.args[0], active, "mbarrier.try_wait.parity")
    lanes = np.flatnonzero(active)
    par = _lanes_of(sim, sim.eval(call.args[1], active)).astype(np.int64)[lanes] & 1
    p = pos[lanes]

    def ready() -> bool:
        return bool(((b.phase[p] & 1) != par).all())
    if not ready():
        roles = sim.__dict__.get("_roles")
        if roles is None:
            j = int(lanes[int(np.argmax((b.phase[p] & 1) == par))])
            sim.finding("mbarrier", f"deadlock: {sim.geom.describe(j)} waits for a phase of "
                                    f"mbarrier {b.mem.buffer.name} that can never complete "
                                    f"(no other role runs)")
            raise MbarrierError(f"kernel {sim.stats.name}: mbarrier deadlock")
        roles.wait(ready)
    cur = b.phase[p]
    last = np.where(((cur - 1) & 1) == par, cur - 1, cur - 2)
    thr = sim.geom.thread[lanes]
    b.observed[p, thr] = np.maximum(b.observed[p, thr], last)
    return 0


# --------------------------------------------------------------------------- TMA


@intrinsic("ptx_tma_load")
def tma_load(sim, call, active):
    from .sim_tensorcore import _check_range
    if not active.any():
        return 0
    g = sim.geom
    st = _state(sim)
    dst, bar = call.args[0], call.args[1]
    rank = int(call.args[4].value)
    span = int(call.args[3].value)
    box = [int(a.value) for a in call.args[5:5 + rank]]
    src_buf = call.args[2].buffer
    smem, soff = _pointer(sim, dst, active, "TMA destination", "shared")
    gmem = sim._memory(src_buf, "TMA source")
    if gmem.scope != "global":
        sim.fail(f"TMA: the source {src_buf.name} is not in global memory")
    if smem.itemsize != gmem.itemsize:
        sim.fail("TMA: source and destination element sizes differ")
    if len(box) != len(gmem.shape) or any(not 1 <= x <= 256 for x in box):
        sim.fail(f"TMA: box {box} for a tensor of shape {list(gmem.shape)} (1..256 per "
                 f"dimension, one per dimension)")
    item = gmem.itemsize
    inner = box[-1] * item
    if inner % 16 or (span and inner > span):
        sim.fail(f"TMA: the box's innermost dimension is {inner} bytes (a multiple of 16, "
                 f"at most the swizzle span {span})")
    _, b, bpos = _bar_args(sim, bar, active, "TMA completion")
    coords = [_lanes_of(sim, sim.eval(i, active)).astype(np.int64)
              for i in call.args[5 + rank:]]
    total = int(np.prod(box))
    nbytes = total * item
    _check_range(sim, smem, soff, total, active, "TMA destination")
    base = smem_address(sim, smem)
    align = {0: 128, 32: 256, 64: 512, 128: 1024}[span]
    t = _tags(st, smem)
    grid = np.indices(box).reshape(len(box), -1)          # (rank, total), row-major
    for lane in np.flatnonzero(active):
        addr = base + int(soff[lane]) * item
        if addr % align:
            sim.fail(f"TMA: {g.describe(lane)} writes to shared address {addr:#x}, not "
                     f"aligned to the {span}-byte swizzle pattern ({align} bytes)")
        gi = [coords[d][lane] + grid[d] for d in range(len(box))]
        inside = np.ones(total, dtype=bool)
        for d, n in enumerate(gmem.shape):
            inside &= (gi[d] >= 0) & (gi[d] < n)
        flat = np.zeros(total, dtype=np.int64)
        for d, n in enumerate(gmem.shape):
            flat = flat * n + np.where(inside, gi[d], 0)
        vals = np.where(inside, gmem.data[flat], np.zeros((), dtype=gmem.data.dtype))
        phys = swizzle(addr + np.arange(total, dtype=np.int64) * item, span)
        elems = (phys - base) // item
        pos = smem.base[lane] + elems
        _check_overwrite(sim, smem, t, pos, "a TMA copy")
        smem.data[pos] = vals
        t.bar[pos] = _key(b, bpos[lane])
        t.phase[pos] = b.phase[bpos[lane]]
        t.unread[pos] = True
        t.writer[pos] = -1
        t.fence_writer[pos] = -1
        b.tx[bpos[lane]] -= nbytes
        _complete(sim, b, np.array([bpos[lane]]))
        rows = total // box[-1]
        sim.stats.global_load.add(1, rows * -(-inner // 32), int(inside.sum()) * item)
    return 0


@intrinsic("ptx_fence_proxy_async")
def fence_proxy_async(sim, call, active):
    st = _state(sim)
    g = sim.geom
    lanes = np.flatnonzero(active)
    if not len(lanes):
        return 0
    mine = np.zeros((g.n_blocks, g.stride), dtype=bool)
    mine[g.block_slot[lanes], g.thread[lanes]] = True
    for mem, t in st.tags.items():
        e = np.flatnonzero(t.fence_writer >= 0)
        if len(e):
            hit = mine[e // mem.size, t.fence_writer[e]]
            t.fence_writer[e[hit]] = -1
    return 0


# --------------------------------------------------------------------------- wgmma


@intrinsic("pc_wgmma_desc")
def wgmma_desc(sim, call, active):
    mem, off = _pointer(sim, call.args[0], active, "wgmma descriptor", "shared")
    base = smem_address(sim, mem)
    addr = base + off * mem.itemsize
    lbo, sbo, mode = (int(call.args[k].value) for k in (1, 2, 3))
    const = (((lbo & 0x3FFFF) >> 4) << 16) | (((sbo & 0x3FFFF) >> 4) << 32) | (mode << 62)
    if const >= 1 << 63:              # the 64-bit pattern as a signed int64
        const -= 1 << 64
    return ((addr & 0x3FFFF) >> 4).astype(np.int64) | np.int64(const)


def _decode_desc(desc: int):
    d = int(desc) & ((1 << 64) - 1)
    start = (d & 0x3FFF) << 4
    lbo = ((d >> 16) & 0x3FFF) << 4
    sbo = ((d >> 32) & 0x3FFF) << 4
    mode = (d >> 62) & 3
    span = {0: 0, 1: 128, 2: 64, 3: 32}[mode]
    return start, lbo, sbo, span


def operand_addresses(desc: int, rows: int, k: int, item: int, mn_major: bool) -> np.ndarray:
    """Byte addresses ``(rows, k)`` of a wgmma operand (``rows`` = M or N, ``k`` = 16
    for 16-bit types) read through descriptor ``desc`` (canonical layouts, swizzled)."""
    start, lbo, sbo, span = _decode_desc(desc)
    r = np.arange(rows)[:, None]
    c = np.arange(k)[None, :]
    per = 16 // item                                   # elements per 16-byte chunk
    if not mn_major:                                   # K-major
        if span:
            off = (r // 8) * sbo + (r % 8) * span + c * item
        else:                                          # core matrices 8 rows x 16 B
            off = (r // 8) * sbo + (r % 8) * 16 + (c // per) * lbo + (c % per) * item
    else:                                              # MN-major
        if span:
            w = span // item                           # elements of a swizzle row
            off = (r // w) * lbo + (r % w) * item + (c // 8) * sbo + (c % 8) * span
        else:
            off = (r // per) * sbo + (r % per) * item + (c // 8) * lbo + (c % 8) * 16
    return swizzle(start + off, span)


def _converged_warpgroups(sim, name, active) -> np.ndarray:
    """Warpgroups (bool per warpgroup slot) executing ``name``; whole aligned ones only."""
    g = sim.geom
    if g.stride % WARPGROUP:
        sim.finding("wgmma", f"{name}: the block's {g.threads} threads are not whole "
                             f"warpgroups of {WARPGROUP}")
        return np.zeros(0, dtype=bool)
    act = active.reshape(-1, WARPGROUP)
    valid = g.valid.reshape(-1, WARPGROUP)
    groups = act.any(axis=1)
    partial = groups & ((act != valid).any(axis=1) | ~valid.all(axis=1))
    if partial.any():
        w = int(np.argmax(partial))
        sim.finding("wgmma", f"{name}: a .sync.aligned warpgroup instruction executed by "
                             f"{int(act[w].sum())} of the {WARPGROUP} threads of warpgroup "
                             f"{g.describe(w * WARPGROUP)}", int(partial.sum()))
    return groups


def _wgmma(sim, call, active, dtype):
    acc_arg = call.args[0]
    groups = _converged_warpgroups(sim, call.name, active)
    if not groups.any():
        return 0
    st = _state(sim)
    g = sim.geom
    n, ta, tb = (int(call.args[k].value) for k in (3, 4, 5))
    if n % 8 or not 8 <= n <= 256:
        sim.fail(f"wgmma: N = {n} (8..256 in steps of 8)")
    wl = np.flatnonzero(groups)
    lanes = (wl[:, None] * WARPGROUP + np.arange(WARPGROUP)).reshape(-1)
    sel = np.zeros(g.n_lanes, dtype=bool)
    sel[lanes] = True
    da = _lanes_of(sim, sim.eval(call.args[1], sel)).astype(np.int64)
    db = _lanes_of(sim, sim.eval(call.args[2], sel)).astype(np.int64)
    scale = _lanes_of(sim, sim.eval(call.args[6], sel)).astype(np.int64)
    for name, v in (("A descriptor", da), ("B descriptor", db), ("scale-d", scale)):
        vv = v[lanes].reshape(len(wl), WARPGROUP)
        if (vv != vv[:, :1]).any():
            sim.finding("wgmma", f"{call.name}: the {name} differs between the threads of "
                                 f"one warpgroup")
    dmem, doff = _pointer(sim, acc_arg, sel, "wgmma accumulator", "local")
    if dmem.buffer.dtype != "float32":
        sim.fail("wgmma: needs float32 accumulators")
    regs = n // 2
    from .sim_tensorcore import _check_range
    _check_range(sim, dmem, doff, regs, sel, "wgmma accumulator")
    dp = dmem.positions(doff)[lanes][:, None] + np.arange(regs)      # (lanes, regs)
    acc = st.acc.get(dmem)
    if acc is None:
        acc = st.acc[dmem] = _Acc(dmem)
    if acc.unfenced[dp].any():
        j = int(lanes[int(np.argmax(acc.unfenced[dp].any(axis=1)))])
        sim.finding("wgmma", f"{call.name} by {g.describe(j)} uses accumulators written by "
                             f"ordinary instructions with no wgmma.fence since")
    if acc.pending[dp].any() and (scale[lanes] != 0).any():
        pass     # chained wgmma on the same accumulators: ordered by the hardware
    item = 2
    npdt = dt.to_numpy(dtype)
    reads: list = []
    D = np.zeros((len(wl), 64, n))
    for k, w in enumerate(wl):
        lane0 = int(w * WARPGROUP)
        a_addr = operand_addresses(int(da[lane0]), 64, 16, item, bool(ta))
        b_addr = operand_addresses(int(db[lane0]), n, 16, item, bool(tb))
        mats = []
        for addr, what in ((a_addr, "A"), (b_addr, "B")):
            mem, el = _decode(sim, addr.reshape(-1), f"wgmma {what} operand")
            if mem.itemsize != item:
                sim.fail(f"wgmma: operand {what} is in {mem.buffer.name}, not a 16-bit buffer")
            pos = mem.base[lane0] + el
            vals = mem.data[pos].astype(npdt).astype(np.float64)
            _check_group_reads(sim, st, mem, pos, lane0 + np.arange(WARPGROUP),
                               f"wgmma (operand {what})")
            reads.append((mem, pos))
            mats.append(vals.reshape(addr.shape))
        with np.errstate(invalid="ignore", over="ignore"):
            D[k] = mats[0] @ mats[1].T
    # accumulators: thread 32 w + l, register i
    t = np.arange(WARPGROUP)
    i = np.arange(regs)
    row = 16 * (t[:, None] // 32) + (t[:, None] % 32) // 4 + 8 * ((i[None, :] // 2) % 2)
    col = 8 * (i[None, :] // 4) + 2 * (t[:, None] % 4) + i[None, :] % 2
    prod = D[:, row, col].reshape(-1, regs)                           # (lanes, regs)
    old = dmem.data[dp].astype(np.float64)
    keep = (scale[lanes] != 0)[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        dmem.data[dp] = np.where(keep, old + prod, prod).astype(np.float32)
    acc.pending[dp] = True
    for mem, pos in reads:
        np.add.at(_tags(st, mem).wg_reads, pos, 1)
    st.records.append([lanes, st.committed[lanes].copy(), reads, (acc, dp)])
    sim.stats.flops += 2 * 64 * n * 16 * len(wl)
    return 0


@intrinsic("ptx_wgmma_f16")
def wgmma_f16(sim, call, active):
    return _wgmma(sim, call, active, "float16")


@intrinsic("ptx_wgmma_bf16")
def wgmma_bf16(sim, call, active):
    return _wgmma(sim, call, active, "bfloat16")


@intrinsic("ptx_wgmma_fence")
def wgmma_fence(sim, call, active):
    _converged_warpgroups(sim, "wgmma.fence", active)
    st = _state(sim)
    lanes = np.flatnonzero(active)
    for mem, a in st.acc.items():
        p = mem.base[lanes][:, None] + np.arange(mem.size)
        a.unfenced[p] = False
    return 0


@intrinsic("ptx_wgmma_commit")
def wgmma_commit(sim, call, active):
    _converged_warpgroups(sim, "wgmma.commit_group", active)
    st = _state(sim)
    st.committed[active] += 1
    return 0


@intrinsic("ptx_wgmma_wait")
def wgmma_wait(sim, call, active):
    _converged_warpgroups(sim, "wgmma.wait_group", active)
    n = int(call.args[0].value)
    st = _state(sim)
    keep = []
    for rec in st.records:
        lanes, group, reads, (acc, dp) = rec
        done = active[lanes] & (group < st.committed[lanes] - n)
        if done.all():
            for mem, pos in reads:
                np.subtract.at(_tags(st, mem).wg_reads, pos, 1)
            acc.pending[dp] = False
        elif done.any():
            sim.fail("wgmma.wait_group: part of a warpgroup completes an instruction")
        else:
            keep.append(rec)
    st.records = keep
    return 0


@intrinsic("ptx_wgmma_fence_operand")
def wgmma_fence_operand(sim, call, active):
    return 0            # a compiler-ordering fence: no effect on the data


@intrinsic("ptx_setmaxnreg")
def setmaxnreg(sim, call, active):
    _converged_warpgroups(sim, "setmaxnreg", active)
    n = int(call.args[1].value)
    if n % 8 or not 24 <= n <= 256:
        sim.fail(f"setmaxnreg: {n} registers (24..256, a multiple of 8)")
    return 0


# --------------------------------------------------------------------------- roles


class _Abort(BaseException):
    """Unwinds a suspended role when another one failed."""


class _Roles:
    """Warp-specialised roles of one ``warp_roles`` region as coroutines (threads that
    hand one baton around; see the module docstring)."""

    def __init__(self, sim, roles):
        self.sim = sim
        self.roles = roles                 # [(body, InterpreterState)]
        self.cv = threading.Condition()
        self.turn = 0
        self.done = [False] * len(roles)
        self.waiting: list = [None] * len(roles)
        self.error: BaseException | None = None
        self.index: dict = {}

    def run(self) -> None:
        old = threading.stack_size()
        threading.stack_size(64 << 20)
        try:
            threads = [threading.Thread(target=self._body, args=(i,), daemon=True)
                       for i in range(len(self.roles))]
            for t in threads:
                t.start()
        finally:
            threading.stack_size(old)
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error

    def _body(self, i: int) -> None:
        self.index[threading.get_ident()] = i
        with self.cv:
            self.cv.wait_for(lambda: self.turn == i or self.error is not None)
        try:
            if self.error is None:
                body, st = self.roles[i]
                self.sim.st = st
                self.sim.stmt(body, st)
        except _Abort:
            pass
        except BaseException as e:       # noqa: BLE001 (re-raised by run)
            with self.cv:
                if self.error is None:
                    self.error = e
        finally:
            with self.cv:
                self.done[i] = True
                if self.error is None and not all(self.done):
                    nxt = self._next(i)
                    if nxt is None:
                        self.error = self._deadlock()
                    else:
                        self.turn = nxt
                self.cv.notify_all()

    def _runnable(self, j: int) -> bool:
        return not self.done[j] and (self.waiting[j] is None or self.waiting[j]())

    def _next(self, i: int) -> int | None:
        n = len(self.roles)
        for d in range(1, n + 1):
            j = (i + d) % n
            if self._runnable(j):
                return j
        return None

    def _deadlock(self) -> BaseException:
        try:
            self.sim.finding("mbarrier", "deadlock: every role of the warp-specialised "
                                         "region waits for an mbarrier phase that no role "
                                         "can complete")
        except SimulatorError as e:
            return e
        return MbarrierError(f"kernel {self.sim.stats.name}: mbarrier deadlock")

    def wait(self, ready) -> None:
        """Suspend the calling role until ``ready()``."""
        i = self.index[threading.get_ident()]
        with self.cv:
            self.waiting[i] = ready
            nxt = self._next(i)
            if nxt is None:
                self.error = self._deadlock()
                self.cv.notify_all()
                raise _Abort
            if nxt != i:
                self.turn = nxt
                self.cv.notify_all()
                self.cv.wait_for(lambda: self.turn == i or self.error is not None)
            self.waiting[i] = None
            if self.error is not None:
                raise _Abort
        self.sim.st = self.roles[i][1]


def _allocates(stmt) -> bool:
    from polycomp import ir
    found: list = []
    ir.walk(stmt, lambda n: found.append(n) if isinstance(n, ir.Allocate) else None)
    return bool(found)


def run_roles(sim, s, st) -> None:
    """The ``warp_roles`` attribute: ``s.body`` is a Block of ``IfThenElse(cond_i,
    body_i)`` with disjoint thread sets; each runs as a coroutine."""
    from polycomp import ir
    from polycomp.lowering.interpreter import InterpreterState
    body = s.body
    items = list(body.stmts) if isinstance(body, ir.Block) else [body]
    roles = []
    for x in items:
        if not (isinstance(x, ir.IfThenElse) and x.orelse is None):
            sim.fail("warp_roles: the region must be a block of `if (role) body` statements")
        if _allocates(x):
            sim.fail("warp_roles: a role allocates storage")
        c = np.broadcast_to(np.asarray(sim.expr(x.cond, st, st.mask)), (st.lanes,))
        m = c if st.mask is None else (st.mask & c)
        if m.any():
            rs = InterpreterState(dict(st.env), st.buffers)
            rs.lanes, rs.mask = st.lanes, m
            roles.append((x.then, rs))
    masks = [r[1].mask for r in roles]
    if len(masks) > 1 and (np.sum(masks, axis=0) > 1).any():
        sim.fail("warp_roles: a thread belongs to two roles")
    prev_roles, prev_st = sim.__dict__.get("_roles"), sim.st
    if len(roles) == 1:
        sim.st = roles[0][1]
        try:
            sim.stmt(roles[0][0], roles[0][1])
        finally:
            sim.st = prev_st
        return
    r = _Roles(sim, roles)
    sim.__dict__["_roles"] = r
    try:
        r.run()
    finally:
        sim.__dict__["_roles"] = prev_roles
        sim.st = prev_st


ATTR_HANDLERS[WARP_ROLES] = run_roles
