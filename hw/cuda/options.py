"""Options of the CUDA targets (``cuda``, ``cuda-sm90``); see :mod:`polycomp.options`
for how options are checked."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from polycomp.errors import OptionError
from polycomp.hw.cuda.target import MAX_THREADS_PER_BLOCK
from polycomp.options import Options, boolean, int_tuple, one_of, opt, positive_int


@dataclass(frozen=True)
class TileOption:
    """``--tile/--threads/--tile-k``: block tile sizes, threads per block dimension and
    the reduction tile of the tiled GPU pipeline (missing parts take the defaults)."""
    block: tuple[int, ...] | None = None
    threads: tuple[int, ...] | None = None
    k: int | None = None


def chain_mode(name: str, v: Any) -> bool | str:
    """Option ``chain``: True (fuse where it pays), False (never) or ``"force"``."""
    if isinstance(v, str) and v.lower() == "force":
        return "force"
    try:
        return boolean(name, v)
    except OptionError:
        raise OptionError(f"option {name} takes True, False or 'force', got {v!r}") from None


def tile_option(name: str, v: Any) -> TileOption | None:
    if v is None or isinstance(v, TileOption):
        return v
    if all(hasattr(v, a) for a in ("block", "threads", "k")) and not isinstance(v, Mapping):
        v = {"block": v.block, "threads": v.threads, "k": v.k or None}  # a GPU TileConfig
    if not isinstance(v, Mapping):
        raise OptionError(f"option {name} takes a dict with keys block, threads, k; got {v!r}")
    bad = set(v) - {"block", "threads", "k"}
    if bad:
        raise OptionError(f"option {name} has unknown keys {sorted(bad)}; valid keys: "
                          f"block, threads, k")
    k = v.get("k")
    return TileOption(int_tuple(None)(f"{name}.block", v.get("block")),
                      int_tuple(None)(f"{name}.threads", v.get("threads")),
                      None if k is None else positive_int(f"{name}.k", k))


@dataclass(frozen=True)
class TensorCoreTileOption:
    """Tensor Core tiles: block (M, N), warp (M, N), K tile, pipeline stages, swizzle."""
    block: tuple[int, ...] | None = None
    warp: tuple[int, ...] | None = None
    k: int | None = None
    stages: int | None = None
    swizzle: bool | None = None


def tc_tile_option(name: str, v: Any) -> TensorCoreTileOption | None:
    if v is None or isinstance(v, TensorCoreTileOption):
        return v
    if all(hasattr(v, a) for a in ("block", "warp", "k", "stages", "swizzle")) and \
            not isinstance(v, Mapping):   # a Tensor Core TcConfig
        v = {a: getattr(v, a) for a in ("block", "warp", "k", "stages", "swizzle")}
    if not isinstance(v, Mapping):
        raise OptionError(f"option {name} takes a dict with keys block, warp, k, stages, "
                          f"swizzle; got {v!r}")
    bad = set(v) - {"block", "warp", "k", "stages", "swizzle"}
    if bad:
        raise OptionError(f"option {name} has unknown keys {sorted(bad)}; valid keys: "
                          f"block, warp, k, stages, swizzle")
    k, st, sw = v.get("k"), v.get("stages"), v.get("swizzle")
    opt = TensorCoreTileOption(int_tuple(2)(f"{name}.block", v.get("block")),
                               int_tuple(2)(f"{name}.warp", v.get("warp")),
                               None if k is None else positive_int(f"{name}.k", k),
                               None if st is None else positive_int(f"{name}.stages", st),
                               None if sw is None else boolean(f"{name}.swizzle", sw))
    if opt.k is not None and opt.k not in (32, 64):
        raise OptionError(f"option {name}.k takes 32 or 64 (the K tile of the mma "
                          f"pipeline), got {opt.k}")
    if opt.stages is not None and not 1 <= opt.stages <= 4:
        raise OptionError(f"option {name}.stages takes 1..4, got {opt.stages}")
    if opt.warp is not None and any(w % 16 for w in opt.warp):
        raise OptionError(f"option {name}.warp takes multiples of 16, got {opt.warp}")
    if opt.block is not None and opt.warp is not None and \
            any(b % w for b, w in zip(opt.block, opt.warp)):
        raise OptionError(f"option {name}: the warp tile {opt.warp} must divide the block "
                          f"tile {opt.block}")
    return opt


@dataclass(frozen=True)
class CudaOptions(Options):
    """Options of the CUDA targets (``cuda``, ``cuda-sm90``)."""

    family: ClassVar[str] = "cuda"

    gpu: str = opt("tiled", one_of("tiled", "baseline"),
                   "'baseline': one point per thread, no tiling or promotion")
    tile: TileOption | None = opt(None, tile_option,
                                  "block tile, threads per block and reduction tile "
                                  "({'block': (..), 'threads': (..), 'k': int})")
    block: tuple[int, ...] | None = opt(None, int_tuple(None),
                                        "threads per block of the baseline mapping "
                                        "(gpu='baseline', and C loop nests)")
    tensor_cores: bool = opt(True, boolean, "f16/bf16 contractions on Tensor Cores")
    tc_tile: TensorCoreTileOption | None = opt(None, tc_tile_option,
                                               "Tensor Core tiles ({'block', 'warp', 'k', "
                                               "'stages', 'swizzle'})")
    promote: bool = opt(True, boolean, "shared-memory and register promotion")
    unroll: bool = opt(True, boolean, "unroll point loops of constant trip count")
    isolate: bool = opt(True, boolean, "separate full tiles from partial ones when unrolling")
    row_stitching: bool = opt(True, boolean,
                              "stitch row reductions with their producers and consumers")
    chain: bool | str = opt(True, chain_mode,
                            "fuse a float32 chain of two contractions into one kernel where "
                            "it pays (a stage between the products and a grid filling a "
                            "third of the SMs; 'force': whenever legal; scheduler/chain, "
                            "docs/fusion.md)")
    chain_tiles: tuple[int, ...] | None = opt(None, int_tuple(2),
                                              "tiles (TM, TL) of the fused chain kernel, "
                                              "multiples of 16 (default: the data-movement "
                                              "model's)")

    def validate(self) -> None:
        if self.chain_tiles is not None and any(t <= 0 or t % 16 for t in self.chain_tiles):
            raise OptionError(f"option chain_tiles takes two positive multiples of 16 "
                              f"(TM, TL), got {self.chain_tiles}")
        if self.gpu == "baseline" and self.tile is not None:
            raise OptionError("option tile applies to the tiled pipeline; with "
                              "gpu='baseline' use option block (threads per block)")
        for what, sizes in (("block", self.block),
                            ("tile.threads", self.tile.threads if self.tile else None)):
            if sizes is not None and math.prod(sizes) > MAX_THREADS_PER_BLOCK:
                raise OptionError(f"option {what} {sizes} asks for {math.prod(sizes)} threads "
                                  f"per block; CUDA allows {MAX_THREADS_PER_BLOCK}")
