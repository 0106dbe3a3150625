"""``polycomp tune``: measure configurations of the CPU GEMM space on this machine and
write tuning records.

Search: optuna's TPE sampler, asked for one point of :func:`~.space.cpu_space` at a time
through conditional parameters (packing, parallel, register block, then ``KC``, ``NC``,
``MC`` among the values valid for the earlier choices), so every trial is a valid point.
Trial 0 is the compiler's default configuration; every trial's output is compared with
its output.  With ``workers="local:N"`` (or ``ray://host:port``) trials run as Ray tasks
in batches of N (``local:N`` starts a local Ray; timings of concurrent trials share the
machine, so use it for throughput, not for final figures).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from polycomp.errors import UsageError

from .records import TuningRecord, kernel_hash, shape_bucket
from .space import CpuPoint, GemmShape, cpu_space


@dataclass(frozen=True)
class TrialResult:
    config: dict[str, Any]
    seconds: float           # inf: the configuration failed (build error or wrong output)
    label: str


def gemm_shape(func, shape: dict[str, int]) -> GemmShape:
    """The ``(M, N, K)`` the space is capped by and the cost model reads
    (:func:`.cost_model.gemm_dims`)."""
    from .cost_model import gemm_dims
    return gemm_dims(func, shape)


def measure(kernel, target: str, config: dict, shape: dict[str, int], repeat: int = 5,
            seed: int = 0):
    """(best seconds of ``repeat`` runs, outputs) of ``kernel`` built with ``config``."""
    from polycomp.cli import random_inputs
    from polycomp.driver import compile_kernel
    ck = compile_kernel(kernel, target, config)
    f = ck.backend.load(ck)
    arrays = random_inputs(ck.final_ir, shape, seed)
    out = f(*arrays, **shape)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*arrays, **shape)
        best = min(best, time.perf_counter() - t0)
    return best, out if isinstance(out, tuple) else (out,)


def _close(a, b) -> bool:
    return all(np.allclose(x, y, rtol=1e-3, atol=1e-3 * max(1.0, float(np.max(np.abs(y)))))
               for x, y in zip(a, b))


def suggest(trial, points: list[CpuPoint]) -> CpuPoint:
    """Pick a point of ``points`` through conditional parameters (define-by-run)."""
    pack = trial.suggest_categorical("packing", sorted({p.packing for p in points}))
    par = trial.suggest_categorical("parallel", [False, True])
    cand = [p for p in points if p.packing == pack and p.parallel == par]
    if not pack:
        return cand[0]
    regs = sorted({f"{p.MR}x{p.NI}" for p in cand})
    reg = trial.suggest_categorical("reg", regs)
    cand = [p for p in cand if f"{p.MR}x{p.NI}" == reg]
    for knob in ("KC", "NC", "MC"):
        vals = sorted({getattr(p, knob) for p in cand})
        v = trial.suggest_categorical(f"{knob}|{reg}|{len(vals)}|{vals[0]}-{vals[-1]}", vals)
        cand = [p for p in cand if getattr(p, knob) == v]
    return cand[0]


def point_params(point: CpuPoint, points: list[CpuPoint]) -> dict[str, Any]:
    """The parameters :func:`suggest` would draw to reach ``point`` (for optuna's
    ``enqueue_trial``: the model's picks are trials TPE learns from)."""
    params: dict[str, Any] = {"packing": point.packing, "parallel": point.parallel}
    if not point.packing:
        return params
    cand = [p for p in points if p.packing and p.parallel == point.parallel]
    reg = f"{point.MR}x{point.NI}"
    params["reg"] = reg
    cand = [p for p in cand if f"{p.MR}x{p.NI}" == reg]
    for knob in ("KC", "NC", "MC"):
        vals = sorted({getattr(p, knob) for p in cand})
        params[f"{knob}|{reg}|{len(vals)}|{vals[0]}-{vals[-1]}"] = getattr(point, knob)
        cand = [p for p in cand if getattr(p, knob) == getattr(point, knob)]
    return params


def safe_measure(kernel, target, config, shape, repeat):
    """:func:`measure`, with a configuration that fails to build a failed trial."""
    from polycomp.errors import PolycompError
    try:
        return measure(kernel, target, config, shape, repeat)
    except PolycompError:
        return float("inf"), ()


def _run_trials(kernel, target, configs, shape, repeat, workers):
    if not workers:
        return [safe_measure(kernel, target, c, shape, repeat) for c in configs]
    from .distributed import run_remote
    return run_remote(kernel, target, configs, shape, repeat, workers)


def tune(kernel, target: str, shape: dict[str, int], budget: int = 64, repeat: int = 5,
         seed: int = 0, workers: str | None = None,
         progress: Callable[[int, float], None] | None = None,
         model=None, model_share: float = 0.5) -> list[TuningRecord]:
    """Tune ``kernel`` at ``shape``: ``budget`` measured trials (the default config
    first); returns one record per trial (failed ones have ``seconds == inf``).

    ``model`` (a :class:`.cost_model.CostModel`): the space is ranked by it before
    measuring and its top ``model_share`` of the budget is measured first (enqueued in
    the optuna study, so TPE learns from them); TPE proposes the rest."""
    import optuna

    from polycomp.driver import compile_kernel
    from polycomp.hw.target import get_target
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t = get_target(target)
    if t.kind == "cuda":             # no GPU measured here: the model's choice
        from .cuda_versions import model_records
        recs = model_records(kernel, t, shape)
        if progress:
            progress(len(recs), recs[0].seconds)
        return recs
    if t.kind != "c":
        raise UsageError(f"polycomp tune measures CPU targets and ranks CUDA ones; "
                         f"{target} is neither")
    ck = compile_kernel(kernel, t)
    points = cpu_space(t, gemm_shape(ck.final_ir, shape))
    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    queue = []
    if model is not None:
        n_model = min(len(points), int(math.ceil((budget - 1) * model_share)))
        queue = [point_params(p, points)
                 for p in model.rank(points, gemm_shape(ck.final_ir, shape))[:n_model]]
    khash, bucket = kernel_hash(kernel), shape_bucket(shape)
    records: list[TuningRecord] = []
    ref = None
    batch = _batch_size(workers)
    seen: dict[CpuPoint, float] = {}
    while len(records) < budget:
        n = min(batch, budget - len(records))
        trials = []
        for _ in range(n):
            trials.append(study.ask())
            for params in queue:      # after the default trial: the model's picks first
                study.enqueue_trial(params, skip_if_exists=True)
            queue = []
        pts = [None if not records and i == 0 else suggest(tr, points)
               for i, tr in enumerate(trials)]
        configs = [{} if p is None else p.options() for p in pts]
        results = _run_trials(kernel, target, configs, shape, repeat, workers)
        for tr, p, cfg, (sec, out) in zip(trials, pts, configs, results):
            if ref is None:
                ref = out
            elif not _close(out, ref):
                sec = float("inf")
            if p is not None:
                seen[p] = sec
            study.tell(tr, sec if np.isfinite(sec) else 1e9)
            records.append(TuningRecord(khash, t.name, bucket, cfg, sec, dict(shape)))
            if progress:
                progress(len(records), min(r.seconds for r in records))
    return records


def _batch_size(workers: str | None) -> int:
    if not workers:
        return 1
    if workers.startswith("local:"):
        try:
            n = int(workers.split(":", 1)[1])
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"--workers local:N takes N >= 1, got {workers!r}")
        return n
    if workers.startswith("ray://"):
        return 4
    raise UsageError(f"--workers takes local:N or ray://HOST:PORT, got {workers!r}")
