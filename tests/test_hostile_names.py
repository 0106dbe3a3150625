"""User names never collide with C, libc, OpenMP, macros or intrinsics in generated code
(issue #14, silent wrong results 2 and 3): a kernel, tensor, symbol or stage may be
called ``free``, ``HUGE_VAL``, ``__SIZEOF_FLOAT__``, ``omp_get_thread_num``..."""
import os
import subprocess

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel
from polycomp.hw.clike import entry_name

HOSTILE = ["HUGE_VAL", "MB_CUR_MAX", "omp_get_thread_num", "free", "malloc", "expf",
           "memcpy", "system", "linux", "unix", "M_PI", "INT8_MAX", "_mm256_set1_ps",
           "__m256", "__SIZEOF_FLOAT__", "__LINE__"]
ROLES = ("kernel", "tensor", "symbol", "stage")


def _kernel(kernel="k", tensor="A", symbol="N", stage="out"):
    """``stage[i] = 2 * tensor[i] + 1`` over ``symbol`` elements, all names as given."""
    src = (f"import polycomp as pc\n"
           f"S = pc.sym({symbol!r})\n"
           f"def {kernel}({tensor}: pc.Tensor[(S,), 'float32']):\n"
           f"    return pc.compute((S,), lambda i: {tensor}[i] * 2.0 + 1.0, name={stage!r})\n")
    ns: dict = {}
    exec(compile(src, "<names>", "exec"), ns)
    return pc.tensor_expr(ns[kernel])


def _rotations(names):
    """Kernels whose four names are four distinct hostile names; rotating the list gives
    every name every role."""
    n = len(names)
    return [{role: names[(i + r) % n] for r, role in enumerate(ROLES)} for i in range(n)]


@pytest.mark.parametrize("names", _rotations(HOSTILE), ids=lambda d: "-".join(d.values()))
def test_hostile_names_build_and_compute(names):
    k = _kernel(**names)
    x = np.arange(37, dtype=np.float32)          # 37: a vector tail on AVX2
    for target in ("c", "cpu-avx2"):
        np.testing.assert_array_equal(build(k, target)(x), x * 2 + 1, err_msg=target)


@pytest.mark.nvcc
@pytest.mark.parametrize("names", _rotations(["free", "HUGE_VAL", "__SIZEOF_FLOAT__",
                                              "omp_get_thread_num", "float4"]),
                         ids=lambda d: "-".join(d.values()))
def test_hostile_names_cuda_compiles(names, tmp_path):
    src = compile_kernel(_kernel(**names), "cuda").source
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", os.fspath(cu) + ".cubin",
                        os.fspath(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_stage_named_like_a_symbol():
    k = _kernel(symbol="M", stage="M")
    x = np.arange(11, dtype=np.float32)
    for target in ("c", "cpu-avx2"):
        np.testing.assert_array_equal(build(k, target)(x), x * 2 + 1, err_msg=target)


def test_entry_point_names_are_predictable():
    assert entry_name("matmul_relu") == "matmul_relu"
    assert entry_name("free") == "pck_free"
    assert entry_name("omp_get_thread_num") == "pck_omp_get_thread_num"
    assert entry_name("__m256") == "pck___m256"
    ck = compile_kernel(_kernel(kernel="free"), "c")
    assert ck.final_ir.name == "pck_free" and "void pck_free(" in ck.source
