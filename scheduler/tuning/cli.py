"""``polycomp tune`` and ``--records`` of compile/explain/run (registered by polycomp.cli)."""
from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings

from polycomp.errors import UsageError

from .records import TuningRecordWarning


@contextlib.contextmanager
def record_warnings_as_lines():
    """Print :class:`TuningRecordWarning` s (skipped lines, records that do not apply) as
    ``warning: ...`` lines on stderr, the CLI's form; other warnings pass through."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TuningRecordWarning)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, TuningRecordWarning):
                    print(f"warning: {str(w.message).removeprefix('polycomp: ')}",
                          file=sys.stderr)
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def add_cli(sub, parents) -> None:
    t = sub.add_parser("tune", parents=parents, help="measure tile configurations, write "
                       "tuning records",
                       description="Tune a kernel at a shape: BUDGET trials of the space "
                       "the target offers for it (its knobs that change this kernel's code; "
                       "CPU: measured, optuna TPE; CUDA: the wave model's choice), the "
                       "records appended to --records (JSON lines).")
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
    from polycomp.kernel_files import parse_shapes

    from .records import options_from_records
    shape = parse_shapes(getattr(args, "shape", None)) or None
    with record_warnings_as_lines():
        recorded = options_from_records(kernel, args.target, path, shape)
    return {**recorded, **opts}


def cmd_tune(args) -> int:
    from polycomp.kernel_files import compile_options, load_kernels, parse_shapes, pick_kernel

    from .tune import tune
    if args.budget < 1:
        raise UsageError(f"--budget takes N >= 1, got {args.budget}")
    _, kernels = load_kernels(args.file)
    kernel = pick_kernel(kernels, args.kernel, args.file)
    shape = parse_shapes(args.shape)
    if compile_options(args):
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
    spaces: list = []
    try:
        recs = tune(kernel, args.target, shape, args.budget, args.repeat, args.seed,
                    args.workers, progress, model=model, on_space=spaces.append)
    finally:
        if bar is not None:
            bar.close()
    print(f"kernel {kernel.name}, target {recs[0].target}, bucket {recs[0].bucket}: "
          f"{len(recs)} trials in {time.perf_counter() - t0:.1f} s")
    print(f"  space: {spaces[0].about} ({len(spaces[0].points)} points)")
    ok = [r for r in recs if r.ok]
    if not spaces[0].measured:                      # the model's choice (CUDA, no GPU)
        r = recs[0]
        print(f"  model's choice: {r.seconds * 1e3:.3f} ms predicted ({r.machine}) "
              f"{r.config}")
    else:
        best = min(ok, key=lambda r: r.seconds)
        default = recs[0].seconds
        print(f"  default config: {default * 1e3:.3f} ms")
        print(f"  best config:    {best.seconds * 1e3:.3f} ms "
              f"({default / best.seconds:.2f}x) {best.config}")
        failed = len(recs) - len(ok)
        if failed:
            print(f"  {failed} trials failed (build error or output differing from the "
                  f"default config's)")
        if recs[0].threads:
            print(f"  threads: {recs[0].threads} (OpenMP; recorded with every trial)")
    if args.records:
        from .records import append
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
    if t.cpu is None:
        raise UsageError(f"--model ranks the CPU GEMM space; {t.name} has no CPU "
                         f"machine description")
    model = CostModel(t)
    if args.model == "learned":
        if not args.records or not os.path.isfile(args.records):
            raise UsageError("--model learned fits on earlier trials: give --records FILE "
                             "with measurements of this kernel on this target")
        with record_warnings_as_lines():
            records = load(args.records)
        model.fit_records(records, compile_kernel(kernel, t, {}).final_ir, kernel_hash(kernel))
    return model


def explain_versions(args, kernel) -> str | None:
    """The multi-version plan of ``kernel`` from ``--records`` (for ``explain``): the
    plan the target's backend makes of them (``Backend.version_plan``: measured records
    by bucket guards, CUDA model records by the wave model), its versions and rule."""
    if not getattr(args, "records", None):
        return None
    from polycomp.driver import compile_kernel
    from polycomp.hw.target import get_target

    from .multiversion import guard_plan
    from .records import load
    t = get_target(args.target)
    ck = compile_kernel(kernel, t, {})
    try:
        with record_warnings_as_lines():
            records = load(args.records)
        plan = ck.backend.version_plan(kernel, t, records, ck.final_ir) or \
            guard_plan(kernel, t, records, ck.final_ir)
    except UsageError as e:
        return f"no multi-version plan: {e}"
    return plan.explain(kernel.name, t.name)
