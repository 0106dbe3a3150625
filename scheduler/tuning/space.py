"""Search spaces generated from a target's data (issue #12 item 1), and the types a
backend answers ``polycomp tune`` with (:class:`TuningSpace`, :class:`Measurement`,
``Backend.tuning_space`` / ``Backend.measure`` in :mod:`polycomp.hw.registry`).

A point of any space has ``options()`` (the target options it stands for), ``label()``
and ``knobs()``: ``(name, value)`` pairs in a fixed order, the values optuna can sample
(bool, int, str); the tuner's sampler walks the knobs in that order, choosing each among
the values the earlier choices leave (:mod:`.tune`).

CPU GEMM space for a product ``(M, K) x (K, N)`` of ``dtype`` on a C target ``t``.  Every
point is valid *by construction* (nothing is generated and then filtered by a trial):

* register block ``(MR, NI)`` (``NR = NI * L`` columns, ``L = t.vector_lanes(dtype)``):
  ``NI`` in 1, 2, 4 and ``MR`` in 1..16 with ``MR*NI`` accumulators + ``NI`` loads + one
  broadcast within ``t.cpu.vector_registers`` — the budget of
  :func:`polycomp.scheduler.cpu.backbone_tile.register_block` — and at least half of the
  budget used (fewer accumulators cannot hide the FMA latency);
* ``KC`` in :data:`KC_CHOICES` with the ``MR x KC`` panel of ``X`` in half of L1;
* ``NC``: ``NR`` times a power of two with the ``KC x NC`` block of ``Y`` in L2, at most
  ``N`` rounded up to ``NR``;
* ``MC``: ``MR`` times a power of two with the ``MC x KC`` block of ``X`` in four L2s
  (the heuristic's bound), at most ``M`` rounded up to ``MR``;
* ``packing`` (option ``microkernel``: tile for the micro-kernel and pack the operands)
  and ``parallel`` (OpenMP over the outer tiles) on/off; scalar C targets (no vector
  ISA, no micro-kernel) get only the two packing-off points.  With packing off the blocking
  knobs do nothing, so that branch is a single point per ``parallel`` value.

A point turns into target options with :meth:`CpuPoint.options`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polycomp import dtypes as dt
from polycomp.tuning_contract import Measurement, OptionPoint, TuningPoint, TuningSpace

__all__ = ["Measurement", "OptionPoint", "TuningPoint", "TuningSpace"]  # re-exported


#: reduction-depth choices (multiples of 16: whole unrolled ``k`` steps)
KC_CHOICES = (32, 64, 128, 192, 256, 384, 512)


@dataclass(frozen=True)
class GemmShape:
    """The sizes of one product ``(M, K) x (K, N)``."""
    M: int
    N: int
    K: int
    dtype: str = "float32"


@dataclass(frozen=True)
class CpuPoint:
    """One configuration of the CPU GEMM space."""
    packing: bool
    parallel: bool
    MR: int = 0
    NI: int = 0
    MC: int = 0
    NC: int = 0
    KC: int = 0

    def options(self) -> dict[str, Any]:
        """The :class:`~polycomp.hw.options.CpuOptions` fields of this point."""
        o: dict[str, Any] = {"microkernel": self.packing, "parallel": self.parallel}
        if self.packing:
            o["gemm_register"] = (self.MR, self.NI)
            o["gemm_tiles"] = (self.MC, self.NC, self.KC)
        return o

    def label(self) -> str:
        if not self.packing:
            return f"nopack{'-par' if self.parallel else ''}"
        return (f"r{self.MR}x{self.NI}-t{self.MC}x{self.NC}x{self.KC}"
                f"{'-par' if self.parallel else ''}")

    def knobs(self) -> tuple[tuple[str, Any], ...]:
        """Packing, parallel, register block, then ``KC``, ``NC``, ``MC``."""
        return (("packing", self.packing), ("parallel", self.parallel),
                ("reg", f"{self.MR}x{self.NI}"), ("KC", self.KC), ("NC", self.NC),
                ("MC", self.MC))


def register_blocks(registers: int) -> list[tuple[int, int]]:
    """``(MR, NI)`` within the register budget, using at least half of it."""
    return [(mr, ni) for ni in (1, 2, 4) for mr in range(1, 17)
            if mr * ni + ni + 1 <= registers and 2 * (mr * ni + ni + 1) >= registers]


def _pow2_multiples(unit: int, limit_units: int, cap: int) -> list[int]:
    """``unit * 2**e`` with ``2**e <= limit_units``, stopping at the first >= ``cap``."""
    out, m = [], 1
    while m <= max(1, limit_units):
        out.append(unit * m)
        if unit * m >= cap:
            break
        m *= 2
    return out


def cpu_space(target, shape: GemmShape) -> list[CpuPoint]:
    """Every point of the CPU GEMM space of ``shape`` on ``target`` (see the module
    docstring); deterministic order."""
    size = dt.itemsize(shape.dtype)
    L = target.vector_lanes(shape.dtype)
    l1, l2 = target.l1_bytes, target.l2_bytes
    points = [CpuPoint(False, par) for par in (False, True)]
    if target.cpu is None or not target.isa:     # scalar C: no micro-kernel to block
        return points
    for MR, NI in register_blocks(target.cpu.vector_registers):
        NR = NI * L
        for KC in KC_CHOICES:
            if MR * KC * size > l1 // 2:
                continue
            ncs = _pow2_multiples(NR, l2 // (KC * size) // NR, -(-shape.N // NR) * NR)
            mcs = _pow2_multiples(MR, 4 * l2 // (KC * size) // MR, -(-shape.M // MR) * MR)
            for NC in ncs:
                if KC * NC * size > l2:
                    continue
                for MC in mcs:
                    for par in (False, True):
                        points.append(CpuPoint(True, par, MR, NI, MC, NC, KC))
    return points
