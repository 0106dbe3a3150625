"""Tuning records: one JSON object per line (kernel hash, target, shape bucket, config,
measured seconds, machine, threads); files from several machines merge by concatenation
(``cat a.jsonl b.jsonl > all.jsonl``) and lookups take the fastest record of a key.

Every line written is JSON (RFC 8259): a failed trial's time is ``null``, never
``Infinity``.  Reading checks every field's type; a line that is not a record (bad JSON,
bytes that are not UTF-8, a field of the wrong type, a NaN or negative time) is skipped
with a :class:`TuningRecordWarning` naming the file and line, so one damaged line of a
merged file does not discard the others.

``threads`` is the OpenMP thread count the trial ran with (None: not a CPU
measurement, or a record written before polycomp recorded it).  Records with different
thread counts are never compared: lookups take the records of the thread count the
kernel will run with (:func:`wanted_threads`).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from polycomp.errors import UsageError


class TuningRecordWarning(UserWarning):
    """A records file had a line that is not a tuning record, or no record applied."""


@dataclass(frozen=True)
class TuningRecord:
    kernel: str            # kernel_hash()
    target: str
    bucket: str            # shape_bucket()
    config: dict[str, Any]
    seconds: float         # inf: the trial failed (written as null)
    shape: dict[str, int] = field(default_factory=dict)
    machine: str = field(default_factory=lambda: machine_id())
    threads: int | None = None

    def to_json(self) -> str:
        d = asdict(self)
        if not math.isfinite(self.seconds):
            d["seconds"] = None
        if self.threads is None:
            del d["threads"]
        return json.dumps(d, sort_keys=True, allow_nan=False)

    @property
    def ok(self) -> bool:
        """A successful trial (a finite time)."""
        return math.isfinite(self.seconds)


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
    """A hash of the kernel's structure: its polyhedral model's statements, domains and
    accesses as text, not its Python object.  The dependences are left out: they follow
    from the rest, and how isl writes them (coalesced or not) is no property of the
    kernel, so records stay valid when the dependence analysis changes."""
    return hashlib.sha256(kernel.polyhedral_model().text(dependences=False).encode()
                          ).hexdigest()[:16]


def bucket_of(n: int) -> int:
    """The power-of-two bucket of an extent: the smallest ``2**e >= n``."""
    return 1 << max(0, (int(n) - 1).bit_length())


def shape_bucket(shape: dict[str, int]) -> str:
    """``K=1024,M=32,N=4096``: every symbol's extent rounded up to a power of two."""
    return ",".join(f"{k}={bucket_of(v)}" for k, v in sorted(shape.items()))


def append(path: str, records) -> None:
    lines = [r.to_json() + "\n" for r in records]     # all serialised before writing
    with open(path, "a") as f:
        f.writelines(lines)


