"""Sanitizer job (#14): every op-library kernel built with ``-fsanitize=address,undefined``
into a standalone executable (:mod:`polycomp.hw.cpu.sanitize`: the kernel's C source
plus a generated ``main()``; nothing instrumented is loaded into this Python process)
and run in a subprocess on small random shapes, extent 1 and vector tails included; a
non-zero exit or any ASan/UBSan/LSan report fails the case, and the outputs are compared
with the numpy reference.

Targets: float32 and float64 on ``c``, ``cpu-avx2`` and, where the host has AVX-512,
``cpu-avx512`` (the vectorised paths); the other dtypes (float16, bfloat16, int32,
int8), which run scalar code on every CPU target, on ``c`` only. Executables are built
once per session by a pool of two gcc processes (only for the cases pytest selected),
then each case runs its shapes.
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


@pytest.fixture(scope="session")
def sanitized_builds(request, tmp_path_factory) -> dict:
    """``{(name, dtype, target): Future of (final_ir, executable path)}`` for the
    selected cases: kernels compiled here in turn, gcc runs two at a time."""
    wanted = []
    for item in request.session.items:
        cs = getattr(item, "callspec", None)
        if cs is not None and item.originalname == "test_op_kernel_sanitized":
            wanted.append((cs.params["name"], cs.params["dtype"], cs.params["target"]))
    workdir = tmp_path_factory.mktemp("sanitize")
    pool = ThreadPoolExecutor(max_workers=2)
    futures: dict[tuple, Future] = {}
    for key in wanted:
        name, dtype, target = key
        func = compiled(name, dtype, target).final_ir
        source = compiled(name, dtype, target).source
        exe = os.path.join(workdir, "-".join(key))
        futures[key] = pool.submit(lambda f=func, s=source, e=exe: (f, build_sanitized(f, s, e)))
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.parametrize("name,dtype,target", _cases())
def test_op_kernel_sanitized(name, dtype, target, sanitized_builds):
    key = (name, dtype, target)
    func, exe = sanitized_builds[key].result()
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
