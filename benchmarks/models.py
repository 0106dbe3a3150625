"""Model benchmark: ``polycomp bench models [--json] [--rounds N] [--threads 1,2] [--only ..]``.

Hugging Face models built by ``transformers`` from their configs with random weights
(nothing is downloaded), eval mode, ``torch.no_grad()``: BERT-base (``BertModel``, 2 and 12
layers, batch 1 and 8, seq 128; 12 layers at batch 8, seq 384), GPT-2 (``GPT2Model``, 2 and
12 layers, batch 1, seq 128) and ViT-B/16 (``ViTModel``, 2 and 12 layers, batch 1, 224x224).
Each runs eagerly, through ``torch.compile(model, backend="polycomp")`` and through
``torch.compile(model)`` (inductor; a column left empty, with the reason, where it does not
work on the host), at each thread count (``torch.set_num_threads``; polycomp's kernels
follow it), in the same process with the calls interleaved (eager, polycomp, inductor,
eager, ...). Reported: best and median ms per call, the ratios eager / polycomp and inductor
/ polycomp of the bests and of the medians (> 1: polycomp faster), the largest relative
error of polycomp against eager, and polycomp's report (pieces compiled, what ran eagerly).

The kernels' OpenMP wait policy (``OMP_WAIT_POLICY=PASSIVE`` after a short spin,
``polycomp.hw.cpu.build.quiet_openmp``) is set before torch loads libgomp, unless the user
set one (long-spinning OpenMP workers of two runtimes, torch's and the kernels', starve
each other on a loaded host).  Cheap by
default (3 rounds, the 2-layer models at batch 1); ``--full`` adds BERT 12 layers and
batch 8, ``--rounds`` more rounds.  ``--prepack-off`` also times polycomp compiled with
``POLYCOMP_PREPACK=0`` (weights packed on every call instead of once at compile time),
interleaved with the others: the gain of compile-time packing, best and median.  Each
call's process CPU time (all threads; inductor's too) is recorded beside its wall time: on a loaded
host it measures the work without the scheduling delays (a ratio of CPU times compares
work, not speed at a given thread count).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Case:
    """One benchmark row's model and input."""
    name: str
    model: str          # bert / gpt2 / vit
    layers: int
    batch: int
    seq: int            # tokens (text) or image side (vit)


CASES = (
    Case("bert-2", "bert", 2, 1, 128),
    Case("gpt2-2", "gpt2", 2, 1, 128),
    Case("vit-2", "vit", 2, 1, 224),
    Case("bert-2-b8", "bert", 2, 8, 128),
    Case("bert-12", "bert", 12, 1, 128),
    # the issue's target rows beyond the 2-layer ones (--full, or --only NAME)
    Case("bert-12-b8-384", "bert", 12, 8, 384),
    Case("gpt2-12", "gpt2", 12, 1, 128),
    Case("vit-12", "vit", 12, 1, 224),
)
QUICK = ("bert-2", "gpt2-2", "vit-2")


@dataclass
class Row:
    case: str
    threads: int
    eager_ms: list[float] = field(default_factory=list)
    polycomp_ms: list[float] = field(default_factory=list)
    inductor_ms: list[float] = field(default_factory=list)
    # --prepack-off: polycomp compiled with POLYCOMP_PREPACK=0 (weights packed per call)
    unpacked_ms: list[float] = field(default_factory=list)
    # process CPU time of the same calls (all threads): the work, which a loaded host's
    # scheduling delays do not inflate as they do wall time
    eager_cpu_ms: list[float] = field(default_factory=list)
    polycomp_cpu_ms: list[float] = field(default_factory=list)
    unpacked_cpu_ms: list[float] = field(default_factory=list)
    inductor_cpu_ms: list[float] = field(default_factory=list)
    max_rel_err: float = float("nan")
    polycomp_report: str = ""
    inductor_note: str = ""

    def summary(self) -> dict[str, Any]:
        def bm(xs):
            return (min(xs), statistics.median(xs)) if xs else (None, None)
        (eb, em), (pb, pm), (ib, im) = bm(self.eager_ms), bm(self.polycomp_ms), \
            bm(self.inductor_ms)
        d = asdict(self)
        d.update(eager_best_ms=eb, eager_median_ms=em, polycomp_best_ms=pb,
                 polycomp_median_ms=pm, inductor_best_ms=ib, inductor_median_ms=im,
                 speedup_vs_eager_best=eb / pb if pb else None,
                 speedup_vs_eager_median=em / pm if pm else None,
                 speedup_vs_inductor_best=ib / pb if (pb and ib) else None,
                 speedup_vs_inductor_median=im / pm if (pm and im) else None)
        ub, um = bm(self.unpacked_ms)
        d.update(unpacked_best_ms=ub, unpacked_median_ms=um,
                 prepack_gain_best=ub / pb if (pb and ub) else None,
                 prepack_gain_median=um / pm if (pm and um) else None)
        (ecb, ecm), (pcb, pcm), (ucb, ucm) = bm(self.eager_cpu_ms), bm(self.polycomp_cpu_ms), \
            bm(self.unpacked_cpu_ms)
        icb, icm = bm(self.inductor_cpu_ms)
        d.update(cpu_vs_eager_best=ecb / pcb if (pcb and ecb) else None,
                 cpu_vs_eager_median=ecm / pcm if (pcm and ecm) else None,
                 cpu_vs_inductor_best=icb / pcb if (pcb and icb) else None,
                 cpu_vs_inductor_median=icm / pcm if (pcm and icm) else None,
                 prepack_cpu_gain_best=ucb / pcb if (pcb and ucb) else None,
                 prepack_cpu_gain_median=ucm / pcm if (pcm and ucm) else None)
        return d


