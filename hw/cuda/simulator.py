"""The CUDA simulator: runs lowered CUDA-level IR with CUDA's execution semantics.

This is how the CUDA path is checked without a GPU.  :func:`simulate` takes a
:class:`~polycomp.driver.CompiledKernel` for the ``cuda`` target (by default its
``final_ir``, the flattened IR that :mod:`~polycomp.hw.cuda.codegen` prints; ``.ir``,
the mapped IR before flattening, with ``ir_stage="ir"``) or a hand-built
``LoweredFunc``, splits it into kernels exactly as codegen does
(:func:`~polycomp.hw.cuda.codegen.split_kernels`), allocates the global temporaries
once for the launch sequence and runs the kernels in order.

Execution model (what the printed ``.cu`` does):

* a kernel's grid is ``KernelInfo.grid`` evaluated with the size parameters, its block
  ``KernelInfo.block``.  A ``gpu_block`` loop binds its variable to
  ``min + blockIdx.<axis>``; a ``gpu_thread`` loop binds ``min + threadIdx.<axis>`` for
  the threads with ``threadIdx.<axis> < extent`` (the printed guard), the others skip
  its body.  A thread loop wider than the block is a :class:`LaunchError` (iterations
  would be lost).  Every other loop (serial, unrolled, parallel, vectorized,
  ``coincident``) runs sequentially in each thread, as the printed ``for`` does.
* Threads are the interpreter's lanes (:mod:`polycomp.lowering.interpreter`): all
  threads of a chunk of blocks execute each statement together, ``if``/``select``
  narrow the active mask, loops with thread-dependent bounds mask finished threads.
  Lane ``l`` is thread ``l % stride`` of block slot ``l // stride``, with ``stride``
  the block's thread count rounded up to whole warps (the padding lanes never run),
  so 32 consecutive lanes are one warp (linear thread id ``x + y*bx + z*bx*by``,
  warp = id // 32).  Blocks run in chunks of at most ``lane_budget`` lanes.
* Memory spaces (:mod:`~polycomp.hw.cuda.sim_memory`): global buffers, one
  ``__shared__`` copy per block for ``Allocate`` scope ``shared``, one copy per thread
  for scope ``local``; an ``Allocate`` statement executed again (in a loop) keeps its
  storage, like CUDA's static shared arrays.  Accesses are bounds-checked in every
  active thread (:class:`OutOfBoundsError`) and counted
  (:mod:`~polycomp.hw.cuda.sim_counters`).
* Intrinsics (``__syncthreads``, ``__syncwarp``, warp shuffles and votes) come from the
  handler table :data:`~polycomp.hw.cuda.sim_intrinsics.INTRINSICS`; math calls are the
  interpreter's.
* Lock-step execution would hide missing synchronisation, so the simulator checks for
  it: shared-memory races between barriers, global-memory races within a launch
  (:mod:`~polycomp.hw.cuda.sim_races`), divergent barriers, and warp intrinsics whose
  member masks do not match the arriving threads (see
  :mod:`~polycomp.hw.cuda.sim_report`).  ``strict=True`` raises
  the first; ``strict=False`` records them all in the :class:`SimReport`.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import TargetError
from polycomp.lowering.interpreter import Interpreter, InterpreterState, store_value
from polycomp.shapes import checked_arguments, eval_int

from . import sim_hopper, sim_tensorcore  # noqa: F401  (register their intrinsics)
from .codegen import KernelInfo, has_host_control, host_program, launch_sequence, program_kernels
from .sim_counters import global_sectors, shared_wavefronts
from .sim_intrinsics import ATTR_HANDLERS, INTRINSICS, WARP
from .sim_memory import GlobalMemory, LocalMemory, SharedMemory, poisoned
from .sim_races import GlobalRaceTracker, same_values
from .sim_report import (  # noqa: F401
    FINDING_ERRORS,
    BarrierDivergenceError,
    Finding,
    GlobalMemoryRaceError,
    GlobalWriteConflictError,
    KernelStats,
    LaunchError,
    OutOfBoundsError,
    SharedMemoryRaceError,
    SimReport,
    SimulatorError,
    WarpSyncError,
)

__all__ = ["simulate", "Simulator", "LaneGeometry", "SimReport", "SimulatorError",
           "LaunchError", "OutOfBoundsError", "BarrierDivergenceError",
           "SharedMemoryRaceError", "WarpSyncError", "GlobalMemoryRaceError",
           "GlobalWriteConflictError", "MisalignedAccessError"]

class MisalignedAccessError(SimulatorError):
    """A vector access (``V`` consecutive elements in one instruction) that does not
    start at a multiple of ``V`` elements: a misaligned-address fault on the GPU."""


DEFAULT_LANE_BUDGET = 1 << 16
GLOBAL_RACE_MAX_ELEMENTS = 1 << 21     # larger buffers are not race-tracked (memory)
_AXIS = {"x": 0, "y": 1, "z": 2}
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2 ** 31 - 1, 65535, 65535)
_FLOP_OPS = ("+", "-", "*", "/")


class LaneGeometry:
    """The lanes of one chunk of blocks: ``n_blocks`` blocks from linear block
    ``first_block`` (x fastest), each ``stride`` lanes (its threads, padded to warps)."""

    def __init__(self, grid: tuple, block: tuple, first_block: int, n_blocks: int):
        self.grid, self.block = grid, block
        self.first_block, self.n_blocks = first_block, n_blocks
        self.threads = block[0] * block[1] * block[2]
        self.warps_per_block = -(-self.threads // WARP)
        self.stride = self.warps_per_block * WARP
        self.n_lanes = n_blocks * self.stride
        self.lane = np.arange(self.n_lanes, dtype=np.int64)
        self.block_slot = self.lane // self.stride
        self.thread = self.lane % self.stride           # linear thread id in the block
        self.warp_lane = self.lane % WARP
        self.valid = self.thread < self.threads
        bx, by, _ = block
        t = self.thread
        self.tid = (t % bx, (t // bx) % by, t // (bx * by))
        lin = first_block + self.block_slot
        gx, gy, _ = grid
        self.bid = (lin % gx, (lin // gx) % gy, lin // (gx * gy))
        self.global_thread = lin * self.stride + self.thread   # unique in the launch

    def thread_xyz(self, t: int) -> tuple:
        bx, by, _ = self.block
        return (t % bx, (t // bx) % by, t // (bx * by))

    def block_index(self, lane: int) -> tuple:
        return tuple(int(a[lane]) for a in self.bid)

    def describe(self, lane: int) -> str:
        return (f"thread {self.thread_xyz(int(self.thread[lane]))} of block "
                f"{self.block_index(lane)}")

    def describe_thread_in_block(self, t: int) -> str:
        return f"thread {self.thread_xyz(int(t))} of the same block"

    def describe_global(self, gid: int) -> str:
        """The thread with global id ``gid`` (see ``global_thread``)."""
        lin, t = divmod(int(gid), self.stride)
        gx, gy, _ = self.grid
        return (f"thread {self.thread_xyz(t)} of block "
                f"{(lin % gx, (lin // gx) % gy, lin // (gx * gy))}")


class Simulator(Interpreter):
    """Executes the kernels of one launch sequence; see the module docstring.

    Overrides the interpreter's hooks: loops (GPU loops bind thread/block indices, all
    others are sequential), allocation (per-block/per-thread storage), loads and stores
    (memory spaces, bounds, counters, race checks), calls (intrinsic table) and binary
    operators (flop count).
    """

    def __init__(self, func: ir.LoweredFunc, report: SimReport, strict: bool = True,
                 poison: bool = True, intrinsics: dict | None = None,
                 global_races: bool = True):
        super().__init__(func)
        self.report = report
        self.strict = strict
        self.poison = poison
        self.global_races = global_races
        self._global_trackers: dict = {}   # GlobalMemory -> GlobalRaceTracker (a launch)
        # extension point: hook(sim, mem, pos, offsets, active, write) is called for
        # every ordinary shared load/store (e.g. cp.async: is the element in flight?)
        self.shared_access_hooks: list = []
        # the same for local (per-thread register) loads/stores (wgmma accumulators)
        self.local_access_hooks: list = []
        # barriers passed, per block slot (allocated per launch)
        self.block_epoch: np.ndarray = None  # type: ignore[assignment]
        self.intrinsics = dict(INTRINSICS if intrinsics is None else intrinsics)
        self.globals: dict = {}        # Buffer -> GlobalMemory, for the whole sequence
        self._globals_by_name: dict = {}
        self.mem: dict = {}            # Buffer -> memory visible at this point
        self._static: dict = {}        # Allocate node -> its storage in this chunk
        # the current launch's geometry and counters (set by each launch)
        self.geom: LaneGeometry = None  # type: ignore[assignment]
        self.stats: KernelStats = None  # type: ignore[assignment]
        self.st: InterpreterState | None = None

    # ------------------------------------------------------------- sequence
    def add_global(self, buffer: ir.Buffer, array: np.ndarray) -> GlobalMemory:
        m = GlobalMemory(buffer, array)
        self.globals[buffer] = m
        self._globals_by_name[buffer.name] = m
        return m

    def run_kernel(self, info: KernelInfo, params: dict,
                   lane_budget: int = DEFAULT_LANE_BUDGET) -> KernelStats:
        grid = tuple(int(eval_int(g, params)) for g in info.grid)
        block = tuple(int(b) for b in info.block)
        if min(grid) <= 0:  # the host code skips a kernel whose domain is empty
            self.stats = KernelStats(info.name, grid, block)
            self.report.kernels.append(self.stats)
            return self.stats
        for a, (g, b) in enumerate(zip(grid, block)):
            if not 1 <= g <= _MAX_GRID[a]:
                raise LaunchError(f"kernel {info.name}: grid dimension {'xyz'[a]} is {g} "
                                  f"(CUDA needs 1..{_MAX_GRID[a]})")
            if not 1 <= b <= _MAX_BLOCK[a]:
                raise LaunchError(f"kernel {info.name}: block dimension {'xyz'[a]} is {b} "
                                  f"(CUDA needs 1..{_MAX_BLOCK[a]})")
        if block[0] * block[1] * block[2] > 1024:
            raise LaunchError(f"kernel {info.name}: {block} is more than 1024 threads")
        self.stats = KernelStats(info.name, grid, block)
        self.report.kernels.append(self.stats)
        total = grid[0] * grid[1] * grid[2]
        stride = -(-(block[0] * block[1] * block[2]) // WARP) * WARP
        chunk = max(1, lane_budget // stride)
        env = {p: int(params[p.name]) for p in info.params}   # sizes, host loop vars
        self._global_trackers = {}
        self._stored_globals = _stored_buffer_names(info.body) if self.global_races else set()
        for first in range(0, total, chunk):
            self.geom = LaneGeometry(grid, block, first, min(chunk, total - first))
            self.block_epoch = np.zeros(self.geom.n_blocks, dtype=np.int64)
            st = InterpreterState(dict(env), {})
            st.lanes = self.geom.n_lanes
            st.mask = self.geom.valid.copy()
            self.st = st
            self.mem = dict(self.globals)
            self._static = {}
            # IEEE values for floating-point errors, numpy's 0 for an integer division
            # by zero: the interpreter's error state (Interpreter.run), set once
            with np.errstate(all="ignore"):
                self.stmt(info.body, st)
        self._static = {}
        self._global_trackers = {}
        return self.stats

    # ------------------------------------------------------------- helpers
    def eval(self, e: ir.Expr, active: np.ndarray):
        """Evaluate ``e`` in the threads of ``active`` (for intrinsic handlers)."""
        return self.expr(e, self.st, active)

    def finding(self, kind: str, message: str, count: int = 1) -> None:
        """Record a violation; raise its error class in strict mode."""
        f = Finding(kind, self.stats.name if self.stats else "?", message, count)
        self.report.add_finding(f)
        if self.strict:
            raise FINDING_ERRORS[kind](f"kernel {f.kernel}: {message}", f)

    def fail(self, message: str):
        raise SimulatorError(f"kernel {self.stats.name if self.stats else '?'}: {message}")

    def live_shared(self) -> list:
        """Every shared allocation of the current chunk (barriers reset their state)."""
        return [m for m in self._static.values() if m.scope == "shared"]

    def block_barrier(self, blocks: np.ndarray) -> None:
        """``__syncthreads()`` completed in the block slots ``blocks``: their shared
        accesses so far are ordered before everything after (race state cleared) and
        their global accesses before their own later ones (next epoch)."""
        for mem in self.live_shared():
            mem.tracker.reset_blocks(blocks)
        self.block_epoch[blocks] += 1

    def _active(self, mask):
        return self.geom.valid if mask is None else mask

    def _count(self, mask) -> int:
        return int(np.count_nonzero(self._active(mask)))

    # ------------------------------------------------------------- loops
    def stmt(self, s, st):
        if type(s) is ir.AttrStmt:      # attributes with execution semantics (warp roles)
            handler = ATTR_HANDLERS.get(s.key)
            if handler is not None:
                return handler(self, s, st)
        return super().stmt(s, st)

    def lane_parallel(self, s) -> bool:
        return False          # lanes are threads; other loops run inside each thread

    def _try_reduction(self, s, st, lo, ext) -> bool:
        return False          # keep per-iteration instructions (counters, races)

    def for_(self, s, st):
        if s.kind in ("gpu_block", "gpu_thread"):
            return self._gpu_for(s, st)
        if s.kind == "vectorized" and s.annotation("vector") is not None:
            self._vector_alignment(s, st)
        return super().for_(s, st)

    def _vector_alignment(self, s, st) -> None:
        """A vector loop (row kernels, :mod:`.rowreduce`): the accesses codegen prints as
        ``V``-element vectors must start at a multiple of ``V`` elements (buffers are
        256-byte aligned), else the GPU faults (misaligned address)."""
        from .rowreduce import vector_accesses, vector_width
        v = vector_width(s)
        active = self._active(st.mask)
        if not active.any() or not v or v == 1:
            return
        loads, stores = vector_accesses(s)
        for what, accesses in (("load", loads), ("store", stores)):
            for buf, base in accesses:
                mem = self._memory(buf, what)
                off = self._offsets(mem, buf, base, st, active, f"vector {what}")
                bad = active & (off % v != 0)
                if bad.any():
                    j = int(np.argmax(bad))
                    raise MisalignedAccessError(
                        f"kernel {self.stats.name}: {v}-element vector {what} of {buf.name} "
                        f"by {self.geom.describe(j)} starts at element {int(off[j])}, not a "
                        f"multiple of {v} ({v * mem.itemsize}-byte alignment)")

    def _gpu_for(self, s, st):
        g = self.geom
        axis = s.annotation("axis")
        if axis not in _AXIS:
            self.fail(f"{s.kind} loop {s.var.name} has no x/y/z axis annotation")
        a = _AXIS[axis]
        block_loop = s.kind == "gpu_block"
        ids, dims = (g.bid, g.grid) if block_loop else (g.tid, g.block)
        what = "gridDim" if block_loop else "blockDim"
        mask = st.mask
        lo = self.expr(s.min, st, mask)
        ext = np.broadcast_to(np.asarray(self.expr(s.extent, st, mask), dtype=np.int64),
                              (g.n_lanes,))
        wide = mask & (ext > dims[a])
        if wide.any():
            j = int(np.argmax(wide))
            raise LaunchError(f"kernel {self.stats.name}: {s.kind} loop {s.var.name} has "
                              f"extent {int(ext[j])} in {g.describe(j)} but {what}.{axis} "
                              f"is {dims[a]}: iterations beyond it would never run")
        inner = mask & (ids[a] < ext)
        if not inner.any():
            return
        st.env[s.var] = lo + ids[a]
        st.mask = inner
        try:
            self.stmt(s.body, st)
        finally:
            st.mask = mask
            del st.env[s.var]

    # ------------------------------------------------------------- memory
    def allocate(self, s, st):
        b = s.buffer
        dims: list[int] = []
        for d in b.shape:
            v = self.expr(d, st, st.mask)
            if np.ndim(v):
                vals = np.asarray(v)[st.mask]
                if vals.size and not np.all(vals == vals[0]):
                    self.fail(f"allocation of {b.name} has a thread-dependent size")
                v = vals[0] if vals.size else 0
            dims.append(int(v))
        shape = tuple(dims)
        mem = self._static.get(s)
        if mem is None or mem.shape != shape:
            if b.scope == "shared":
                mem = SharedMemory(b, shape, self.geom.n_blocks, self.geom.block_slot,
                                   self.poison)
            elif b.scope == "local":
                mem = LocalMemory(b, shape, self.geom.n_lanes, self.poison)
            else:
                self.fail(f"allocation of {b.name} in scope {b.scope!r} inside a kernel "
                          f"(a kernel allocates only shared and local memory)")
            self._static[s] = mem
        prev = self.mem.get(b)
        self.mem[b] = mem
        try:
            self.stmt(s.body, st)
        finally:
            if prev is None:
                del self.mem[b]
            else:
                self.mem[b] = prev

    def _memory(self, buf, what):
        m = self.mem.get(buf)
        if m is None:
            m = self._globals_by_name.get(buf.name)
        if m is None:
            self.fail(f"{what} of {buf.name!r}, which is not allocated here")
        return m

    def _offsets(self, mem, buf, indices, st, active, what) -> np.ndarray:
        """Element offset (row-major) of the access in every lane; 0 where inactive."""
        if buf.flat:
            if len(indices) != 1:
                self.fail(f"flat buffer {buf.name!r} accessed with {len(indices)} indices")
            dims = (mem.size,)
        else:
            dims = mem.shape
            if len(indices) != len(dims):
                self.fail(f"{buf.name!r} has {len(dims)} dims, a {what} uses {len(indices)}")
        n = self.geom.n_lanes
        flat = None
        clamp = False
        for k, (i, d) in enumerate(zip(indices, dims)):
            v = np.broadcast_to(np.asarray(self.expr(i, st, active)), (n,))
            if v.dtype.kind not in "iu":
                self.fail(f"{what} of {buf.name}: index {k} is not an integer ({v.dtype})")
            v = v.astype(np.int64, copy=False)
            outside = v.view(np.uint64) >= d          # negative indices wrap to huge
            if outside.any():
                bad = outside & active
                if bad.any():
                    j = int(np.argmax(bad))
                    raise OutOfBoundsError(
                        f"kernel {self.stats.name}: {what} of {buf.name} ({mem.scope}) by "
                        f"{self.geom.describe(j)}: index {k} = {int(v[j])} is out of "
                        f"bounds [0, {d})")
                clamp = True                          # only inactive lanes are outside
            flat = v if flat is None else flat * d + v
        if flat is None:                              # a 0-d buffer
            return np.zeros(n, dtype=np.int64)
        return np.where(active, flat, 0) if clamp else flat

    def _account(self, mem, offsets, active, store: bool) -> None:
        if mem.scope == "local":
            return
        byte = (offsets * mem.itemsize).reshape(-1, WARP)
        act = active.reshape(-1, WARP)
        if mem.scope == "global":
            g = self.stats.global_store if store else self.stats.global_load
            g.add(*global_sectors(byte, act, mem.itemsize))
        else:
            s = self.stats.shared_store if store else self.stats.shared_load
            s.add(*shared_wavefronts(byte, act, mem.itemsize))

    def _race_check(self, mem, pos, offsets, active, new=None) -> None:
        """Hazards of a read (``new is None``) or of a store of ``new`` (full lanes)."""
        g = self.geom
        write = new is not None
        describe: Callable[[int], str]
        if mem.scope == "shared":
            describe, space = g.describe_thread_in_block, "shared"
            tracker = mem.tracker
            args: tuple = (pos, g.thread)
        else:
            tracker = self._global_tracker(mem)
            if tracker is None:
                return
            describe, space = g.describe_global, "global"
            args = (pos, g.global_thread, self.block_epoch[g.block_slot])
        if write:
            hazards = tracker.write(*args, active, new, mem.data[pos])
        else:
            hazards = tracker.read(*args, active)
        order = ("no __syncthreads() orders the two" if space == "shared" else
                 "nothing orders the two within the launch (a different block, or no "
                 "__syncthreads() between)")
        for kind, bad, other in hazards:
            lane = int(np.argmax(bad))
            same_instruction = kind.startswith("write-write in one")
            if same_instruction:
                theirs = "writes a different value to it"
            else:
                theirs = "has read it" if kind == "write-after-read" else "has written it"
            self.finding(
                "global-write-conflict" if space == "global" and same_instruction
                else f"{space}-race",
                f"{space}-memory race ({kind}) on {mem.buffer.name}[{int(offsets[lane])}]: "
                f"{g.describe(lane)} {'writes' if write else 'reads'} it, "
                f"{describe(int(other[lane]))} {theirs}, and {order}", int(bad.sum()))

    def _global_tracker(self, mem):
        """The launch's race tracker of a global buffer, or None when it is not tracked:
        a buffer the kernel never stores to cannot race (reads do not conflict), and
        one above GLOBAL_RACE_MAX_ELEMENTS is skipped (listed in the report)."""
        if mem in self._global_trackers:
            return self._global_trackers[mem]
        tracker = None
        if mem.buffer.name in self._stored_globals:
            if mem.size <= GLOBAL_RACE_MAX_ELEMENTS:
                tracker = GlobalRaceTracker(mem.size, self.geom.stride)
            elif mem.buffer.name not in self.report.unchecked:
                self.report.unchecked.append(mem.buffer.name)
        self._global_trackers[mem] = tracker
        return tracker

    def load(self, e, st, mask):
        active = self._active(mask)
        mem = self._memory(e.buffer, "load")
        offsets = self._offsets(mem, e.buffer, e.indices, st, active, "load")
        pos = mem.positions(offsets)
        values = mem.data[pos]
        self._account(mem, offsets, active, store=False)
        if mem.scope == "shared":
            for hook in self.shared_access_hooks:
                hook(self, mem, pos, offsets, active, False)
        elif mem.scope == "local":
            for hook in self.local_access_hooks:
                hook(self, mem, pos, offsets, active, False)
        if mem.scope == "shared" or (self.global_races and mem.scope == "global"):
            self._race_check(mem, pos, offsets, active)
        return values.astype(dt.to_numpy(dt.compute_dtype(e.dtype)), copy=False)

    def store(self, s, st):
        active = self._active(st.mask)
        if not active.any():
            return
        mem = self._memory(s.buffer, "store")
        offsets = self._offsets(mem, s.buffer, s.indices, st, active, "store")
        value = self.expr(s.value, st, active)
        lanes = np.flatnonzero(active)
        pos = mem.positions(offsets)
        p = pos[lanes]
        if mem.scope == "shared":
            for hook in self.shared_access_hooks:
                hook(self, mem, pos, offsets, active, True)
        elif mem.scope == "local":
            for hook in self.local_access_hooks:
                hook(self, mem, pos, offsets, active, True)
        if mem.scope == "shared" or (self.global_races and mem.scope == "global"):
            new = store_value(np.broadcast_to(np.asarray(value), (self.geom.n_lanes,)),
                            mem.data.dtype)
            self._race_check(mem, pos, offsets, active, new)
            vals = new[lanes]
        else:
            vals = store_value(np.broadcast_to(np.asarray(value),
                                             (self.geom.n_lanes,))[lanes], mem.data.dtype)
            if mem.scope == "global" and len(p) > 1:
                self._global_conflicts(mem, p, vals, lanes)
        mem.data[p] = vals
        self._account(mem, offsets, active, store=True)

    def _global_conflicts(self, mem, p, vals, lanes) -> None:
        stamp = mem.stamp()
        idx = np.arange(len(p))
        stamp[p] = idx
        winner = stamp[p]
        dup = winner != idx
        if not dup.any():
            return
        bad = dup & ~same_values(vals, vals[winner])
        if bad.any():
            j = int(np.argmax(bad))
            self.finding("global-write-conflict",
                         f"{self.geom.describe(int(lanes[j]))} and "
                         f"{self.geom.describe(int(lanes[winner[j]]))} store different "
                         f"values to {mem.buffer.name}[{int(p[j])}] in the same instruction",
                         int(bad.sum()))

    # ------------------------------------------------------------- calls, arithmetic
    def call(self, e, st, mask):
        handler = self.intrinsics.get(e.name)
        if handler is not None:
            return handler(self, e, self._active(mask))
        if e.name not in ir.MATH_FUNCS:
            self.fail(f"the CUDA simulator has no handler for intrinsic {e.name!r}")
        self.stats.math_ops += self._count(mask)
        return super().call(e, st, mask)

    def binary(self, e, st, mask):
        r = super().binary(e, st, mask)
        if e.op in _FLOP_OPS and e.dtype in dt.FLOATS:
            self.stats.flops += self._count(mask)
        return r


def _stored_buffer_names(body) -> set:
    names = set()
    ir.walk(body, lambda n: names.add(n.buffer.name) if isinstance(n, ir.Store) else None)
    return names


# --------------------------------------------------------------------------- API


def _lowered(obj, ir_stage: str) -> ir.LoweredFunc:
    if isinstance(obj, ir.LoweredFunc):
        return obj
    from polycomp.driver import CompiledKernel, compile_kernel
    if not isinstance(obj, CompiledKernel):
        if not hasattr(obj, "polyhedral_model"):
            raise TargetError(f"simulate() takes a CompiledKernel, a LoweredFunc or a "
                              f"kernel, got {type(obj).__name__}")
        obj = compile_kernel(obj, "cuda")
    if obj.target.cuda is None:            # not a CUDA machine description
        raise TargetError(f"simulate() runs CUDA kernels; {obj.name} was compiled for "
                          f"{obj.target.name}")
    if ir_stage not in ("final", "ir"):
        raise TargetError(f"ir_stage must be 'final' (the printed IR) or 'ir' (before "
                          f"flattening), got {ir_stage!r}")
    return obj.final_ir if ir_stage == "final" else obj.ir


def simulate(compiled_or_func, *inputs, strict: bool = True, ir_stage: str = "final",
             poison: bool = True, lane_budget: int = DEFAULT_LANE_BUDGET,
             intrinsics: dict | None = None, global_races: bool = True, **params):
    """Run a CUDA kernel sequence on numpy arrays; return ``(outputs, SimReport)``.

    ``compiled_or_func``: a CompiledKernel for the cuda target (its ``final_ir``, or its
    ``ir`` with ``ir_stage="ir"``), a ``LoweredFunc`` with GPU loops, or a DSL kernel
    (compiled for cuda).  ``inputs`` are the input arrays in order, then the initial
    contents of the in-out outputs (``func.inout``), as for
    :func:`~polycomp.driver.interpret`; symbolic sizes are inferred from them, others
    go in ``params``.  Outputs and global temporaries start
    poisoned (NaN) unless ``poison=False``, so elements no kernel writes are visible.
    ``outputs`` is the one output array, or a tuple of them.  With ``strict=True`` the
    first race / divergence / warp-sync / write conflict raises its SimulatorError
    subclass; with ``strict=False`` they are collected in the report.
    ``intrinsics`` replaces the handler table (default
    :data:`~polycomp.hw.cuda.sim_intrinsics.INTRINSICS`).
    """
    func = _lowered(compiled_or_func, ir_stage)
    expected, arrays, values = checked_arguments(func, inputs, params, copy=True)
    given = {b.name: a for b, a in zip(expected, arrays)}
    temps, program = host_program(func)
    kernels = program_kernels(program)
    report = SimReport(func.name)
    sim = Simulator(func, report, strict=strict, poison=poison, intrinsics=intrinsics,
                    global_races=global_races)
    for b in func.inputs:
        sim.add_global(b, given[b.name])
    outputs = []
    for b in tuple(func.outputs) + tuple(temps):
        arr = given.get(b.name) if b in func.outputs else None
        if arr is None:
            shape = tuple(int(eval_int(d, values)) for d in b.shape)
            arr = poisoned(shape, b.dtype, poison)
        sim.add_global(b, arr)
        if b in func.outputs:
            outputs.append(arr)
    bundle = _bundle_target(compiled_or_func, ir_stage, intrinsics)
    before = {n: a.copy() for n, a in given.items()} if bundle else {}
    for info, env in launch_sequence(program, values):   # host loops iterated
        sim.run_kernel(info, env, lane_budget)
    res = tuple(outputs)
    if bundle:
        from .gpu_bundle import record_case
        # a host program with loops is checked through its host entry point only
        record_case(compiled_or_func.source, func,
                    [] if has_host_control(program) else kernels, temps, values, before,
                    {b.name: a for b, a in zip(func.outputs, outputs)}, bundle,
                    target=_target_name(compiled_or_func), arch=_target_arch(compiled_or_func))
    return (res[0] if len(res) == 1 else res), report


def _target_arch(obj) -> str:
    """The nvcc architecture of an architecture-specific target (``"90a"``), else ""."""
    cu = getattr(getattr(obj, "target", None), "cuda", None)
    return cu.arch if cu is not None and cu.arch_suffix else ""


def _target_name(obj) -> str:
    t = getattr(obj, "target", None)
    return t if isinstance(t, str) else getattr(t, "name", "")


def _bundle_target(obj, ir_stage: str, intrinsics) -> str | None:
    """The GPU check bundle to record this run in (:mod:`.gpu_bundle`): only a compiled
    kernel's printed IR with the standard intrinsics, and only when recording is on."""
    from .gpu_bundle import bundle_dir
    root = bundle_dir()
    if root is None or ir_stage != "final" or intrinsics is not None \
            or not isinstance(getattr(obj, "source", None), str):
        return None
    return root
