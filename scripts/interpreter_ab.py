"""A/B of the IR interpreter: ``lowering/interpreter.py`` at a git commit (old) against
the working tree's (new), in one process, alternating, on the compiled ``cpu`` IR of
kernels of ``tests/c_scop_kernels/`` at the sizes ``tests/test_c_scop_schedule.py``
interprets; prints best and median of each and whether every output is byte-identical.

    python scripts/interpreter_ab.py 778324e 3
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

#: (kernel, index into test_c_scop_schedule.SIZES[kernel])
CASES = [("gemm_bt", 1), ("mm2_f32", 0), ("gemm_ikj", 0), ("syrk_aa", 2),
         ("seidel_like", 0), ("heat3d_like", 0), ("symm_like", 0), ("lu_like", 0)]


def main(commit: str, rounds: int) -> None:
    from test_c_scop_schedule import SIZES, kernel, random_arrays

    from polycomp.driver import compile_kernel
    from polycomp.lowering import interpreter as new
    from polycomp.shapes import checked_arguments
    text = subprocess.run(["git", "show", f"{commit}:lowering/interpreter.py"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "interpreter_old.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("interpreter_old", path)
        assert spec is not None and spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
    for name, i in CASES:
        sizes = SIZES[name][i]
        k = kernel(name)
        f = compile_kernel(k, "cpu").ir
        arrays = random_arrays(k, sizes, seed=len(name))
        args = tuple(arrays[n] for n in list(k.inputs) + list(k.outputs))
        expected, arrs, values = checked_arguments(f, args, {p: sizes[p] for p in k.params})
        n = len(f.inputs)
        inputs = {b.name: a for b, a in zip(f.inputs, arrs[:n])}
        initial = {b.name: a for b, a in zip(expected[n:], arrs[n:])}
        times: dict[str, list[float]] = {"old": [], "new": []}
        outs = {}
        for _ in range(rounds):
            for tag, mod in (("old", old), ("new", new)):
                t0 = time.perf_counter()
                outs[tag] = mod.run_func(f, inputs, values, initial)
                times[tag].append(time.perf_counter() - t0)
        same = all(outs["old"][b].tobytes() == outs["new"][b].tobytes() for b in outs["old"])
        bo, bn = min(times["old"]), min(times["new"])
        mo, mn = float(np.median(times["old"])), float(np.median(times["new"]))
        print(f"{name:12s} {sizes!s:40s} old best {bo:6.2f} s med {mo:6.2f} s | new best "
              f"{bn:6.2f} s med {mn:6.2f} s | ratio best {bo / bn:4.2f} med {mo / mn:4.2f} | "
              f"bitwise {same}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
