"""Options of the NPU targets (``npu``, ``npu-lite``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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
