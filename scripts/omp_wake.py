"""What a parallel region costs on this host: a C probe (built with gcc -fopenmp) times
``#pragma omp parallel`` regions of 2 threads, each thread busy for ``WORK`` us, with a
50 us serial gap before each (the worker sleeps in between, as between kernels), and a
loop of ``#pragma omp barrier`` in one region; best and mean wall per region, us.
A region's wall above ``WORK`` is the wake of the sleeping worker plus the join.

    OMP_WAIT_POLICY=PASSIVE python scripts/omp_wake.py 0 100 170
    OMP_WAIT_POLICY=PASSIVE chrt -f 10 python scripts/omp_wake.py 100   # both cores ours
    python scripts/omp_wake.py 0 100 170      # polycomp's default: PASSIVE after a short spin

``--spin COUNT ...``: how long an idle worker spins for a ``GOMP_SPINCOUNT`` (with
``OMP_WAIT_POLICY=PASSIVE``): 2-thread regions with no work, each followed by a 3 ms
sleep of the caller; the worker's own CPU time per region (``CLOCK_THREAD_CPUTIME_ID``)
is its spin after the region plus the wake and join (the ``0`` row).

    python scripts/omp_wake.py --spin 0 1000 3000 10000

(A measuring probe like ``benchmarks/cpu_roofline.py``'s, not a kernel.)
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

PROBE = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
static volatile double sink;
static void work(int us) {
  double t = now(), x = 0; while (now() - t < us * 1e-6) x += 1; sink = x;
}
int main(int argc, char** argv) {
  int us = atoi(argv[1]), n = 400;
  double best = 1e9, tot = 0, bb = 1e9;
  for (int i = 0; i < n; i++) {
    double t = now();
    #pragma omp parallel num_threads(2)
    { work(us); }
    double d = now() - t; tot += d; if (d < best) best = d;
    work(50);
  }
  double t0 = now();
  #pragma omp parallel num_threads(2)
  { for (int i = 0; i < n; i++) { double t1 = now(); work(us);
      #pragma omp barrier
      double d = now() - t1; if (omp_get_thread_num() == 0 && d < bb) bb = d; } }
  printf("work %4d us: region best %7.1f mean %7.1f us; barrier+work best %7.1f mean %7.1f us\n",
         us, best * 1e6, tot / n * 1e6, bb * 1e6, (now() - t0) / n * 1e6);
  return 0;
}
"""


SPIN_PROBE = r"""
#include <omp.h>
#include <stdio.h>
#include <time.h>
static double cpu(void) {
  struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(void) {
  int n = 200; double first = 0, last = 0;
  for (int i = 0; i < n; i++) {
    #pragma omp parallel num_threads(2)
    { if (omp_get_thread_num() == 1) { double c = cpu(); if (i == 1) first = c; last = c; } }
    struct timespec gap = {0, 3000000}; nanosleep(&gap, NULL);
  }
  printf("%.1f\n", (last - first) / (n - 2) * 1e6);
  return 0;
}
"""


def _build(d: str, name: str, text: str) -> str:
    src, exe = os.path.join(d, f"{name}.c"), os.path.join(d, name)
    with open(src, "w") as f:
        f.write(text)
    subprocess.run(["gcc", "-O2", "-fopenmp", src, "-o", exe], check=True)
    return exe


def main() -> int:
    args = sys.argv[1:]
    with tempfile.TemporaryDirectory() as d:
        if args[:1] == ["--spin"]:
            exe = _build(d, "spin", SPIN_PROBE)
            for count in args[1:] or ["0", "1000"]:
                env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": count}
                us = subprocess.run([exe], env=env, check=True, capture_output=True,
                                    text=True).stdout.strip()
                print(f"GOMP_SPINCOUNT={count:>7}: worker CPU per region {us} us")
            print(f"load {os.getloadavg()[0]:.1f}")
            return 0
        if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
            from polycomp.hw.cpu.build import quiet_openmp
            quiet_openmp()                      # polycomp's default, as its kernels get
        exe = _build(d, "wake", PROBE)
        for us in args or ["0", "100"]:
            subprocess.run([exe, us], check=True)
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, "
          f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '(unset)')}, "
          f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
