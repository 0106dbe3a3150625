"""Options of the C targets (``c``, ``cpu``, ``cpu-avx2``, ``cpu-avx512``); see
:mod:`polycomp.options` for how options are checked."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from polycomp.options import Options, boolean, int_tuple, one_of, opt, positive_int


@dataclass(frozen=True)
class CpuOptions(Options):
    """Options of the C targets (``c``, ``cpu``, ``cpu-avx2``, ``cpu-avx512``)."""

    family: ClassVar[str] = "cpu"

    parallel: bool = opt(True, boolean, "OpenMP-parallel outer loops")
    fuse: bool = opt(True, boolean, "fuse chains of memory-bound stages")
    chain: bool = opt(True, boolean,
                      "fuse a chain of two contractions (with elementwise stages or a "
                      "softmax between) into one kernel (scheduler/chain, docs/fusion.md)")
    microkernel: bool = opt(True, boolean,
                            "tile matmul/conv backbones for the register micro-kernel and pack "
                            "their operands (vector targets)")
    interchange: bool = opt(True, boolean, "interchange column reductions (vector targets)")
    contract: bool = opt(True, boolean, "contract temporaries to the loops that use them")
    vectorize: bool = opt(True, boolean, "emit AVX2/AVX-512 intrinsics (vector targets)")
    tail: str = opt("mask", one_of("mask", "scalar"),
                    "how the last n mod L iterations of a vector loop run")
    reduce_unroll: int = opt(4, positive_int, "vector accumulators per reduction")
    reciprocal: bool = opt(True, boolean,
                           "divide by a loop-invariant value as a multiply by its reciprocal")
    prefetch: bool = opt(True, boolean,
                         "prefetch the next row in row-wise loop nests")
    gemm_tiles: tuple[int, ...] | None = opt(None, int_tuple(3),
                                             "GEMM cache blocking (MC, NC, KC)")
    gemm_register: tuple[int, ...] | None = opt(None, int_tuple(2),
                                                "GEMM register block (MR, vectors per row)")
    gemm_epilogue: bool = opt(True, boolean,
                              "run an elementwise stage after a product on each register tile")


