"""What the CPU backend emits: intrinsics per ISA, zmm registers in native AVX-512 builds,
masked and scalar tails, the register-blocked micro-kernel, OpenMP loops, contracted
temporaries, and the vector math helpers' accuracy; plus vectoriser corner cases
(padding selects, lane-range conditions, reductions, float64, extent 1) checked
against numpy through AVX2 (native) and AVX-512 (SIMDe).
"""
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret
from polycomp.frontend import ops
from polycomp.hw.cpu.build import CFunction, build_shared
from polycomp.hw.cpu.codegen import C_HEADER
from polycomp.hw.cpu.simd_build import build_simde, disassemble, has_native_avx512, simde_available
from polycomp.hw.cpu.target import cpu_flags
from polycomp.hw.cpu.vector_prelude import prelude

N, M, K = pc.sym("N M K")
HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()


@pc.tensor_expr
def softmax(x: pc.Tensor[(N, M), "float32"]):
    return ops.softmax(x)


@pc.tensor_expr
def matmul(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
    return ops.matmul(A, B)


@pc.tensor_expr
def shifted_window(x: pc.Tensor[(N, M), "float32"]):
    """out[i, j] = x[i, j - 2] where it exists, else 0 (a lane-range select)."""
    return pc.compute((N, M), lambda i, j: pc.select(j >= 2, x[i, pc.max(j - 2, 0)], 0.0),
                      name="out")


@pc.tensor_expr
def pad_read(x: pc.Tensor[(N, M), "float32"]):
    """A padded 1-d stencil: reads x[i, j-1], x[i, j], x[i, j+1] guarded by selects."""
    def at(i, j, d):
        return pc.select((j + d >= 0) & (j + d < M), x[i, j + d], 0.0)
    return pc.compute((N, M + 2), lambda i, j: at(i, j, -2) + 2.0 * at(i, j, -1) + at(i, j, 0),
                      name="out")


@pc.tensor_expr
def row_stats(x: pc.Tensor[(N, M), "float64"]):
    r = pc.reduce_axis(M, "r")
    q = pc.reduce_axis(M, "q")
    s = pc.reduce_axis(M, "s")
    lo = pc.compute((N,), lambda i: pc.min(x[i, r], axis=r), name="lo")
    hi = pc.compute((N,), lambda i: pc.max(x[i, q], axis=q), name="hi")
    tot = pc.compute((N,), lambda i: pc.sum(pc.abs(x[i, s]), axis=s), name="tot")
    return lo, hi, tot


def _source(kernel, target, options=None):
    return compile_kernel(kernel, target, options).source


def _paths():
    out = []
    if HAS_AVX2:
        out.append("avx2")
    if simde_available():
        out.append("simde")
    if has_native_avx512():
        out.append("native512")
    return out


def _callable(kernel, path, options=None):
    if path == "avx2":
        return build(kernel, "cpu-avx2", options)
    ck = compile_kernel(kernel, "cpu-avx512", options)
    if path == "simde":
        return CFunction(ck.final_ir, build_simde(ck.source))
    return CFunction(ck.final_ir, build_shared(ck.source))


# --------------------------------------------------------------------------- emitted code


def test_isa_specific_intrinsics():
    s2 = _source(softmax, "cpu-avx2")
    s5 = _source(softmax, "cpu-avx512")
    body2 = s2[s2.index("void softmax("):]
    body5 = s5[s5.index("void softmax("):]
    assert "__m256" in body2 and "_mm256_" in body2 and "__m512" not in body2
    assert "_mm512_" in body5 and "pc_mask16" in body5
    assert "pc512_exp_ps" in body5 and "pc512_reduce_max_ps" in body5


def test_native_avx512_build_uses_zmm_registers():
    for k in (softmax, matmul):
        asm = disassemble(_source(k, "cpu-avx512"))
        assert len(re.findall(r"%zmm\d+", asm)) > 20, k.name
    asm2 = disassemble(_source(softmax, "cpu-avx2"))
    assert "%ymm" in asm2


def test_masked_tails_and_scalar_tails():
    masked = _source(softmax, "cpu-avx512")
    assert "pc512_mask_storeu_ps" in masked and "pc512_maskz_loadu_ps" in masked
    scalar = _source(softmax, "cpu-avx2", {"tail": "scalar"})
    body = scalar[scalar.index("void softmax("):]
    assert "maskz_loadu" not in body and "mask_storeu" not in body
    if HAS_AVX2:
        f = build(softmax, "cpu-avx2", {"tail": "scalar"})
        x = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32)
        np.testing.assert_allclose(f(x), ops.OPS["softmax"].reference(x), rtol=1e-5, atol=1e-6)


