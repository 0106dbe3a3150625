"""The ``polycomp`` command line.

``polycomp compile FILE.py``  compile a @tensor_expr kernel of FILE.py to CUDA or C source
``polycomp explain FILE.py``  print the polyhedral model, the output of every step (schedule
                              passes, lowering, IR passes, emission) with its time
                              and notes
``polycomp run FILE.py``      run a kernel on random inputs and compare it with a reference
``polycomp bench SUITE ...``  run a benchmark suite (``polycomp.benchmarks.<SUITE>.main``)
``polycomp targets``          list the registered targets: memory hierarchy, compute
                              units, options
``polycomp cache info|clear`` show or empty the kernel cache (:mod:`polycomp.cache`)
``polycomp tune FILE.py``     measure tile configurations on a CPU target and write tuning
                              records (``--records``, reused by compile/explain/run)

Every :class:`~polycomp.errors.PolycompError` is printed as ``error: <message>`` followed by
the user's source line, with exit status 2 (``--traceback`` shows the Python traceback).
``run`` exits with status 1 when an output differs from the reference by more than the
tolerance.  Anything else escaping is a polycomp bug: it is reported as an internal error
with exit status 3.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
import traceback
from typing import Any

import numpy as np

from polycomp.errors import PolycompError, UnknownSymbolError, UsageError
from polycomp.kernel_files import (
    check_run_memory,
    find_kernels,
    load_kernels,
    load_module,
    pick_kernel,
    random_inputs,
)
from polycomp.kernel_files import compile_options as _compile_options
from polycomp.kernel_files import parse_shapes as _parse_shapes

__all__ = ["main", "load_module", "find_kernels", "pick_kernel", "random_inputs", "compare"]


def _target_names() -> list[str]:
    from polycomp.hw.registry import backends
    return [n for b in backends() for n in (*b.names, *b.aliases)]

# Tolerances of `polycomp run`: an output passes when
#   max |out - ref| <= tol * max(1, max |ref|)
# (a norm-wise relative bound, robust to reference entries near zero).
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2,
             "int8": 0.0, "int32": 0.0, "int64": 0.0, "bool": 0.0}


# --------------------------------------------------------------------------- user files


# --------------------------------------------------------------------------- options
def _arg_count(text: str) -> int:
    """argparse type: an integer >= 1 (--repeat)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"takes an integer >= 1, got {text!r}")
    return n


def _arg_seed(text: str) -> int:
    """argparse type: an integer >= 0 (--seed; numpy's generators take no negative seed)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes an integer >= 0, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"takes an integer >= 0, got {text!r}")
    return n


def _arg_tolerance(text: str) -> float:
    """argparse type: a finite number >= 0 (--tol)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a number >= 0, got {text!r}") from None
    if not (x >= 0 and x != float("inf")):
        raise argparse.ArgumentTypeError(f"takes a finite number >= 0, got {text!r}")
    return x



def _compile(args, dump: bool = False):
    from polycomp.driver import compile_kernel
    mod, kernels = load_kernels(args.file)
    kernel = pick_kernel(kernels, args.kernel, args.file)
    from polycomp.scheduler.tuning.cli import options_with_records
    opts = options_with_records(args, kernel, _compile_options(args))
    ck = compile_kernel(kernel, args.target, opts,
                        debug=getattr(args, "debug", False), dump=dump,
                        dump_dir=getattr(args, "dump_dir", None))
    return mod, kernels, kernel, ck


# --------------------------------------------------------------------------- compile


def _check_output_path(out: str) -> None:
    """Reject ``-o`` values that cannot name the output file, before compiling."""
    if out.endswith(("/", os.sep)) or os.path.isdir(out):
        raise UsageError(f"-o {out}: is a directory; -o takes the output file's name "
                         f"(e.g. {os.path.join(out, 'kernel.c')}), or '-' for stdout")


def _write_output(out: str, text: str) -> None:
    """Write ``text`` to ``out`` (creating its folder); an OS error is a UsageError."""
    try:
        parent = os.path.dirname(out)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"-o {out}: cannot write the output file: "
                         f"{e.strerror or type(e).__name__}") from None


def cmd_compile(args) -> int:
    if args.output not in (None, "-"):
        _check_output_path(args.output)
    _, _, kernel, ck = _compile(args)
    if args.output == "-":
        sys.stdout.write(ck.source)
        return 0
    out = args.output or os.path.join("build", kernel.name + ck.suffix())
    _check_output_path(out)
    _write_output(out, ck.source)
    print(f"wrote {out} (kernel {kernel.name}, target {ck.target.name}, "
          f"{ck.source.count(chr(10))} lines)")
    if args.check:
        print(_check_source(out, ck))
    return 0


