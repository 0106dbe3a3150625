"""Multi-version row kernels: one version per row-length bucket, chosen at run time by
the row length (DISC's multi-versioned kernels with host dispatch, through the
multi-version module of :mod:`polycomp.scheduler.tuning.multiversion`; a builder of the
driver layer, as :mod:`.cuda_versions`: it compiles each version through the driver).

A row group whose row length ``W`` is symbolic cannot be mapped by its length at compile
time. :func:`row_version_plan` asks the cost model
(:mod:`polycomp.scheduler.gpu.rowplan`) for the best mapping at each bucket bound ``hi``
of ``W`` (:data:`BUCKETS`), twice: with the widest vector (``V = 16 / itemsize`` columns
per access, guarded by ``W mod V = 0``) and with scalar columns. Each version is
compiled with the option ``row_map`` (its threads, rows, vector, register cache and
``bound = hi``: isl generates its code for ``W <= hi``, the cache holds ``ceil(hi / (V
T)) V`` registers, and the kernel traps if called outside its assumptions). Adjacent
buckets whose mapping is the same share one version. A last version has no guard: a
block of 1024 threads per row, uncached, scalar columns (rows longer than the last
bucket, or of a length no vector version divides).

The rule is "the first version whose guard holds": guards ``lo < W <= hi`` (and
``W mod V = 0``), vector versions first.  :class:`RowVersionPlan` is a
:class:`~polycomp.scheduler.tuning.multiversion.VersionPlan`: its selector is IR (the
backend prints it into the module, :mod:`polycomp.lowering.host_eval` evaluates it in
Python), :meth:`RowVersionPlan.select` states the rule in Python.
:class:`RowMultiVersion` compiles the versions and builds the one ``.cu``.

Row *counts* stay symbolic: the model assumes they fill the GPU (docs/rowreduce.md).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from polycomp import ir
from polycomp.errors import UsageError
from polycomp.scheduler.gpu.rowplan import VECTOR_BYTES, RowMapping, choose, estimate
from polycomp.scheduler.tuning import guards as gd
from polycomp.scheduler.tuning.guards import Guard
from polycomp.scheduler.tuning.multiversion import MultiVersion, first_true_selector

#: the row-length buckets (upper bounds) the versions are chosen at
BUCKETS = (32, 128, 512, 1024, 4096, 16384, 32768)
#: the row length the unbounded last version is estimated at, and its threads per row
#: (a block per row: long rows, however many)
LONG_ROW = 4 * BUCKETS[-1]
LONG_ROW_THREADS = 1024


@dataclass(frozen=True)
class RowVersion:
    """Version for ``lo < W <= hi`` (``hi`` None: unbounded) with ``W mod multiple_of
    = 0``, compiled with ``mapping``."""
    lo: int | None
    hi: int | None
    multiple_of: int
    mapping: RowMapping
    seconds: float                 # the model's estimate at ``hi`` (or LONG_ROW)

    def guards(self, symbol: str) -> tuple[Guard, ...]:
        if self.lo is None and self.hi is None and self.multiple_of == 1:
            return ()
        return (Guard(symbol, self.lo, self.hi, self.multiple_of),)

    def config(self) -> dict[str, Any]:
        m = self.mapping
        return {"row_map": {"threads": m.threads, "rows": m.rows, "vector": m.vector,
                            "cache": m.cache, "bound": m.bound}}


@dataclass(frozen=True)
class RowVersionPlan:
    """Row-kernel versions by row length (module docstring)."""
    symbol: str
    versions: tuple[RowVersion, ...]

    def configs(self) -> list[dict[str, Any]]:
        return [v.config() for v in self.versions]

    def selector(self, func: ir.LoweredFunc) -> ir.LoweredFunc:
        params = {p.name: p for p in func.params}
        return first_true_selector(func, [gd.condition(v.guards(self.symbol), params)
                                          for v in self.versions])

    def comments(self) -> list[str]:
        return [f"{gd.text(v.guards(self.symbol)) or 'otherwise'}: {v.mapping.label()}"
                for v in self.versions]

    def explain(self, name: str, target: str) -> str:
        lines = [f"multi-version row kernel {name} on {target}: {len(self.versions)} "
                 f"versions by row length {self.symbol}",
                 "rule: the first version whose guard holds (the last always holds)"]
        for i, (v, c) in enumerate(zip(self.versions, self.comments())):
            lines.append(f"  v{i}: {c}  (model {v.seconds * 1e6:.1f} us at "
                         f"{self.symbol}={v.hi or LONG_ROW}, rows filling the GPU)")
        return "\n".join(lines)

    def select(self, values: dict[str, int]) -> int:
        """The rule in Python (independent of the selector IR)."""
        for i, v in enumerate(self.versions):
            if gd.all_hold(v.guards(self.symbol), values):
                return i
        raise UsageError(f"no version's guard holds for {values}")


def row_version_plan(kernel, target, buckets=BUCKETS) -> tuple[RowVersionPlan, Any]:
    """(the plan, the default compile of ``kernel``) for a kernel with one row group
    whose row length is a symbol."""
    from polycomp.driver import compile_kernel
    from polycomp.hw.target import get_target
    from polycomp.scheduler.gpu.rowstate import row_kernels
    t = get_target(target)
    base = compile_kernel(kernel, t)
    rks = list(row_kernels(base.state).kernels.values()) if base.state else []
    if len(rks) != 1 or rks[0].symbol is None:
        raise UsageError(f"{kernel.name}: multi-version row kernels take one row group "
                         f"whose row length is one size symbol (found {len(rks)} row "
                         f"groups)")
    rk = rks[0]
    symbol = str(rk.symbol)
    shape = rk.shape
    vmax = max(1, VECTOR_BYTES // shape.itemsize) if shape.vector_ok else 1
    versions: list[RowVersion] = []
    for vec in ([vmax, 1] if vmax > 1 else [1]):
        lo: int | None = None
        for hi in sorted(buckets):
            s = replace(shape, bound=hi)
            m, cost = choose(s, t, _Fixed(vector=vec))
            m = replace(m, bound=hi)
            last = versions[-1] if versions else None
            if last is not None and last.multiple_of == vec and last.hi == lo and \
                    replace(last.mapping, bound=None) == replace(m, bound=None):
                versions[-1] = RowVersion(last.lo, hi, vec, m, cost.seconds)
            else:
                versions.append(RowVersion(lo, hi, vec, m, cost.seconds))
            lo = hi
    s = replace(shape, bound=LONG_ROW)
    m, _ = choose(s, t, _Fixed(threads=LONG_ROW_THREADS, vector=1, cache=False))
    m = replace(m, bound=None)
    versions.append(RowVersion(None, None, 1, m, estimate(m, s, t).seconds))
    return RowVersionPlan(symbol, tuple(versions)), base


@dataclass(frozen=True)
class _Fixed:
    """The parts of a ``row_map`` option the plan fixes (duck-typed like RowMapOption)."""
    threads: int | None = None
    rows: int | None = None
    vector: int | None = None
    cache: bool | None = None
    bound: int | None = None


class RowMultiVersion(MultiVersion):
    """Every version of a row kernel with a symbolic row length and the one ``.cu``
    holding them with its selector and dispatchers (:attr:`source`, from
    :attr:`module`); :meth:`execute` runs the selected version in the simulator."""

    def __init__(self, kernel, target="cuda", buckets=BUCKETS):
        from polycomp.scheduler.tuning.multiversion import config_key
        plan, base = row_version_plan(kernel, target, buckets)
        self.symbol = plan.symbol
        self.versions = list(plan.versions)
        super().__init__(kernel, base.target, plan, {config_key({}): base})
