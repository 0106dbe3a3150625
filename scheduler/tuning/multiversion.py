"""Multi-version kernels: several tuned versions of one kernel and the rule that picks
one at call time, as functions of ONE IR module (issue #12 item 4, issue #22 item 3).

Tuning (this package) makes the **plan**: which configurations become versions and the
**selector**, an IR function over the kernel's size symbols that returns the index of the
version to run (:class:`GuardPlan` here; the GPU wave model in :mod:`.cuda_versions`).
The target's **backend** makes and prints the **module** (``Backend.multiversion_module``
/ ``emit_module`` in :mod:`polycomp.hw.registry`): the versions (each compiled kernel's
final IR, renamed ``<name>__v<i>``), the selector ``<name>__select`` and dispatchers with
the kernel's own entry points that call the selected version, all in one
:class:`polycomp.ir.LoweredModule` printed once by the backend's printer.  Nothing is
renamed or cut out of printed source.  :meth:`MultiVersion.select` evaluates the
module's selector IR in Python (:mod:`polycomp.lowering.host_eval`), so the Python answer
is the artifact's by construction; tests still compare it with the compiled artifact and
with an independent Python statement of the rule (:func:`select`).

The guard plan (:func:`plan_versions`), from tuning records of one kernel and target that
differ in the bucket of one symbol (the *dispatch symbol*, e.g. ``N`` = 32·L rows of
BERT's dense layers):

* bucket ranges: version ``i`` covers ``bucket[i-1] < N <= bucket[i]`` (the first from 0,
  the last unbounded) with the fastest recorded config of ``bucket[i]``; adjacent buckets
  with the same config share one version;
* DISC-style shape guards, when the kernel's output shape is known: a version whose config
  packs for the register micro-kernel ``MR x NR`` (``NR = NI * vector lanes``) also
  requires the output's columns to be a multiple of ``NR`` (divisibility by the vector
  width: no edge tiles) and its rows to be at least ``MR`` (no register block made mostly
  of padding).  The records were measured at power-of-two extents, where both hold; where
  they do not, the measured ranking says nothing, so the call falls to
* the fallback: the compiler's default configuration (trial 0 of every tuning run), with
  no guard, last.

The rule is "the first version whose guard holds" (:mod:`.guards`: each guard is an IR
expression; the selector returns ``i`` under the first that holds).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polycomp import ir
from polycomp.errors import UsageError
from polycomp.tuning_contract import VersionPlan

from . import guards as gd
from .guards import Guard
from .records import TuningRecord, kernel_hash, load, same_threads, wanted_threads

#: the selector of kernel ``k`` is the function ``k__select`` (GPU check bundles and
#: ``MultiVersion.select_in_artifact`` call it by this name)
SELECT_SUFFIX = "__select"


@dataclass(frozen=True)
class Version:
    lo: int | None                # dispatch range: lo < value <= hi (None: unbounded)
    hi: int | None
    config: dict[str, Any]
    seconds: float                # the record's time at its bucket (nan: the fallback)
    extra: tuple[Guard, ...] = ()  # DISC-style shape guards
    fallback: bool = False

    def guards(self, symbol: str) -> tuple[Guard, ...]:
        if self.fallback:
            return ()
        return (Guard(symbol, self.lo, self.hi),) + self.extra

    def guard(self, symbol: str) -> str:
        return gd.text(self.guards(symbol))

    def condition(self, symbol: str, params: Mapping[str, ir.Var]) -> ir.Expr:
        """The guard as an IR expression over the kernel's size parameters."""
        return gd.condition(self.guards(symbol), params)


def _bucket_dict(bucket: str) -> dict[str, int]:
    out = {}
    for p in bucket.split(","):
        if not p:
            continue
        k, _, v = p.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            raise UsageError(f"tuning record bucket {bucket!r} is not NAME=INT,...") from None
    return out


def shape_guards(config: dict[str, Any], func: ir.LoweredFunc, target
                 ) -> tuple[Guard, ...] | None:
    """The DISC-style guards of a packed config on ``func``'s first output (columns a
    multiple of ``NR``, rows at least ``MR``); ``()`` for configs without a register
    block; None when a constant extent already violates them (the version never runs)."""
    reg = config.get("gemm_register")
    if not config.get("microkernel", True) or not reg or not func.outputs:
        return ()
    mr, ni = int(reg[0]), int(reg[1])
    out = func.outputs[0]
    nr = ni * target.vector_lanes(func.inputs[0].dtype if func.inputs else out.dtype)
    out_guards: list[Guard] = []
    dims = list(out.shape)
    checks = [(dims[-1], Guard("", multiple_of=nr))] if dims else []
    if len(dims) > 1:
        checks.append((dims[0], Guard("", lo=mr - 1)))
    for d, g in checks:
        if g.multiple_of == 1 and (g.lo is None or g.lo < 1):
            continue                 # holds for every extent >= 1: no guard
        if isinstance(d, ir.Var):
            out_guards.append(Guard(d.name, g.lo, g.hi, g.multiple_of))
        elif isinstance(d, ir.IntImm) and not Guard("x", g.lo, g.hi, g.multiple_of).holds(
                {"x": int(d.value)}):
            return None
    return tuple(out_guards)