def _check_source(path: str, ck) -> str:
    """Compile the emitted file with the target's compiler (nvcc -cubin with ptxas
    resource usage, gcc -c)."""
    return ck.backend.check(path, ck)


# --------------------------------------------------------------------------- explain


def cmd_explain(args) -> int:
    from polycomp.graph.explain import explain_file  # a file of graphs: their partitions
    if explain_file(args.file, sys.stdout.write, getattr(args, "dump_dir", None)):
        return 0
    _, _, kernel, ck = _compile(args, dump=True)
    w = sys.stdout.write
    w(f"=== polyhedral model of {kernel.name} ===\n{ck.model}\n\n")
    w(f"=== steps for target {ck.target.name} ===\n")
    notes = {k: list(v) for k, v in (ck.notes or {}).items()}
    headers = {"model": "polyhedral model", "schedule": "schedule passes",
               "lower": "lowering (isl AST -> IR)", "ir": "IR passes",
               "codegen": "code-generation passes",
               "target": "target IR (the lowering to the backend's own IR, its passes)",
               "emit": "emission"}
    stage = None
    for r in ck.records:
        if r.stage != stage:
            stage = r.stage
            w(f"\n##### {headers.get(stage, stage)} #####\n")
        if r.stage == "model":
            w(f"\n--- {r.name} built ({r.seconds * 1e3:.2f} ms): printed above ---\n")
            continue
        if r.stage == "emit":
            w(f"\n--- {r.name} ({r.seconds * 1e3:.2f} ms): {len(r.tree or '')} characters"
              f"{'' if args.source else ' (--source prints them)'} ---\n")
            if args.source:
                w(f"\n=== {ck.target.name} source ===\n{r.tree}")
            continue
        w(f"\n--- after {r.name} ({r.seconds * 1e3:.2f} ms) ---\n")
        w((r.tree or "(output not recorded)").rstrip("\n") + "\n")
        for n in notes.pop(r.name, ()):
            w(f"note [{r.name}]: {n}\n")
    for name, items in notes.items():
        for n in items:
            w(f"note [{name}]: {n}\n")
    total = sum(r.seconds for r in ck.records)
    w("\n--- step times ---\n")
    for r in ck.records:
        w(f"  {r.stage:9s} {r.name:28s} {r.seconds * 1e3:9.2f} ms\n")
    w(f"  {'':9s} {'total':28s} {total * 1e3:9.2f} ms\n")
    from polycomp.scheduler.tuning.cli import explain_versions
    plan = explain_versions(args, kernel)
    if plan:
        w(f"\n--- versions (--records) ---\n{plan}\n")
    return 0


def _params_text(params) -> str:
    import dataclasses
    return ", ".join(f"{f.name}={getattr(params, f.name)}" for f in dataclasses.fields(params))


def cmd_targets(args) -> int:
    """Print every registered target: its memory hierarchy, compute units and (with
    --options) the options it takes."""
    from polycomp.hw.registry import backends, canonical_name
    from polycomp.hw.target import get_target
    w = sys.stdout.write
    wanted = {canonical_name(n) for n in args.name}   # unknown names raise TargetError
    for b in backends():
        for name in b.names:
            if wanted and name not in wanted:
                continue
            t = get_target(name)
            aliases = [a for a, c in b.aliases.items() if c == name]
            alias = f" (alias {', '.join(aliases)})" if aliases else ""
            w(f"{name}{alias}: {b.descriptions.get(name, '')}; emits {b.suffix}\n")
            w(f"  {'level':12s} {'scope':8s} {'capacity':>10s} {'align':>6s}  accessed by\n")
            for lv, scope, cap, align, who in t.memory.table():
                w(f"  {lv:12s} {scope:8s} {cap:>10s} {align:>6s}  {who}\n")
            for c in t.memory.copies:
                sync = f"; sync: {c.sync}" if c.sync else ""
                form = f" ({c.variant})" if c.variant else ""
                w(f"  copy {c.src} -> {c.dst}{form}: {c.mechanism}{sync}\n")
            for param in (t.cpu, t.cuda):
                if param is not None:
                    w(f"  parameters: {_params_text(param)}\n")
            for u in t.units:
                shape = "x".join(map(str, u.shape))
                w(f"  unit {u.name} ({u.kind} {shape}): {', '.join(u.dtypes)}"
                  f"{'; ' + u.note if u.note else ''}\n")
            if args.options:
                for opt_name, default, doc in b.options_class.describe():
                    w(f"  option {opt_name} = {default}: {doc}\n")
            w("\n")
    return 0


