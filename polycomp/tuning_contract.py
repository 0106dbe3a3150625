"""The tuning contract between the tuner (:mod:`polycomp.scheduler.tuning`) and the
backends (:class:`polycomp.hw.registry.Backend`'s ``tuning_space``, ``measure`` and
``version_plan``): what a backend offers to tune, one measured trial, a plan of versions.

It sits below both (the registry's interface names these types; the tuner fills and reads
them), so the registry imports nothing of the scheduler.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from polycomp import ir

__all__ = ["TuningPoint", "OptionPoint", "TuningSpace", "Measurement", "VersionPlan"]


class TuningPoint(Protocol):
    """One configuration of a search space."""

    def options(self) -> dict[str, Any]: ...

    def label(self) -> str: ...

    def knobs(self) -> tuple[tuple[str, Any], ...]: ...


@dataclass(frozen=True)
class OptionPoint:
    """A point that is a plain set of option values (e.g. ``parallel`` alone)."""
    values: tuple[tuple[str, Any], ...]

    def options(self) -> dict[str, Any]:
        return dict(self.values)

    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values) or "default"

    def knobs(self) -> tuple[tuple[str, Any], ...]:
        return self.values


@dataclass(frozen=True)
class TuningSpace:
    """What a backend offers ``polycomp tune`` for one compiled kernel at one shape.

    ``points``: every configuration, each changing the generated code (knobs that do
    not change it are left out; no points: nothing to tune, ``about`` says why).
    ``measured``: trials are timed on this machine (``Backend.measure``, with
    ``threads`` OpenMP threads where that applies); otherwise ``model`` ranks the points
    (fastest first, with the predicted seconds) and ``model_name`` says so in the
    records."""
    points: tuple = ()
    measured: bool = True
    threads: int | None = None
    model: Callable[[], list[tuple[float, Any]]] | None = None
    model_name: str = ""
    about: str = ""


@dataclass(frozen=True)
class Measurement:
    """One measured trial: the best of its timed runs, its outputs and the thread
    count it actually ran with (None: not a threaded CPU run)."""
    seconds: float
    outputs: tuple
    threads: int | None = None


class VersionPlan(Protocol):
    """A plan of versions: their configurations, the selector and an explanation."""

    def configs(self) -> list[dict[str, Any]]: ...

    def selector(self, func: ir.LoweredFunc) -> ir.LoweredFunc: ...

    def comments(self) -> list[str]: ...

    def explain(self, name: str, target: str) -> str: ...
