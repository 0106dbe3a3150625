"""Tuning records: one JSON object per line (kernel hash, target, shape bucket, config,
measured seconds, machine); files from several machines merge by concatenation
(``cat a.jsonl b.jsonl > all.jsonl``) and lookups take the fastest record of a key.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

from polycomp.errors import UsageError


@dataclass(frozen=True)
class TuningRecord:
    kernel: str            # kernel_hash()
    target: str
    bucket: str            # shape_bucket()
    config: dict[str, Any]
    seconds: float
    shape: dict[str, int] = field(default_factory=dict)
    machine: str = field(default_factory=lambda: machine_id())

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def machine_id() -> str:
    """``host/cpu model/cores``: which machine measured a record."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.node()}/{model}/{os.cpu_count()}"


def kernel_hash(kernel) -> str:
    """A hash of the kernel's structure: its polyhedral model's text (statements,
    domains, accesses), not its Python object."""
    return hashlib.sha256(str(kernel.polyhedral_model()).encode()).hexdigest()[:16]


def bucket_of(n: int) -> int:
    """The power-of-two bucket of an extent: the smallest ``2**e >= n``."""
    return 1 << max(0, (int(n) - 1).bit_length())


def shape_bucket(shape: dict[str, int]) -> str:
    """``K=1024,M=32,N=4096``: every symbol's extent rounded up to a power of two."""
    return ",".join(f"{k}={bucket_of(v)}" for k, v in sorted(shape.items()))


def append(path: str, records) -> None:
    with open(path, "a") as f:
        for r in records:
            f.write(r.to_json() + "\n")


def load(paths) -> list[TuningRecord]:
    """Every record of the files in ``paths`` (a path or a list of them)."""
    if isinstance(paths, str):
        paths = [paths]
    out = []
    for path in paths:
        if not os.path.isfile(path):
            raise UsageError(f"no such records file: {path}")
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    out.append(TuningRecord(**d))
                except (ValueError, TypeError) as e:
                    raise UsageError(f"{path}:{n}: not a tuning record ({e})") from None
    return out


def best(records, kernel: str, target: str, bucket: str | None = None) -> TuningRecord | None:
    """The fastest record of ``kernel`` on ``target`` in ``bucket`` (any bucket when
    None... then the largest bucket's best)."""
    mine = [r for r in records if r.kernel == kernel and r.target == target]
    if bucket is not None:
        mine = [r for r in mine if r.bucket == bucket]
    elif mine:
        top = max(mine, key=lambda r: sum(r.shape.values())).bucket
        mine = [r for r in mine if r.bucket == top]
    return min(mine, key=lambda r: r.seconds, default=None)


def options_from_records(kernel, target: str, paths, shape: dict[str, int] | None = None
                         ) -> dict[str, Any]:
    """The options of the best record for ``kernel`` on ``target`` at ``shape`` (its
    bucket), for ``polycomp.build(kernel, target, options)``; ``{}`` when none."""
    name = target if isinstance(target, str) else target.name
    r = best(load(paths), kernel_hash(kernel), name,
             shape_bucket(shape) if shape else None)
    return dict(r.config) if r else {}