# --------------------------------------------------------------------------- run


def compare(out, ref, dtype: str, tol: float | None = None) -> tuple[float, float, bool]:
    """``(max abs error, max rel error, ok)`` of ``out`` against ``ref``.

    The relative error is norm-wise: ``max|out - ref| / max(1e-30, max|ref|)``.  NaNs
    must sit at the same positions in both.
    """
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if o.shape != r.shape:
        return float("inf"), float("inf"), False
    tol = TOLERANCE.get(dtype, 1e-4) if tol is None else tol
    nan_o, nan_r = np.isnan(o), np.isnan(r)
    if (nan_o != nan_r).any():
        return float("nan"), float("nan"), False
    keep = ~nan_r
    if not keep.any():
        return 0.0, 0.0, True
    o, r = o[keep], r[keep]
    inf_o, inf_r = np.isinf(o), np.isinf(r)
    if (inf_o != inf_r).any() or (o[inf_r] != r[inf_r]).any():
        return float("inf"), float("inf"), False
    o, r = o[~inf_r], r[~inf_r]
    if o.size == 0:
        return 0.0, 0.0, True
    abs_err = float(np.max(np.abs(o - r)))
    scale = float(np.max(np.abs(r)))
    rel_err = abs_err / max(scale, 1e-30)
    return abs_err, rel_err, abs_err <= tol * max(1.0, scale)


#: default bound of the statement instances ``polycomp run`` lets the IR interpreter
#: evaluate for its reference check (``--max-reference-work``): tens of seconds
MAX_REFERENCE_WORK = 200_000_000
#: a check of at least this many statement instances shows a progress bar (on a terminal)
PROGRESS_WORK = 2_000_000


