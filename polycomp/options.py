"""Typed, validated compile options: one class per target family.

``compile_kernel(k, target, options={...})`` (and ``polycomp compile -O KEY=VALUE``)
accepts a mapping; the target's options class turns it into a frozen dataclass and
rejects what it does not know:

* an unknown key raises :class:`~polycomp.errors.OptionError` naming the key, the
  closest valid key (``paralel`` -> ``parallel``) and listing every valid one;
* a value of the wrong type or out of range raises ``OptionError`` naming the option,
  the value and what it takes (``--tile-k 0``: "tile.k takes an integer >= 1").

Passes read fields (``state.options.parallel``), never string keys.  Each field's
``metadata["doc"]`` is its one-line description (``polycomp targets --options``
prints them; docs/api.md lists them).
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from polycomp.errors import OptionError

O = TypeVar("O", bound="Options")


# --------------------------------------------------------------------------- value checks
# Each check takes (option name, raw value) and returns the normalised value or raises.


def boolean(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        return v.lower() in ("true", "1", "yes", "on")
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise OptionError(f"option {name} takes True or False, got {v!r}")


def positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise OptionError(f"option {name} takes an integer >= 1, got {v!r}")
    return v


def int_tuple(n: int | None) -> Callable[[str, Any], tuple[int, ...] | None]:
    """A tuple of positive integers (``n`` of them when given), or None."""
    def check(name: str, v: Any) -> tuple[int, ...] | None:
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            v = (v,)
        if not isinstance(v, (tuple, list)) or not v or \
                any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
            raise OptionError(f"option {name} takes a tuple of integers >= 1, got {v!r}")
        if n is not None and len(v) != n:
            raise OptionError(f"option {name} takes {n} integers, got {len(v)}: {v!r}")
        return tuple(v)
    return check


def one_of(*choices: str) -> Callable[[str, Any], str]:
    def check(name: str, v: Any) -> str:
        if v not in choices:
            raise OptionError(f"option {name} takes one of {', '.join(map(repr, choices))}, "
                              f"got {v!r}")
        return str(v)
    return check


def opt(default: Any, check: Callable[[str, Any], Any], doc: str) -> Any:
    """A dataclass field with its check and one-line description."""
    return field(default=default, metadata={"check": check, "doc": doc})


# --------------------------------------------------------------------------- base class


@dataclass(frozen=True)
class Options:
    """Options every target takes."""

    family: ClassVar[str] = "any"

    isl_scheduler: bool = opt(False, boolean,
                              "reschedule with isl's scheduler before the target passes")

    @classmethod
    def from_mapping(cls: type[O], values: Mapping[str, Any] | None, target: str = "") -> O:
        """Validate ``values`` (None: all defaults) into an instance of ``cls``."""
        if values is None:
            return cls()
        if isinstance(values, cls):
            return values
        if isinstance(values, Options):
            values = values.as_dict()
        if not isinstance(values, Mapping):
            raise OptionError(f"options must be a dict of option names to values, got "
                              f"{type(values).__name__}")
        known = {f.name: f for f in fields(cls)}
        out: dict[str, Any] = {}
        for key, raw in values.items():
            if key not in known:
                raise OptionError(cls._unknown(str(key), target))
            out[key] = known[key].metadata["check"](key, raw)
        inst = cls(**out)
        inst.validate()
        return inst

    @classmethod
    def _unknown(cls, key: str, target: str) -> str:
        names = sorted(f.name for f in fields(cls))
        close = difflib.get_close_matches(key, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        where = f"target {target}" if target else f"{cls.family} targets"
        return f"unknown option {key!r} for {where}{hint}; valid options: {', '.join(names)}"

    def validate(self) -> None:
        """Checks across fields (subclasses)."""

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self: O, **changes: Any) -> O:
        return type(self).from_mapping({**self.as_dict(), **changes})

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """``(name, default, description)`` of every option."""
        return [(f.name, repr(f.default), f.metadata["doc"]) for f in fields(cls)]


# --------------------------------------------------------------------------- CPU


@dataclass(frozen=True)
class CpuOptions(Options):
    """Options of the C targets (``c``, ``cpu``, ``cpu-avx2``, ``cpu-avx512``)."""

    family: ClassVar[str] = "cpu"

    parallel: bool = opt(True, boolean, "OpenMP-parallel outer loops")
    fuse: bool = opt(True, boolean, "fuse chains of memory-bound stages")
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


# --------------------------------------------------------------------------- CUDA


@dataclass(frozen=True)
class TileOption:
    """``--tile/--threads/--tile-k``: block tile sizes, threads per block dimension and
    the reduction tile of the tiled GPU pipeline (missing parts take the defaults)."""
    block: tuple[int, ...] | None = None
    threads: tuple[int, ...] | None = None
    k: int | None = None


def tile_option(name: str, v: Any) -> TileOption | None:
    if v is None or isinstance(v, TileOption):
        return v
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
    if not isinstance(v, Mapping):
        raise OptionError(f"option {name} takes a dict with keys block, warp, k, stages, "
                          f"swizzle; got {v!r}")
    bad = set(v) - {"block", "warp", "k", "stages", "swizzle"}
    if bad:
        raise OptionError(f"option {name} has unknown keys {sorted(bad)}; valid keys: "
                          f"block, warp, k, stages, swizzle")
    k, st, sw = v.get("k"), v.get("stages"), v.get("swizzle")
    return TensorCoreTileOption(int_tuple(2)(f"{name}.block", v.get("block")),
                                int_tuple(2)(f"{name}.warp", v.get("warp")),
                                None if k is None else positive_int(f"{name}.k", k),
                                None if st is None else positive_int(f"{name}.stages", st),
                                None if sw is None else boolean(f"{name}.swizzle", sw))


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
                                        "threads per block of the baseline mapping")
    tensor_cores: bool = opt(True, boolean, "f16/bf16 contractions on Tensor Cores")
    tc_tile: TensorCoreTileOption | None = opt(None, tc_tile_option,
                                               "Tensor Core tiles ({'block', 'warp', 'k', "
                                               "'stages', 'swizzle'})")
    promote: bool = opt(True, boolean, "shared-memory and register promotion")
    unroll: bool = opt(True, boolean, "unroll point loops of constant trip count")
    isolate: bool = opt(True, boolean, "separate full tiles from partial ones when unrolling")
    row_stitching: bool = opt(True, boolean,
                              "stitch row reductions with their producers and consumers")
