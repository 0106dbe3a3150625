"""Multi-version dispatch (scheduler/tuning/multiversion.py and cuda_versions.py; the
modules: hw/cpu/multiversion.py, hw/cuda/multiversion.py).

The versions, the selector and the dispatchers are functions of ONE
:class:`~polycomp.ir.LoweredModule` that the backend prints once; the selector is IR,
evaluated in Python by :mod:`polycomp.lowering.host_eval`.

CPU: several versions as several C functions in ONE shared object with a host-side
dispatcher (bucket ranges + DISC-style guards: columns a multiple of the micro-kernel's
vector width, rows at least its register rows, a default-config fallback); the rule in
Python, the selector IR evaluated in Python and the object agree at every bucket boundary
and odd shapes, and every selected version gives numpy's product.  CUDA: several Tensor
Core kernels in one ``.cu`` with the wave-model host rule; the rule in Python, the IR in
Python and the IR printed as C (gcc) agree at every boundary, every version runs in the
GPU-semantics simulator against numpy, and the whole ``.cu`` compiles with
``nvcc -arch=sm_80 -cubin``."""
from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polycomp import ir
from polycomp.cli import main
from polycomp.frontend.ops import matmul_kernel
from polycomp.scheduler.tuning import records as rec
from polycomp.scheduler.tuning.guards import Guard
from polycomp.scheduler.tuning.multiversion import (
    MultiVersionKernel,
    plan_versions,
    select,
)

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


def test_guards_are_ir_and_agree_with_python():
    from polycomp.hw.cpu.codegen import CPrinter
    from polycomp.lowering.host_eval import call_host
    g = Guard("N", 16, 128, 8)
    assert g.holds({"N": 24}) and not g.holds({"N": 20}) and not g.holds({"N": 16})
    n = ir.Var("N", is_param=True)
    e = g.expr(n)
    assert CPrinter().expr(e) == "(((16 < N) && (N <= 128)) && ((N % 8) == 0))"
    assert g.text() == "16 < N <= 128 and N % 8 == 0"
    f = ir.LoweredFunc("g", (n,), (), (), ir.Return(e))
    for v in range(-3, 200):
        assert call_host(f, {"N": v}) == int(g.holds({"N": v})), v
    assert ir.is_const(Guard("N").expr(n), 1)                # no parts: true


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
    assert "so" in mv.library().how


def test_one_ir_module_printed_once(cpu_mv):
    """The artifact is the printout of one LoweredModule: the versions ARE the compiled
    kernels' final IR (renamed, nothing cut out of printed text), the selector and the
    dispatcher are IR calling them."""
    mv = cpu_mv
    m = mv.module
    assert [f.role for f in m.functions] == [ir.VERSION] * 4 + [ir.SELECTOR, ir.DISPATCH]
    for mf in m.of_role(ir.VERSION):
        assert mf.func.body is mv.compiled[mf.version].final_ir.body
        assert mf.func.name == f"matmul_float32__v{mf.version}" and not mf.exported
    assert m.selector.name == "matmul_float32__select"
    calls = []
    ir.walk(m.function("matmul_float32").func.body,
            lambda n: calls.append(n.func) if isinstance(n, ir.FuncCall) else None)
    assert calls == ["matmul_float32__select"] + [f"matmul_float32__v{i}" for i in range(4)]
    assert mv.source == mv.backend.emit_module(m, mv.compiled)       # deterministic
    from polycomp.lowering.printer import module_str
    assert "# selector -> int64" in module_str(m)


