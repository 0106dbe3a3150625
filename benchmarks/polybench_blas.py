"""PolyBench's BLAS-3 kernels (gemm, 2mm, 3mm, syrk, syr2k, trmm, symm) and gemver through
polycomp's ``cpu`` target against the same product through numpy (OpenBLAS), timed in one process:
``python -m benchmarks.polybench_blas --polybench DIR [--dataset LARGE] [--rounds 7]
[--kernels gemm,syrk] [--peer-c DIR]``.

Rounds interleave polycomp, a peer build's generated C (``--peer-c`` as in ``polycomp
bench polybench``) and numpy, so the host's load drifts alike for all, with a pause of
``SETTLE_S`` before each call (OpenBLAS's threads keep spinning a little after a call,
which would slow whatever runs next); each line prints
best and median seconds and ``numpy time / polycomp time`` (above 1: polycomp faster),
and the same ratio (and polycomp's own seconds; with ``--peer-c`` also the peer's ratio) of
the on-CPU seconds of each call's busiest thread (Linux
``/proc/self/task/*/schedstat``: the critical path without the time spent waiting for a
CPU, which on a loaded host is most of the wall time).
numpy's formulations compute the whole result (2mm: ``beta D + (alpha A B) C``;
3mm: ``(A B)(C D)``; syrk/syr2k: the full square, of which
PolyBench updates the lower triangle; numpy's ``A @ A.T`` calls BLAS ``?syrk``; trmm:
scipy's BLAS ``dtrmm``, ``alpha * A^T B`` with ``A`` unit lower triangular, on
Fortran-ordered copies made outside the timed call; symm: scipy's ``dsymm``, ``alpha * A B +
beta * C`` reading ``A``'s lower triangle, on Fortran-ordered copies; gemver: ``A +=
outer(u1, v1) + outer(u2, v2)``, ``x += beta A^T y + z``, ``w += alpha A x``), and
its thread count is OpenBLAS's (run under ``env -u OPENBLAS_CORETYPE
OMP_NUM_THREADS=2`` to compare like with like).  The results are checked against
numpy's on the updated triangle.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time

import numpy as np

from benchmarks.polybench import Compiled, Peer, extract, find_kernels, fresh, make_data

#: seconds of pause before each timed call (lets the previous call's threads go idle)
SETTLE_S = 0.1


def _on_cpu() -> dict[str, int]:
    """Nanoseconds each thread of this process has run on a CPU (Linux schedstat; empty
    elsewhere)."""
    out = {}
    for t in glob.glob("/proc/self/task/*/schedstat"):
        try:
            with open(t) as f:
                out[t] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def _timed(call) -> tuple[float, float]:
    """Wall seconds of ``call()`` and on-CPU seconds of its busiest thread (the critical
    path when no thread waits for a CPU: on a loaded host the wall time is mostly the
    other processes' share)."""
    a = _on_cpu()
    t0 = time.perf_counter()
    call()
    wall = time.perf_counter() - t0
    b = _on_cpu()
    busy = max((b[t] - a.get(t, 0) for t in b), default=0) / 1e9
    return wall, busy


def _numpy(name: str, d: dict):
    """The numpy formulation of ``name`` on the arrays of ``d`` (a callable), the
    mask of the output elements PolyBench's kernel updates and the output's name."""
    if name == "trmm":
        from scipy.linalg import blas  # (heavy, optional: imported for trmm only)
        af, bf = np.asfortranarray(d["A"]), np.asfortranarray(d["B"])
        a = float(np.ravel(d["alpha"])[0])
        return (lambda: blas.dtrmm(a, af, bf, side=0, lower=1, trans_a=1, diag=1)), \
            np.ones(d["B"].shape, bool), "B"
    if name == "symm":
        from scipy.linalg import blas  # (heavy, optional: imported for symm only)
        af, bf, cf = (np.asfortranarray(d[x]) for x in "ABC")
        sa, sb = (float(np.ravel(d[x])[0]) for x in ("alpha", "beta"))
        return (lambda: blas.dsymm(sa, af, bf, sb, cf, side=0, lower=1)), \
            np.ones(d["C"].shape, bool), "C"
    if name == "gemver":
        A, u1, v1, u2, v2, w, x, y, z = (d[n] for n in ("A", "u1", "v1", "u2", "v2", "w",
                                                         "x", "y", "z"))
        a, b = d["alpha"], d["beta"]

        def gemver():
            A[...] += np.outer(u1, v1) + np.outer(u2, v2)      # the rank-2 update
            x[...] += b * (A.T @ y) + z
            w[...] += a * (A @ x)
            return w.copy()
        # (updates its arrays in place like the kernel: later rounds start from the
        # earlier rounds' results, the same work)
        return gemver, np.ones(w.shape, bool), "w"
    if name == "3mm":
        A, B, C, D = (d[x] for x in "ABCD")
        return (lambda: (A @ B) @ (C @ D)), np.ones(d["G"].shape, bool), "G"
    al, be = d["alpha"], d["beta"]
    if name == "2mm":
        A, B, C, D = (d[x] for x in "ABCD")
        return (lambda: be * D + (al * (A @ B)) @ C), np.ones(D.shape, bool), "D"
    if name == "gemm":
        A, B, C = d["A"], d["B"], d["C"]
        return (lambda: al * (A @ B) + be * C), np.ones(C.shape, bool), "C"
    A, C = d["A"], d["C"]
    tri = np.tril(np.ones(C.shape, bool))
    if name == "syrk":
        return (lambda: al * (A @ A.T) + be * C), tri, "C"
    B = d["B"]
    return (lambda: al * (A @ B.T) + al * (B @ A.T) + be * C), tri, "C"


def bench(name: str, path: str, pb: str, dataset: str, rounds: int, peer_dir) -> str:
    from polycomp.frontend.c_reader import read_c_kernel
    pk = extract(path, pb, dataset)
    k = read_c_kernel(pk.source, pk.func)
    data = make_data(k, pk)
    c = Compiled(k, "cpu", None)
    peer = Peer(k, os.path.join(peer_dir, f"{name}.c")) if peer_dir else None
    work = fresh(data)
    fn, mask, out = _numpy(name, fresh(data))
    want = fn()
    c.f.cfunc(*c.args(work))
    err = float(np.max(np.abs(work[out] - want)[mask] / np.abs(want[mask])))
    ts: dict[str, list[float]] = {"polycomp": [], "numpy": [], "peer": []}
    busy: dict[str, list[float]] = {"polycomp": [], "numpy": [], "peer": []}

    def one(name, call):
        time.sleep(SETTLE_S)
        w, b = _timed(call)
        ts[name].append(w)
        busy[name].append(b)
    for _ in range(rounds):
        fresh(data, work)
        one("polycomp", lambda: c.f.cfunc(*c.args(work)))
        if peer is not None:
            fresh(data, work)
            one("peer", lambda: peer.cfunc(*peer.args(work)))
        one("numpy", fn)
    best = {n: min(v) for n, v in ts.items() if v}
    med = {n: statistics.median(v) for n, v in ts.items() if v}
    bb = {n: min(v) for n, v in busy.items() if v}
    bm = {n: statistics.median(v) for n, v in busy.items() if v}
    line = (f"{name} {dataset}: polycomp {best['polycomp']:.4f}/{med['polycomp']:.4f} s, "
            f"numpy {best['numpy']:.4f}/{med['numpy']:.4f} s (best/median); numpy/polycomp "
            f"{best['numpy'] / best['polycomp']:.2f} / {med['numpy'] / med['polycomp']:.2f}")
    if peer is not None:
        line += (f"; peer/polycomp {best['peer'] / best['polycomp']:.2f} / "
                 f"{med['peer'] / med['polycomp']:.2f}")
    if bb["polycomp"] > 0:
        line += (f"; busiest thread on-CPU numpy/polycomp {bb['numpy'] / bb['polycomp']:.2f}"
                 f" / {bm['numpy'] / bm['polycomp']:.2f}"
                 f" ({bb['polycomp']:.4f}/{bm['polycomp']:.4f} s)")
        if peer is not None:
            line += (f", peer/polycomp {bb['peer'] / bb['polycomp']:.2f}"
                     f" / {bm['peer'] / bm['polycomp']:.2f}")
    return line + f"; max rel err vs numpy {err:.1e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--polybench", default=os.environ.get("POLYBENCH_DIR"))
    ap.add_argument("--dataset", default="LARGE")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--kernels", default="gemm,syrk,syr2k")
    ap.add_argument("--peer-c", default=None)
    a = ap.parse_args(argv)
    if not a.polybench:
        ap.error("--polybench DIR (an unpacked PolyBench/C 4.2.1) or $POLYBENCH_DIR")
    paths = dict(find_kernels(a.polybench))
    with tempfile.TemporaryDirectory():
        for name in a.kernels.split(","):
            print(bench(name, paths[name], a.polybench, a.dataset, a.rounds, a.peer_c),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
