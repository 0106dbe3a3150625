"""Trials as Ray tasks (``--workers local:N`` or ``ray://HOST:PORT``); Ray is an optional
extra (``pip install polycomp[tune]``)."""
from __future__ import annotations

from polycomp.errors import UsageError


def _measure_task(kernel, target, config, shape, repeat):
    from .tune import safe_measure
    return safe_measure(kernel, target, config, shape, repeat)


def run_remote(kernel, target, configs, shape, repeat, workers: str):
    """Measure ``configs`` concurrently as Ray tasks; results in order."""
    try:
        import ray
    except ImportError:
        raise UsageError("--workers needs Ray: pip install 'polycomp[tune]'") from None
    if not ray.is_initialized():
        if workers.startswith("ray://"):
            ray.init(address=workers, log_to_driver=False)
        else:
            n = int(workers.split(":", 1)[1])
            ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
    task = ray.remote(_measure_task)
    return ray.get([task.remote(kernel, target, c, shape, repeat) for c in configs])