def test_every_boundary_and_odd_shapes(cpu_mv):
    mv = cpu_mv
    rng = np.random.default_rng(0)
    seen = set()
    for n in (1, 2, 3, 5, 6, 15, 16, 17, 63, 64, 65, 127, 128, 129, 131, 255, 256, 257):
        for m, k in ((16, 20), (24, 13), (7, 13), (1, 1), (33, 5), (8, 1), (32, 31)):
            v = {"N": n, "M": m, "K": k}
            i = mv.select(**v)
            assert mv.select_in_artifact(**v) == i == select("N", mv.versions, v), v
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
    assert cpu_mv.select_in_artifact(**v) == cpu_mv.select(**v) == \
        select("N", cpu_mv.versions, v)
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
    """The CUDA module's selector IR printed by the C backend (one more printer of the
    same IR), built with gcc."""
    from polycomp.hw.cpu.build import build_shared
    from polycomp.hw.registry import backend_for_name
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    f = mv.func
    sel = mv.module.selector
    only = ir.LoweredModule(f.name, (ir.ModuleFunction(sel, ir.SELECTOR, "int64"),))
    src = backend_for_name("c").emit_module(only, [])
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
            assert c_select(**v) == mv.select(**v) == mv.select_model(**v), v
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
    assert c_select(N=n, M=m, K=k) == mv.select(N=n, M=m, K=k) == \
        mv.select_model(N=n, M=m, K=k)


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
    assert 'extern "C" void matmul_float16_launch_config(' in src
    assert 'extern "C" int64_t matmul_float16__select(' in src
    assert compile_cubin(src, 80)[:4] == b"\x7fELF"


@pytest.mark.nvcc
@pytest.mark.slow
def test_cuda_module_host_code_built_by_nvcc(small_cuda_mv, tmp_path):
    """The module's host code (selector, dispatchers, every version's launch
    configuration) built by nvcc as a host shared library runs without a GPU: its
    ``__select`` is the Python rule's choice and its ``_launch_config`` writes the
    selected version's own launch configuration."""
    import subprocess
    mv = small_cuda_mv
    cu = tmp_path / "mv.cu"
    cu.write_text(mv.source)
    so = tmp_path / "mv.so"
    subprocess.run(["nvcc", "-arch=sm_80", "-Xcompiler", "-fPIC", "-shared", "-o", str(so),
                    str(cu)], check=True, capture_output=True)
    lib = ctypes.CDLL(str(so))
    sel = lib.matmul_float16__select
    sel.restype = ctypes.c_int64
    sel.argtypes = [ctypes.c_int64] * 3
    names = [p.name for p in mv.func.params]
    seen = set()
    for n in _boundaries([16, 32, 64, 128]) + [1000, 4099]:
        for m, k in ((40, 32), (24, 16), (8, 48), (17, 64), (1, 1), (13, 97)):
            v = {"N": n, "M": m, "K": k}
            args = [ctypes.c_int64(v[p]) for p in names]
            i = sel(*args)
            assert i == mv.select(**v) == mv.select_model(**v), v
            seen.add(i)
            got, want = (ctypes.c_longlong * 6)(), (ctypes.c_longlong * 6)()
            lib.matmul_float16_launch_config(*args, got)
            getattr(lib, f"matmul_float16__v{i}_launch_config")(*args, want)
            assert list(got) == list(want), v
    assert len(seen) >= 2