def plan_versions(records: list[TuningRecord], kernel: str, target: str,
                  func: ir.LoweredFunc | None = None, target_obj=None,
                  threads: int | None = None) -> tuple[str, list[Version]]:
    """(dispatch symbol, versions) from the successful ``records`` of ``kernel`` (its
    hash) on ``target`` measured with ``threads``; with ``func`` (the compiled kernel's
    IR) and ``target_obj`` the packed versions get their shape guards and a fallback
    version is appended."""
    mine = [r for r in records if r.kernel == kernel and r.target == target and r.ok
            and same_threads(r, threads)]
    if not mine:
        raise UsageError(f"no tuning records for kernel {kernel} on {target}"
                         + (f" with {threads} threads" if threads else ""))
    buckets = {r.bucket: _bucket_dict(r.bucket) for r in mine}
    syms = sorted({s for b in buckets.values() for s in b})
    varying = [s for s in syms if len({b.get(s) for b in buckets.values()}) > 1]
    if len(varying) > 1:
        raise UsageError(f"records vary in several symbols ({', '.join(varying)}); "
                         f"multi-version dispatch takes one")
    sym = varying[0] if varying else (syms[0] if syms else "")
    if func is not None and sym and sym not in {p.name for p in func.params}:
        raise UsageError(f"the records dispatch on {sym}, which kernel {func.name} has no "
                         f"size symbol of")
    best: dict[int, TuningRecord] = {}
    for r in mine:
        v = buckets[r.bucket].get(sym, 1)
        if v not in best or r.seconds < best[v].seconds:
            best[v] = r
    versions: list[Version] = []
    lo = 0
    edges = sorted(best)
    for i, v in enumerate(edges):
        hi = None if i == len(edges) - 1 else v
        r = best[v]
        if versions and versions[-1].config == r.config:
            last = versions.pop()
            versions.append(Version(last.lo, hi, r.config, min(last.seconds, r.seconds)))
        else:
            versions.append(Version(lo, hi, r.config, r.seconds))
        lo = v
    if func is None or target_obj is None:
        return sym, versions
    guarded: list[Version] = []
    for ver in versions:
        extra = shape_guards(ver.config, func, target_obj)
        if extra is None:           # can never hold: the fallback covers its range
            continue
        vlo: int | None = ver.lo
        for g in extra:             # rows >= MR on the dispatch symbol: tighten the range
            if g.symbol == sym and g.hi is None and g.multiple_of == 1 and g.lo is not None:
                vlo = max(vlo or 0, g.lo)
        extra = tuple(g for g in extra if not (g.symbol == sym and g.hi is None
                                                and g.multiple_of == 1))
        if ver.hi is not None and vlo is not None and vlo >= ver.hi:
            continue
        guarded.append(Version(vlo, ver.hi, ver.config, ver.seconds, extra))
    if any(v.extra for v in guarded) or len(guarded) < len(versions):
        guarded.append(Version(None, None, {}, float("nan"), (), fallback=True))
    return sym, guarded


def select(symbol: str, versions: list[Version], values: dict[str, int]) -> int:
    """The index of the first version whose guard holds for ``values`` (the rule in
    Python, independent of the selector IR)."""
    for i, v in enumerate(versions):
        if gd.all_hold(v.guards(symbol), values):
            return i
    raise UsageError(f"no version's guard holds for "
                     f"{', '.join(f'{k}={x}' for k, x in sorted(values.items()))}: "
                     f"the records leave {symbol} <= 0 uncovered")


# --------------------------------------------------------------------------- selectors


def selector_name(func: ir.LoweredFunc) -> str:
    return func.name + SELECT_SUFFIX


def first_true_selector(func: ir.LoweredFunc, conditions: Sequence[ir.Expr]
                        ) -> ir.LoweredFunc:
    """``<name>__select(<size symbols>)``: returns ``i`` for the first ``conditions[i]``
    that holds, ``-1`` when none does (IR over ``func``'s parameters)."""
    body: list[ir.Stmt] = []
    for i, c in enumerate(conditions):
        if ir.is_const(c, 1):
            body.append(ir.Return(ir.IntImm(i)))
            break
        body.append(ir.IfThenElse(c, ir.Return(ir.IntImm(i))))
    else:
        body.append(ir.Return(ir.IntImm(-1)))
    return ir.LoweredFunc(selector_name(func), func.params, (), (), ir.seq(*body))


