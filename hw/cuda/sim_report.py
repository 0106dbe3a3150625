"""What the CUDA simulator found and counted: errors, findings, counters, the report.

A *finding* is a violation of CUDA's execution model that the simulator detected while
running a kernel: a shared-memory race, a global-memory race within a launch (a special
case: several threads storing different values to one global element in the same
instruction), a divergent ``__syncthreads``, or a warp-level intrinsic whose member
mask does not match the threads that reach it.  In
strict mode (the default) the first finding raises the matching
:class:`SimulatorError` subclass; otherwise findings are collected in the
:class:`SimReport`, and execution goes on (with the values a lock-step execution
produces, which real hardware need not).

Counters follow the definitions of NVIDIA's profilers, computed per executed warp-level
instruction instance (a *request*) over the warp's active threads:

* global memory: the distinct 32-byte sectors the request touches; the coalescing
  efficiency is ``bytes requested / (32 * sectors)`` (1.0 for a perfectly coalesced
  access; it exceeds 1.0 when several threads read the same word);
* shared memory: 32 banks of 4-byte words; a request takes as many *wavefronts* as
  the largest number of distinct words it touches in one bank; the bank conflicts are
  the extra wavefronts, ``wavefronts - requests``;
* ``flops``: float ``+ - * /`` per executing thread; ``math_ops``: math-library calls.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from polycomp.lowering.interpreter import InterpreterError

# --------------------------------------------------------------------------- errors


class SimulatorError(InterpreterError):
    """The simulated CUDA kernels did something invalid or undefined."""

    def __init__(self, message: str, finding: "Finding | None" = None):
        super().__init__(message)
        self.finding = finding


class LaunchError(SimulatorError):
    """An invalid launch: bad grid/block sizes, or a thread loop wider than the block."""


class OutOfBoundsError(SimulatorError):
    """A thread loaded or stored outside its buffer."""


class BarrierDivergenceError(SimulatorError):
    """A ``__syncthreads()`` reached by only part of a block's threads."""


class SharedMemoryRaceError(SimulatorError):
    """Two threads of a block touched one shared-memory word between two barriers, at
    least one of them writing."""


class WarpSyncError(SimulatorError):
    """A ``*_sync`` warp intrinsic whose member mask does not match the threads that
    execute it (a named thread did not arrive, or a caller is not in its own mask)."""


class GlobalMemoryRaceError(SimulatorError):
    """Two threads accessed one global element within a kernel launch, at least one
    writing, with nothing ordering them (different blocks, or no barrier between)."""


class GlobalWriteConflictError(GlobalMemoryRaceError):
    """Several threads stored different values to one global element in one
    instruction (the result is whichever write the hardware happens to keep)."""


FINDING_ERRORS = {
    "shared-race": SharedMemoryRaceError,
    "barrier-divergence": BarrierDivergenceError,
    "warp-sync": WarpSyncError,
    "global-write-conflict": GlobalWriteConflictError,
    "global-race": GlobalMemoryRaceError,
}


@dataclass
class Finding:
    """One detected violation; ``count`` is how many threads (or blocks) it involves."""
    kind: str
    kernel: str
    message: str
    count: int = 1

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


# --------------------------------------------------------------------------- counters


@dataclass
class GlobalAccessCounters:
    """Global loads or stores: warp requests, 32-byte sectors, bytes requested."""
    requests: int = 0
    sectors: int = 0
    bytes: int = 0

    def add(self, requests: int, sectors: int, nbytes: int) -> None:
        self.requests += int(requests)
        self.sectors += int(sectors)
        self.bytes += int(nbytes)

    def merge(self, o: "GlobalAccessCounters") -> None:
        self.add(o.requests, o.sectors, o.bytes)

    @property
    def efficiency(self) -> float | None:
        """``bytes / (32 * sectors)``; None when nothing was accessed."""
        return self.bytes / (32 * self.sectors) if self.sectors else None

    @property
    def sectors_per_request(self) -> float | None:
        return self.sectors / self.requests if self.requests else None


@dataclass
class SharedAccessCounters:
    """Shared loads or stores: warp requests, wavefronts, bytes requested."""
    requests: int = 0
    wavefronts: int = 0
    bytes: int = 0

    def add(self, requests: int, wavefronts: int, nbytes: int) -> None:
        self.requests += int(requests)
        self.wavefronts += int(wavefronts)
        self.bytes += int(nbytes)

    def merge(self, o: "SharedAccessCounters") -> None:
        self.add(o.requests, o.wavefronts, o.bytes)

    @property
    def bank_conflicts(self) -> int:
        """Extra wavefronts: the sum over requests of (max distinct words in a bank - 1)."""
        return self.wavefronts - self.requests


