"""Trials as Ray tasks (``--workers local:N`` or ``ray://HOST:PORT``); Ray is an optional
extra (``pip install polycomp[tune]``).

Ray starts its workers with ``OMP_NUM_THREADS=1`` unless told otherwise, which would time
``parallel=True`` trials on one thread while the tuning process runs kernels on all of
its CPUs.  So every task gets the tuning process's thread count: the local Ray's workers
start with ``OMP_NUM_THREADS`` set to it (``runtime_env``), and each task sets it again in
its timing thread (``Backend.measure(..., threads)``) and reports the count it ran with,
which the tuner checks and records.
"""
from __future__ import annotations

from polycomp.errors import UsageError


def _measure_task(kernel, target, config, shape, repeat, threads):
    from .tune import safe_measure
    return safe_measure(kernel, target, config, shape, repeat, threads)


def run_remote(kernel, target, configs, shape, repeat, workers: str,
               threads: int | None = None):
    """Measure ``configs`` concurrently as Ray tasks, each with ``threads`` threads;
    results (:class:`~.space.Measurement`) in order."""
    try:
        import ray
    except ImportError:
        raise UsageError("--workers needs Ray: pip install 'polycomp[tune]'") from None
    env = {"env_vars": {"OMP_NUM_THREADS": str(threads)}} if threads else None
    if not ray.is_initialized():
        if workers.startswith("ray://"):
            ray.init(address=workers, log_to_driver=False, runtime_env=env)
        else:
            n = int(workers.split(":", 1)[1])
            ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, runtime_env=env)
    task = ray.remote(_measure_task)
    if env is not None:
        task = task.options(runtime_env=env)
    return ray.get([task.remote(kernel, target, c, shape, repeat, threads) for c in configs])