def test_matmul_micro_kernel_structure():
    for target, vec, ni, mr in (("cpu-avx512", "__m512", 4, 6), ("cpu-avx2", "__m256", 2, 6)):
        ck = compile_kernel(matmul, target)
        assert ck.final_ir.counts.microkernels >= 1
        src = ck.source
        # the register tile: MR * NI accumulators declared as vector variables
        accs = set(re.findall(rf"{vec} (acc\d+_v\d+);", src))
        assert len(accs) >= mr * ni
        # the k loop of the first micro-kernel: one row of Y vectors and one column of X
        # broadcasts let-bound, then one FMA per accumulator
        mk = re.search(r"(acc\d+)_v0 = _mm\d+_fmadd_ps\((mk\d+)_x0, \2_y0, \1_v0\)", src)
        assert mk is not None, target
        acc, pre = mk.group(1), mk.group(2)
        fmas = re.findall(rf"{acc}_v\d+ = _mm\d+_fmadd_ps\({pre}_x\d+, {pre}_y\d+, "
                          rf"{acc}_v\d+\);", src)
        assert len(fmas) == mr * ni, target
        # (AVX2 binds each Y vector through pin_register: a register, not a folded load)
        ys = re.findall(rf"const {vec} {pre}_y\d+ = (?:\(\{{ {vec} pc_pin = )?"
                        rf"_mm\d+_loadu_ps\(\(B_pk", src)
        xs = re.findall(rf"const {vec} {pre}_x\d+ = _mm\d+_set1_ps\(A_pk", src)
        assert len(ys) == ni and len(xs) == mr, target        # packed operands
        assert "#pragma omp parallel" in src and "schedule(static)" in src


@pytest.mark.slow
def test_packing_is_interpretable():
    """The IR after packing (what the interpreter runs) computes the product."""
    ck = compile_kernel(matmul, "cpu-avx512")
    rng = np.random.default_rng(3)
    # two column panels (the second partial) and partial register rows; the interpreter
    # runs every element in Python, so the reduction is kept short
    A = rng.standard_normal((13, 21)).astype(np.float32)
    B = rng.standard_normal((21, 53)).astype(np.float32)
    np.testing.assert_allclose(interpret(ck, A, B), A @ B, rtol=1e-5, atol=1e-4)


def test_fused_softmax_is_one_parallel_loop_with_row_buffers():
    src = _source(softmax, "cpu-avx512")
    body = src[src.index("void softmax("):]
    # one parallel region, the barrier after the per-thread allocations, its for
    assert [ln.strip() for ln in body.splitlines() if "#pragma omp" in ln] == \
        ["#pragma omp parallel", "#pragma omp barrier", "#pragma omp for schedule(static)"]
    # the exponentials are one row (M floats) per thread, from the thread's workspace
    # (kept between calls), the row max/sum scalars
    assert re.search(r"pc_ws = \(char\*\)pc_ws_take\("
                     r"\(\(sizeof\(float\) \* \(size_t\)\(M\)", body)
    assert "softmax_exp = (float*)(pc_ws ? pc_ws + 0 : NULL)" in body
    assert "pc_ws_give(pc_ws, pc_ws_kept);" in body
    assert "float softmax_max[1]" in body and "float softmax_sum[1]" in body


