"""The NPU simulator: executes a :class:`~polycomp.hw.npu.program.Program` on numpy.

* Buffers are allocated per level at 32-byte-aligned (level-aligned) addresses; the
  total of every level must fit its capacity (:class:`NpuCapacityError`).
* Data lives in the buffers' real layouts: L1 tiles in fractal NZ
  ``(cols/16, rows, 16)``, L0A in zZ ``(rows/16, cols/16, 16, 16)``, L0B in nZ
  (fractals transposed), L0C in NZ; each instruction works on whole tiles with
  vectorised numpy.
* Pipes run concurrently with a cycle model (:class:`~polycomp.hw.npu.target.NpuParams`);
  an instruction starts when its pipe is free and after the flags it waited on.
* Vector clocks per pipe: every access to an on-chip buffer from a pipe other than its
  last writer's (or, for a write, its readers') must be ordered by a set/wait chain,
  else :class:`NpuRaceError` names both instructions; a wait without a set is a
  deadlock (also :class:`NpuRaceError`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from polycomp.errors import NpuCapacityError, NpuRaceError
from polycomp.hw.npu.program import (
    CopyIn,
    CopyOut,
    GmRegion,
    Load2D,
    LocalBuf,
    Loop,
    Mmad,
    Program,
    SetFlag,
    Slot,
    WaitFlag,
)
from polycomp.hw.npu.target import ALIGN, PIPES, NpuParams, npu_params
from polycomp.hw.target import Target


@dataclass
class SimReport:
    """What one run measured: total cycles, busy cycles per pipe, bytes per copy path,
    cube fractal ops, instructions per pipe and the address map."""
    cycles: int = 0
    busy: dict = field(default_factory=lambda: {p: 0 for p in PIPES})
    bytes: dict = field(default_factory=dict)
    instructions: dict = field(default_factory=lambda: {p: 0 for p in PIPES})
    addresses: dict = field(default_factory=dict)

    def then(self, nxt: SimReport) -> SimReport:
        """This run followed by ``nxt`` (which started when this one ended)."""
        def add(a: dict, b: dict) -> dict:
            return {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}
        return SimReport(max(self.cycles, nxt.cycles), add(self.busy, nxt.busy),
                         add(self.bytes, nxt.bytes), add(self.instructions, nxt.instructions),
                         {**self.addresses, **nxt.addresses})

    @property
    def cube_utilisation(self) -> float:
        return self.busy["M"] / self.cycles if self.cycles else 0.0

    def text(self) -> str:
        lines = [f"cycles {self.cycles}, cube utilisation {100 * self.cube_utilisation:.1f}%"]
        lines.append("  busy: " + ", ".join(f"{p} {v}" for p, v in self.busy.items() if v))
        lines.append("  bytes: " + ", ".join(f"{k} {v}" for k, v in self.bytes.items()))
        return "\n".join(lines)


def allocate(prog: Program, target: Target, env: dict | None = None) -> dict:
    """``{buffer name: (level, address)}`` (``env``: the tiling values of buffers sized
    by the host); raises :class:`NpuCapacityError` when a level overflows or a buffer
    would be misaligned."""
    used: dict[str, int] = {}
    addrs = {}
    for b in prog.buffers:
        lv = target.memory.level(b.level)
        align = max(lv.alignment, ALIGN)
        (r, c), nbytes = b.shape(env), b.size(env)
        if nbytes % ALIGN:
            raise NpuCapacityError(f"buffer {b.name} ({r}x{c} {b.dtype}) in "
                                   f"{b.level}: {nbytes} B is not a multiple of {ALIGN} B")
        addr = -(-used.get(b.level, 0) // align) * align
        end = addr + nbytes * b.copies
        if lv.capacity and end > lv.capacity:
            raise NpuCapacityError(
                f"buffer {b.name} ({b.copies} x {nbytes} B) does not fit {b.level} of "
                f"target {target.name}: needs {end} B at address {addr}, capacity "
                f"{lv.capacity} B")
        used[b.level] = end
        addrs[b.name] = (b.level, addr)
    return addrs


def _fractal_shape(b: LocalBuf, env: dict) -> tuple[int, ...]:
    r, c = b.shape(env)
    return {"ND": (r, c), "COL": (r, c), "ROW": (r, c), "NZ": (c // 16, r, 16),
            "zZ": (r // 16, c // 16, 16, 16),
            "nZ": (r // 16, c // 16, 16, 16)}[b.layout]


def to_layout(nd: np.ndarray, layout: str) -> np.ndarray:
    r, c = nd.shape
    if layout == "NZ":
        return nd.reshape(r, c // 16, 16).transpose(1, 0, 2).copy()
    if layout == "zZ":
        return nd.reshape(r // 16, 16, c // 16, 16).transpose(0, 2, 1, 3).copy()
    if layout == "nZ":   # fractal (i, j) holds the 16x16 block transposed
        return nd.reshape(r // 16, 16, c // 16, 16).transpose(0, 2, 3, 1).copy()
    return nd.copy()


def from_layout(a: np.ndarray, layout: str) -> np.ndarray:
    if layout == "NZ":
        c16, r, _ = a.shape
        return a.transpose(1, 0, 2).reshape(r, c16 * 16)
    if layout == "zZ":
        r16, c16 = a.shape[:2]
        return a.transpose(0, 2, 1, 3).reshape(r16 * 16, c16 * 16)
    if layout == "nZ":
        r16, c16 = a.shape[:2]
        return a.transpose(0, 3, 1, 2).reshape(r16 * 16, c16 * 16)
    return a


@dataclass
class _Access:
    pipe: str
    seq: int
    what: str


class Simulator:
    """Runs one program; see the module docstring."""

    def __init__(self, prog: Program, target: Target, params: NpuParams | None = None):
        self.prog, self.target = prog, target
        self.p = params or npu_params(target)
        self.report = SimReport()
        self.time = {p: 0 for p in PIPES}
        self.seq = {p: 0 for p in PIPES}
        self.clock = {p: {q: 0 for q in PIPES} for p in PIPES}
        self.flags: dict[tuple, list] = {}
        self.writes: dict[tuple, _Access] = {}
        self.reads: dict[tuple, list[_Access]] = {}

    # ------------------------------------------------------------------ driver
    def run(self, gm: dict, sizes: dict) -> SimReport:
        self.gm = gm
        self.report.addresses = allocate(self.prog, self.target, sizes)
        self.mem = {(b.name, k): np.zeros(_fractal_shape(b, sizes), np.dtype(b.dtype))
                    for b in self.prog.buffers for k in range(b.copies)}
        self._block(self.prog.body, dict(sizes))
        left = [k for k, v in self.flags.items() if v]
        if left:
            raise NpuRaceError(f"program {self.prog.name} ends with flags set and never "
                               f"waited for: {', '.join(_flag_name(k) for k in left)}")
        self.report.cycles = max(self.time.values())
        return self.report

    def _block(self, body: tuple, env: dict) -> None:
        for s in body:
            if isinstance(s, Loop):
                for v in range(s.extent.eval(env)):
                    env[s.var] = v
                    self._block(s.body, env)
                env.pop(s.var, None)
            else:
                self._instr(s, env)

    def _instr(self, s, env: dict) -> None:
        if isinstance(s, SetFlag):
            self._set(s, env)
        elif isinstance(s, WaitFlag):
            self._wait(s, env)
        else:
            from .sim_exec import execute
            cycles = execute(self, s, env)
            self._issue(s.pipe, cycles)

    # ------------------------------------------------------------------ pipes, flags
    def _issue(self, pipe: str, cycles: int) -> None:
        self.seq[pipe] += 1
        self.clock[pipe][pipe] = self.seq[pipe]
        self.time[pipe] += cycles
        self.report.busy[pipe] += cycles
        self.report.instructions[pipe] += 1

    def _set(self, s: SetFlag, env: dict) -> None:
        key = (s.src_pipe, s.dst_pipe, s.event.eval(env))
        self.flags.setdefault(key, []).append((self.time[s.src_pipe],
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
            mine[q] = max(mine[q], v)

    # ------------------------------------------------------------------ memory
    def start(self, pipe: str) -> None:
        """Called before an instruction's accesses (its sequence number is next)."""

    def access(self, pipe: str, slot: Slot, env: dict, write: bool, what: str) -> np.ndarray:
        """The array of ``slot``, after checking the access is ordered after every
        conflicting access of another pipe."""
        k = slot.index.eval(env) if slot.buf.copies > 1 else 0
        if not 0 <= k < slot.buf.copies:
            raise NpuCapacityError(f"{what}: copy {k} of buffer {slot.buf.name}, which has "
                                   f"{slot.buf.copies}")
        key = (slot.buf.name, k)
        me = _Access(pipe, self.seq[pipe] + 1, what)
        w = self.writes.get(key)
        others = [w] if w is not None else []
        if write:
            others += self.reads.get(key, [])
        for o in others:
            if o.pipe != pipe and self.clock[pipe][o.pipe] < o.seq:
                kind = "write after read" if write and o is not w else \
                    ("write after write" if write else "read after write")
                raise NpuRaceError(
                    f"race on {slot.buf.level} buffer {slot.buf.name}[{k}] ({kind}): "
                    f"{what} on pipe {pipe} is not ordered after {o.what} on pipe "
                    f"{o.pipe} — a WaitFlag<{o.pipe}->{pipe}> is missing")
        if write:
            self.writes[key] = me
            self.reads[key] = []
        else:
            self.reads.setdefault(key, []).append(me)
        return self.mem[key]

    def count_bytes(self, path: str, n: int) -> None:
        self.report.bytes[path] = self.report.bytes.get(path, 0) + n

    def region(self, r: GmRegion, env: dict) -> tuple[np.ndarray, tuple[slice, ...]]:
        arr = self.gm[r.tensor.name]
        offs = [o.eval(env) for o in r.offsets]
        exts = [e.eval(env) for e in r.extents]
        return arr, tuple(slice(o, o + e) for o, e in zip(offs, exts))


def _flag_name(key: tuple) -> str:
    return f"{key[0]}->{key[1]}, event {key[2]}"


__all__ = ["Simulator", "SimReport", "allocate", "to_layout", "from_layout",
           "CopyIn", "CopyOut", "Load2D", "Mmad"]
