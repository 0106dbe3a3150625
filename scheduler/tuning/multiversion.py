"""Multi-version CPU kernels: several tuned versions as several C functions in ONE shared
object, chosen by a host-side dispatcher in that object at call time (issue #12 item 4).

Plan (:func:`plan_versions`), from tuning records of one kernel and target that differ in
the bucket of one symbol (the *dispatch symbol*, e.g. ``N`` = 32·L rows of BERT's dense
layers):

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

The rule is "the first version whose guard holds" (:mod:`.guards`).  The artifact
(:func:`multiversion_source`): the shared header of the versions once, each version's
entry point as ``static void <name>__v<i>(...)``, ``int64_t <name>__select(<params>)``
(the rule, in C) and ``void <name>(...)`` with the kernel's own signature, which calls the
selected version; so the one ``.so`` is called exactly like a single-version build.
:class:`MultiVersionKernel` builds it through the kernel cache and also evaluates the rule
in Python (:meth:`MultiVersionKernel.select`) so tests compare both at every boundary.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from polycomp import ir
from polycomp.errors import PolycompInternalError, UsageError

from . import guards as gd
from .guards import Guard
from .records import TuningRecord, kernel_hash, load


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


def _bucket_dict(bucket: str) -> dict[str, int]:
    return {k: int(v) for k, v in (p.split("=") for p in bucket.split(",") if p)}


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
        if isinstance(d, ir.Var):
            out_guards.append(Guard(d.name, g.lo, g.hi, g.multiple_of))
        elif isinstance(d, ir.IntImm) and not Guard("x", g.lo, g.hi, g.multiple_of).holds(
                {"x": int(d.value)}):
            return None
    return tuple(out_guards)


def plan_versions(records: list[TuningRecord], kernel: str, target: str,
                  func: ir.LoweredFunc | None = None, target_obj=None
                  ) -> tuple[str, list[Version]]:
    """(dispatch symbol, versions) from ``records`` of ``kernel`` (its hash) on
    ``target``; with ``func`` (the compiled kernel's IR) and ``target_obj`` the packed
    versions get their shape guards and a fallback version is appended."""
    mine = [r for r in records if r.kernel == kernel and r.target == target
            and r.seconds != float("inf")]
    if not mine:
        raise UsageError(f"no tuning records for kernel {kernel} on {target}")
    buckets = {r.bucket: _bucket_dict(r.bucket) for r in mine}
    syms = sorted({s for b in buckets.values() for s in b})
    varying = [s for s in syms if len({b.get(s) for b in buckets.values()}) > 1]
    if len(varying) > 1:
        raise UsageError(f"records vary in several symbols ({', '.join(varying)}); "
                         f"multi-version dispatch takes one")
    sym = varying[0] if varying else (syms[0] if syms else "")
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
    """The index of the first version whose guard holds for ``values``."""
    for i, v in enumerate(versions):
        if gd.all_hold(v.guards(symbol), values):
            return i
    raise UsageError(f"no version's guard holds for "
                     f"{', '.join(f'{k}={x}' for k, x in sorted(values.items()))}: "
                     f"the records leave {symbol} <= 0 uncovered")


def split_entry(source: str, name: str) -> tuple[str, str]:
    """(header, entry definition) of a C source printed by
    :func:`polycomp.hw.cpu.codegen.emit_c` (the entry point is defined last)."""
    at = source.rfind(f"\nvoid {name}(")
    if at < 0:
        raise PolycompInternalError(f"multi-version: no definition of {name}() in the "
                                    f"generated C")
    return source[:at], source[at + 1:]


def multiversion_source(compiled: list, conditions: list[str]) -> str:
    """One C translation unit from the compiled versions (CompiledKernels of one kernel
    and target) and their C guard conditions (``conditions[-1]`` must be ``"1"`` or
    every binding must satisfy one of them)."""
    first = compiled[0].final_ir
    name = first.name
    header, entry0 = split_entry(compiled[0].source, name)
    sig = entry0[:entry0.index("{")].strip()
    parts = [header.rstrip("\n"), ""]
    for i, ck in enumerate(compiled):
        h, entry = split_entry(ck.source, ck.final_ir.name)
        if h != header or entry[:entry.index("{")].strip() != sig:
            raise PolycompInternalError(f"multi-version {name}: version {i} has another "
                                        f"header or signature than version 0")
        parts.append(f"/* version {i} */\nstatic " +
                     entry.replace(f"void {name}(", f"void {name}__v{i}(", 1))
    params = [p.name for p in first.params]
    args = params + [b.name for b in first.inputs] + [b.name for b in first.outputs]
    psig = ", ".join(f"int64_t {p}" for p in params) or "void"
    sel = [f"int64_t {name}__select({psig}) {{"]
    for i, cond in enumerate(conditions):
        sel.append(f"  if ({cond}) return {i};")
    sel.append("  return -1;\n}")
    for p in params:                 # a symbol no guard reads
        sel.insert(1, f"  (void){p};")
    call = [sig + " {", f"  switch ({name}__select({', '.join(params)})) {{"]
    for i in range(len(compiled)):
        call.append(f"  case {i}: {name}__v{i}({', '.join(args)}); break;")
    call.append("  default: break;\n  }\n}")
    return "\n".join(parts + ["/* dispatcher: the first version whose guard holds */",
                              "\n".join(sel), "\n".join(call)]) + "\n"


class MultiVersionKernel:
    """One shared object holding every version of ``kernel`` and its dispatcher; calling
    it runs the version whose guard holds (chosen inside the object)."""

    def __init__(self, kernel, target, records_paths):
        import ctypes

        from polycomp.driver import compile_kernel
        from polycomp.hw.cpu.build import CFunction, build_shared
        from polycomp.hw.target import get_target
        self.kernel = kernel
        t = get_target(target)
        if t.kind != "c":
            raise UsageError(f"MultiVersionKernel builds C targets; {t.name} is not one "
                             f"(CUDA: scheduler/tuning/cuda_versions.py)")
        self.target = t.name
        base = compile_kernel(kernel, t, {})
        self.symbol, self.versions = plan_versions(
            load(records_paths), kernel_hash(kernel), t.name, base.final_ir, t)
        cks: dict[str, Any] = {}
        compiled = []
        for v in self.versions:
            key = json.dumps(v.config, sort_keys=True)
            if key not in cks:
                cks[key] = base if not v.config else compile_kernel(kernel, t, v.config)
            compiled.append(cks[key])
        self.func = base.final_ir
        self.source = multiversion_source(
            compiled, [gd.c_condition(v.guards(self.symbol)) for v in self.versions])
        self.path = build_shared(self.source)
        self.function = CFunction(self.func, self.path)
        self._select = getattr(self.function.lib, f"{self.func.name}__select")
        self._select.restype = ctypes.c_int64
        self._select.argtypes = [ctypes.c_int64] * len(self.func.params)

    def select(self, **values: int) -> int:
        """The version the rule picks for ``values`` (every size symbol), in Python."""
        return select(self.symbol, self.versions, values)

    def select_in_artifact(self, **values: int) -> int:
        """The version the shared object's own dispatcher picks for ``values``."""
        return int(self._select(*[int(values[p.name]) for p in self.func.params]))

    def __call__(self, *arrays, **params):
        return self.function(*arrays, **params)

    def explain(self) -> str:
        return explain_plan(self.kernel.name, self.target, self.symbol, self.versions,
                            one_object=True)


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
