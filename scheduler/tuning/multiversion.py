"""Multi-version kernels: one version per tuned shape bucket, selected on the host at
call time (issue #12 item 4, CPU).

From tuning records of one kernel and target that differ in the bucket of one symbol
(the *dispatch symbol*, e.g. ``N`` = 32·L rows of BERT's dense layers), version ``i``
covers ``bucket[i-1] < N <= bucket[i]`` (the first from 1, the last to infinity) with the
fastest recorded config of ``bucket[i]``; adjacent buckets with the same config share
one version.  A call binds the symbols from the arrays' shapes
(:func:`polycomp.shapes.infer_params`) and runs the version whose guard holds.

Limits (said plainly): each version is its own shared object (one build per distinct
config, all through the kernel cache), not several functions in one ``.c``; the rule is
the bucket guards only (no DISC-style divisibility guards, no cost-model term on CPU).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from polycomp.errors import UsageError

from .records import TuningRecord, kernel_hash, load


@dataclass(frozen=True)
class Version:
    lo: int                       # guard: lo < value <= hi (hi None: unbounded)
    hi: int | None
    config: dict[str, Any]
    seconds: float                # the record's time at its bucket

    def guard(self, symbol: str) -> str:
        return f"{self.lo} < {symbol}" + (f" <= {self.hi}" if self.hi is not None else "")


def _bucket_dict(bucket: str) -> dict[str, int]:
    return {k: int(v) for k, v in (p.split("=") for p in bucket.split(",") if p)}


def plan_versions(records: list[TuningRecord], kernel: str, target: str
                  ) -> tuple[str, list[Version]]:
    """(dispatch symbol, versions) from ``records`` of ``kernel`` on ``target``."""
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
    return sym, versions


class MultiVersionKernel:
    """A callable that runs the version of ``kernel`` whose guard holds."""

    def __init__(self, kernel, target: str, records_paths):
        from polycomp.driver import build, compile_kernel
        self.kernel, self.target = kernel, target
        self.symbol, self.versions = plan_versions(load(records_paths), kernel_hash(kernel),
                                                   target)
        built: dict[str, Any] = {}
        self.functions = []
        for v in self.versions:
            key = json.dumps(v.config, sort_keys=True)
            if key not in built:
                built[key] = build(kernel, target, v.config)
            self.functions.append(built[key])
        self.func = compile_kernel(kernel, target, self.versions[0].config).final_ir

    def select(self, value: int) -> int:
        """The index of the version for ``symbol = value``."""
        for i, v in enumerate(self.versions):
            if value > v.lo and (v.hi is None or value <= v.hi):
                return i
        raise AssertionError("the guards cover every value >= 1")

    def __call__(self, *arrays, **params):
        from polycomp.shapes import infer_params
        f = self.func
        values = infer_params(f.params, f.inputs, list(arrays), params, outputs=f.outputs)
        return self.functions[self.select(values[self.symbol])](*arrays, **params)

    def explain(self) -> str:
        lines = [f"multi-version kernel {self.kernel.name} on {self.target}: "
                 f"{len(self.versions)} versions, dispatch on {self.symbol}",
                 f"rule: the first version whose guard holds "
                 f"(guards partition {self.symbol} >= 1)"]
        for i, v in enumerate(self.versions):
            lines.append(f"  v{i}: {v.guard(self.symbol):24s} {v.seconds * 1e3:9.3f} ms at "
                         f"its bucket  config {v.config or '(default)'}")
        return "\n".join(lines)