@dataclass(frozen=True)
class GuardPlan:
    """Versions from measured records, chosen by bucket ranges and shape guards."""
    symbol: str
    versions: tuple[Version, ...]

    def configs(self) -> list[dict[str, Any]]:
        return [v.config for v in self.versions]

    def selector(self, func: ir.LoweredFunc) -> ir.LoweredFunc:
        params = {p.name: p for p in func.params}
        return first_true_selector(func, [v.condition(self.symbol, params)
                                          for v in self.versions])

    def comments(self) -> list[str]:
        return [f"{v.guard(self.symbol)}" + (" (fallback)" if v.fallback else "")
                for v in self.versions]

    def explain(self, name: str, target: str) -> str:
        return explain_plan(name, target, self.symbol, list(self.versions), one_object=True)

    def select(self, values: dict[str, int]) -> int:
        return select(self.symbol, list(self.versions), values)


def guard_plan(kernel, target, records: list[TuningRecord], func: ir.LoweredFunc
               ) -> GuardPlan:
    """The guard plan of ``kernel`` on ``target`` (a Target) from ``records``, for the
    compiled kernel ``func`` (used where ``Backend.version_plan`` offers none)."""
    sym, versions = plan_versions(records, kernel_hash(kernel), target.name, func, target,
                                  wanted_threads(target))
    return GuardPlan(sym, tuple(versions))


# --------------------------------------------------------------------------- artifacts


class MultiVersion:
    """The versions of ``plan`` compiled for ``target``, the one module the target's
    backend makes of them (:attr:`module`, :attr:`source`), the rule in Python
    (:meth:`select`) and, where the backend can load it, the artifact."""

    def __init__(self, kernel, target, plan: VersionPlan,
                 precompiled: Mapping[str, Any] | None = None):
        from polycomp.driver import compile_kernel
        from polycomp.hw.target import get_target
        t = get_target(target)
        self.kernel, self.target, self.plan = kernel, t, plan
        cks: dict[str, Any] = dict(precompiled or {})
        compiled = []
        for cfg in plan.configs():
            key = config_key(cfg)
            if key not in cks:
                cks[key] = compile_kernel(kernel, t, cfg)
            compiled.append(cks[key])
        if not compiled:
            raise UsageError(f"multi-version {kernel.name}: the plan has no versions")
        self.compiled = compiled
        self.func = compiled[0].final_ir
        self.backend = compiled[0].backend
        self.module: ir.LoweredModule = self.backend.multiversion_module(
            compiled, plan.selector(self.func), plan.comments())
        self.source: str = self.backend.emit_module(self.module, compiled)
        self._library = None

    def select(self, **values: int) -> int:
        """The version the module's selector picks for ``values`` (every size symbol):
        its IR evaluated in Python."""
        from polycomp.lowering.host_eval import call_host
        r = call_host(self.module.selector, values, self.module)
        return -1 if r is None else int(r)

    def library(self):
        """The loaded artifact (``Backend.load_module``: built once)."""
        if self._library is None:
            self._library = self.backend.load_module(self.module, self.source, self.compiled)
        return self._library

    def select_in_artifact(self, **values: int) -> int:
        """The version the artifact's own selector picks for ``values``."""
        return int(self.library().select(values))

    def __call__(self, *arrays, **params):
        return self.library().call(*arrays, **params)

    def execute(self, *arrays, **params):
        """(outputs, version index): the selected version run with the target's
        reference semantics (``Backend.execute_module``: interpreter, simulator)."""
        return self.backend.execute_module(self.module, self.source, self.compiled,
                                           arrays, params)

    def explain(self) -> str:
        return self.plan.explain(self.kernel.name, self.target.name)


def config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


class MultiVersionKernel(MultiVersion):
    """One artifact holding every version of ``kernel`` planned from the tuning records
    in ``records_paths`` (the target's backend chooses the plan, ``Backend.version_plan``:
    measured records by bucket guards, CUDA model records by the wave model), and its
    dispatcher; calling it runs the version whose guard holds (chosen inside the
    artifact)."""

    def __init__(self, kernel, target, records_paths):
        from polycomp.driver import compile_kernel
        from polycomp.hw.target import get_target
        t = get_target(target)
        base = compile_kernel(kernel, t, {})
        recs = load(records_paths)
        plan = base.backend.version_plan(kernel, t, recs, base.final_ir) or \
            guard_plan(kernel, t, recs, base.final_ir)
        super().__init__(kernel, t, plan, {config_key({}): base})
        if isinstance(plan, GuardPlan):
            self.symbol, self.versions = plan.symbol, list(plan.versions)


def explain_plan(name: str, target: str, symbol: str, versions: list[Version],
                 one_object: bool = False) -> str:
    where = "one shared object, " if one_object else ""
    lines = [f"multi-version kernel {name} on {target}: {len(versions)} versions "
             f"({where}dispatch on {symbol})",
             "rule: the first version whose guard holds (the last always holds)"]
    for i, v in enumerate(versions):
        cfg = v.config or "(compiler default)"
        t = "fallback" if v.fallback else f"{v.seconds * 1e3:.3f} ms at its bucket"
        lines.append(f"  v{i}: {v.guard(symbol):44s} {t:24s} config {cfg}")
    return "\n".join(lines)