def test_vector_math_accuracy():
    """exp, log, tanh, erf, sigmoid of the prelude against float64 numpy (rounded to
    float32), for each available build."""
    builds = []
    if HAS_AVX2:
        builds.append(("avx2", "native"))
    if has_native_avx512():
        builds.append(("avx512", "native"))
    if simde_available():
        builds.append(("avx512", "simde"))
    assert builds
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(2000) * 3, rng.uniform(-100, 100, 2000),
                        [0.0, -0.0, 1e-4, -1e-4, 1e-30, 88.0, 88.7, 89, -87, -88, -104, -110,
                         np.inf, -np.inf, np.nan, 0.6249, 0.6251, 5, -5]])
    refs = {"exp": np.exp, "log": np.log, "tanh": np.tanh,
            "erf": np.vectorize(math.erf, otypes=[np.float64]),
            "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
    for isa, mode in builds:
        W = 256 if isa == "avx2" else 512
        L = W // 32
        n = (len(x) + L - 1) // L * L
        xs = np.resize(x, n).astype(np.float32)
        cases = "".join(f"case {k}: r = pc{W}_{f}_ps(v); break;\n" for k, f in enumerate(refs))
        src = C_HEADER + prelude(isa) + f"""
void run(int which, int64_t n, const float* x, float* y) {{
  for (int64_t i = 0; i < n; i += {L}) {{
    __m{W} v = _mm{W}_loadu_ps(x + i), r = v;
    switch (which) {{ {cases} }}
    _mm{W}_storeu_ps(y + i, r);
  }}
}}
"""
        lib = build_simde(src) if mode == "simde" else build_shared(src)
        import ctypes
        fn = ctypes.CDLL(lib).run
        for k, (name, ref) in enumerate(refs.items()):
            xi = np.abs(xs) if name == "log" else xs
            y = np.empty(n, np.float32)
            fn(ctypes.c_int(k), ctypes.c_int64(n), ctypes.c_void_p(xi.ctypes.data),
               ctypes.c_void_p(y.ctypes.data))
            with np.errstate(all="ignore"):
                r = ref(xi.astype(np.float64)).astype(np.float32).astype(np.float64)
            np.testing.assert_allclose(y, r, rtol=4e-7, atol=1e-37, equal_nan=True,
                                       err_msg=f"{name} {isa} {mode}")


def test_strided_loads_of_the_prelude():
    """``pc<W>_load_strided_ps(p, s)`` is lanes ``p[l*s]`` for every build; stride 2 (a
    permute of two loads, natively) reads nothing past ``p[2*(L-1)]``: the array ends
    there, at the end of a page followed by an unmapped one.  Stride -1 (a reversed
    load, natively) with ``p`` the page's last element reads nothing past ``p``; the
    ``pd`` forms likewise."""
    import ctypes
    import mmap
    builds = [("avx2", "native")] * HAS_AVX2 + [("avx512", "native")] * has_native_avx512() \
        + [("avx512", "simde")] * simde_available()
    assert builds
    page = mmap.PAGESIZE
    guard = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(guard))
    assert libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 0) == 0
    arr = np.frombuffer(guard, np.float32, count=page // 4)
    arr[:] = np.arange(page // 4, dtype=np.float32)
    for isa, mode in builds:
        W = 256 if isa == "avx2" else 512
        L = W // 32
        src = C_HEADER + prelude(isa) + f"""
void run(const float* p, int64_t s, float* y) {{
  _mm{W}_storeu_ps(y, pc{W}_load_strided_ps(p, s));
}}
void run_pd(const double* p, int64_t s, double* y) {{
  _mm{W}_storeu_pd(y, pc{W}_load_strided_pd(p, s));
}}
"""
        lib = ctypes.CDLL(build_simde(src) if mode == "simde" else build_shared(src))
        for stride in (1, 2, 3, -1):
            start = page // 4 - (L - 1) * stride - 1 if stride > 0 else page // 4 - 1
            y = np.empty(L, np.float32)
            lib.run(ctypes.c_void_p(base + 4 * start), ctypes.c_int64(stride),
                    ctypes.c_void_p(y.ctypes.data))
            want = arr[start + np.arange(L) * stride]
            np.testing.assert_array_equal(y, want, err_msg=f"{isa} {mode} {stride}")
        arr_pd = np.frombuffer(guard, np.float64, count=page // 8)
        for stride in (1, 3, -1):
            start = page // 8 - (L // 2 - 1) * stride - 1 if stride > 0 else page // 8 - 1
            yd = np.empty(L // 2, np.float64)
            lib.run_pd(ctypes.c_void_p(base + 8 * start), ctypes.c_int64(stride),
                       ctypes.c_void_p(yd.ctypes.data))
            want_pd = arr_pd[start + np.arange(L // 2) * stride]
            np.testing.assert_array_equal(yd.view(np.uint64), want_pd.view(np.uint64),
                                          err_msg=f"{isa} {mode} pd {stride}")
        del arr_pd
    del arr
    assert libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 3) == 0
    guard.close()


# --------------------------------------------------------------------------- vectoriser


@pytest.mark.parametrize("path", _paths())
@settings(max_examples=8)
@given(n=st.integers(1, 5), m=st.integers(1, 70), seed=st.integers(0, 2 ** 31))
def test_lane_range_selects(path, n, m, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, m)).astype(np.float32)
    f = _callable(shifted_window, path)
    ref = np.zeros_like(x)
    ref[:, 2:] = x[:, :-2]
    np.testing.assert_array_equal(f(x), ref)
    g = _callable(pad_read, path)
    xp = np.pad(x, ((0, 0), (2, 2)))
    ref2 = xp[:, 0:m + 2] + 2 * xp[:, 1:m + 3] + xp[:, 2:m + 4]
    np.testing.assert_allclose(g(x), ref2, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("path", _paths())
@settings(max_examples=8)
@given(n=st.integers(1, 4), m=st.sampled_from([1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100]),
       seed=st.integers(0, 2 ** 31))
def test_float64_min_max_sum_reductions(path, n, m, seed):
    x = np.random.default_rng(seed).standard_normal((n, m))
    lo, hi, tot = _callable(row_stats, path)(x)
    np.testing.assert_array_equal(lo, x.min(1))
    np.testing.assert_array_equal(hi, x.max(1))
    np.testing.assert_allclose(tot, np.abs(x).sum(1), rtol=1e-13)


def test_vectorizer_reports_what_it_did():
    ck = compile_kernel(softmax, "cpu-avx2")
    assert ck.final_ir.counts.vectorized_loops == 3     # max; exp + sum (fused); divide
    assert compile_kernel(softmax, "c").final_ir.counts.vectorized_loops is None
    ck = compile_kernel(softmax, "cpu-avx2", {"vectorize": False})
    assert "_mm256" not in ck.source[ck.source.index("void softmax("):]


def test_degenerate_parallel_band_does_not_parallelise_a_reduction():
    """With one row (M = 1) isl generates no loop for the parallel i-tile band; the
    reduction loop of the micro-kernel below it must stay sequential."""
    from polycomp import ir
    from polycomp.frontend.dsl import Kernel
    k = Kernel(lambda A, B: ops.matmul(A, B), name="one_row",
               inputs={"A": pc.Tensor[(1, 5), "float32"], "B": pc.Tensor[(5, 17), "float32"]})
    for target in ("cpu-avx2", "cpu-avx512"):
        ck = compile_kernel(k, target)
        bad = []
        ir.walk(ck.final_ir.body, lambda n, bad=bad: bad.append(n) if isinstance(n, ir.For)
                and n.kind == "parallel" and not n.annotation("coincident", False) else None)
        assert not bad, target


# --------------------------------------------------------------------------- prefetch


def _const_kernel(fn, name, **inputs):
    from polycomp.frontend.dsl import Kernel
    return Kernel(fn, name=name, inputs={k: pc.Tensor[v] for k, v in inputs.items()})


def test_row_loops_prefetch_the_next_row_in_their_busiest_loop():
    k = _const_kernel(lambda x: ops.softmax(x), "sm_rows", x=((64, 1024), "float32"))
    # the prefetch addresses are read from the C text: spelled out (index-cse off)
    ck = compile_kernel(k, "cpu-avx512", {"index_cse": False})
    assert ck.final_ir.counts.prefetched_loops == 1
    body = ck.source[ck.source.index("void sm_rows("):]
    loops = body.split("for (")
    with_pf = [chunk for chunk in loops if "__builtin_prefetch" in chunk]
    assert len(with_pf) == 1 and "pc512_exp_ps" in with_pf[0]       # the exp + sum loop
    # the next row (+1024) of the input (read) and of the output (write), 4 lines each
    reads = re.findall(r"__builtin_prefetch\(x \+ (.*?), 0, 3\)", with_pf[0])
    writes = re.findall(r"__builtin_prefetch\((\w+) \+ (.*?), 1, 3\)", with_pf[0])
    out_name = ck.final_ir.outputs[0].name
    assert len(reads) == 4 and all("1024" in r for r in reads)
    assert len(writes) == 4 and all(w[0] == out_name and "1024" in w[1] for w in writes)
    off = compile_kernel(k, "cpu-avx512", {"prefetch": False})
    assert "__builtin_prefetch" not in off.source
    # symbolic rows, and products (their loads read packed buffers): no next-row
    # prefetch; a product's micro-kernels prefetch their C tile for writing only
    assert "__builtin_prefetch" not in _source(softmax, "cpu-avx512")
    mm = _source(matmul, "cpu-avx512")
    assert not re.findall(r"__builtin_prefetch\(.*, 0, 3\)", mm)
    assert re.findall(r"__builtin_prefetch\(matmul\w* \+ .*, 1, 3\)", mm)
    mk = _const_kernel(lambda A, B: ops.matmul(A, B), "mm_pf", A=((64, 64), "float32"),
                       B=((64, 64), "float32"))
    assert "__builtin_prefetch" not in compile_kernel(mk, "cpu-avx512",
                                                      {"prefetch": False}).source


@pytest.mark.slow
@pytest.mark.parametrize("path", _paths())
@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 5), m=st.sampled_from([1, 7, 16, 33, 100, 257, 1000]),
       seed=st.integers(0, 2 ** 31))
def test_prefetching_row_kernels_match_numpy(path, n, m, seed):
    """Constant shapes (the prefetch pass needs constant trip counts), rows shorter and
    longer than a vector, the last row prefetching past the end of the arrays."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, m)).astype(np.float32)
    g, b = rng.standard_normal(m).astype(np.float32), rng.standard_normal(m).astype(np.float32)
    sm = _const_kernel(lambda x: ops.softmax(x), f"pf_sm_{n}_{m}", x=((n, m), "float32"))
    ln = _const_kernel(lambda x, g, b: ops.layernorm(x, g, b), f"pf_ln_{n}_{m}",
                       x=((n, m), "float32"), g=((m,), "float32"), b=((m,), "float32"))
    np.testing.assert_allclose(_callable(sm, path)(x), ops.OPS["softmax"].reference(x),
                               rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(_callable(ln, path)(x, g, b),
                               ops.OPS["layernorm"].reference(x, g, b), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_matmul_epilogue_runs_on_each_register_tile():
    """relu(A @ B + b): the epilogue joins the product's parallel region (one parallel
    region instead of a second parallel loop over C) and the
    result matches numpy with the epilogue in the GEMM and apart."""
    from polycomp.frontend.dsl import Kernel
    k = Kernel(lambda A, B, b: ops.matmul_bias_relu(A, B, b), name="mbr_tiles",
               inputs={"A": pc.Tensor[(61, 80), "float32"], "B": pc.Tensor[(80, 131), "float32"],
                       "b": pc.Tensor[(131,), "float32"]})
    rng = np.random.default_rng(5)
    A = rng.standard_normal((61, 80)).astype(np.float32)
    B = rng.standard_normal((80, 131)).astype(np.float32)
    b = rng.standard_normal(131).astype(np.float32)
    ref = np.maximum(A.astype(np.float64) @ B + b, 0)
    pragmas = {}
    for on in (True, False):
        ck = compile_kernel(k, "cpu-avx512", {"gemm_epilogue": on})
        assert ("epilogue" in ck.notes["cpu-backbone-tile"][0]) == on
        body = ck.source[ck.source.index("void mbr_tiles("):]
        pragmas[on] = body.count("#pragma omp parallel")
        for path in _paths():
            np.testing.assert_allclose(_callable(k, path, {"gemm_epilogue": on})(A, B, b), ref,
                                       rtol=1e-4, atol=1e-4, err_msg=f"{path} epilogue={on}")
    # one parallel region (``parallel for``, or ``parallel`` + ``for`` around a packing)
    assert pragmas[True] == 1 and pragmas[False] == 2


@pytest.mark.slow
def test_epilogue_limits_and_a_shared_product_buffer():
    """An epilogue that reads an operand of the product (a residual ``A + A @ B``) stays
    a stage of its own (its reads would widen the packed blocks), and with the epilogue
    inside the product's parallel loop the temporary product is still one array
    allocated before the parallel region, not one per thread."""
    from polycomp.frontend.dsl import Kernel

    def resid(A, B):
        c = ops.matmul(A, B)
        return pc.compute(c.shape, lambda i, j: c[i, j] + A[i, j], name="res")
    k = Kernel(resid, name="resid", inputs={"A": pc.Tensor[(70, 70), "float32"],
                                            "B": pc.Tensor[(70, 70), "float32"]})
    ck = compile_kernel(k, "cpu-avx2")
    assert "epilogue" not in ck.notes["cpu-backbone-tile"][0]
    A = np.random.default_rng(1).standard_normal((70, 70)).astype(np.float32)
    for path in _paths():
        np.testing.assert_allclose(_callable(k, path)(A, A), A + A.astype(np.float64) @ A,
                                   rtol=1e-4, atol=1e-4, err_msg=path)
    ck = compile_kernel(ops.OPS["matmul_bias_relu"].kernel("float32"), "cpu-avx2")
    assert "epilogue" in ck.notes["cpu-backbone-tile"][0]
    body = ck.source[ck.source.index(f"void {ck.final_ir.name}("):]
    # (symbolic sizes: the product's kept slot, hw/cpu/codegen.py keep_temporary)
    assert body.index("pc_keep_take(&pc_keep_") < body.index("#pragma omp parallel")
