"""``polycomp tune``: try configurations of the space the target's backend offers for a
kernel at a shape, and write tuning records.

The backend says what to try (``Backend.tuning_space``: only knobs that change this
kernel's code; nothing to tune is a clear error) and how a trial is timed
(``Backend.measure``); this module searches.  Search: optuna's TPE sampler, asked for one
point of the space at a time through conditional parameters (:func:`suggest`: each knob
of the points' ``knobs()`` in order, among the values the earlier choices leave), so
every trial is a valid point.  Trial 0 is the compiler's default configuration, measured
in this process (a failure there is the kernel's own error, raised); every other trial's
output is compared with its output.  A space the backend ranks by a model instead
(``measured=False``: CUDA without a GPU) gives one record of the model's choice.

With ``workers="local:N"`` (or ``ray://host:port``) trials run as Ray tasks in batches
of N (``local:N`` starts a local Ray; timings of concurrent trials share the machine, so
use it for throughput, not for final figures).  Every trial runs with the thread count
this process runs kernels with (the space's ``threads``), remote ones too, and each
record carries the count it ran with (:mod:`.records`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from polycomp.errors import PolycompError, UsageError

from .records import TuningRecord, kernel_hash, shape_bucket
from .space import CpuPoint, GemmShape, Measurement, TuningPoint, TuningSpace


def gemm_shape(func, shape: dict[str, int]) -> GemmShape:
    """The ``(M, N, K)`` the CPU space is capped by and the cost model reads
    (:func:`.cost_model.gemm_dims`)."""
    from .cost_model import gemm_dims
    return gemm_dims(func, shape)


def check_shape(func, shape: Mapping[str, int], kernel_name: str) -> None:
    """``shape`` must bind exactly the kernel's size symbols, each to an extent >= 1
    (checked before any trial: an unbound or unknown symbol is the user's error, not a
    failed configuration)."""
    names = [p.name for p in func.params]
    unknown = sorted(set(shape) - set(names))
    if unknown:
        raise UsageError(f"--shape binds {', '.join(unknown)}, which kernel {kernel_name} "
                         f"has no size symbol of (its symbols: {', '.join(names) or 'none'})")
    missing = [n for n in names if n not in shape]
    if missing:
        raise UsageError(f"--shape must bind every size symbol of kernel {kernel_name}: "
                         f"missing {', '.join(missing)} (e.g. --shape "
                         f"{','.join(f'{n}=64' for n in names)})")
    bad = [f"{n}={v}" for n, v in shape.items() if int(v) < 1]
    if bad:
        raise UsageError(f"--shape: every extent must be >= 1, got {', '.join(bad)}")


def measure_config(kernel, target, config: dict, shape: Mapping[str, int], repeat: int,
                   threads: int | None = None, seed: int = 0) -> Measurement:
    """Compile ``kernel`` with ``config`` and time it on random inputs through the
    target's backend (``Backend.measure``)."""
    from polycomp.driver import compile_kernel
    from polycomp.kernel_files import random_inputs
    ck = compile_kernel(kernel, target, config)
    arrays = random_inputs(ck.final_ir, dict(shape), seed)
    return ck.backend.measure(ck, arrays, dict(shape), repeat, threads)


def safe_measure(kernel, target, config, shape, repeat, threads: int | None = None
                 ) -> Measurement:
    """:func:`measure_config`, with a configuration that fails to build or run a failed
    trial (``seconds`` inf, no outputs)."""
    try:
        return measure_config(kernel, target, config, shape, repeat, threads)
    except PolycompError:
        return Measurement(float("inf"), (), None)


def _close(a, b) -> bool:
    return all(np.allclose(x, y, rtol=1e-3, atol=1e-3 * max(1.0, float(np.max(np.abs(y)))))
               for x, y in zip(a, b))


def _param(name: str, vals: list) -> str:
    """The optuna parameter of knob ``name`` among ``vals`` (one distribution per name)."""
    return f"{name}|{'/'.join(str(v) for v in vals)}"


def suggest(trial, points: list[TuningPoint]) -> TuningPoint:
    """Pick a point of ``points`` through conditional parameters (define-by-run): each
    knob in order among the values the earlier choices leave (a knob with one value
    left is no parameter)."""
    cand = list(points)
    for k in range(len(cand[0].knobs())):
        vals = sorted({p.knobs()[k][1] for p in cand})
        if len(vals) > 1:
            v = trial.suggest_categorical(_param(cand[0].knobs()[k][0], vals), vals)
            cand = [p for p in cand if p.knobs()[k][1] == v]
    return cand[0]