def _program_order_reference(ck, arrays, params, work: int = 0):
    """Outputs of the kernel's program-order IR (the model's initial schedule), run by
    the IR interpreter; ``arrays`` as :func:`random_inputs` made them.  ``work``: the
    statement instances it will run (a progress bar on stderr from
    :data:`PROGRESS_WORK`)."""
    from polycomp.lowering.ast_to_ir import lower_schedule
    from polycomp.lowering.interpreter import run_func
    from polycomp.shapes import caller_arrays
    f = lower_schedule(ck.model, ck.model.initial_schedule)
    passed = caller_arrays(ck.final_ir)
    n = len(ck.final_ir.inputs)
    inputs = {b.name: a for b, a in zip(passed[:n], arrays[:n])}
    initial = {b.name: a for b, a in zip(passed[n:], arrays[n:])}
    bar = None
    if work >= PROGRESS_WORK:
        from tqdm import tqdm
        bar = tqdm(total=work, desc="reference (IR interpreter)", unit="inst",
                   unit_scale=True, file=sys.stderr, mininterval=0.5)
    try:
        outs = run_func(f, inputs, params, initial,
                        progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    return [outs[b.name] for b in f.outputs]


def _user_reference(mod, kernel, n_kernels):
    if mod is None:
        return None
    fn = getattr(mod, f"reference_{kernel.name}", None)
    if fn is None and n_kernels == 1:
        fn = getattr(mod, "reference", None)
    return fn if callable(fn) else None


def cmd_run(args) -> int:
    mod, kernels, kernel, ck = _compile(args)
    given = _parse_shapes(args.shape)
    f = ck.final_ir
    names = [p.name for p in f.params]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UnknownSymbolError(f"--shape names {', '.join(unknown)}, which kernel "
                                 f"{kernel.name} does not have (its symbols: "
                                 f"{', '.join(names) or 'none'})")
    missing = [n for n in names if n not in given]
    if missing:
        raise UnknownSymbolError(f"kernel {kernel.name} needs a value for symbolic "
                                 f"dimension(s) {', '.join(missing)}: pass "
                                 + " ".join(f"--shape {n}=..." for n in missing))
    params = {n: given[n] for n in names}
    check_run_memory(f, params)
    arrays = random_inputs(f, params, args.seed)
    runner = ck.backend.runner(ck)
    run, how, timed = runner.call, runner.how, runner.native
    reps = max(1, args.repeat) if timed else 1
    result: Any = None
    best = float("inf")
    for _ in range(reps + (1 if reps > 1 else 0)):  # one warm-up run when timing
        t0 = time.perf_counter()
        result = run(*arrays, **params)
        best = min(best, time.perf_counter() - t0)
    outs = list(result) if isinstance(result, tuple) else [result]

    ref_fn = _user_reference(mod, kernel, len(kernels))
    refs: list | None = None
    if ref_fn is not None:
        ref = ref_fn(*[a.copy() for a in arrays])
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        ref_how = f"{ref_fn.__name__}() in {args.file}"
    elif getattr(kernel, "numpy_reference", None) is not None:
        ref = kernel.numpy_reference(*[a.copy() for a in arrays])
        refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        ref_how = "the op library's numpy reference"
    else:
        from polycomp.lowering.interpreter import statement_instances
        work = statement_instances(ck.model, params)
        limit = args.max_reference_work
        if work < 0 or work > limit:
            ref_how = (f"none: the IR interpreter would run "
                       f"{'an unknown number of' if work < 0 else f'{work:.3g}'} statement "
                       f"instances (more than --max-reference-work {limit:.3g}); define "
                       f"reference() in {args.file} for a numpy check, or raise the bound")
        else:
            refs = _program_order_reference(ck, arrays, params, work)
            ref_how = f"IR interpreter on the program-order IR ({work:.3g} instances)"
    shape_txt = " ".join(f"{k}={v}" for k, v in params.items())
    if refs is None:
        print(f"kernel {kernel.name}, target {ck.target.name}"
              + (f", {shape_txt}" if shape_txt else ""))
        print(f"  ran on:    {how}")
        print(f"  reference: {ref_how}")
        for b, o in zip(f.outputs, outs):
            print(f"  output {b.name} {b.dtype}{list(np.shape(o))}: NOT CHECKED")
        _print_time(timed, best, reps)
        return 0
    if len(refs) != len(outs):
        raise UsageError(f"the reference returned {len(refs)} array(s); kernel "
                         f"{kernel.name} has {len(outs)} output(s)")
    print(f"kernel {kernel.name}, target {ck.target.name}"
          + (f", {shape_txt}" if shape_txt else ""))
    print(f"  ran on:    {how}")
    print(f"  reference: {ref_how}")
    ok_all = True
    for b, o, r in zip(f.outputs, outs, refs):
        tol = args.tol if args.tol is not None else TOLERANCE.get(b.dtype, 1e-4)
        if np.shape(o) != np.shape(r):
            print(f"  output {b.name}: shape {np.shape(o)} but the reference has "
                  f"{np.shape(r)} FAIL")
            ok_all = False
            continue
        abs_err, rel_err, ok = compare(o, r, b.dtype, tol)
        ok_all &= ok
        print(f"  output {b.name} {b.dtype}{list(np.shape(o))}: max abs error {abs_err:.3e}, "
              f"max rel error {rel_err:.3e} (tolerance {tol:.0e}) {'OK' if ok else 'FAIL'}")
    _print_time(timed, best, reps)
    return 0 if ok_all else 1


def _print_time(timed: bool, best: float, reps: int) -> None:
    if timed:
        print(f"  time: {best * 1e3:.3f} ms" + (f" (best of {reps})" if reps > 1 else ""))
    else:
        print(f"  time: {best * 1e3:.3f} ms of simulation (not a timing of the target)")


# --------------------------------------------------------------------------- bench


def cmd_bench(args) -> int:
    import pkgutil
    name = args.suite
    modname = f"polycomp.benchmarks.{name}"
    try:
        mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name not in (modname, "polycomp.benchmarks"):
            raise
        try:
            import polycomp.benchmarks as pkg
            have = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                          if not m.name.startswith("_"))
        except ModuleNotFoundError:
            have = []
        raise UsageError(f"there is no benchmark suite {name!r} (no module {modname}); "
                         f"available: {', '.join(have) or 'none yet'}") from None
    if not callable(getattr(mod, "main", None)):
        raise UsageError(f"{modname} has no main(argv) function")
    rc = mod.main(list(args.args))
    return int(rc or 0)


