"""Options of the NPU targets (``npu``, ``npu-lite``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from polycomp.errors import OptionError
from polycomp.options import Options, boolean, int_tuple, opt


@dataclass(frozen=True)
class NpuOptions(Options):
    """Options of the NPU targets."""

    family: ClassVar[str] = "npu"

    double_buffer: bool = opt(True, boolean,
                              "ping-pong L1/L0/L0C/UB buffers so the pipes overlap")
    cube_tile: tuple[int, ...] | None = opt(
        None, int_tuple(4), "cube tiling (m0, n0, k0, kL1), multiples of 16; default: "
        "the largest that fits L0A/L0B/L0C/L1")
    chain: bool = opt(True, boolean,
                      "fuse a chain of two contractions (fp16 or fp32 cube operands; "
                      "elementwise stages or a softmax between) into one cube/vector "
                      "program (scheduler/chain/npu_*, docs/fusion.md)")
    chain_tiles: tuple[int, ...] | None = opt(
        None, int_tuple(None), "tiles (TM, TL) or (TM, TL, TN) of the fused chain program, "
        "multiples of 16; default: the data-movement model's choice")

    def validate(self) -> None:
        if self.chain_tiles is not None and (any(t % 16 for t in self.chain_tiles)
                                             or len(self.chain_tiles) not in (2, 3)):
            raise OptionError(f"option chain_tiles takes two or three positive multiples "
                              f"of 16 (TM, TL[, TN]), got {self.chain_tiles}")
