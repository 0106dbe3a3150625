"""The NPU simulator: executes a :class:`~polycomp.hw.npu.program.Kernel` -- the API
calls the printer prints -- on numpy, for every core of the chip.

* Every core of a phase runs its program (the cube program on ``numBlocks`` cube cores,
  the vector program on ``numBlocks`` vector cores, or two per block in a mixed
  kernel), each with its own ``bid``; the cores share GM (the arrays the caller passed
  and the workspaces) and cross-core flags (``CrossCoreSetFlag``/``WaitFlag`` modes 0
  and 2, their counters saturating at 15); a core blocked on a flag lets the others
  run; a state where every unfinished core waits is a deadlock (:class:`NpuRaceError`).
* Each core's buffers are allocated per level at aligned addresses and must fit the
  level's capacity (:class:`NpuCapacityError`); a buffer is a flat array of its
  elements, which start as NaN ("uninitialised": a value read before any write shows
  in the result); every call addresses it by element offsets from its parameters, and
  an access past its end is an error.
* Pipes run concurrently with a cycle model (:class:`~polycomp.hw.npu.target.NpuParams`);
  an instruction starts when its pipe is free and after the flags it waited on.
* Vector clocks per (core, pipe): every access to an on-chip buffer, and every GM
  access, by a pipe other than its last writer's (or, for a write, its readers') must be
  ordered by a chain of set/wait flags and cross-core flags, else :class:`NpuRaceError`
  names both accesses -- within a core and across cores.
* The report: cycles (the slowest core, and no less than the chip's HBM traffic takes),
  busy cycles per pipe summed over the cores, bytes per path, and which bound holds.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from polycomp import dtypes
from polycomp.errors import NpuCapacityError, NpuRaceError
from polycomp.hw.npu.program import (
    BID,
    BNUM,
    SUB,
    Barrier,
    CrossSet,
    CrossWait,
    GlobalTensor,
    Kernel,
    Let,
    LocalBuf,
    Loop,
    Program,
    SetFlag,
    Slot,
    WaitFlag,
)
from polycomp.hw.npu.target import (
    AIC_PIPES,
    AIV_PIPES,
    ALIGN,
    CROSS_FLAG_MAX,
    PIPES,
    UB_BANK_PERIOD,
    NpuParams,
    npu_params,
)
from polycomp.hw.target import Target

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass
class SimReport:
    """What one run measured: cycles (the slowest core's, raised to the HBM bound),
    busy cycles per pipe summed over the cores, bytes per copy path, cube fractal ops,
    instructions per pipe, the cores used and the address map."""
    cycles: int = 0
    busy: dict = field(default_factory=lambda: {p: 0 for p in PIPES})
    bytes: dict = field(default_factory=dict)
    instructions: dict = field(default_factory=lambda: {p: 0 for p in PIPES})
    addresses: dict = field(default_factory=dict)
    # repeats (cycles) that a UB bank conflict slowed, by kind (vector_ops.bank_conflicts)
    bank_conflict_cycles: dict = field(default_factory=dict)
    aic: int = 0                   # cube cores used
    aiv: int = 0                   # vector cores used
    core_cycles: int = 0           # the slowest core's own cycles
    hbm_cycles: int = 0            # HBM bytes / the chip's HBM bytes per cycle
    hbm_bytes: int = 0             # bytes crossing HBM (see Chip.run)
    l2_cycles: int = 0             # all GM transfers at the L2's bandwidth
    l2_hit_bytes: int = 0          # GM reads served by the L2
    chip_aic: int = 1              # cube cores of the chip (utilisation's peak)
    #: busy cycles per pipe of the core with the busiest pipe (that pipe names the
    #: bound when the cores, not HBM or L2, set the cycles)
    core_busy: dict = field(default_factory=dict)
    #: every core's busy cycles per pipe (core id -> pipe -> cycles)
    cores_busy: dict = field(default_factory=dict)

    @property
    def cube_utilisation(self) -> float:
        """Cube busy cycles over the chip's cube peak (every cube core, all cycles)."""
        peak = self.cycles * max(1, self.chip_aic)
        return self.busy["M"] / peak if peak else 0.0

    @property
    def core_utilisation(self) -> float:
        """Cube busy cycles over the cube cores the kernel used, all cycles."""
        peak = self.cycles * max(1, self.aic)
        return self.busy["M"] / peak if peak else 0.0

    @property
    def gm_bytes(self) -> int:
        return sum(v for k, v in self.bytes.items() if "GM" in k)

    @property
    def bound(self) -> str:
        """What sets the cycles: ``HBM`` or ``L2`` (the chip's traffic at their
        bandwidth), else the busiest pipe of any core: ``cube`` (M), ``MTE2`` (GM
        -> L1/UB), ``MTE1``, ``FIX``, ``MTE3``, ``vector`` (V)."""
        if self.hbm_cycles >= max(self.core_cycles, self.l2_cycles):
            return "HBM"
        if self.l2_cycles > self.core_cycles:
            return "L2"
        if not self.core_busy:
            return "cores"
        pipe = max(self.core_busy, key=lambda p: self.core_busy[p])
        return {"M": "cube", "V": "vector"}.get(pipe, pipe)

    @property
    def bound_busy(self) -> float:
        """The bound pipe's busy share of the run's core cycles (1.0: the pipe never
        idles; HBM / L2: their cycles over the run's)."""
        if self.bound == "HBM":
            return self.hbm_cycles / max(1, self.cycles)
        if self.bound == "L2":
            return self.l2_cycles / max(1, self.cycles)
        return max(self.core_busy.values(), default=0) / max(1, self.core_cycles)

    def text(self) -> str:
        lines = [f"cycles {self.cycles} ({self.aic} cube / {self.aiv} vector cores; "
                 f"bound: {self.bound} ({100 * self.bound_busy:.0f}% busy): cores "
                 f"{self.core_cycles}, HBM {self.hbm_cycles} for "
                 f"{self.hbm_bytes} B, L2 {self.l2_cycles} ({self.l2_hit_bytes} B of reads "
                 f"hit)), cube utilisation {100 * self.cube_utilisation:.1f}% of the chip's "
                 f"peak"]
        lines.append("  busy: " + ", ".join(f"{p} {v}" for p, v in self.busy.items() if v))
        lines.append("  bytes: " + ", ".join(f"{k} {v}" for k, v in self.bytes.items()))
        return "\n".join(lines)


def allocate(prog: Program, target: Target, env: dict | None = None) -> dict:
    """``{buffer name: (level, address)}`` of one core's program (``env``: the tiling
    values of buffers sized by the host); raises :class:`NpuCapacityError` when a level
    overflows.  Buffers follow each other (aligned); a buffer the bank placement gave a
    ``bank_phase`` starts at the next 256-byte boundary that is its phase modulo 512."""
    used: dict[str, int] = {}
    addrs = {}
    for b in prog.buffers:
        lv = target.memory.level(b.level)
        align = max(lv.alignment, ALIGN)
        nbytes = b.size(env)
        addr = _place(used.get(b.level, 0), align, b.bank_phase)
        end = addr + nbytes * b.copies
        if lv.capacity and end > lv.capacity:
            raise NpuCapacityError(
                f"buffer {b.name} ({b.copies} x {nbytes} B) does not fit {b.level} of "
                f"target {target.name}: needs {end} B at address {addr}, capacity "
                f"{lv.capacity} B")
        used[b.level] = end
        addrs[b.name] = (b.level, addr)
    return addrs


def _place(used: int, align: int, phase: int | None) -> int:
    """The address after ``used`` bytes: aligned, or (a bank placement) the next
    256-byte boundary that is ``phase`` modulo 512."""
    if phase is None:
        return -(-used // align) * align
    a = -(-used // 256) * 256
    return a + (phase - a) % UB_BANK_PERIOD


def allocate_level(bufs, level: str, capacity: int) -> int:
    """The bytes the buffers of ``level`` among ``bufs`` (constant sizes) take when
    placed as :func:`allocate` places them; :class:`NpuCapacityError` past
    ``capacity``."""
    used = 0
    for b in bufs:
        if b.level == level:
            used = _place(used, ALIGN, b.bank_phase) + b.size() * b.copies
    if used > capacity:
        raise NpuCapacityError(f"{level}: {used} B placed, capacity {capacity} B")
    return used

@dataclass
class _Access:
    key: tuple                 # (core id, pipe)
    seq: int
    what: str
    atomic: bool = False       # an atomic add (SetAtomicAdd): commutes with another


class _Runner:
    """One core's program as a generator the scheduler steps."""

    def __init__(self, cid: str, gen):
        self.cid, self.gen = cid, gen

    def __next__(self):
        return next(self.gen)


class GmTracker:
    """The last writer and last reader of every GM element (ids into a table of
    accesses), for race checks across pipes and cores; and the L2 between the cores
    and HBM: a GM read hits when its line (``l2_line`` bytes) was accessed less than
    ``l2_bytes`` of GM traffic ago (the reuse distance of an LRU cache, bounded by the
    bytes moved in between rather than the distinct ones), else it misses and crosses
    HBM; every GM byte written crosses HBM once (write-back)."""

    def __init__(self, gm: dict, l2_bytes: int = 0, line: int = 512):
        self.writer = {k: np.full(v.size, -1, np.int64) for k, v in gm.items()}
        self.reader = {k: np.full(v.size, -1, np.int64) for k, v in gm.items()}
        self.written = {k: np.zeros(v.size, bool) for k, v in gm.items()}
        self.itemsize = {k: v.itemsize for k, v in gm.items()}
        self.nbytes = {k: v.nbytes for k, v in gm.items()}
        self.table: list[_Access] = []
        self.l2, self.line = l2_bytes, line
        self.last = {k: np.full(-(-v.nbytes // line), -1, np.int64) for k, v in gm.items()}
        self.stream = 0               # GM bytes moved so far (the L2's clock)
        self.read_miss = 0            # bytes read from HBM
        self.write_bytes = 0          # bytes written back to HBM
        self.read_hit = 0             # bytes read from L2

    def l2_access(self, tensor: str, idx: np.ndarray, write: bool) -> None:
        """Account one transfer of elements ``idx`` of ``tensor`` in the L2 model."""
        size = self.itemsize[tensor]
        lines = (idx * size) // self.line
        ul, inv = np.unique(lines, return_inverse=True)
        last = self.last[tensor][ul]
        hit = (last >= 0) & (self.stream - last <= self.l2)
        if write:
            w = self.written[tensor]
            new = np.count_nonzero(~w[idx])
            if new:
                w[idx] = True
                self.write_bytes += int(new) * size
        else:             # a missed line comes from HBM whole (up to the tensor's end)
            ml = ul[~hit]
            nbytes = self.nbytes[tensor]
            self.read_miss += int(np.minimum(self.line, nbytes - ml * self.line).sum())
            self.read_hit += int(np.count_nonzero(hit[inv.ravel()])) * size
        self.last[tensor][ul] = self.stream
        self.stream += idx.size * size

    @property
    def hbm_bytes(self) -> int:
        return self.read_miss + self.write_bytes

    def check(self, core: Core, pipe: str, tensor: str, idx: np.ndarray, write: bool,
              what: str, atomic: bool = False) -> None:
        """Raise :class:`NpuRaceError` when this access is not ordered after the last
        write (and, for a write, the last reads) of its elements by another pipe or
        core; an atomic add need not be ordered after another atomic add (they
        commute; of several unordered ones the last is kept as the writer)."""
        me = (core.cid, pipe)
        clock = core.clock[pipe]
        ids = [self.writer[tensor][idx]]
        if write:
            ids.append(self.reader[tensor][idx])
        for k, arr in enumerate(ids):
            for i in np.unique(arr):
                if i < 0:
                    continue
                o = self.table[i]
                if atomic and o.atomic and not k:
                    continue
                if o.key != me and clock.get(o.key, 0) < o.seq:
                    kind = ("write after read" if k else "write after write") if write \
                        else "read after write"
                    raise NpuRaceError(
                        f"race on GM {tensor} ({kind}): {what} on {core.cid} pipe {pipe} "
                        f"is not ordered after {o.what} on {o.key[0]} pipe {o.key[1]} -- "
                        f"a flag is missing")
        self.table.append(_Access(me, core.seq[pipe] + 1, what, atomic))
        (self.writer if write else self.reader)[tensor][idx] = len(self.table) - 1
        self.l2_access(tensor, idx, write)


class Chip:
    """The cores of one kernel run and what they share: GM, the tracker, cross-core
    flag counters and the report."""

    def __init__(self, kernel: Kernel, target: Target, gm: dict, sizes: dict,
                 blocks: int, params: NpuParams | None = None,
                 tilings: dict | None = None):
        self.kernel, self.target, self.gm, self.sizes = kernel, target, gm, sizes
        self.tilings = tilings or {}
        self.p = params or npu_params(target)
        self.blocks = blocks
        self.report = SimReport(chip_aic=self.p.aic_cores)
        self.tracker = GmTracker(gm, self.p.l2_bytes, self.p.l2_line)
        self.cores: dict[str, Core] = {}
        self.counters: dict[tuple, deque] = {}       # (core id, flag) -> pending sets
        self.steps = 0                               # cross-core sets so far
        self.rounds: dict[tuple, dict] = {}          # mode 0 / AIV->AIC: sets per core

    # ------------------------------------------------------------------ cores
    def core_ids(self, kind: str) -> list[tuple[str, dict]]:
        k = self.kernel
        if kind == "AIC":
            return [(f"AIC{i}", {BID: i, BNUM: self.blocks}) for i in range(self.blocks)]
        per = self.p.aiv_per_aic if k.kind == "mix" else 1
        n = self.blocks * per
        return [(f"AIV{i}", {BID: i, BNUM: n, SUB: i % per}) for i in range(n)]

    def run(self) -> SimReport:
        k = self.kernel
        if k.kind in ("aic", "mix"):
            self.report.aic = self.blocks
        if k.kind in ("aiv", "mix"):
            self.report.aiv = self.blocks * (self.p.aiv_per_aic if k.kind == "mix" else 1)
        for n, ph in enumerate(k.phases):
            runners = []
            for prog in ph.programs:
                for cid, idx in self.core_ids(prog.core):
                    core = self.cores.get(cid)
                    if core is None:
                        core = self.cores[cid] = Core(self, cid, prog.core)
                    env = {**self.sizes, **self.tilings.get(id(prog), {}), **idx}
                    runners.append(core.start(prog, env, n))
            self._schedule(runners)
        left = [f"{key[0]} flag {key[1]}" for key, q in self.counters.items() if q]
        if left:
            raise NpuRaceError(f"kernel {k.name} ends with cross-core flags set and never "
                               f"waited for: {', '.join(sorted(left))}")
        ends = {cid: max(*c.time.values(), c.stime) for cid, c in self.cores.items()}
        core_cycles = max(ends.values(), default=0)
        if ends:     # the core whose busiest pipe is busiest (in a mixed kernel the
            #          last core to end may be a vector core waiting for the cube)
            top = max(self.cores.values(), key=lambda c: max(c.busy.values()))
            self.report.core_busy = {p: v for p, v in top.busy.items() if v}
            self.report.cores_busy = {cid: dict(c.busy) for cid, c in self.cores.items()}
        # HBM: the L2 model's read misses and write-backs (GmTracker); L2: every GM
        # transfer of every core at the L2's bandwidth
        hbm_bytes = self.tracker.hbm_bytes
        self.report.hbm_bytes = hbm_bytes
        self.report.l2_hit_bytes = self.tracker.read_hit
        hbm = -(-hbm_bytes // self.p.hbm_bytes_per_cycle)
        l2 = -(-self.report.gm_bytes // self.p.l2_bytes_per_cycle)
        self.report.core_cycles, self.report.hbm_cycles = core_cycles, hbm
        self.report.l2_cycles = l2
        self.report.cycles = max(core_cycles, hbm, l2)
        return self.report

    def _schedule(self, runners: list) -> None:
        try:                 # small matmuls per Mmad: BLAS threads only cost here
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover
            return self._schedule_all(runners)
        with threadpool_limits(1):
            return self._schedule_all(runners)

    def _schedule_all(self, runners: list) -> None:
        live = list(runners)
        while live:
            before = self.steps
            progress = False
            nxt = []
            for r in live:
                try:
                    state = next(r)
                except StopIteration:
                    progress = True
                    continue
                if state == "ran":
                    progress = True
                nxt.append(r)
            live = nxt
            if live and not progress and self.steps == before:
                names = [f"{r.cid} on flag {self.cores[r.cid].waiting}" for r in live]
                raise NpuRaceError(f"kernel {self.kernel.name}: deadlock -- {len(live)} "
                                   f"cores wait on cross-core flags never set "
                                   f"({', '.join(names[:6])})")

    # ------------------------------------------------------------------ cross-core flags
    def cross_set(self, core: Core, s: CrossSet, env: dict) -> None:
        self.steps += 1
        flag = s.flag.eval(env)
        t = core.time[s.pipe] + self.p.cross_latency
        snap = dict(core.clock[s.pipe])
        k = self.kernel
        if s.mode == 2 and core.kind == "AIC":             # to the block's vector cores
            per = self.p.aiv_per_aic
            for j in range(per):
                self._post((f"AIV{core.env[BID] * per + j}", flag), t, snap)
            return
        if s.mode == 2:                                     # every vector core of the block
            per = self.p.aiv_per_aic if k.kind == "mix" else 1
            block = core.env[BID] // per
            members = [f"AIV{block * per + j}" for j in range(per)]
            self._round((f"blk{block}", flag), core.cid, members, [f"AIC{block}"], flag,
                        t, snap)
            return
        members = [cid for cid, _ in self.core_ids(core.kind)]   # mode 0: every core
        self._round((core.kind, flag), core.cid, members, members, flag, t, snap)

    def _round(self, key: tuple, cid: str, members: list, targets: list, flag: int,
               t: int, snap: dict) -> None:
        r = self.rounds.setdefault(key, {m: deque() for m in members})
        r[cid].append((t, snap))
        while all(r[m] for m in members):
            sets = [r[m].popleft() for m in members]
            tt = max(x[0] for x in sets)
            merged: dict = {}
            for _, sn in sets:
                for q, v in sn.items():
                    merged[q] = max(merged.get(q, 0), v)
            for tg in targets:
                self._post((tg, flag), tt, merged)

    def _post(self, key: tuple, t: int, snap: dict) -> None:
        q = self.counters.setdefault(key, deque())
        if len(q) >= CROSS_FLAG_MAX:
            raise NpuRaceError(f"cross-core flag {key[1]} of {key[0]} set more than "
                               f"{CROSS_FLAG_MAX} times without a wait (its counter "
                               f"saturates)")
        q.append((t, snap))

    def cross_wait(self, core: Core, s: CrossWait, env: dict) -> bool:
        q = self.counters.get((core.cid, s.flag.eval(env)))
        if not q:
            return False
        t, snap = q.popleft()
        for p in core.pipes:
            core.time[p] = max(core.time[p], t)
            mine = core.clock[p]
            for k, v in snap.items():
                mine[k] = max(mine.get(k, 0), v)
        return True


class Core:
    """One core: its pipes, their times and vector clocks, its flags and the buffers of
    the program it runs."""

    def __init__(self, chip: Chip, cid: str, kind: str):
        self.chip, self.cid, self.kind = chip, cid, kind
        self.p = chip.p
        self.pipes = AIC_PIPES if kind == "AIC" else AIV_PIPES
        self.time = {p: 0 for p in self.pipes}
        self.stime = 0            # the scalar unit: every instruction is issued by it
        self.seq = {p: 0 for p in self.pipes}
        self.busy = {p: 0 for p in self.pipes}     # this core's busy cycles per pipe
        self.clock: dict[str, dict] = {p: {} for p in self.pipes}
        self.env: dict = {}
        self.waiting: int | None = None

    # ------------------------------------------------------------------ driver
    def start(self, prog: Program, env: dict, phase: int):
        self.prog, self.env = prog, env
        self.flags: dict[tuple, list] = {}
        self.dirty: dict[str, dict] = {"V": {}, "M": {}}    # written since PipeBarrier
        self.writes: dict[tuple, _Access] = {}
        self.reads: dict[tuple, list[_Access]] = {}
        addrs = allocate(prog, self.chip.target, env)
        if self.cid in ("AIC0", "AIV0"):
            self.chip.report.addresses.update(
                {f"{b}@{phase}": a for b, a in addrs.items()})
        self.mem = {(b.name, k): _fresh(b, env) for b in prog.buffers
                    for k in range(b.copies)}
        self.addr = {(b.name, k): addrs[b.name][1] + k * b.size(env)
                     for b in prog.buffers for k in range(b.copies)}
        return _Runner(self.cid, self._run(prog))

    def _run(self, prog: Program):
        yield from self._block(prog.body, dict(self.env))
        left = [k for k, v in self.flags.items() if v]
        if left:
            raise NpuRaceError(f"program {prog.name} ({self.cid}) ends with flags set and "
                               f"never waited for: {', '.join(_flag_name(k) for k in left)}")

    def _block(self, body: tuple, env: dict):
        for s in body:
            if isinstance(s, Loop):
                n = s.extent.eval(env)
                first = s.start.eval(env)
                for v in range(first, first + max(0, n)):
                    env[s.var] = v
                    self.stime += self.p.scalar_op
                    yield from self._block(s.body, env)
                env.pop(s.var, None)
            elif isinstance(s, Let):
                env[s.var] = s.value.eval(env)
                self.stime += self.p.scalar_op
            elif isinstance(s, CrossWait):
                self.waiting = s.flag.eval(env)
                while not self.chip.cross_wait(self, s, env):
                    yield "blocked"
                self.waiting = None
                yield "ran"
            else:
                self._instr(s, env)

    def _instr(self, s, env: dict) -> None:
        self.stime += self.p.scalar_issue
        if isinstance(s, SetFlag):
            self._set(s, env)
        elif isinstance(s, WaitFlag):
            self._wait(s, env)
        elif isinstance(s, CrossSet):
            self.chip.cross_set(self, s, env)
        elif isinstance(s, Barrier):
            if s.pipe in self.dirty:
                self.dirty[s.pipe].clear()
            self._issue(s.pipe, self.p.vector_latency) if s.pipe in self.pipes else None
        else:
            from .sim_exec import execute
            if s.pipe not in self.pipes:
                raise NpuRaceError(f"{type(s).__name__} on pipe {s.pipe} in a {self.kind} "
                                   f"program: the {self.kind} has no such pipe")
            cycles = execute(self, s, env)
            self._issue(s.pipe, cycles)

    # ------------------------------------------------------------------ pipes, flags
    def _issue(self, pipe: str, cycles: int) -> None:
        self.seq[pipe] += 1
        self.clock[pipe][(self.cid, pipe)] = self.seq[pipe]
        # a pipe starts an instruction once the scalar unit has issued it
        self.time[pipe] = max(self.time[pipe], self.stime) + cycles
        r = self.chip.report
        r.busy[pipe] += cycles
        self.busy[pipe] += cycles
        r.instructions[pipe] += 1

    def _set(self, s: SetFlag, env: dict) -> None:
        key = (s.src_pipe, s.dst_pipe, s.event.eval(env))
        if s.src_pipe not in self.pipes or s.dst_pipe not in self.pipes:
            raise NpuRaceError(f"SetFlag<{_flag_name(key)}> in a {self.kind} program")
        pending = self.flags.setdefault(key, [])
        if pending:
            raise NpuRaceError(f"SetFlag<{_flag_name(key)}> in {self.prog.name} "
                               f"({self.cid}) while it is still set (undefined behaviour "
                               f"on the A2 generation)")
        pending.append((self.time[s.src_pipe] + self.p.flag_latency,
                        dict(self.clock[s.src_pipe])))

    def _wait(self, s: WaitFlag, env: dict) -> None:
        key = (s.src_pipe, s.dst_pipe, s.event.eval(env))
        pending = self.flags.get(key)
        if not pending:
            raise NpuRaceError(f"WaitFlag<{_flag_name(key)}> in {self.prog.name} has no "
                               f"SetFlag before it: the {s.dst_pipe} pipe would wait forever")
        t, snap = pending.pop(0)
        self.time[s.dst_pipe] = max(self.time[s.dst_pipe], t)
        mine = self.clock[s.dst_pipe]
        for q, v in snap.items():
            mine[q] = max(mine.get(q, 0), v)

    # ------------------------------------------------------------------ memory
    def ub_address(self, slot: Slot, env: dict) -> int:
        """The byte address of the copy ``slot`` names (its buffer's start)."""
        k = slot.index.eval(env) if slot.buf.copies > 1 else 0
        return self.addr[(slot.buf.name, k)]

    def buffer(self, pipe: str, slot: Slot, env: dict, write: bool, what: str) -> np.ndarray:
        """The flat array of ``slot``'s copy, after checking the access is ordered after
        every conflicting access of another pipe."""
        k = slot.index.eval(env) if slot.buf.copies > 1 else 0
        if not 0 <= k < slot.buf.copies:
            raise NpuCapacityError(f"{what}: copy {k} of buffer {slot.buf.name}, which has "
                                   f"{slot.buf.copies}")
        key = (slot.buf.name, k)
        me = _Access((self.cid, pipe), self.seq[pipe] + 1, what)
        w = self.writes.get(key)
        others = [w] if w is not None else []
        if write:
            others += self.reads.get(key, [])
        for o in others:
            if o.key != me.key and self.clock[pipe].get(o.key, 0) < o.seq:
                kind = "write after read" if write and o is not w else \
                    ("write after write" if write else "read after write")
                raise NpuRaceError(
                    f"race on {slot.buf.level} buffer {slot.buf.name}[{k}] ({kind}): "
                    f"{what} on pipe {pipe} is not ordered after {o.what} on pipe "
                    f"{o.key[1]} -- a WaitFlag<{o.key[1]}->{pipe}> is missing")
        if pipe == "V":
            self.in_pipe("V", key, me.seq, write, what)
        if write:
            self.writes[key] = me
            self.reads[key] = []
        else:
            self.reads.setdefault(key, []).append(me)
        return self.mem[key]

    def in_pipe(self, pipe: str, key: tuple, seq: int, write: bool, what: str) -> None:
        """A pipe's instruction must not touch what an earlier instruction of the pipe
        wrote since the last ``PipeBarrier`` of the pipe (the pipe is pipelined)."""
        dirty = self.dirty[pipe]
        if dirty.get(key, seq) != seq:
            raise NpuRaceError(f"{what} on pipe {pipe} uses {key[0]}[{key[1]}], which an "
                               f"earlier {pipe} instruction wrote with no "
                               f"PipeBarrier<PIPE_{pipe}> between")
        if write:
            dirty[key] = seq

    def gm(self, pipe: str, t: GlobalTensor, idx: np.ndarray, write: bool,
           what: str, atomic: bool = False) -> np.ndarray:
        """The flat GM array of ``t`` after checking ``idx`` is inside it and the
        access is ordered (across cores too; ``atomic``: an atomic add)."""
        arr = self.chip.gm[t.name]
        if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
            raise NpuCapacityError(f"{what}: GM {t.name} elements [{idx.min()}, "
                                   f"{idx.max()}] outside its {arr.size}")
        if idx.size:
            self.chip.tracker.check(self, pipe, t.name, idx, write, what, atomic)
        return arr.reshape(-1)

    def count_bytes(self, path: str, n: int) -> None:
        r = self.chip.report
        r.bytes[path] = r.bytes.get(path, 0) + n


def _fresh(b: LocalBuf, env: dict) -> np.ndarray:
    n = b.size(env) // b.itemsize
    if b.dtype == "uint8":
        return np.zeros(n, np.uint8)
    if b.dtype == "uint64":              # quantisation parameters: unwritten reads NaN
        return np.full(n, 0x7FFFFFFF, np.uint64)
    if b.dtype in ("int8", "int32"):     # no NaN: a value read unwritten shows as extreme
        return np.full(n, np.iinfo(b.dtype).min, np.dtype(b.dtype))
    return np.full(n, np.nan, dtypes.to_numpy(b.dtype))


def _flag_name(key: tuple) -> str:
    return f"{key[0]}->{key[1]}, event {key[2]}"


__all__ = ["Chip", "Core", "SimReport", "allocate", "GmTracker"]
