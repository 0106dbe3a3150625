"""Threads of the C kernels (issue 27): each call runs its parallel loops with torch's
thread count when torch is imported, else ``OMP_NUM_THREADS`` as it is at the call; the
OpenMP runtime is made to wait passively unless the user chose a policy; the result does
not depend on the thread count (bitwise)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel
from polycomp.frontend import ops
from polycomp.frontend.dsl import Kernel
from polycomp.hw.cpu.build import call_threads


def _matmul(m: int, n: int, k: int, name: str) -> Kernel:
    return Kernel(lambda A, B: ops.matmul(A, B), name=name,
                  inputs={"A": pc.Tensor[(m, k), "float32"], "B": pc.Tensor[(k, n), "float32"]})


def test_calls_follow_torch_set_num_threads_and_results_do_not_depend_on_it():
    import torch
    f = build(_matmul(67, 131, 97, "mm_threads"), "cpu")
    assert f.openmp is not None
    rng = np.random.default_rng(3)
    A = rng.standard_normal((67, 97), dtype=np.float32)
    B = rng.standard_normal((97, 131), dtype=np.float32)
    before = torch.get_num_threads()
    outs = {}
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            assert call_threads() == n
            outs[n] = f(A, B)
            assert f.openmp.get() == n     # the call ran with torch's count
    finally:
        torch.set_num_threads(before)
    np.testing.assert_allclose(outs[1], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    assert np.array_equal(outs[1], outs[2]) and np.array_equal(outs[1], outs[3])


def test_calls_follow_a_torch_with_its_own_openmp_runtime(monkeypatch):
    # a torch wheel bundling a renamed libgomp: torch.set_num_threads does not reach the
    # kernels' runtime, the call sets it
    f = build(_matmul(16, 32, 8, "mm_threads_torch"), "cpu")
    assert f.openmp is not None
    before = f.openmp.get()
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(get_num_threads=lambda: 3))
    try:
        f.openmp.set(1)
        f(np.ones((16, 8), np.float32), np.ones((8, 32), np.float32))
        assert f.openmp.get() == 3
    finally:
        f.openmp.set(before)


def test_explicit_threads_override_the_process_count():
    f = build(_matmul(16, 32, 8, "mm_threads_fixed"), "cpu")
    assert f.openmp is not None
    before = f.openmp.get()
    f.threads = 1
    try:
        f.openmp.set(4)
        f(np.ones((16, 8), np.float32), np.ones((8, 32), np.float32))
        assert f.openmp.get() == 1
    finally:
        f.openmp.set(before)


_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import polycomp as pc
    from polycomp.driver import build, compile_kernel
    from polycomp.frontend import ops
    from polycomp.frontend.dsl import Kernel
    k = Kernel(lambda A, B: ops.matmul(A, B), name="mm_threads_env",
               inputs={"A": pc.Tensor[(16, 8), "float32"], "B": pc.Tensor[(8, 32), "float32"]})
    f = build(k, "cpu")
    policy = os.environ.get("OMP_WAIT_POLICY")
    spin = os.environ.get("GOMP_SPINCOUNT")
    os.environ["OMP_NUM_THREADS"] = "3"      # set after the runtime was loaded
    f(np.ones((16, 8), np.float32), np.ones((8, 32), np.float32))
    print(json.dumps({"policy": policy, "spin": spin, "threads": f.openmp.get(),
                      "torch": "torch" in sys.modules}))
""")


@pytest.mark.parametrize("policy,spin", [(None, None), ("ACTIVE", None), (None, "7")])
def test_without_torch_calls_follow_omp_num_threads_and_wait_passively(policy, spin):
    from polycomp.hw.cpu.build import OMP_SPIN_COUNT
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    if spin is not None:
        env["GOMP_SPINCOUNT"] = spin
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert not got["torch"]
    assert got["threads"] == 3
    if policy is None and spin is None:      # none chosen: passive after a short spin
        assert (got["policy"], got["spin"]) == ("PASSIVE", str(OMP_SPIN_COUNT))
    else:                                     # the user's choice is kept, nothing added
        assert (got["policy"], got["spin"]) == (policy, spin)


def test_the_blocking_is_planned_for_torchs_thread_count():
    import torch

    from polycomp.hw.cpu.target import cpu_threads
    from polycomp.hw.target import get_target
    before = torch.get_num_threads()
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            assert cpu_threads() == n and get_target("cpu").cpu.threads == n
    finally:
        torch.set_num_threads(before)


def test_the_thread_workspace_is_kept_between_calls_and_never_shared():
    """``pc_ws_take`` (C header): the same block for the next region of the thread, a
    separate allocation while the block is taken or above ``PC_WS_KEEP``, a larger block
    when a region needs more."""
    import ctypes

    from polycomp.hw.cpu.build import build_shared
    from polycomp.hw.cpu.codegen import C_HEADER
    src = C_HEADER + """
int pc_ws_check(void) {
  int k1, k2, k3, k4, k5, bad = 0;
  char* a = (char*)pc_ws_take(1000, &k1);
  char* b = (char*)pc_ws_take(1000, &k2);          /* a is taken: another block */
  bad |= (!k1) | (k2 << 1) | ((a == b) << 2) | ((((uintptr_t)a) & 63) != 0) << 3;
  pc_ws_give(b, k2);
  pc_ws_give(a, k1);
  char* c = (char*)pc_ws_take(800, &k3);           /* kept: the same block again */
  bad |= ((c != a) << 4) | ((!k3) << 5);
  pc_ws_give(c, k3);
  char* d = (char*)pc_ws_take(PC_WS_KEEP + 64, &k4); /* too large to keep */
  bad |= (k4 << 6) | ((d == NULL) << 7);
  pc_ws_give(d, k4);
  char* e = (char*)pc_ws_take(200000, &k5);        /* grows */
  bad |= ((!k5) << 8);
  memset(e, 1, 200000);
  pc_ws_give(e, k5);
  return bad;
}
"""
    lib = ctypes.CDLL(build_shared(src))
    assert lib.pc_ws_check() == 0


