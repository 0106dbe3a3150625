"""Differential fuzzer: random DSL programs on every backend against numpy.

Each case is a kernel of several random programs (:mod:`fuzz_programs`) over shared
inputs; it runs on the IR interpreter, ``c``, ``cpu-avx2``, ``cpu-avx512`` (SIMDe on
hosts without AVX-512, natively where the host has it), the CUDA simulator and the NPU
simulator (for the kernels the NPU target takes; a clear ``TargetError`` otherwise), and
every program's output is compared with its numpy reference.

CI runs ``POLYCOMP_FUZZ_N`` programs (default 48, one case per shard; 96 and 192
until 2026-11-29, ``POLYCOMP_FUZZ_N=192``; set it higher for a longer run, and
``POLYCOMP_FUZZ_SEED`` for other seeds) dealt to ``FUZZ_SHARDS`` tests that pytest-xdist
spreads over its workers, every case on all six paths. Throughput: 12 programs share one
kernel (one compile and one gcc build per target for all of them), one ``c`` compile
serves both the C build and the interpreter, and gcc builds are cached
(:mod:`polycomp.cache`). A failure names the seed and the program; replay is
``run_case(seed)`` (``make_case(seed, PROGRAMS_PER_CASE)`` rebuilds the kernel). Every
failure found is minimised into a regression test elsewhere (tests/test_nan_semantics.py,
tests/test_cpu_contract_carried.py, ...).
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

PROGRAMS_PER_CASE = 12


def _backends(case):
    """``[(name, run)]`` for the six paths.  One ``c`` compile serves the C build and
    the interpreter (which then runs exactly the IR the C source is printed from)."""
    from polycomp.driver import compile_kernel, interpret
    from polycomp.hw.cpu.build import CFunction
    from polycomp.hw.cpu.simd_build import build_simde, has_native_avx512

    k, xs = case.kernel, case.inputs
    compiled: dict = {}

    def ck(target):
        if target not in compiled:
            compiled[target] = compile_kernel(k, target)
        return compiled[target]

    def native(target):
        c = ck(target)
        return c.backend.load(c)(*xs)

    def avx512():
        if has_native_avx512():
            return native("cpu-avx512")
        c = ck("cpu-avx512")
        return CFunction(c.final_ir, build_simde(c.source))(*xs)

    return [("interpreter", lambda: interpret(ck("c"), *xs)),
            ("c", lambda: native("c")),
            ("npu-simulator", lambda: interpret(ck("npu"), *xs)),
            ("cpu-avx2", lambda: native("cpu-avx2")),
            ("cpu-avx512", avx512),
            ("cuda-simulator", lambda: interpret(ck("cuda"), *xs))]


def run_case(seed: int) -> tuple[list[str], int]:
    """Run case ``seed`` on every backend: (failure messages, programs the NPU took)."""
    from fuzz_programs import check_outputs, make_case

    from polycomp.errors import PolycompError, TargetError
    case = make_case(seed, PROGRAMS_PER_CASE)
    failures: list[str] = []
    npu_programs = 0
    for name, run in _backends(case):
        try:
            out = run()
        except TargetError as e:
            if name == "npu-simulator" and "npu" in str(e).lower():
                continue           # a kernel the NPU target does not take (clear error)
            failures.append(f"{name}: seed {seed}: {type(e).__name__}: {e}")
            continue
        except PolycompError as e:
            failures.append(f"{name}: seed {seed}: {type(e).__name__}: {e}")
            continue
        except Exception as e:  # a crash of polycomp itself is a failure too
            failures.append(f"{name}: seed {seed}: raw {type(e).__name__}: {e}")
            continue
        if name == "npu-simulator":
            npu_programs += len(case.programs)
        failures += check_outputs(case, out, name)
    return failures, npu_programs


#: programs CI runs (4 cases of 12, one per shard): on the Zen 3 host (AVX2, the
#: AVX-512 path through SIMDe) each case cost 10-25 s of CPU, the 96 programs of the
#: former default 193 s of CPU with the integer edge cases (docs/testing.md "Suite
#: time")
DEFAULT_FUZZ_N = 48


def _fuzz_seeds() -> list[int]:
    n_programs = int(os.environ.get("POLYCOMP_FUZZ_N", str(DEFAULT_FUZZ_N)))
    first = int(os.environ.get("POLYCOMP_FUZZ_SEED", "1000"))
    return list(range(first, first + -(-n_programs // PROGRAMS_PER_CASE)))


#: the cases are dealt to this many tests, so that pytest-xdist spreads them over its
#: workers (one shard runs its cases in turn in the worker's process)
FUZZ_SHARDS = 4


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(FUZZ_SHARDS))
def test_differential_fuzzer(shard):
    seeds = _fuzz_seeds()[shard::FUZZ_SHARDS]
    failures: list[str] = []
    npu = 0
    for seed in seeds:
        fails, n = run_case(seed)
        failures += fails
        npu += n
    assert not failures, f"{len(failures)} failure(s):\n" + "\n".join(failures[:40])
    print(f"{len(seeds) * PROGRAMS_PER_CASE} programs; the NPU took {npu}")


def test_fuzz_shards_cover_every_case():
    seeds = _fuzz_seeds()
    dealt = sorted(s for k in range(FUZZ_SHARDS) for s in seeds[k::FUZZ_SHARDS])
    assert dealt == seeds and len(seeds) * PROGRAMS_PER_CASE >= int(
        os.environ.get("POLYCOMP_FUZZ_N", str(DEFAULT_FUZZ_N)))


#: Integer cases with edge values (MIN, MAX, MAX-1, -1, 0) and overflowing comparisons,
#: two per dtype (int32, int64, int8): five of them found the wrong answers of issue #24 before
#: integer semantics were made numpy's everywhere (docs/dsl.md "Integer arithmetic").
#: The default run takes the first of each dtype (8-11 s of CPU a case on the Zen 3 host);
#: ``POLYCOMP_FUZZ_N`` above :data:`DEFAULT_FUZZ_N` (a longer run) takes all six.  The
#: semantics they found wrong have focused tests (tests/test_trust_int_semantics.py,
#: tests/test_ops_int_wrap.py).
INT_EDGE_SEEDS = [5009, 5038, 5010, 5016, 5034, 5048]


def _int_edge_seeds() -> list[int]:
    if int(os.environ.get("POLYCOMP_FUZZ_N", str(DEFAULT_FUZZ_N))) > DEFAULT_FUZZ_N:
        return INT_EDGE_SEEDS
    return INT_EDGE_SEEDS[::2]          # 5009 int32, 5010 int64, 5034 int8


@pytest.mark.slow
@pytest.mark.parametrize("seed", _int_edge_seeds())
def test_integer_edge_fuzzer(seed):
    from fuzz_programs import make_case
    case = make_case(seed, 1)
    assert case.dtype != "float32" and case.edges, seed
    failures, _ = run_case(seed)
    assert not failures, f"{len(failures)} failure(s):\n" + "\n".join(failures[:40])


#: Seeds whose cases once failed (minimised cases live in the focused test files):
#: 34 — the interpreter reported a "lanes race" when all active lanes stored NaN.
REGRESSION_SEEDS = [34]


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_fuzz_regressions(seed):
    failures, _ = run_case(seed)
    assert not failures, "\n".join(failures)