_FIELDS = {f for f in TuningRecord.__dataclass_fields__}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def record_of(d) -> TuningRecord:
    """The record of one parsed JSON line; ValueError naming what is wrong."""
    if not isinstance(d, dict):
        raise ValueError(f"a JSON {type(d).__name__}, not an object")
    missing = [k for k in ("kernel", "target", "bucket", "config", "seconds") if k not in d]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    unknown = sorted(set(d) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown fields {', '.join(unknown)}")
    for k in ("kernel", "target", "bucket", "machine"):
        if k in d and not isinstance(d[k], str):
            raise ValueError(f"{k} is {d[k]!r}, not a string")
    if not isinstance(d["config"], dict) or not all(isinstance(k, str) for k in d["config"]):
        raise ValueError(f"config is {d['config']!r}, not an object of options")
    sec = d["seconds"]
    if sec is None:
        sec = math.inf                       # a failed trial
    elif isinstance(sec, bool) or not isinstance(sec, (int, float)):
        raise ValueError(f"seconds is {sec!r}, not a number")
    elif math.isnan(sec) or sec < 0:
        raise ValueError(f"seconds is {sec!r}, not a time")
    shape = d.get("shape", {})
    if not isinstance(shape, dict) or not all(isinstance(k, str) and _is_int(v)
                                              for k, v in shape.items()):
        raise ValueError(f"shape is {shape!r}, not an object of integer sizes")
    threads = d.get("threads")
    if threads is not None and (not _is_int(threads) or threads < 1):
        raise ValueError(f"threads is {threads!r}, not a thread count")
    return TuningRecord(d["kernel"], d["target"], d["bucket"], dict(d["config"]),
                        float(sec), dict(shape), d.get("machine", ""), threads)


def load(paths) -> list[TuningRecord]:
    """Every record of the files in ``paths`` (a path or a list of them); lines that are
    not records are skipped with a :class:`TuningRecordWarning` naming file and line."""
    if isinstance(paths, str):
        paths = [paths]
    out = []
    for path in paths:
        if not os.path.isfile(path):
            raise UsageError(f"no such records file: {path}")
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise UsageError(f"cannot read records file {path}: {e.strerror}") from None
        for n, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                out.append(record_of(json.loads(line.decode("utf-8"))))
            except UnicodeDecodeError as e:
                _skip(path, n, f"not UTF-8 text at byte {e.start + 1}")
            except json.JSONDecodeError as e:
                _skip(path, n, f"not JSON ({e.msg}, column {e.colno})")
            except (ValueError, TypeError) as e:
                _skip(path, n, str(e))
    return out


def _skip(path: str, line: int, why: str) -> None:
    warnings.warn(f"polycomp: {path}:{line}: not a tuning record, skipped ({why})",
                  TuningRecordWarning, stacklevel=3)


def wanted_threads(target) -> int | None:
    """The thread count kernels of ``target`` run with in this process (a CPU target's
    ``cpu.threads``: ``OMP_NUM_THREADS`` or the CPUs it may use); None elsewhere."""
    return target.cpu.threads if getattr(target, "cpu", None) is not None else None


def same_threads(r: TuningRecord, threads: int | None) -> bool:
    """Whether ``r`` was measured with ``threads`` (records without a thread count
    predate the field and match any)."""
    return r.threads is None or threads is None or r.threads == threads


def best(records, kernel: str, target: str, bucket: str | None = None,
         threads: int | None = None) -> TuningRecord | None:
    """The fastest successful record of ``kernel`` on ``target`` in ``bucket`` measured
    with ``threads`` (any bucket when None: then the largest bucket's best)."""
    mine = [r for r in records if r.kernel == kernel and r.target == target and r.ok
            and same_threads(r, threads)]
    if bucket is not None:
        mine = [r for r in mine if r.bucket == bucket]
    elif mine:
        top = max(mine, key=lambda r: sum(r.shape.values())).bucket
        mine = [r for r in mine if r.bucket == top]
    return min(mine, key=lambda r: r.seconds, default=None)


def why_none(records, kernel: str, target: str, bucket: str | None,
             threads: int | None) -> str:
    """Why :func:`best` found nothing: how many records are of other kernels, targets,
    buckets or thread counts, or failed."""
    if not records:
        return "the file has no records"
    counts = {"of other kernels": 0, "of other targets": 0, "of other buckets": 0,
              "measured with another thread count": 0, "of failed trials": 0}
    for r in records:
        if r.kernel != kernel:
            counts["of other kernels"] += 1
        elif r.target != target:
            counts["of other targets"] += 1
        elif bucket is not None and r.bucket != bucket:
            counts["of other buckets"] += 1
        elif not same_threads(r, threads):
            counts["measured with another thread count"] += 1
        elif not r.ok:
            counts["of failed trials"] += 1
    parts = [f"{n} {what}" for what, n in counts.items() if n]
    return f"{len(records)} records: " + ", ".join(parts)


def options_from_records(kernel, target, paths, shape: dict[str, int] | None = None
                         ) -> dict[str, Any]:
    """The options of the best record for ``kernel`` on ``target`` at ``shape`` (its
    bucket), measured with the thread count this process runs kernels with, for
    ``polycomp.build(kernel, target, options)``; ``{}`` (the default configuration, with a
    :class:`TuningRecordWarning` saying why) when none applies."""
    from polycomp.hw.target import get_target
    t = get_target(target)
    threads = wanted_threads(t)
    records = load(paths)
    khash = kernel_hash(kernel)
    bucket = shape_bucket(shape) if shape else None
    r = best(records, khash, t.name, bucket, threads)
    if r is None:
        where = ", ".join([paths] if isinstance(paths, str) else list(paths))
        at = f" at bucket {bucket}" if bucket else ""
        th = f" with {threads} threads" if threads else ""
        warnings.warn(f"polycomp: no tuning record in {where} applies to kernel "
                      f"{kernel.name} ({khash}) on {t.name}{at}{th} "
                      f"({why_none(records, khash, t.name, bucket, threads)}); using the "
                      f"default configuration", TuningRecordWarning, stacklevel=2)
        return {}
    return dict(r.config)