@dataclass
class KernelStats:
    """Counters of one kernel launch (all its blocks)."""
    name: str
    grid: tuple
    block: tuple
    global_load: GlobalAccessCounters = field(default_factory=GlobalAccessCounters)
    global_store: GlobalAccessCounters = field(default_factory=GlobalAccessCounters)
    shared_load: SharedAccessCounters = field(default_factory=SharedAccessCounters)
    shared_store: SharedAccessCounters = field(default_factory=SharedAccessCounters)
    barriers: int = 0          # __syncthreads executed, counted once per block
    shuffles: int = 0          # warp-level shuffle/vote requests
    flops: int = 0
    math_ops: int = 0

    @property
    def bank_conflicts(self) -> int:
        return self.shared_load.bank_conflicts + self.shared_store.bank_conflicts


# --------------------------------------------------------------------------- report


MAX_FINDINGS_KEPT = 64


@dataclass
class SimReport:
    """Everything one :func:`~polycomp.hw.cuda.simulator.simulate` call counted and found."""
    name: str
    kernels: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    finding_counts: dict = field(default_factory=dict)
    undefined_shuffle_reads: int = 0
    unchecked: list = field(default_factory=list)   # global buffers not race-tracked

    def add_finding(self, f: Finding) -> None:
        self.finding_counts[f.kind] = self.finding_counts.get(f.kind, 0) + 1
        if len(self.findings) < MAX_FINDINGS_KEPT:
            self.findings.append(f)

    def of_kind(self, kind: str) -> list:
        return [f for f in self.findings if f.kind == kind]

    @property
    def races(self) -> list:
        return self.of_kind("shared-race")

    @property
    def divergences(self) -> list:
        return self.of_kind("barrier-divergence")

    @property
    def warp_sync_errors(self) -> list:
        return self.of_kind("warp-sync")

    @property
    def ok(self) -> bool:
        return not self.finding_counts

    # totals over kernels
    def _sum_global(self, attr) -> GlobalAccessCounters:
        out = GlobalAccessCounters()
        for k in self.kernels:
            out.merge(getattr(k, attr))
        return out

    def _sum_shared(self, attr) -> SharedAccessCounters:
        out = SharedAccessCounters()
        for k in self.kernels:
            out.merge(getattr(k, attr))
        return out

    @property
    def global_load(self) -> GlobalAccessCounters:
        return self._sum_global("global_load")

    @property
    def global_store(self) -> GlobalAccessCounters:
        return self._sum_global("global_store")

    @property
    def shared_load(self) -> SharedAccessCounters:
        return self._sum_shared("shared_load")

    @property
    def shared_store(self) -> SharedAccessCounters:
        return self._sum_shared("shared_store")

    @property
    def global_bytes_loaded(self) -> int:
        return self.global_load.bytes

    @property
    def global_bytes_stored(self) -> int:
        return self.global_store.bytes

    @property
    def coalescing_efficiency(self) -> float | None:
        """Loads and stores together: bytes requested / (32 * sectors)."""
        ld, st = self.global_load, self.global_store
        sectors = ld.sectors + st.sectors
        return (ld.bytes + st.bytes) / (32 * sectors) if sectors else None

    @property
    def bank_conflicts(self) -> int:
        return sum(k.bank_conflicts for k in self.kernels)

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels)

    @property
    def barriers(self) -> int:
        return sum(k.barriers for k in self.kernels)

    def summary(self) -> str:
        def eff(c):
            e = c.efficiency
            return "-" if e is None else f"{100 * e:.1f}%"

        rows = [("kernel", "grid", "block", "ld req", "ld sect", "ld eff", "st req",
                 "st sect", "st eff", "shm req", "bank confl", "barriers", "flops")]
        for k in self.kernels:
            shm = k.shared_load.requests + k.shared_store.requests
            rows.append((k.name, "x".join(map(str, k.grid)), "x".join(map(str, k.block)),
                         str(k.global_load.requests), str(k.global_load.sectors),
                         eff(k.global_load), str(k.global_store.requests),
                         str(k.global_store.sectors), eff(k.global_store), str(shm),
                         str(k.bank_conflicts), str(k.barriers), str(k.flops)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"simulated {self.name}: {len(self.kernels)} kernel(s), "
                 f"{sum(self.finding_counts.values())} finding(s)"]
        for r in rows:
            lines.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                          for i, (c, w) in enumerate(zip(r, widths))))
        ce = self.coalescing_efficiency
        lines.append(f"  global: {self.global_bytes_loaded} B loaded, "
                     f"{self.global_bytes_stored} B stored, coalescing efficiency "
                     f"{'-' if ce is None else f'{100 * ce:.1f}%'}; shared bank conflicts "
                     f"{self.bank_conflicts}; flops {self.flops}")
        if self.undefined_shuffle_reads:
            lines.append(f"  {self.undefined_shuffle_reads} shuffle read(s) from inactive "
                         f"or non-existent lanes returned undefined values")
        if self.unchecked:
            lines.append(f"  global race checks skipped (buffers too large): "
                         f"{', '.join(self.unchecked)}")
        for kind, n in sorted(self.finding_counts.items()):
            lines.append(f"  {kind}: {n}")
        for f in self.findings[:10]:
            lines.append(f"    {f}")
        return "\n".join(lines)

    __str__ = summary
