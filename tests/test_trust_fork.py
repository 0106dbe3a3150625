"""A process that forks after a kernel ran does not hang in the child (issue #24).

libgomp's worker threads do not survive ``fork``: before the fix, a child of a process
whose OpenMP kernel had run waited forever for the parent's workers at its first
parallel region (a ``multiprocessing`` pool with the fork start method).  polycomp
releases the thread pool before every fork (:func:`polycomp.hw.cpu.build.
release_openmp_threads`, an ``os.register_at_fork`` hook).  Each scenario runs in its
own interpreter under a timeout, so a regression fails instead of hanging CI; the
workers use 4 OpenMP threads whatever the host's core count (1 thread never hangs).
"""
import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import pytest

SETUP = """
import multiprocessing as mp, os, sys
import numpy as np
import polycomp as pc
from polycomp.driver import build, compile_kernel
N = pc.sym("N")

@pc.tensor_expr
def twice(A: pc.Tensor[(N, N), "float32"]):
    return pc.compute((N, N), lambda i, j: A[i, j] * 2 + 1, name="B")

assert "omp parallel" in compile_kernel(twice, "c", {"parallel": True}).source
f = build(twice, "c", options={"parallel": True})
A = np.ones((128, 128), np.float32)
want = float(f(A).sum())             # the parent runs the kernel: libgomp's pool exists

def child(k):
    return float(f(A + k).sum()) - 128 * 128 * 2 * k
"""

SCENARIOS = {
    "pool-fork": """
with mp.get_context("fork").Pool(2) as p:
    got = p.map(child, range(4))
assert got == [want] * 4, got
""",
    "process-fork": """
ctx = mp.get_context("fork")
q = ctx.Queue()
pr = ctx.Process(target=lambda: q.put(child(3)))
pr.start()
got = q.get(timeout=60)
pr.join()
assert got == want and pr.exitcode == 0
""",
    "os-fork": """
pid = os.fork()
if pid == 0:
    ok = child(1) == want
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
assert float(f(A).sum()) == want     # the parent's kernel still runs (new pool)
""",
    "pool-spawn": """
if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as p:
        got = p.map(child, range(2))
    assert got == [want] * 2, got
""",
    "fork-without-pause": """
# a libgomp without omp_pause_resource_all (GCC < 11): the child runs on one thread
import polycomp.hw.cpu.build as b
b._pause_function = lambda lib: None
with mp.get_context("fork").Pool(2) as p:
    got = p.map(child, range(3))
assert got == [want] * 3, got
""",
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_kernels_run_in_children_after_the_parent_ran_one(scenario, tmp_path):
    script = tmp_path / "fork_case.py"
    script.write_text(textwrap.dedent(SETUP) + textwrap.dedent(SCENARIOS[scenario])
                      + "\nprint('done')\n")
    env = dict(os.environ, OMP_NUM_THREADS="4", PYTHONPATH=str(tmp_path))
    # its own session: on a timeout the whole group goes (hung children included)
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail(f"{scenario}: the forked child hung (libgomp's pool after fork)")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)    # no stray worker outlives the test
    assert p.returncode == 0 and "done" in out, err[-3000:]


def test_fork_hooks_are_registered_by_the_build_module():
    import polycomp.hw.cpu.build as b
    assert callable(b.release_openmp_threads)
    b.release_openmp_threads()        # no kernel loaded or loaded: never raises
    b.openmp_after_fork_in_child()