def point_params(point: TuningPoint, points: list[TuningPoint]) -> dict[str, Any]:
    """The parameters :func:`suggest` would draw to reach ``point`` (for optuna's
    ``enqueue_trial``: the model's picks are trials TPE learns from)."""
    params: dict[str, Any] = {}
    cand = list(points)
    for k, (name, value) in enumerate(point.knobs()):
        vals = sorted({p.knobs()[k][1] for p in cand})
        if len(vals) > 1:
            params[_param(name, vals)] = value
        cand = [p for p in cand if p.knobs()[k][1] == value]
    return params


def _run_trials(kernel, target, configs, shape, repeat, workers, threads):
    if not workers:
        return [safe_measure(kernel, target, c, shape, repeat, threads) for c in configs]
    from .distributed import run_remote
    return run_remote(kernel, target, configs, shape, repeat, workers, threads)


def tune(kernel, target: str, shape: dict[str, int], budget: int = 64, repeat: int = 5,
         seed: int = 0, workers: str | None = None,
         progress: Callable[[int, float], None] | None = None,
         model=None, model_share: float = 0.5,
         on_space: Callable[[TuningSpace], None] | None = None) -> list[TuningRecord]:
    """Tune ``kernel`` at ``shape``: ``budget`` trials (the default config first);
    returns one record per trial (failed ones have ``seconds == inf``).  ``on_space`` is
    called with the space the backend offered before the first trial.

    ``model`` (a :class:`.cost_model.CostModel`, CPU GEMM spaces): the space is ranked
    by it before measuring and its top ``model_share`` of the budget is measured first
    (enqueued in the optuna study, so TPE learns from them); TPE proposes the rest."""
    from polycomp.driver import compile_kernel
    from polycomp.hw.target import get_target
    t = get_target(target)
    ck = compile_kernel(kernel, t)
    check_shape(ck.final_ir, shape, kernel.name)
    batch = _batch_size(workers)
    space = ck.backend.tuning_space(ck, shape)
    if on_space is not None:
        on_space(space)
    if not space.points:
        raise UsageError(f"nothing to tune for kernel {kernel.name} on {t.name}: "
                         f"{space.about}")
    khash, bucket = kernel_hash(kernel), shape_bucket(shape)
    if not space.measured:                  # the model's choice, e.g. CUDA without a GPU
        if space.model is None:
            raise UsageError(f"{t.name}: the tuning space is neither measured nor modelled")
        sec, p = space.model()[0]
        recs = [TuningRecord(khash, t.name, bucket, p.options(), sec, dict(shape),
                             space.model_name)]
        if progress:
            progress(len(recs), recs[0].seconds)
        return recs
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    points = list(space.points)
    queue = []
    if model is not None:
        if not all(isinstance(p, CpuPoint) for p in points):
            raise UsageError(f"the cost model ranks the CPU GEMM space; kernel {kernel.name} "
                             f"on {t.name} has none ({space.about})")
        n_model = min(len(points), int(math.ceil((budget - 1) * model_share)))
        g = gemm_shape(ck.final_ir, shape)
        queue = [point_params(p, points) for p in model.rank(points, g)[:n_model]]
    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=seed))
    for params in queue:
        study.enqueue_trial(params, skip_if_exists=True)
    m0 = measure_config(kernel, t, {}, shape, repeat, space.threads)   # errors: raised
    ref = m0.outputs
    records = [TuningRecord(khash, t.name, bucket, {}, m0.seconds, dict(shape),
                            threads=m0.threads)]
    if progress:
        progress(1, m0.seconds)
    while len(records) < budget:
        n = min(batch, budget - len(records))
        trials = [study.ask() for _ in range(n)]
        pts = [suggest(tr, points) for tr in trials]
        configs = [p.options() for p in pts]
        results = _run_trials(kernel, t.name, configs, shape, repeat, workers, space.threads)
        for tr, cfg, m in zip(trials, configs, results):
            sec = m.seconds
            if not m.outputs or not _close(m.outputs, ref):
                sec = float("inf")
            elif m.threads != m0.threads:
                raise UsageError(f"a trial ran with {m.threads} threads where this process "
                                 f"runs kernels with {m0.threads}: its time is not "
                                 f"comparable (set OMP_NUM_THREADS the same for workers)")
            study.tell(tr, sec if np.isfinite(sec) else 1e9)
            records.append(TuningRecord(khash, t.name, bucket, cfg, sec, dict(shape),
                                        threads=m0.threads if m.threads is None
                                        else m.threads))
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
