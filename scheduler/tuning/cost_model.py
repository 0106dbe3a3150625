"""The CPU GEMM cost model: an analytic estimate and a learned correction (issue #12
item 2).

Analytic (:func:`analytic_seconds`), for a point of :func:`.space.cpu_space` at a product
``(M, K) x (K, N)``, from the target's data (vector lanes, registers, L1/L2 sizes,
threads) and a few machine constants (:data:`MACHINE`, a generic x86 core: the model
ranks, the correction calibrates):

* compute: ``2 * M' * N' * K`` flops (``M'``, ``N'`` padded to the register block) at
  ``2 FMA/cycle * lanes``, slowed when the ``MR x NI`` accumulators cannot cover the FMA
  latency (fewer than ``latency * 2`` independent FMAs);
* L1 -> registers: ``MR`` broadcasts and ``NI`` loads per ``MR * NI`` FMAs at 2 loads/cycle;
* L2 -> L1: the ``KC x NR`` panel of the packed ``Y`` block is re-read for every ``MR``
  rows of ``X``;
* memory: ``X`` read ``ceil(N/NC)`` times, ``Y`` ``ceil(M/MC)`` times, the output read
  and written ``ceil(K/KC)`` times; packing copies both operands once per reuse;
* the three bandwidth terms and compute overlap (their max) plus the packing time;
  ``parallel`` divides by the threads the ``MC x NC`` tiles can keep busy;
* packing off: the compiler's unblocked loops, a fixed fraction of peak.

Learned (:class:`CostModel`): gradient-boosted trees (scikit-learn's
``HistGradientBoostingRegressor``, the optional ``tune`` extra, imported lazily) fitted on
``log(measured / analytic)`` against features of the configuration and shape (the knobs,
log sizes, padding waste, the analytic terms); a prediction is ``analytic * exp(tree)``.
Fitted from tuning records (every finite trial of the target); used to rank the space
before measuring (``polycomp tune --model learned``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polycomp import dtypes as dt
from polycomp.errors import UsageError

from .space import CpuPoint, GemmShape


@dataclass(frozen=True)
class MachineConstants:
    """Generic per-core constants of the analytic model (not measured; the learned
    correction absorbs their error)."""
    hz: float = 2.5e9
    fma_per_cycle: int = 2
    fma_latency: int = 4
    loads_per_cycle: int = 2
    l2_bytes_per_cycle: float = 32.0
    mem_bytes_per_s: float = 12e9      # one core's share of DRAM bandwidth
    copy_bytes_per_s: float = 8e9      # packing: load + store + index arithmetic
    nopack_fraction: float = 0.15      # unblocked loops: share of peak they reach


MACHINE = MachineConstants()


@dataclass(frozen=True)
class Terms:
    """The analytic model's terms (seconds) of one point at one shape."""
    compute: float
    l1: float
    l2: float
    memory: float
    packing: float
    threads: int

    @property
    def seconds(self) -> float:
        return max(self.compute, self.l1, self.l2, self.memory) + self.packing


def analytic_terms(p: CpuPoint, shape: GemmShape, target,
                   c: MachineConstants = MACHINE) -> Terms:
    """The terms of :func:`analytic_seconds` (see the module docstring)."""
    M, N, K = max(1, shape.M), max(1, shape.N), max(1, shape.K)
    size = dt.itemsize(shape.dtype)
    lanes = max(1, target.vector_lanes(shape.dtype))
    cores = max(1, target.cpu.threads if target.cpu else 1)
    peak = c.hz * c.fma_per_cycle * lanes * 2                 # flop/s of one core
    if not p.packing:
        threads = min(cores, M) if p.parallel else 1
        t = 2.0 * M * N * K / (peak * c.nopack_fraction) / threads
        mem = (M * K + K * N * math.ceil(M / 64) + 2 * M * N) * size / c.mem_bytes_per_s
        return Terms(t, 0.0, 0.0, mem / threads, 0.0, threads)
    NR = p.NI * lanes
    Mp, Np = math.ceil(M / p.MR) * p.MR, math.ceil(N / NR) * NR
    flops = 2.0 * Mp * Np * K
    chains = p.MR * p.NI                                      # independent FMA chains
    eff = min(1.0, chains / (c.fma_latency * c.fma_per_cycle))
    tiles = math.ceil(M / p.MC) * math.ceil(N / p.NC)
    threads = min(cores, tiles) if p.parallel else 1
    compute = flops / (peak * eff) / threads
    fmas = flops / 2 / lanes                                  # vector FMAs
    l1 = fmas * (p.MR + p.NI) / (p.MR * p.NI) / c.loads_per_cycle / c.hz / threads
    l2 = (Mp / p.MR) * K * Np * size / (c.l2_bytes_per_cycle * c.hz) / threads
    reads = (M * K * math.ceil(N / p.NC) + K * N * math.ceil(M / p.MC)) * size
    out = 2 * M * N * math.ceil(K / p.KC) * size
    memory = (reads + out) / c.mem_bytes_per_s / max(1, min(threads, 2))
    packing = reads / c.copy_bytes_per_s / threads
    return Terms(compute, l1, l2, memory, packing, threads)


def analytic_seconds(p: CpuPoint, shape: GemmShape, target,
                     c: MachineConstants = MACHINE) -> float:
    """The analytic model's time of ``p`` at ``shape`` on ``target``."""
    return analytic_terms(p, shape, target, c).seconds