def test_kept_temporaries_reuse_their_slot_and_grow():
    """``pc_keep_take`` (C header): a temporary of ``PC_KEEP_MIN`` bytes or more comes
    back from its slot at the next call (no fresh pages to fault), 2 MiB-aligned; a
    separate allocation while the slot is taken, below ``PC_KEEP_MIN`` or above
    ``PC_KEEP_MAX``; a larger block when a call needs more."""
    import ctypes

    from polycomp.hw.cpu.build import build_shared
    from polycomp.hw.cpu.codegen import C_HEADER
    src = C_HEADER + """
int pc_keep_check(void) {
  static __thread pc_keep s;
  int k1, k2, k3, k4, k5, bad = 0;
  char* a = (char*)pc_keep_take(&s, PC_KEEP_MIN, &k1);
  char* b = (char*)pc_keep_take(&s, PC_KEEP_MIN, &k2);   /* a is taken: another block */
  bad |= (!k1) | (k2 << 1) | ((a == b) << 2) | ((((uintptr_t)a) % PC_KEEP_ALIGN) != 0) << 3;
  memset(a, 1, PC_KEEP_MIN); memset(b, 2, PC_KEEP_MIN);
  pc_keep_give(&s, b, k2);
  pc_keep_give(&s, a, k1);
  char* c = (char*)pc_keep_take(&s, PC_KEEP_MIN - 64, &k3);  /* small: not kept */
  bad |= (k3 << 4) | ((c == NULL) << 5);
  pc_keep_give(&s, c, k3);
  char* d = (char*)pc_keep_take(&s, PC_KEEP_MIN + 64, &k4);  /* kept: the same block */
  bad |= ((d != a) << 6) | ((!k4) << 7);
  pc_keep_give(&s, d, k4);
  char* e = (char*)pc_keep_take(&s, 3 * PC_KEEP_ALIGN, &k5);  /* grows */
  bad |= ((!k5) << 8) | ((s.cap < 3 * PC_KEEP_ALIGN) << 9);
  memset(e, 1, 3 * PC_KEEP_ALIGN);
  pc_keep_give(&s, e, k5);
  return bad | (s.busy << 10);
}
"""
    lib = ctypes.CDLL(build_shared(src))
    assert lib.pc_keep_check() == 0


def test_large_temporaries_are_kept_and_match_numpy_as_sizes_change(monkeypatch):
    """A GEMM with an epilogue whose product ``C`` is a temporary of symbolic size (or
    of at least 1 MiB) takes it from its kept slot; ``POLYCOMP_KEEP_TEMPS=0`` allocates
    it per call; both match numpy as the sizes grow and shrink (the slot's stale values
    from a larger call are never read)."""
    M, N, K = pc.sym("M N K")

    def mm_relu(A, B):
        c = ops.matmul(A, B)
        return pc.compute(c.shape, lambda i, j: pc.max(c[i, j] + 1.0, 0.0), name="r")
    rng = np.random.default_rng(7)
    for keep in ("1", "0"):
        monkeypatch.setenv("POLYCOMP_KEEP_TEMPS", keep)
        k = Kernel(mm_relu, name=f"mm_keep{keep}",
                   inputs={"A": pc.Tensor[(M, K), "float32"], "B": pc.Tensor[(K, N), "float32"]})
        ck = compile_kernel(k, "cpu")
        assert ("pc_keep_take(&pc_keep_" in ck.source) == (keep == "1")
        f = ck.backend.load(ck)
        for m, n, kk in ((300, 900, 40), (31, 17, 9), (600, 1000, 33), (5, 3, 2)):
            A = rng.standard_normal((m, kk), dtype=np.float32)
            B = rng.standard_normal((kk, n), dtype=np.float32)
            np.testing.assert_allclose(f(A, B), np.maximum(A.astype(np.float64) @ B + 1, 0),
                                       rtol=1e-4, atol=1e-3)
    monkeypatch.setenv("POLYCOMP_KEEP_TEMPS", "1")
    small = Kernel(mm_relu, name="mm_keep_small",
                   inputs={"A": pc.Tensor[(16, 8), "float32"], "B": pc.Tensor[(8, 24), "float32"]})
    assert "pc_keep_take(&pc_keep_" not in compile_kernel(small, "cpu").source   # 1.5 KiB: per call


def test_workspace_kernels_match_numpy_as_sizes_grow_and_shrink_and_across_threads():
    import threading

    M, N, K = pc.sym("M N K")
    k = Kernel(lambda A, B: ops.matmul(A, B), name="mm_ws",
               inputs={"A": pc.Tensor[(M, K), "float32"], "B": pc.Tensor[(K, N), "float32"]})
    ck = compile_kernel(k, "cpu")
    assert "pc_ws_take(" in ck.source      # the packed panels come from the workspace
    f = ck.backend.load(ck)
    rng = np.random.default_rng(5)

    def check(m, n, kk, errors):
        A = rng.standard_normal((m, kk), dtype=np.float32)
        B = rng.standard_normal((kk, n), dtype=np.float32)
        got = f(A, B)
        if not np.allclose(got, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3):
            errors.append((m, n, kk))
    errors: list = []
    for shape in [(7, 5, 3), (131, 257, 300), (13, 17, 1), (300, 97, 1031), (1, 1, 1)]:
        check(*shape, errors)
    threads = [threading.Thread(target=lambda s=s: [check(*s, errors) for _ in range(3)])
               for s in [(97, 130, 513), (64, 257, 100)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
