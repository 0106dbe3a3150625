"""Typed, validated compile options: the base class and the value checks.

The built-in target families declare their options classes in
:mod:`polycomp.hw.options` (target data that schedule passes read); a backend names its
class as ``Backend.options_class``.

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
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

import numpy as np

from polycomp.errors import OptionError

O = TypeVar("O", bound="Options")


# --------------------------------------------------------------------------- value checks
# Each check takes (option name, raw value) and returns the normalised value or raises.


def _as_int(v: Any) -> int | None:
    """``v`` as a Python int when it is an integer (numpy integers included, bools
    not), else None."""
    if isinstance(v, (bool, np.bool_)):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def boolean(name: str, v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        return v.lower() in ("true", "1", "yes", "on")
    i = _as_int(v)
    if i in (0, 1):
        return bool(i)
    raise OptionError(f"option {name} takes True or False, got {v!r}")


def positive_int(name: str, v: Any) -> int:
    i = _as_int(v)
    if i is None or i < 1:
        raise OptionError(f"option {name} takes an integer >= 1, got {v!r}")
    return i


def int_tuple(n: int | None) -> Callable[[str, Any], tuple[int, ...] | None]:
    """A tuple of positive integers (``n`` of them when given), or None."""
    def check(name: str, v: Any) -> tuple[int, ...] | None:
        if v is None:
            return None
        if _as_int(v) is not None:
            v = (v,)
        items = [_as_int(x) for x in v] if isinstance(v, (tuple, list, np.ndarray)) \
            else [None]
        if not items or any(x is None or x < 1 for x in items):
            raise OptionError(f"option {name} takes a tuple of integers >= 1, got {v!r}")
        if n is not None and len(items) != n:
            raise OptionError(f"option {name} takes {n} integers, got {len(items)}: {v!r}")
        return tuple(x for x in items if x is not None)
    return check


def name_tuple(name: str, v: Any) -> tuple[str, ...]:
    """A tuple of names (a single string is one name)."""
    if isinstance(v, str):
        v = (v,)
    if not isinstance(v, (tuple, list)) or not all(isinstance(x, str) and x for x in v):
        raise OptionError(f"option {name} takes a tuple of names, got {v!r}")
    return tuple(v)


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


#: What ``fp_exact=True`` sets in a target family's options: on the C targets SIMD
#: reductions keep several partial sums, the micro-kernel uses explicit FMA instructions
#: and ``reciprocal`` rounds differently from a division; on CUDA the Tensor Cores sum
#: in fp32 in the mma's order and a fused contraction chain (online softmax) rescales
#: partial sums (the ``.cu`` is also built with ``nvcc -fmad=false``).
FP_EXACT_OVERRIDES: dict[str, dict[str, Any]] = {
    "cpu": {"vectorize": False, "microkernel": False, "reciprocal": False},
    "cuda": {"tensor_cores": False, "chain": False},
}

#: Target families that implement ``fp_exact`` (elsewhere it is an OptionError).
FP_EXACT_FAMILIES = tuple(FP_EXACT_OVERRIDES)


@dataclass(frozen=True)
class Options:
    """Options every target takes."""

    family: ClassVar[str] = "any"

    isl_scheduler: bool = opt(False, boolean,
                              "reschedule with isl's scheduler before the target passes")
    fp_exact: bool = opt(False, boolean,
                         "IEEE results of the source's own operation order: no FMA "
                         "contraction, no reordered reductions (no SIMD, micro-kernel, "
                         "reciprocal or Tensor Cores); C kernels match gcc -O0 "
                         "-ffp-contract=off bitwise")

    def __post_init__(self) -> None:
        """Every field passes its check (normalised in place), then :meth:`validate`:
        an options object built directly is as valid as one from a mapping."""
        for f in fields(self):
            value = f.metadata["check"](f.name, getattr(self, f.name))
            object.__setattr__(self, f.name, value)
        if self.fp_exact:  # switch off every option of the target that reorders or fuses
            if self.family not in FP_EXACT_FAMILIES:
                raise OptionError(f"option fp_exact is not supported on {self.family} targets "
                                  f"yet (only on the C targets c, cpu, cpu-avx2, cpu-avx512 and "
                                  f"the CUDA targets)")
            names = {f.name for f in fields(self)}
            for name, value in FP_EXACT_OVERRIDES[self.family].items():
                if name in names:
                    object.__setattr__(self, name, value)
        self.validate()

    @classmethod
    def from_mapping(cls: type[O], values: Mapping[str, Any] | Options | None,
                     target: str = "") -> O:
        """Validate ``values`` (None: all defaults) into an instance of ``cls``."""
        if values is None:
            return cls()
        if isinstance(values, cls):
            return values
        if isinstance(values, Options):
            where = f"target {target}" if target else f"{cls.family} targets"
            raise OptionError(f"{type(values).__name__} given for {where}, which takes "
                              f"{cls.__name__} (or a dict)")
        if not isinstance(values, Mapping):
            raise OptionError(f"options must be a dict of option names to values, got "
                              f"{type(values).__name__}")
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise OptionError(cls._unknown(str(key), target))
        return cls(**values)

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
