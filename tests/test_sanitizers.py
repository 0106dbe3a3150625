"""Sanitizer job (#14): every op-library kernel built with ``-fsanitize=address,undefined``
into a standalone executable (:mod:`polycomp.hw.cpu.sanitize`: the kernel's C source
plus a generated ``main()``; nothing instrumented is loaded into this Python process)
and run in a subprocess on small random shapes, extent 1 and vector tails included; a
non-zero exit or any ASan/UBSan/LSan report fails the case, and the outputs are compared
with the numpy reference.

Targets: float32 and float64 on ``c``, ``cpu-avx2`` and, where the host has AVX-512,
``cpu-avx512`` (the vectorised paths); the other dtypes (float16, bfloat16, int32,
int8), which run scalar code on every CPU target, on ``c`` only. Executables are built
as the cases run (each process builds only the cases it runs; gcc works on a pool of two
threads a couple of cases ahead), then each case runs its shapes.
"""
from __future__ import annotations

import os
import zlib
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest
from ops_helpers import check_close, compiled

from polycomp.frontend.ops import OPS
from polycomp.hw.cpu.sanitize import (
    SanitizerError,
    build_sanitized,
    run_sanitized,
    run_sanitized_many,
)

#: dtypes built for both CPU targets; the others are built for ``c`` only
VECTOR_DTYPES = ("float32", "float64")

#: per shape draw, the extents tried for a free extent in [lo, hi]: 1 and sizes that
#: leave tails of 8-wide (float32) and 4-wide (float64) vectors
_TAILS = (1, 2, 3, 5, 7, 9, 11, 13, 17)


def _vector_targets() -> tuple:
    """``cpu-avx2``, and ``cpu-avx512`` where the host runs AVX-512 natively (the
    sanitized executable runs the kernel directly; SIMDe builds are covered by the
    fuzzer)."""
    from polycomp.hw.cpu.simd_build import has_native_avx512
    return ("cpu-avx2", "cpu-avx512") if has_native_avx512() else ("cpu-avx2",)


def _cases() -> list:
    out = []
    vector = _vector_targets()
    for name, spec in sorted(OPS.items()):
        for dtype in spec.dtypes:
            targets = ("c", *vector) if dtype in VECTOR_DTYPES else ("c",)
            for target in targets:
                out.append(pytest.param(name, dtype, target, id=f"{name}-{dtype}-{target}",
                                        marks=pytest.mark.slow))
    return out


def _shape_draws(name: str, dtype: str) -> list:
    """Three shape lists for op ``name``: every extent at its minimum (1 where the
    operator allows it), then two random draws from :data:`_TAILS`."""
    spec = OPS[name]
    rng = np.random.default_rng(zlib.crc32(f"{name}-{dtype}".encode()))

    def tail(lo: int, hi: int) -> int:
        options = [e for e in _TAILS if lo <= e <= hi] or [lo]
        return int(rng.choice(options))

    return [spec.shapes(lambda lo, hi: lo), spec.shapes(tail), spec.shapes(tail)]


class SanitizedBuilds:
    """Executables built on demand, for the cases this process runs: under xdist every
    worker sees every collected item, so building them all up front built each one
    twice. Asking for a case also queues the next selected case (gcc
    runs on a pool of two threads while the tests run)."""

    LOOKAHEAD = 1

    def __init__(self, wanted: list[tuple], workdir: str) -> None:
        self.wanted = wanted
        self.workdir = workdir
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.futures: dict[tuple, Future] = {}

    def _submit(self, key: tuple) -> None:
        if key in self.futures:
            return
        ck = compiled(*key)
        exe = os.path.join(self.workdir, "-".join(key))
        self.futures[key] = self.pool.submit(
            lambda f=ck.final_ir, s=ck.source, e=exe: (f, build_sanitized(f, s, e)))

    def get(self, key: tuple):
        """``(final_ir, executable path)`` of case ``key``."""
        self._submit(key)
        if key in self.wanted:
            at = self.wanted.index(key)
            for nxt in self.wanted[at + 1:at + 1 + self.LOOKAHEAD]:
                self._submit(nxt)
        return self.futures[key].result()


@pytest.fixture(scope="session")
def sanitized_builds(request, tmp_path_factory):
    """The builds of the selected cases, made as the cases run."""
    wanted = []
    for item in request.session.items:
        cs = getattr(item, "callspec", None)
        if cs is not None and item.originalname == "test_op_kernel_sanitized":
            wanted.append((cs.params["name"], cs.params["dtype"], cs.params["target"]))
    builds = SanitizedBuilds(wanted, str(tmp_path_factory.mktemp("sanitize")))
    yield builds
    builds.pool.shutdown(wait=True)


@pytest.mark.parametrize("name,dtype,target", _cases())
def test_op_kernel_sanitized(name, dtype, target, sanitized_builds):
    func, exe = sanitized_builds.get((name, dtype, target))
    spec = OPS[name]
    rng = np.random.default_rng(1)
    draws = _shape_draws(name, dtype)
    inputs = [spec.inputs(rng, shapes, dtype) for shapes in draws]
    runs = run_sanitized_many(exe, func, inputs)  # one process for the three shapes
    for shapes, xs, run in zip(draws, inputs, runs):
        out = run.outputs[0] if len(run.outputs) == 1 else run.outputs
        check_close(out, spec.reference(*xs), spec, dtype, shapes,
                    f"{name}[{dtype}] on {target} under ASan/UBSan, shapes {shapes}")


def test_harness_reports_overflow(tmp_path):
    """Liveness: the same kernel with one extra store just past its output (appended at
    the end of its body) is caught as a heap-buffer-overflow."""
    ck = compiled("add_row", "float32", "c")
    func = ck.final_ir
    out = func.outputs[0]
    assert ck.source.endswith("\n}\n") and len(out.shape) == len(func.params)
    past_end = " * ".join(p.name for p in func.params)
    bad = ck.source[:-3] + f"\n  {out.name}[{past_end}] = 0;\n}}\n"
    exe = build_sanitized(func, bad, str(tmp_path / "bad"))
    xs = OPS["add_row"].inputs(np.random.default_rng(0), [(3, 5), (5,)], "float32")
    run_sanitized(build_sanitized(func, ck.source, str(tmp_path / "good")), func, xs)
    with pytest.raises(SanitizerError, match="heap-buffer-overflow"):
        run_sanitized(exe, func, xs)


def test_avx512_cases_where_the_host_has_it():
    from polycomp.hw.cpu.simd_build import has_native_avx512
    ids = [p.id for p in _cases()]
    assert any(i.endswith("-float32-cpu-avx2") for i in ids)
    assert any(i.endswith("-float32-cpu-avx512") for i in ids) == has_native_avx512()
    assert not any(i.endswith("-int8-cpu-avx512") for i in ids)


def test_precompiled_headers_serve_the_builds():
    from polycomp.hw.cpu.sanitize import precompiled_header_flags
    flags = precompiled_header_flags()
    assert flags and os.path.exists(os.path.join(flags[1], "pc_san.h.gch"))
    assert precompiled_header_flags() is flags  # built once per process
