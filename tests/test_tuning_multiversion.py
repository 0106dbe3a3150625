"""Multi-version dispatch (scheduler/tuning/multiversion.py and cuda_versions.py).

CPU: several versions as several C functions in ONE shared object with a host-side
dispatcher (bucket ranges + DISC-style guards: columns a multiple of the micro-kernel's
vector width, rows at least its register rows, a default-config fallback); the rule in
Python and in the object agree at every bucket boundary and odd shapes, and every
selected version gives numpy's product.  CUDA: several Tensor Core kernels in one
``.cu`` with the wave-model host rule; the rule in Python and in C (gcc) agree at every
boundary, every version runs in the GPU-semantics simulator against numpy, and the whole
``.cu`` compiles with ``nvcc -arch=sm_80 -cubin``."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polycomp.cli import main
from polycomp.frontend.ops import matmul_kernel
from polycomp.scheduler.tuning import records as rec
from polycomp.scheduler.tuning.guards import Guard
from polycomp.scheduler.tuning.multiversion import MultiVersionKernel, plan_versions

CONFIGS = {  # per bucket of N (rows): three different register/cache blockings
    16: {"microkernel": True, "parallel": False, "gemm_register": [2, 2],
         "gemm_tiles": [4, 16, 32]},
    64: {"microkernel": True, "parallel": True, "gemm_register": [6, 1],
         "gemm_tiles": [12, 8, 64]},
    128: {"microkernel": True, "parallel": True, "gemm_register": [6, 1],
          "gemm_tiles": [12, 8, 64]},                   # same as 64: merged
    256: {"microkernel": False, "parallel": True},
}


@pytest.fixture(scope="module")
def records_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("mv")
    k = matmul_kernel()
    h = rec.kernel_hash(k)
    path = d / "r.jsonl"
    rs = [rec.TuningRecord(h, "cpu-avx2", rec.shape_bucket({"N": n, "M": 24, "K": 20}),
                           cfg, 1e-3, {"N": n, "M": 24, "K": 20}) for n, cfg in CONFIGS.items()]
    rs.append(rec.TuningRecord(h, "cpu-avx2", rs[0].bucket, {"parallel": True}, 5e-3))  # slower
    rec.append(str(path), rs)
    return path


def test_plan_partitions_the_symbol(records_file):
    sym, vs = plan_versions(rec.load(str(records_file)), rec.kernel_hash(matmul_kernel()),
                            "cpu-avx2")
    assert sym == "N"
    assert [(v.lo, v.hi) for v in vs] == [(0, 16), (16, 128), (128, None)]
    assert [v.config for v in vs] == [CONFIGS[16], CONFIGS[64], CONFIGS[256]]


def test_guards_python_and_c_text():
    g = Guard("N", 16, 128, 8)
    assert g.holds({"N": 24}) and not g.holds({"N": 20}) and not g.holds({"N": 16})
    assert g.c_expr() == "N > 16 && N <= 128 && N % 8 == 0"
    assert g.text() == "16 < N <= 128 and N % 8 == 0"


@pytest.fixture(scope="module")
def cpu_mv(records_file, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("POLYCOMP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        yield MultiVersionKernel(matmul_kernel(), "cpu-avx2", str(records_file))
    finally:
        mp.undo()


def test_one_object_with_disc_guards(cpu_mv):
    mv = cpu_mv
    # v0: r2x2 (NR = 16 on AVX2 f32), v1: r6x1 (NR = 8), v2: no packing, v3: fallback
    assert [v.guard("N") for v in mv.versions] == [
        "1 < N <= 16 and M % 16 == 0", "16 < N <= 128 and M % 8 == 0", "128 < N", "always"]
    assert mv.versions[-1].fallback and mv.versions[-1].config == {}
    src = mv.source
    assert src.count("int pc_alloc_failed") == 1          # one header
    for i in range(4):
        assert f"static void matmul_float32__v{i}(" in src
    assert "int64_t matmul_float32__select(int64_t N, int64_t K, int64_t M)" in src
    assert mv.path.endswith(".so")


def test_every_boundary_and_odd_shapes(cpu_mv):
    mv = cpu_mv
    rng = np.random.default_rng(0)
    seen = set()
    for n in (1, 2, 5, 6, 15, 16, 17, 63, 64, 65, 127, 128, 129, 257):
        for m, k in ((16, 20), (24, 13), (7, 13), (1, 1), (33, 5), (8, 1)):
            v = {"N": n, "M": m, "K": k}
            i = mv.select(**v)
            assert mv.select_in_artifact(**v) == i, v
            seen.add(i)
            a = rng.standard_normal((n, k), dtype=np.float32)
            b = rng.standard_normal((k, m), dtype=np.float32)
            np.testing.assert_allclose(mv(a, b), a @ b, rtol=1e-4, atol=1e-4,
                                       err_msg=f"N={n} M={m} K={k} (version {i})")
    assert seen == {0, 1, 2, 3}
    assert mv.select(N=16, M=32, K=3) == 0 and mv.select(N=17, M=8, K=3) == 1
    assert mv.select(N=16, M=24, K=3) == 3                 # 24 % 16 != 0: fallback
    assert mv.select(N=1, M=16, K=3) == 3                  # fewer rows than MR = 2
    text = mv.explain()
    assert "4 versions (one shared object, dispatch on N)" in text
    assert "first version whose guard holds" in text


@given(n=st.integers(1, 300), m=st.integers(1, 70), k=st.integers(1, 40))
def test_any_shape_python_rule_equals_object_and_numpy(cpu_mv, n, m, k):
    v = {"N": n, "M": m, "K": k}
    assert cpu_mv.select_in_artifact(**v) == cpu_mv.select(**v)
    rng = np.random.default_rng(n * 10007 + m * 101 + k)
    a = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal((k, m), dtype=np.float32)
    np.testing.assert_allclose(cpu_mv(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_explain_shows_versions(records_file, tmp_path, capsys):
    f = tmp_path / "mm.py"
    f.write_text("from polycomp.frontend.ops import matmul_kernel\nmm = matmul_kernel()\n")
    assert main(["explain", str(f), "-t", "cpu-avx2", "--records", str(records_file)]) == 0
    out = capsys.readouterr().out
    assert "--- versions (--records) ---" in out
    assert "v0: 1 < N <= 16 and M % 16 == 0" in out and "v2: 128 < N" in out
    assert "v3: always" in out and "fallback" in out


# --------------------------------------------------------------------------- CUDA

BERT_ROWS = [32 * L for L in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]


def _boundaries(buckets):
    return sorted({1} | {x + d for x in buckets for d in (-1, 0, 1) if x + d >= 1})


def _c_select(mv, tmp_path, monkeypatch):
    from polycomp.hw.cpu.build import build_shared
    from polycomp.scheduler.tuning.cuda_versions import select_c
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    f = mv.func
    src = "#include <stdint.h>\n" + select_c(f.name, [p.name for p in f.params], mv.symbols,
                                             mv.versions) + "\n"
    lib = ctypes.CDLL(build_shared(src, flags=("-O2", "-fPIC", "-shared")))
    fn = getattr(lib, f"{f.name}__select")
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64] * len(f.params)
    return lambda **v: int(fn(*[v[p.name] for p in f.params]))


def test_cuda_rule_python_equals_c_at_bert_boundaries(tmp_path, monkeypatch):
    from polycomp.scheduler.tuning.cuda_versions import CudaMultiVersion
    mv = CudaMultiVersion(matmul_kernel("float16", "float32"), "cuda", BERT_ROWS, 3072, 1024)
    assert len(mv.versions) >= 3
    c_select = _c_select(mv, tmp_path, monkeypatch)
    picked = set()
    for n in _boundaries(BERT_ROWS):
        for m, k in ((3072, 1024), (1024, 4096), (3071, 1000), (8, 16)):
            v = {"N": n, "M": m, "K": k}
            assert c_select(**v) == mv.select(**v), v
            if (m, k) == (3072, 1024):
                picked.add(mv.select(**v))
    assert len(picked) >= 3            # the rule moves between versions as L grows
    assert mv.select(N=32, M=3072, K=1024) == 0               # smallest tiles at L = 1
    assert mv.select(N=16384, M=3072, K=1024) == len(mv.versions) - 1
    text = mv.explain()
    assert f"{len(mv.versions)} versions in one .cu" in text and "floor(blocks / W_v)" in text
    # at every BERT dense1 bucket the host rule picks the ranking model's own choice
    from polycomp.scheduler.tuning.gpu_space import rank
    for n in BERT_ROWS:
        assert mv.versions[mv.select(N=n, M=3072, K=1024)].point == \
            rank(mv.target, n, 3072, 1024, top=1)[0][1], n


@pytest.fixture(scope="module")
def bert_cuda_rule(tmp_path_factory):
    from polycomp.scheduler.tuning.cuda_versions import CudaMultiVersion
    mv = CudaMultiVersion(matmul_kernel("float16", "float32"), "cuda", BERT_ROWS, 1024, 4096)
    mp = pytest.MonkeyPatch()
    try:
        yield mv, _c_select(mv, tmp_path_factory.mktemp("rule"), mp)
    finally:
        mp.undo()


@given(n=st.integers(1, 1 << 20), m=st.integers(1, 1 << 16), k=st.integers(1, 1 << 16))
def test_cuda_rule_python_equals_c_any_shape(bert_cuda_rule, n, m, k):
    mv, c_select = bert_cuda_rule
    assert c_select(N=n, M=m, K=k) == mv.select(N=n, M=m, K=k)


@pytest.fixture(scope="module")
def small_cuda_mv():
    """Three small Tensor Core versions the rule switches between at simulable sizes (K
    tile 32 vs 64: the depth decides)."""
    from polycomp.scheduler.tuning.cuda_versions import CudaMultiVersion
    from polycomp.scheduler.tuning.gpu_space import GpuPoint
    points = [GpuPoint((16, 16), (16, 16), 32, 4), GpuPoint((16, 16), (16, 16), 64, 4),
              GpuPoint((32, 32), (16, 16), 32, 2)]
    return CudaMultiVersion(matmul_kernel("float16", "float32"), "cuda", [16, 32, 64, 128],
                            40, 32, points=points)


def test_cuda_versions_in_simulator_at_every_boundary(small_cuda_mv, tmp_path, monkeypatch):
    mv = small_cuda_mv
    c_select = _c_select(mv, tmp_path, monkeypatch)
    rng = np.random.default_rng(1)
    picked = set()
    for n in _boundaries([16, 32, 64, 128]):
        for m, k in ((40, 32), (24, 16), (8, 48), (17, 64)):
            a = rng.standard_normal((n, k)).astype(np.float16)
            b = rng.standard_normal((k, m)).astype(np.float16)
            out, i = mv.simulate(a, b)
            assert i == c_select(N=n, M=m, K=k)
            picked.add(i)
            np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32),
                                       rtol=1e-3, atol=1e-3, err_msg=f"N={n} M={m} K={k}")
    assert len(picked) >= 2
    from polycomp.hw.cuda.simulator import simulate
    for ck in mv.compiled:          # every version, whichever the rule picks, at odd sizes
        a = rng.standard_normal((33, 24)).astype(np.float16)
        b = rng.standard_normal((24, 17)).astype(np.float16)
        out, _ = simulate(ck, a, b)
        np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32),
                                   rtol=1e-3, atol=1e-3)


@pytest.mark.nvcc
def test_cuda_one_cu_compiles_to_cubin(small_cuda_mv, tmp_path, monkeypatch):
    from polycomp.hw.cuda.launcher import compile_cubin
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    mv = small_cuda_mv
    src = mv.source
    assert src.count("#include") == mv.compiled[0].source.count("#include")
    for i in range(len(mv.versions)):
        assert f"matmul_float16__v{i}_k0" in src
    assert 'extern "C" int matmul_float16(' in src
    assert compile_cubin(src, 80)[:4] == b"\x7fELF"