# --------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="polycomp", description="polycomp: a polyhedral tensor compiler "
        "(@tensor_expr kernels -> isl schedule trees -> CUDA / C).")
    from polycomp import __version__
    p.add_argument("--version", action="version", version=f"polycomp {__version__}")
    p.add_argument("--traceback", action="store_true",
                   help="show the Python traceback of errors")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", default=argparse.SUPPRESS,
                        help="show the Python traceback of errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    kern = argparse.ArgumentParser(add_help=False)
    kern.add_argument("file", metavar="FILE.py",
                      help="a Python file defining @tensor_expr kernels (or a .c file of "
                      "affine loop nests)")
    kern.add_argument("--kernel", "-k", metavar="NAME",
                      help="which kernel (needed when the file defines several)")
    kern.add_argument("--target", "-t", default="c", choices=_target_names(),
                      help="target (default: c; `polycomp targets` lists them)")
    kern.add_argument("--tile", metavar="T0,T1,...",
                      help="CUDA: block tile sizes (option tile.block)")
    kern.add_argument("--threads", metavar="P0,P1,...",
                      help="CUDA: threads per block dimension (option tile.threads)")
    kern.add_argument("--tile-k", type=int, metavar="K",
                      help="CUDA: reduction tile (option tile.k)")
    kern.add_argument("--isl-scheduler", action="store_true",
                      help="reschedule with isl's scheduler before the target passes")
    kern.add_argument("-O", "--option", action="append", metavar="KEY=VALUE",
                      help="any pipeline option (VALUE is a Python literal); repeatable")
    kern.add_argument("--debug", action="store_true",
                      help="check every schedule pass for legality (dependences)")
    kern.add_argument("--dump-dir", metavar="DIR",
                      help="write the output of every step (trees, IR, source) to "
                      "numbered files in DIR")
    from polycomp.scheduler.tuning.cli import add_records_arg
    add_records_arg(kern)

    c = sub.add_parser("compile", parents=[common, kern], help="compile a kernel to source",
                       description="Compile a kernel and write the CUDA (.cu) or C (.c) source.")
    c.add_argument("-o", "--output", metavar="OUT",
                   help="output file (default: build/<kernel>.cu or .c; '-' for stdout)")
    c.add_argument("--check", action="store_true",
                   help="compile the output with nvcc -cubin (ptxas resource usage) or gcc")
    c.set_defaults(func=cmd_compile)

    e = sub.add_parser("explain", parents=[common, kern],
                       help="show the model, the tree after each pass and the IR",
                       description="Print the polyhedral model, the schedule tree after "
                       "every pass (with its time and notes) and the final IR.")
    e.add_argument("--source", action="store_true", help="also print the generated source")
    e.set_defaults(func=cmd_explain)

    r = sub.add_parser("run", parents=[common, kern],
                       help="run a kernel on random inputs and check it",
                       description="Run a compiled kernel on random inputs and compare it "
                       "with reference_<kernel>() (or reference()) from the file, else the op "
                       "library's numpy reference, else the IR interpreter on the "
                       "program-order IR (bounded by --max-reference-work).  Exit status 1 "
                       "when the error exceeds the tolerance.")
    r.add_argument("--shape", "-s", action="append", metavar="NAME=INT",
                   help="value of a symbolic dimension (repeatable, or N=64,M=32)")
    r.add_argument("--seed", type=_arg_seed, default=0, help="random seed (default 0)")
    r.add_argument("--repeat", type=_arg_count, default=5,
                   help="timed runs; the best is reported (default 5)")
    r.add_argument("--tol", type=_arg_tolerance, default=None,
                   help="tolerance on max|out-ref| / max(1, max|ref|) (default by dtype)")
    r.add_argument("--max-reference-work", type=_arg_count, default=MAX_REFERENCE_WORK,
                   metavar="N", help="most statement instances the IR interpreter runs as "
                   f"the reference (default {MAX_REFERENCE_WORK:.0e}); beyond, the outputs "
                   "are reported NOT CHECKED")
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("bench", parents=[common], help="run a benchmark suite",
                       description="Run polycomp.benchmarks.<SUITE>.main(ARGS), e.g. "
                       "`polycomp bench cpu` or `polycomp bench gpu`.")
    b.add_argument("suite", metavar="SUITE", help="cpu, gpu, ...")
    b.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the suite")
    b.set_defaults(func=cmd_bench)

    tg = sub.add_parser("targets", parents=[common], help="list the targets",
                        description="List the registered targets with their memory "
                        "hierarchy, copy rules and compute units.")
    tg.add_argument("name", nargs="*", help="only these targets")
    tg.add_argument("--options", action="store_true", help="also list each target's options")
    tg.set_defaults(func=cmd_targets)

    from polycomp.cache import add_cli as add_cache_cli
    add_cache_cli(sub, [common])
    from polycomp.scheduler.tuning.cli import add_cli as add_tune_cli
    add_tune_cli(sub, [common, kern])
    return p


def main(argv=None) -> int:
    """Entry point of the ``polycomp`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    show_tb = getattr(args, "traceback", False)
    try:
        return args.func(args)
    except PolycompError as e:
        if show_tb:
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `polycomp explain ... | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:  # pragma: no cover
            pass
        return 0
    except Exception as e:  # a polycomp bug
        if show_tb:
            traceback.print_exc()
        else:
            print(f"internal error (a polycomp bug): {type(e).__name__}: {e}\n"
                  f"  rerun with --traceback for the Python traceback", file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