def _transformers():
    """``import transformers`` with a torchvision that does not load (built for another
    torch) hidden from it."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure: hide it
        sys.modules["torchvision"] = None  # type: ignore[assignment]
    import transformers
    return transformers


def build(case: Case):
    """``(model, inputs)``: the case's model (random weights, eval) and its input."""
    import torch
    t = _transformers()
    torch.manual_seed(0)
    if case.model == "bert":
        m = t.BertModel(t.BertConfig(num_hidden_layers=case.layers))
        x = {"input_ids": torch.randint(0, 30000, (case.batch, case.seq))}
    elif case.model == "gpt2":
        m = t.GPT2Model(t.GPT2Config(n_layer=case.layers))
        x = {"input_ids": torch.randint(0, 50000, (case.batch, case.seq))}
    elif case.model == "vit":
        m = t.ViTModel(t.ViTConfig(num_hidden_layers=case.layers, image_size=case.seq))
        x = {"pixel_values": torch.randn(case.batch, 3, case.seq, case.seq)}
    else:
        raise ValueError(case.model)
    return m.eval(), x


def _out(r):
    return r.last_hidden_state if hasattr(r, "last_hidden_state") else r[0]


def _timed(f: Callable[[], Any], cpu: list[float] | None = None) -> float:
    """Wall ms of one call of ``f``; its process CPU ms appended to ``cpu``."""
    c = time.process_time()
    t = time.perf_counter()
    f()
    wall = (time.perf_counter() - t) * 1e3
    if cpu is not None:
        cpu.append((time.process_time() - c) * 1e3)
    return wall


def run_case(case: Case, threads: int, rounds: int, inductor: bool,
             prepack_off: bool = False) -> Row:
    import torch

    from polycomp.graph.dynamo import polycomp_backend
    torch.set_num_threads(threads)
    m, x = build(case)
    row = Row(case.name, threads)
    reports = []

    def backend(gm, example_inputs):
        fn = polycomp_backend(gm, example_inputs)
        reports.append(fn.polycomp_report)
        return fn
    torch._dynamo.reset()
    pc = torch.compile(m, backend=backend, dynamic=False)
    ind = None
    with torch.no_grad():
        ref = _out(m(**x))
        got = _out(pc(**x))  # compiles
        row.max_rel_err = float((got - ref).abs().max() / ref.abs().max())
        unpacked = None
        if prepack_off:  # the same model compiled again, weights packed on every call
            before = os.environ.get("POLYCOMP_PREPACK")
            os.environ["POLYCOMP_PREPACK"] = "0"
            try:
                # another backend object: Dynamo reuses a compiled frame for the same one
                # (its report is not polycomp's: not appended to reports)
                unpacked = torch.compile(m, backend=lambda gm, ex: polycomp_backend(gm, ex),
                                         dynamic=False)
                unpacked(**x)
            finally:
                if before is None:
                    os.environ.pop("POLYCOMP_PREPACK")
                else:
                    os.environ["POLYCOMP_PREPACK"] = before
        if inductor:
            try:
                ind = torch.compile(m, dynamic=False)
                ind(**x)
            except Exception as e:  # noqa: BLE001 - a comparison column, not a requirement
                ind, row.inductor_note = None, f"inductor failed: {type(e).__name__}: {e}"[:200]
        else:
            row.inductor_note = "inductor not run (--no-inductor)"
        for _ in range(rounds):  # interleaved
            row.eager_ms.append(_timed(lambda: m(**x), row.eager_cpu_ms))
            row.polycomp_ms.append(_timed(lambda: pc(**x), row.polycomp_cpu_ms))
            if unpacked is not None:
                row.unpacked_ms.append(_timed(lambda: unpacked(**x), row.unpacked_cpu_ms))
            if ind is not None:
                row.inductor_ms.append(_timed(lambda: ind(**x), row.inductor_cpu_ms))
    comp = sum(r.compiled for r in reports)
    pieces = sum(r.pieces for r in reports)
    eager = sorted({e for r in reports for e in r.eager})
    row.polycomp_report = f"{comp} of {pieces} pieces compiled" + (
        f"; eager: {' | '.join(eager)}" if eager else "")
    return row