def test_scalar_c_module_and_thread_counts(tmp_path, monkeypatch):
    """The scalar C printer path (target ``c``: no vector prelude, no micro-kernel guards)
    and records of another thread count, which never enter the plan."""
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch = sys.modules.get("torch")    # imported by an earlier test: its count rules
    if torch is not None:
        monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    k = matmul_kernel()
    h = rec.kernel_hash(k)
    path = tmp_path / "c.jsonl"
    rs = [rec.TuningRecord(h, "c", rec.shape_bucket({"N": n, "M": 5, "K": 3}),
                           {"parallel": n > 8}, 1e-3, {"N": n, "M": 5, "K": 3}, "m", 2)
          for n in (8, 64)]
    rs.append(rec.TuningRecord(h, "c", rs[0].bucket, {"fuse": False}, 1e-9, rs[0].shape,
                               "m", 1))                 # fastest, but on one thread
    rec.append(str(path), rs)
    mv = MultiVersionKernel(k, "c", str(path))
    assert [v.config for v in mv.versions] == [{"parallel": False}, {"parallel": True}]
    assert "__m256" not in mv.source and "static void matmul_float32__v1(" in mv.source
    rng = np.random.default_rng(3)
    for n, m, kk in ((1, 1, 1), (7, 3, 2), (8, 5, 3), (9, 5, 3), (13, 1, 7), (64, 2, 2),
                     (65, 3, 1)):
        v = {"N": n, "M": m, "K": kk}
        assert mv.select_in_artifact(**v) == mv.select(**v) == int(n > 8), v
        a = rng.standard_normal((n, kk), dtype=np.float32)
        b = rng.standard_normal((kk, m), dtype=np.float32)
        np.testing.assert_allclose(mv(a, b), a @ b, rtol=1e-5, atol=1e-5)
        out, i = mv.execute(a, b)                       # the interpreter, same choice
        assert i == int(n > 8)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_cuda_dispatch_recorded_for_gpu_bundles(small_cuda_mv, tmp_path, monkeypatch):
    """With a GPU check bundle being recorded, a dispatch becomes a case of the module's
    ``.cu`` whose host entry point and ``__select`` scripts/gpu_bundle_run.py calls."""
    import json

    from polycomp.hw.cuda.gpu_bundle import ENV_VAR
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    mv = small_cuda_mv
    rng = np.random.default_rng(5)
    a = rng.standard_normal((33, 32)).astype(np.float16)
    b = rng.standard_normal((32, 40)).astype(np.float16)
    out, i = mv.simulate(a, b)
    cases = [json.loads(p.read_text()) for p in (tmp_path / "cases").glob("*.json")]
    (m,) = [c for c in cases if c.get("extra", {}).get("select")]
    assert m["entry"] == "matmul_float16" and m["kernels"] == []
    assert m["extra"] == {"select": "matmul_float16__select", "version": str(i)}
    assert m["params"] == {"N": 33, "K": 32, "M": 40}
    assert (tmp_path / m["source"]).read_text() == mv.source
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32),
                               rtol=1e-3, atol=1e-3)


def test_dot_tile_versions_outline_their_tiles_apart(tmp_path, monkeypatch):
    """Two int8 versions on a dot-product target: each version's outlined register tiles
    (the vector printer's ``static noinline`` functions) are printed in the module under
    that version's own names, and the one object runs each version exactly."""
    import re

    from polycomp.hw.cpu.build import CFunction
    from polycomp.hw.cpu.simd_build import build_simde
    from polycomp.scheduler.tuning.multiversion import GuardPlan, MultiVersion, Version
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    k = matmul_kernel("int8")
    plan = GuardPlan("N", (Version(0, 16, {"gemm_register": [2, 1], "parallel": False}, 1.0),
                           Version(16, None, {"gemm_register": [6, 1], "parallel": False},
                                   float("nan"), fallback=True)))
    mv = MultiVersion(k, "cpu-avx512-bf16", plan)
    defined = re.findall(r"static __attribute__\(\(noinline\)\) void (\w+)\(", mv.source)
    assert defined and len(defined) == len(set(defined)), defined
    assert {d.split("_")[1] for d in defined} == {"v0", "v1"}, defined
    lib = CFunction(mv.module.function(mv.module.name).func, build_simde(mv.source))
    rng = np.random.default_rng(5)
    for n, m, kk in ((3, 17, 9), (16, 5, 4), (17, 33, 13), (40, 1, 1)):
        a = rng.integers(-128, 128, (n, kk), dtype=np.int8)
        b = rng.integers(-128, 128, (kk, m), dtype=np.int8)
        assert mv.select(N=n, M=m, K=kk) == int(n > 16)
        np.testing.assert_array_equal(lib(a, b), a.astype(np.int32) @ b.astype(np.int32))
