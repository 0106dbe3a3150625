"""The compile options of the built-in target families, as data: :class:`CpuOptions`
(``c``, ``cpu``, ``cpu-avx2``, ``cpu-avx512``), :class:`CudaOptions` (``cuda``,
``cuda-sm90``, ``cuda-sm90a``) and :class:`NpuOptions` (``npu``, ``npu-lite``); see
:mod:`polycomp.options` for how options are checked.

They live beside :mod:`polycomp.hw.target` and :mod:`polycomp.hw.memory` rather than in
the backend packages because the schedule passes of ``scheduler/`` read them, and
``scheduler/`` depends on target data only, never on a backend package.  A backend
declares its class as ``Backend.options_class``; a plug-in backend whose passes live in
its own package may keep its options class there.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from polycomp.errors import OptionError
from polycomp.hw.target import CUDA_MAX_THREADS_PER_BLOCK
from polycomp.options import Options, boolean, int_tuple, name_tuple, one_of, opt, positive_int

# --------------------------------------------------------------------------- CPU


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
    vector_window: bool = opt(True, boolean,
                              "AVX-512: start a vector loop whose loads overlap (X[i-1], X[i], "
                              "X[i+1]) at an aligned store and read the shifted loads as "
                              "lane shifts of aligned ones (a stencil row shared by several "
                              "statements: the aligned store only)")
    vector_lift: bool = opt(True, boolean,
                            "AVX-512: run a 1-D stencil's time loop on lane-transposed copies "
                            "of its arrays (lane l holds the l-th block of n/L elements), so "
                            "a point's neighbours are the vectors beside it (lowering/lift.py)")
    reciprocal: bool = opt(True, boolean,
                           "divide by a loop-invariant value as a multiply by its reciprocal")
    prefetch: bool = opt(True, boolean,
                         "prefetch the next row in row-wise loop nests")
    gemm_tiles: tuple[int, ...] | None = opt(None, int_tuple(3),
                                             "GEMM cache blocking (MC, NC, KC)")
    gemm_register: tuple[int, ...] | None = opt(None, int_tuple(2),
                                                "GEMM register block (MR, vectors per row)")
    acc_init_split: bool = opt(True, boolean,
                               "AVX2, float64: a product's init at the first k tile (C = 0, "
                               "C *= beta) before a register tile of symbolic extent runs "
                               "in the full tile (accumulators, its stores) instead of "
                               "a pass of stores before it "
                               "(hw/cpu/microkernel.py; POLYCOMP_ACC_INIT_SPLIT=0 off)")
    index_cse: bool = opt(True, boolean,
                          "vector targets: bind each index expression the C would repeat "
                          "(the lane ranges and clamped rows of masked register tiles) "
                          "once, in a const local (IR pass index-cse, "
                          "lowering/index_cse.py; POLYCOMP_INDEX_CSE=0 off)")
    gemm_epilogue: bool = opt(True, boolean,
                              "run an elementwise stage after a product on each register tile")
    prepack: tuple[str, ...] = opt((), name_tuple,
                                   "inputs the caller hands in pre-packed: a GEMM whose weight "
                                   "operand is one of them reads it in the micro-kernel's panel "
                                   "layout and copies nothing (see prepacked_inputs)")
    stencil_tiles: tuple[int, ...] | None = opt(None, int_tuple(None),
                                                "time-tile sizes of stencils (scop-stencil: "
                                                "the tiled band members' sizes)")
    stencil_jam: bool = opt(True, boolean,
                            "time-tiled stencils with one innermost loop shared by the "
                            "statements: the IR pass stencil-jam runs two time steps of a "
                            "tile per row pass (hw/cpu/jam.py; False: one step per pass)")
    dead_store_contract: bool = opt(True, boolean,
                                    "an array the statements below one loop iteration write, "
                                    "read back in it and that a later statement overwrites "
                                    "lives in a per-thread buffer there, its stores removed "
                                    "(schedule pass dead-store-contract; "
                                    "POLYCOMP_DEAD_STORE_CONTRACT=0 also turns it off)")
    stencil_shape: str = opt("diamond", one_of("diamond", "parallelogram"),
                             "time tiles of stencils: diamonds with concurrent start where "
                             "the dependence cone allows, else parallelograms")


# -------------------------------------------------------------------------- CUDA


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
class RowMapOption:
    """Option ``row_map``: the thread mapping of row-reduction kernels
    (:mod:`polycomp.scheduler.gpu.rowplan`; missing fields are the cost model's choice).
    ``threads`` per row (a power of two, at most 1024), ``rows`` per block (1 when
    ``threads > 32``), ``vector``: consecutive columns per access (1, 2, 4, 8 or 16, at
    most 16 bytes), ``cache``: keep the row's inputs in registers between the passes of
    the group, ``bound``: the largest row length the kernel handles (a symbolic row
    length; the multi-version selector guarantees it, a kernel called past it traps)."""
    threads: int | None = None
    rows: int | None = None
    vector: int | None = None
    cache: bool | None = None
    bound: int | None = None


_ROW_MAP_KEYS = ("threads", "rows", "vector", "cache", "bound")


def row_map_option(name: str, v: Any) -> RowMapOption | None:
    if v is None or isinstance(v, RowMapOption):
        return v
    if all(hasattr(v, a) for a in _ROW_MAP_KEYS) and not isinstance(v, Mapping):
        v = {a: getattr(v, a) for a in _ROW_MAP_KEYS}          # a RowMapping
    if not isinstance(v, Mapping):
        raise OptionError(f"option {name} takes a dict with keys {', '.join(_ROW_MAP_KEYS)}; "
                          f"got {v!r}")
    bad = set(v) - set(_ROW_MAP_KEYS)
    if bad:
        raise OptionError(f"option {name} has unknown keys {sorted(bad)}; valid keys: "
                          f"{', '.join(_ROW_MAP_KEYS)}")

    def num(key):
        x = v.get(key)
        return None if x is None else positive_int(f"{name}.{key}", x)
    cache = v.get("cache")
    o = RowMapOption(num("threads"), num("rows"), num("vector"),
                     None if cache is None else boolean(f"{name}.cache", cache), num("bound"))
    if o.threads is not None and (o.threads > CUDA_MAX_THREADS_PER_BLOCK
                                  or o.threads & (o.threads - 1)):
        raise OptionError(f"option {name}.threads takes a power of two up to "
                          f"{CUDA_MAX_THREADS_PER_BLOCK}, got {o.threads}")
    if o.vector is not None and o.vector not in (1, 2, 4, 8, 16):
        raise OptionError(f"option {name}.vector takes 1, 2, 4, 8 or 16, got {o.vector}")
    if o.rows is not None and o.rows > 1 and o.threads is not None and o.threads > 32:
        raise OptionError(f"option {name}: rows {o.rows} per block with {o.threads} threads "
                          f"per row; a row wider than a warp takes a block of its own (rows 1)")
    if o.rows is not None and o.threads is not None and \
            o.rows * o.threads > CUDA_MAX_THREADS_PER_BLOCK:
        raise OptionError(f"option {name}: {o.rows} rows of {o.threads} threads is "
                          f"{o.rows * o.threads} threads per block; CUDA allows "
                          f"{CUDA_MAX_THREADS_PER_BLOCK}")
    return o


@dataclass(frozen=True)
class TensorCoreTileOption:
    """Tensor Core tiles: block (M, N), warp (M, N) (on sm_90a the consumer warpgroup's
    tile), K tile, pipeline stages, swizzle, and on sm_90a a persistent grid."""
    block: tuple[int, ...] | None = None
    warp: tuple[int, ...] | None = None
    k: int | None = None
    stages: int | None = None
    swizzle: bool | None = None
    persistent: bool | None = None


def tc_tile_option(name: str, v: Any) -> TensorCoreTileOption | None:
    if v is None or isinstance(v, TensorCoreTileOption):
        return v
    if all(hasattr(v, a) for a in ("block", "warp", "k", "stages", "swizzle")) and \
            not isinstance(v, Mapping):   # a Tensor Core TcConfig
        v = {a: getattr(v, a) for a in ("block", "warp", "k", "stages", "swizzle")}
    if not isinstance(v, Mapping):
        raise OptionError(f"option {name} takes a dict with keys block, warp, k, stages, "
                          f"swizzle; got {v!r}")
    bad = set(v) - {"block", "warp", "k", "stages", "swizzle", "persistent"}
    if bad:
        raise OptionError(f"option {name} has unknown keys {sorted(bad)}; valid keys: "
                          f"block, warp, k, stages, swizzle, persistent")
    k, st, sw, pe = v.get("k"), v.get("stages"), v.get("swizzle"), v.get("persistent")
    opt = TensorCoreTileOption(int_tuple(2)(f"{name}.block", v.get("block")),
                               int_tuple(2)(f"{name}.warp", v.get("warp")),
                               None if k is None else positive_int(f"{name}.k", k),
                               None if st is None else positive_int(f"{name}.stages", st),
                               None if sw is None else boolean(f"{name}.swizzle", sw),
                               None if pe is None else boolean(f"{name}.persistent", pe))
    if opt.k is not None and opt.k not in (32, 64):
        raise OptionError(f"option {name}.k takes 32 or 64 (the K tile of the mma "
                          f"pipeline), got {opt.k}")
    if opt.stages is not None and not 1 <= opt.stages <= 8:
        raise OptionError(f"option {name}.stages takes 1..8 (1..4 for mma.sync, 2..8 "
                          f"for sm_90a wgmma), got {opt.stages}")
    if opt.warp is not None and any(w % 16 for w in opt.warp):
        raise OptionError(f"option {name}.warp takes multiples of 16, got {opt.warp}")
    if opt.block is not None and opt.warp is not None and \
            any(b % w for b, w in zip(opt.block, opt.warp)):
        raise OptionError(f"option {name}: the warp tile {opt.warp} must divide the block "
                          f"tile {opt.block}")
    return opt


@dataclass(frozen=True)
class CudaOptions(Options):
    """Options of the CUDA targets (``cuda``, ``cuda-sm90``, ``cuda-sm90a``)."""

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
                                               "'stages', 'swizzle', 'persistent'}; on "
                                               "sm_90a warp is the consumer warpgroup "
                                               "tile)")
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
    block_reduce: bool = opt(True, boolean,
                             "a C SCoP's reduction into one element below a host loop "
                             "(trisolv's x[i] -= L[i][j] * x[j]) as a one-block parallel "
                             "reduction: the terms reassociated, not bitwise the C order; "
                             "False: one thread in the C order")
    row_online: bool = opt(True, boolean,
                           "an uncached softmax row's maximum and sum in one pass (online "
                           "max-and-sum, docs/rowreduce.md)")
    row_map: RowMapOption | None = opt(None, row_map_option,
                                       "thread mapping of row reductions ({'threads', "
                                       "'rows', 'vector', 'cache', 'bound'}; default: the "
                                       "cost model's choice, docs/rowreduce.md)")
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
            if sizes is not None and math.prod(sizes) > CUDA_MAX_THREADS_PER_BLOCK:
                raise OptionError(f"option {what} {sizes} asks for {math.prod(sizes)} threads "
                                  f"per block; CUDA allows {CUDA_MAX_THREADS_PER_BLOCK}")


# --------------------------------------------------------------------------- NPU


@dataclass(frozen=True)
class NpuOptions(Options):
    """Options of the NPU targets."""

    family: ClassVar[str] = "npu"

    double_buffer: bool = opt(True, boolean,
                              "ping-pong L1/L0/L0C/UB buffers so the pipes overlap")
    ub_banks: bool = opt(True, boolean,
                         "place UB buffers read together by a vector call in different "
                         "halves of the 16 bank groups (npu-ub-banks, docs/npu.md)")
    fixpipe_quant: bool = opt(False, boolean,
                              "int8 matmuls: a per-column float32 scale (and a constant "
                              "one Fixpipe cannot read exactly) applied by Fixpipe on the "
                              "way out of L0C (VDEQF16; VREQ8 / REQ8 for an int8 "
                              "requantisation, rounded to nearest even where the DSL's "
                              "cast truncates), which reads each scale with 10 mantissa "
                              "bits (the lower 13 dropped); off: a vector epilogue in "
                              "float32 (docs/npu.md)")
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
    chain_cost: bool = opt(True, boolean,
                           "decline a chain fusion that the A2 cycle model predicts slower "
                           "than the phased program (constant shapes, no iterator values "
                           "between the products, no chain_tiles given); off: fuse "
                           "whenever tiles fit")

    def validate(self) -> None:
        if self.chain_tiles is not None and (any(t % 16 for t in self.chain_tiles)
                                             or len(self.chain_tiles) not in (2, 3)):
            raise OptionError(f"option chain_tiles takes two or three positive multiples "
                              f"of 16 (TM, TL[, TN]), got {self.chain_tiles}")