def host() -> str:
    import torch
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, "
            f"python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")


def _fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    """The markdown table of docs/graph.md."""
    out = ["| case | threads | eager best / median ms | polycomp best / median ms | "
           "inductor best / median ms | vs eager (best / median) | vs inductor "
           "(best / median) | rel err | CPU time vs eager (best / median) | "
           "CPU time vs inductor | "
           "without prepack / with, wall (best / median) | same, CPU time |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['case']} | {r['threads']} | {_fmt(r['eager_best_ms'])} / "
            f"{_fmt(r['eager_median_ms'])} | {_fmt(r['polycomp_best_ms'])} / "
            f"{_fmt(r['polycomp_median_ms'])} | {_fmt(r['inductor_best_ms'])} / "
            f"{_fmt(r['inductor_median_ms'])} | {_fmt(r['speedup_vs_eager_best'], '.2f')}x / "
            f"{_fmt(r['speedup_vs_eager_median'], '.2f')}x | "
            f"{_fmt(r['speedup_vs_inductor_best'], '.2f')}x / "
            f"{_fmt(r['speedup_vs_inductor_median'], '.2f')}x | {r['max_rel_err']:.1e} | "
            f"{_fmt(r.get('cpu_vs_eager_best'), '.2f')}x / "
            f"{_fmt(r.get('cpu_vs_eager_median'), '.2f')}x | "
            f"{_fmt(r.get('cpu_vs_inductor_best'), '.2f')}x / "
            f"{_fmt(r.get('cpu_vs_inductor_median'), '.2f')}x | "
            f"{_fmt(r.get('prepack_gain_best'), '.2f')}x / "
            f"{_fmt(r.get('prepack_gain_median'), '.2f')}x | "
            f"{_fmt(r.get('prepack_cpu_gain_best'), '.2f')}x / "
            f"{_fmt(r.get('prepack_cpu_gain_median'), '.2f')}x |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="polycomp bench models",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--rounds", type=int, default=3, help="timed calls per side (default 3)")
    p.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    p.add_argument("--only", default="",
                   help=f"cases, comma-separated ({', '.join(c.name for c in CASES)})")
    p.add_argument("--full", action="store_true",
                   help="every case (default: " + ", ".join(QUICK) + ")")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile's inductor")
    p.add_argument("--prepack-off", action="store_true",
                   help="also time polycomp with POLYCOMP_PREPACK=0 (weights packed per call)")
    args = p.parse_args(argv)
    from polycomp.hw.cpu.build import quiet_openmp
    quiet_openmp()                                   # before torch loads libgomp
    names = [s for s in args.only.split(",") if s] or (
        [c.name for c in CASES] if args.full else list(QUICK))
    unknown = sorted(set(names) - {c.name for c in CASES})
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}")
    threads = [int(t) for t in args.threads.split(",") if t]
    rows = []
    for c in CASES:
        if c.name not in names:
            continue
        for t in threads:
            r = run_case(c, t, args.rounds, not args.no_inductor, args.prepack_off).summary()
            rows.append(r)
            if not args.json:
                print(f"{c.name} threads={t}: eager {_fmt(r['eager_median_ms'])} ms, "
                      f"polycomp {_fmt(r['polycomp_median_ms'])} ms, inductor "
                      f"{_fmt(r['inductor_median_ms'])} ms"
                      + (f", without prepack {_fmt(r['unpacked_median_ms'])} ms (gain "
                         f"{_fmt(r['prepack_gain_best'], '.2f')}x best / "
                         f"{_fmt(r['prepack_gain_median'], '.2f')}x median)"
                         if r["unpacked_ms"] else "")
                      + " (medians); "
                      f"{r['polycomp_report']}"
                      f"{'; ' + r['inductor_note'] if r['inductor_note'] else ''}",
                      flush=True)
    meta = {"command": "polycomp bench models " + " ".join(argv if argv is not None
                                                           else sys.argv[1:]),
            "host": host(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"), "rounds": args.rounds}
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=1))
        return 0
    print(f"\n{meta['command']}  ({meta['date']}; {meta['host']})\n")
    print(table(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
