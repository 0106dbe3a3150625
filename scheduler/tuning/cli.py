"""``polycomp tune`` and ``--records`` of compile/explain/run (registered by polycomp.cli)."""
from __future__ import annotations

import os
import time

from polycomp.errors import UsageError


def add_cli(sub, parents) -> None:
    t = sub.add_parser("tune", parents=parents, help="measure tile configurations, write "
                       "tuning records",
                       description="Tune a kernel on a CPU target at a shape: BUDGET measured "
                       "trials of the target's GEMM space (optuna TPE), the records appended "
                       "to --records (JSON lines).")
    t.add_argument("--shape", "-s", action="append", metavar="NAME=INT",
                   help="value of a symbolic dimension (repeatable, or N=64,M=32)")
    t.add_argument("--budget", type=int, default=64, help="measured trials (default 64)")
    t.add_argument("--repeat", type=int, default=5, help="timed runs per trial (best)")
    t.add_argument("--seed", type=int, default=0, help="sampler seed")
    t.add_argument("--workers", metavar="local:N|ray://HOST:PORT",
                   help="run trials as Ray tasks (optional extra polycomp[tune])")
    t.add_argument("--model", choices=("none", "analytic", "learned"), default="none",
                   help="rank the space by the cost model before measuring and measure "
                   "its top half of the budget first (learned: the analytic model "
                   "corrected by trees fitted on the --records file's trials; needs "
                   "scikit-learn, polycomp[tune])")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_tune)


def add_records_arg(parser) -> None:
    parser.add_argument("--records", metavar="FILE.jsonl",
                        help="tuning records: compile/explain/run use the fastest recorded "
                        "config of this kernel, target and shape bucket; tune appends to it")


def options_with_records(args, kernel, opts: dict) -> dict:
    """``opts`` over the best recorded config (the user's options win)."""
    path = getattr(args, "records", None)
    if not path:
        return opts
    from polycomp.cli import _parse_shapes

    from .records import options_from_records
    shape = _parse_shapes(getattr(args, "shape", None)) or None
    return {**options_from_records(kernel, args.target, path, shape), **opts}


def cmd_tune(args) -> int:
    from polycomp.cli import _compile_options, _parse_shapes, load_kernels, pick_kernel

    from .records import append
    from .tune import tune
    if args.budget < 1:
        raise UsageError(f"--budget takes N >= 1, got {args.budget}")
    _, kernels = load_kernels(args.file)
    kernel = pick_kernel(kernels, args.kernel, args.file)
    shape = _parse_shapes(args.shape)
    if _compile_options(args):
        raise UsageError("polycomp tune chooses the options itself: drop -O/--tile")
    bar = None
    if not args.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=args.budget, desc=f"tune {kernel.name}", unit="trial")

    def progress(n: int, best: float) -> None:
        if bar is not None:
            bar.update(n - bar.n)
            bar.set_postfix(best=f"{best * 1e3:.3f} ms")
    model = _cost_model(args, kernel)
    t0 = time.perf_counter()
    recs = tune(kernel, args.target, shape, args.budget, args.repeat, args.seed,
                args.workers, progress, model=model)
    if bar is not None:
        bar.close()
    best = min(recs, key=lambda r: r.seconds)
    default = recs[0].seconds
    print(f"kernel {kernel.name}, target {args.target}, bucket {best.bucket}: "
          f"{len(recs)} trials in {time.perf_counter() - t0:.1f} s")
    print(f"  default config: {default * 1e3:.3f} ms")
    print(f"  best config:    {best.seconds * 1e3:.3f} ms ({default / best.seconds:.2f}x) "
          f"{best.config}")
    if args.records:
        append(args.records, recs)
        print(f"  {len(recs)} records appended to {os.path.abspath(args.records)}")
    return 0


def _cost_model(args, kernel):
    """The ``--model`` of ``polycomp tune`` (None for ``none``)."""
    if args.model == "none":
        return None
    from polycomp.driver import compile_kernel
    from polycomp.hw.target import get_target

    from .cost_model import CostModel
    from .records import kernel_hash, load
    t = get_target(args.target)
    if t.kind != "c":
        raise UsageError(f"--model ranks the CPU space; {t.name} is not a CPU target")
    model = CostModel(t)
    if args.model == "learned":
        if not args.records or not os.path.isfile(args.records):
            raise UsageError("--model learned fits on earlier trials: give --records FILE "
                             "with measurements of this kernel on this target")
        model.fit_records(load(args.records), compile_kernel(kernel, t, {}).final_ir,
                          kernel_hash(kernel))
    return model


def explain_versions(args, kernel) -> str | None:
    """The multi-version plan of ``kernel`` from ``--records`` (for ``explain``): the
    versions with their guards and the rule (CPU); on a CUDA target the wave-model plan
    of :mod:`.cuda_versions` when the kernel is a Tensor Core GEMM."""
    if not getattr(args, "records", None):
        return None
    from polycomp.driver import compile_kernel
    from polycomp.hw.target import get_target

    from .multiversion import explain_plan, plan_versions
    from .records import kernel_hash, load
    t = get_target(args.target)
    if t.kind == "cuda":
        from .cuda_versions import explain_cuda_plan
        return explain_cuda_plan(kernel, t, load(args.records))
    try:
        func = compile_kernel(kernel, t, {}).final_ir if t.kind == "c" else None
        sym, versions = plan_versions(load(args.records), kernel_hash(kernel), t.name,
                                      func, t if func is not None else None)
    except UsageError as e:
        return f"no multi-version plan: {e}"
    return explain_plan(kernel.name, t.name, sym, versions, one_object=func is not None)
