"""Per-step profile of a compiled transformer at 1 and 2 threads (issue #27: where the
second thread is lost).  The model (``benchmarks/models.py`` ``build``: random weights,
eval, ``torch.no_grad()``) is compiled once per *config* in one process: a thread
count (``torch.set_num_threads(t)`` before the compile: the GEMM blocking is planned
for ``t``), optionally with environment variables set while it compiles (``2:
POLYCOMP_GEMM_SHARED=0``); then the compiled models and eager torch at each count run
interleaved, ``--rounds`` calls each in shuffled order, and every kernel call
(``hw/cpu/build.py`` ``CFunction._run``) is timed, wall and process CPU (all threads).
Printed: per config the whole call (wall, CPU, the kernels' summed wall), then for
each config against the first one per step (its kernel, in call order) best / median
wall us, the speed-up (first / this, medians), the CPU ratio (this / first: > 1 at 2
threads is work or waiting added by the second thread) and whether the step ran on one
thread (the graph's ``ONE_THREAD_BELOW_S`` decision); then the same summed per kind of
step.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE \\
        python scripts/step_profile.py --model bert --layers 1 --rounds 15 --configs 1,2

A 2-thread wall figure needs both cores: on a loaded host read the CPU columns and the
best calls, and run it twice.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from collections import defaultdict


class Recorder:
    """Wraps ``CFunction._run``: while ``on``, appends ``(name, wall s, cpu s, threads)``
    of every kernel call to ``calls``."""

    def __init__(self):
        from polycomp.hw.cpu import build
        self.calls: list[tuple[str, float, float, int | None]] = []
        self.on = False
        orig = build.CFunction._run
        rec = self

        def _run(fn, args, values, threads):
            if not rec.on:
                return orig(fn, args, values, threads)
            c, w = time.process_time(), time.perf_counter()
            orig(fn, args, values, threads)
            rec.calls.append((fn.func.name, time.perf_counter() - w,
                              time.process_time() - c, threads))
        build.CFunction._run = _run  # type: ignore[method-assign]


#: kernel name -> the ops of its graph step ("matmul+add+gelu"), filled at compile
OPS: dict[str, str] = {}


def describe(graph) -> None:
    """Record each compiled step's ops under its kernel's name (:data:`OPS`)."""
    for s in getattr(graph, "steps", ()):
        fn = getattr(s.fn, "func", None)
        if fn is not None:
            OPS[fn.name] = "+".join(n.op for n in s.group.nodes)


def kind(name: str) -> str:
    """A step's kind: its ops (or its kernel name without the graph's numbers)."""
    return OPS.get(name) or re.sub(r"_?\d+", "", name) or name


def realtime(on: bool) -> None:
    """Every thread of the process (and those it starts) under ``SCHED_FIFO`` priority
    10 (``on``) or back to ``SCHED_OTHER``: both cores of a loaded host for the timed
    calls (a 2-thread wall time needs both), as ``chrt -f 10`` for the whole run would
    also give them to the compiles."""
    policy, prio = (os.SCHED_FIFO, 10) if on else (os.SCHED_OTHER, 0)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), policy, os.sched_param(prio))
        except (PermissionError, ProcessLookupError):
            pass


def bm(xs: list[float]) -> tuple[float, float]:
    return min(xs), statistics.median(xs)


def parse_configs(text: str) -> list[tuple[str, int, dict]]:
    """``"1,2,2:POLYCOMP_GEMM_SHARED=0"`` -> ``[(label, threads, env at compile)]``."""
    out = []
    for part in text.split(","):
        head, *env = part.split(":")
        out.append((part, int(head), dict(e.split("=", 1) for e in env)))
    return out


def report(case, a, labels, steps, names, one, whole) -> None:
    """Print the whole-call lines, then per other config its step and kind tables."""
    ref = labels[0]
    print(f"{case.name} batch {case.batch} seq {case.seq}, {a.rounds} rounds, load "
          f"{os.getloadavg()[0]:.1f}; us, best / median; speed-up = {ref} wall / this wall "
          f"(medians); CPU x = this CPU / {ref} CPU (medians, process CPU of all threads)")
    for c in whole:
        ws = [w * 1e3 for w, _ in whole[c]]
        cs = [u * 1e3 for _, u in whole[c]]
        line = (f"  {c:>28}: call wall {bm(ws)[0]:.2f} / {bm(ws)[1]:.2f} ms, CPU "
                f"{bm(cs)[0]:.2f} / {bm(cs)[1]:.2f} ms")
        if c in steps:
            ks = [sum(v[r][0] for v in steps[c].values()) * 1e3 for r in range(a.rounds)]
            line += (f", kernels' wall {bm(ks)[0]:.2f} / {bm(ks)[1]:.2f} ms "
                     f"({len(steps[c])} kernel calls)")
        print(line)
    for other in labels[1:]:
        if len(steps[other]) != len(steps[ref]):
            print(f"  {other}: {len(steps[other])} kernel calls, {ref}: {len(steps[ref])}: "
                  f"steps compared by position")
        n_steps = min(len(steps[ref]), len(steps[other]))
        rows = []
        for k in range(n_steps):
            w1 = bm([w * 1e6 for w, _ in steps[ref][k]])
            w2 = bm([w * 1e6 for w, _ in steps[other][k]])
            c1 = bm([u * 1e6 for _, u in steps[ref][k]])
            c2 = bm([u * 1e6 for _, u in steps[other][k]])
            rows.append((k, names[other][k], w1, w2, c1, c2, one[other][k]))
        print(f"\n{other} against {ref}\n")
        print(f"| step | ops | {ref} wall | {other} wall | speed-up | CPU x | runs on |")
        print("|---|---|---|---|---|---|---|")
        for k, n, w1, w2, c1, c2, o in sorted(rows, key=lambda r: -r[2][1])[:a.top]:
            print(f"| {k} | {kind(n)} | {w1[0]:.0f} / {w1[1]:.0f} | {w2[0]:.0f} / {w2[1]:.0f} | "
                  f"{w1[1] / w2[1]:.2f} | {c2[1] / c1[1]:.2f} | "
                  f"{'1 thread' if o else 'all'} |")
        agg: dict = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
        for _, n, w1, w2, c1, c2, _o in rows:
            g = agg[kind(n)]
            g[0] += w1[1]
            g[1] += w2[1]
            g[2] += c1[1]
            g[3] += c2[1]
            g[4] += 1
        tot1 = sum(g[0] for g in agg.values())
        print(f"\n| kind | steps | {ref} wall | share | {other} wall | speed-up | CPU x |")
        print("|---|---|---|---|---|---|---|")
        for n, g in sorted(agg.items(), key=lambda kv: -kv[1][0]):
            print(f"| {n} | {g[4]} | {g[0]:.0f} | {g[0] / tot1:.0%} | {g[1]:.0f} | "
                  f"{g[0] / g[1]:.2f} | {g[3] / g[2]:.2f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bert", choices=("bert", "gpt2", "vit"))
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=None, help="tokens (bert/gpt2) or image size")
    p.add_argument("--configs", default="1,2",
                   help="thread counts, each optionally with environment variables set "
                        "while it compiles: 1,2,2:POLYCOMP_GEMM_SHARED=0 (the first is the "
                        "reference of the ratios)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--top", type=int, default=30, help="steps listed (by reference time)")
    p.add_argument("--fifo", action="store_true",
                   help="time under SCHED_FIFO (both cores of a loaded host; not the "
                        "compiles)")
    a = p.parse_args(argv)
    import torch

    from polycomp.benchmarks.models import Case, _out, build
    from polycomp.graph.dynamo import polycomp_backend
    seq = a.seq or (224 if a.model == "vit" else 128)
    case = Case(f"{a.model}-{a.layers}", a.model, a.layers, a.batch, seq)
    configs = parse_configs(a.configs)
    labels = [c[0] for c in configs]
    rec = Recorder()
    models = {}
    with torch.no_grad():
        for label, t, env in configs:
            torch.set_num_threads(t)
            m, x = build(case)
            torch._dynamo.reset()
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                def backend(gm, ex):
                    fn = polycomp_backend(gm, ex)
                    describe(fn.compiled_graph)
                    return fn
                pc = torch.compile(m, backend=backend, dynamic=False)
                ref = _out(m(**x))
                got = _out(pc(**x))
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k)
                    else:
                        os.environ[k] = v
            err = float((got - ref).abs().max() / ref.abs().max())
            models[label] = (pc, x, t, m)
            print(f"compiled {label}: rel err {err:.1e}", file=sys.stderr, flush=True)
        # per config: per step index: [(wall, cpu)], names, threads; whole-call wall / cpu
        steps: dict = {c: defaultdict(list) for c in labels}
        names: dict = {c: {} for c in labels}
        one: dict = {c: {} for c in labels}
        whole: dict = {c: [] for c in labels + [f"eager {t}T" for t in
                                                sorted({c[1] for c in configs})]}
        if a.fifo:
            realtime(True)
        for _ in range(a.rounds):
            for c in random.sample(list(whole), len(whole)):
                if c.startswith("eager"):
                    t = int(c.split()[1][:-1])
                    torch.set_num_threads(t)
                    m, x = next((v[3], v[1]) for v in models.values() if v[2] == t)
                    m(**x)
                    w0, c0 = time.perf_counter(), time.process_time()
                    m(**x)
                    whole[c].append((time.perf_counter() - w0, time.process_time() - c0))
                    continue
                pc, x, t, _m = models[c]
                torch.set_num_threads(t)
                pc(**x)                     # warm: this count's threads awake once
                rec.calls, rec.on = [], True
                w0, c0 = time.perf_counter(), time.process_time()
                pc(**x)
                whole[c].append((time.perf_counter() - w0, time.process_time() - c0))
                rec.on = False
                for k, (n, dw, dc, th) in enumerate(rec.calls):
                    steps[c][k].append((dw, dc))
                    names[c][k] = n
                    one[c][k] = th == 1 and t > 1
        realtime(False)
    report(case, a, labels, steps, names, one, whole)
    return 0


if __name__ == "__main__":
    sys.exit(main())