def features(p: CpuPoint, shape: GemmShape, target) -> list[float]:
    """The learned correction's inputs: knobs, log sizes, padding, analytic terms."""
    lanes = max(1, target.vector_lanes(shape.dtype))
    t = analytic_terms(p, shape, target)
    NR = p.NI * lanes
    pad_m = (math.ceil(shape.M / p.MR) * p.MR / shape.M) if p.packing else 1.0
    pad_n = (math.ceil(shape.N / NR) * NR / shape.N) if p.packing else 1.0
    logs = [math.log2(max(x, 1e-12)) for x in
            (t.compute, t.l1, t.l2, t.memory, t.packing + 1e-12, t.seconds)]
    return [float(p.packing), float(p.parallel), p.MR, p.NI, math.log2(max(p.MC, 1)),
            math.log2(max(p.NC, 1)), math.log2(max(p.KC, 1)), math.log2(shape.M),
            math.log2(shape.N), math.log2(shape.K), pad_m, pad_n,
            (shape.M / p.MC) if p.MC else 0.0, (shape.N / p.NC) if p.NC else 0.0,
            float(t.threads), *logs]


def point_of(config: dict) -> CpuPoint:
    """The :class:`CpuPoint` of a record's config (``{}`` or partial configs: None)."""
    pack = bool(config.get("microkernel", True))
    par = bool(config.get("parallel", True))
    if not pack:
        return CpuPoint(False, par)
    reg, tiles = config.get("gemm_register"), config.get("gemm_tiles")
    if not reg or not tiles:
        raise ValueError("a packed config without gemm_register/gemm_tiles")
    return CpuPoint(True, par, int(reg[0]), int(reg[1]), int(tiles[0]), int(tiles[1]),
                    int(tiles[2]))


def _regressor():
    try:
        from sklearn.ensemble import HistGradientBoostingRegressor
    except ImportError:
        raise UsageError("the learned cost model needs scikit-learn: "
                         "pip install 'polycomp[tune]'") from None
    return HistGradientBoostingRegressor(max_iter=100, learning_rate=0.1, max_leaf_nodes=15,
                                         min_samples_leaf=3, random_state=0)


class CostModel:
    """The analytic model, optionally corrected by trees fitted on measurements."""

    def __init__(self, target, constants: MachineConstants = MACHINE):
        self.target = target
        self.constants = constants
        self.trees = None
        self.samples = 0

    def fit(self, samples: list[tuple[CpuPoint, GemmShape, float]]) -> CostModel:
        """Fit the correction on ``(point, shape, measured seconds)`` (finite, > 0)."""
        rows = [(p, s, sec) for p, s, sec in samples if np.isfinite(sec) and sec > 0]
        if len(rows) < 8:
            raise UsageError(f"the learned cost model needs at least 8 finite measurements, "
                             f"got {len(rows)}")
        X = np.array([features(p, s, self.target) for p, s, _ in rows])
        y = np.array([math.log(sec / analytic_seconds(p, s, self.target, self.constants))
                      for p, s, sec in rows])
        self.trees = _regressor().fit(X, y)
        self.samples = len(rows)
        return self

    def fit_records(self, records, func, kernel: str | None = None) -> CostModel:
        """:meth:`fit` on tuning records of this target (optionally one kernel hash)
        measured with the thread count this process runs kernels with;
        ``func`` (the kernel's lowered function) reads each record's ``shape`` as
        :func:`gemm_dims`."""
        from .records import same_threads, wanted_threads
        threads = wanted_threads(self.target)
        samples = []
        for r in records:
            if r.target != self.target.name or (kernel and r.kernel != kernel) \
                    or not same_threads(r, threads):     # other thread counts: not comparable
                continue
            try:
                samples.append((point_of(r.config), gemm_dims(func, r.shape), float(r.seconds)))
            except (ValueError, KeyError):
                continue
        return self.fit(samples)

    def predict(self, points: list[CpuPoint], shape: GemmShape) -> np.ndarray:
        base = np.array([analytic_seconds(p, shape, self.target, self.constants)
                         for p in points])
        if self.trees is None or not points:
            return base
        X = np.array([features(p, shape, self.target) for p in points])
        return base * np.exp(self.trees.predict(X))

    def rank(self, points: list[CpuPoint], shape: GemmShape) -> list[CpuPoint]:
        """``points`` fastest first by the model (stable on ties)."""
        t = self.predict(points, shape)
        return [points[i] for i in np.argsort(t, kind="stable")]


def gemm_dims(func, shape: dict[str, int]) -> GemmShape:
    """The ``(M, N, K)`` of a kernel whose first output is the product: ``M`` its rows
    (all but the last dimension), ``N`` its columns, ``K`` the product of the size
    symbols the output does not use (the reduction; 1 when none)."""
    from polycomp import ir
    from polycomp.shapes import eval_int
    out = func.outputs[0]
    dims = [int(eval_int(d, shape)) for d in out.shape]
    used = {d.name for d in out.shape if isinstance(d, ir.Var)}
    depth = int(np.prod([shape[p.name] for p in func.params
                         if p.name not in used and p.name in shape] or [1]))
    m = int(np.prod(dims[:-1])) if len(dims) > 1 else 1
    return GemmShape(m, dims[-1] if dims else 1, depth, out.dtype)
