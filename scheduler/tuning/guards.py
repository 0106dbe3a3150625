"""Dispatch guards of multi-version kernels (issue #12 item 4): DISC-style conditions on
the kernel's integer size parameters, evaluated the same way in Python and in the C host
dispatcher the artifact carries.

A :class:`Guard` on one symbol ``s`` holds when ``lo < s`` (``lo`` None: no lower bound),
``s <= hi`` (``hi`` None: no upper bound) and ``s % multiple_of == 0``.  A version's
guard is a conjunction of them; the dispatch rule is "the first version whose guard holds",
and the last version's guard is empty (it always holds), so every binding of the symbols
selects exactly one version.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Guard:
    """``lo < symbol <= hi`` and ``symbol % multiple_of == 0`` (each part optional)."""
    symbol: str
    lo: int | None = None
    hi: int | None = None
    multiple_of: int = 1

    def holds(self, values: Mapping[str, int]) -> bool:
        v = int(values[self.symbol])
        return ((self.lo is None or self.lo < v) and (self.hi is None or v <= self.hi)
                and v % self.multiple_of == 0)

    def c_expr(self) -> str:
        """The same condition in C (``int64_t`` arithmetic; ``symbol`` is a C variable)."""
        parts = []
        if self.lo is not None:
            parts.append(f"{self.symbol} > {self.lo}")
        if self.hi is not None:
            parts.append(f"{self.symbol} <= {self.hi}")
        if self.multiple_of != 1:
            parts.append(f"{self.symbol} % {self.multiple_of} == 0")
        return " && ".join(parts) or "1"

    def text(self) -> str:
        parts = []
        if self.lo is not None or self.hi is not None:
            rng = (f"{self.lo} < " if self.lo is not None else "") + self.symbol + \
                (f" <= {self.hi}" if self.hi is not None else "")
            parts.append(rng)
        if self.multiple_of != 1:
            parts.append(f"{self.symbol} % {self.multiple_of} == 0")
        return " and ".join(parts) or "true"


def all_hold(guards: tuple[Guard, ...], values: Mapping[str, int]) -> bool:
    return all(g.holds(values) for g in guards)


def c_condition(guards: tuple[Guard, ...]) -> str:
    return " && ".join(f"({g.c_expr()})" for g in guards) or "1"


def text(guards: tuple[Guard, ...]) -> str:
    return " and ".join(g.text() for g in guards) or "always"
