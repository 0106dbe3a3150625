"""GPU check bundles (hw/cuda/gpu_bundle.py, scripts/gpu_bundle_run.py): what the
simulator ran is recorded faithfully, and the runner's comparison rejects what it must."""
import importlib.util
import json
import os

import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import compile_kernel
from polycomp.hw.cuda.gpu_bundle import ENV_VAR
from polycomp.hw.cuda.simulator import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _runner():
    spec = importlib.util.spec_from_file_location(
        "gpu_bundle_run", os.path.join(ROOT, "scripts", "gpu_bundle_run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernel():
    N, M = pc.sym("N"), pc.sym("M")

    @pc.tensor_expr
    def rowsum_scaled(x: pc.Tensor[(N, M), "float32"]):
        j = pc.reduce_axis(M, "j")
        s = pc.compute((N,), lambda i: pc.sum(x[i, j], axis=j), name="s")
        return pc.compute((N, M), lambda i, j: x[i, j] / s[i], name="y")
    return rowsum_scaled


def test_simulate_records_a_case_the_runner_loads(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    ck = compile_kernel(_kernel(), "cuda")
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    x[2, 3] = np.nan
    out, _ = simulate(ck, x)
    cases = sorted(p for p in os.listdir(tmp_path / "cases") if p.endswith(".json"))
    assert len(cases) == 1
    m = json.loads((tmp_path / "cases" / cases[0]).read_text())
    assert m["entry"] == ck.final_ir.name and m["params"] == {"N": 5, "M": 7}
    assert [a["name"] for a in m["args"]] == [b.name for b in ck.final_ir.args]
    assert (tmp_path / m["source"]).read_text() == ck.source
    assert m["kernels"] and all(len(k["grid"]) == 3 and min(k["grid"]) >= 1
                                for k in m["kernels"])
    case = _runner().Case(str(tmp_path), cases[0][:-5])
    np.testing.assert_array_equal(case.arrays["in:x"], x)          # before the run
    np.testing.assert_array_equal(case.arrays["sim:" + m["args"][-1]["name"]], out)
    assert np.isnan(out[2]).all() and not np.isnan(out[1]).any()


def test_recording_is_off_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    ck = compile_kernel(_kernel(), "cuda")
    simulate(ck, np.ones((2, 3), np.float32))
    assert not os.listdir(tmp_path)


def test_runner_comparison():
    compare = _runner().compare
    w = np.array([1.0, np.nan, np.inf, 1e3], np.float32)
    assert compare(w.copy(), w, "float32")[0]
    near = w.copy()
    near[3] += 1e-2                                    # 1e-5 relative: rounding
    assert compare(near, w, "float32")[0]
    far = w.copy()
    far[0] += 1.0
    assert not compare(far, w, "float32")[0]
    moved_nan = w.copy()
    moved_nan[[0, 1]] = [np.nan, 1.0]
    ok, why = compare(moved_nan, w, "float32")
    assert not ok and "NaN" in why
    flipped_inf = w.copy()
    flipped_inf[2] = -np.inf
    assert not compare(flipped_inf, w, "float32")[0]
    assert not compare(np.array([1, 2], np.int32), np.array([1, 3], np.int32), "int32")[0]
    bf = np.array([0x3F80, 0x4000], np.uint16)                     # 1.0, 2.0 as bf16 bits
    assert compare(bf, bf, "bfloat16")[0]
    assert not compare(np.array([0x3F80, 0x4040], np.uint16), bf, "bfloat16")[0]


@pytest.mark.parametrize("ref", ["matmul", "bmm_chain", "attention"])
def test_timed_case_references(ref):
    refs = _runner().REFERENCES
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((2, 3, 3)).astype(np.float32) for _ in range(3))
    got = refs[ref]([a, b, c], {"scale": "0.5"})
    if ref == "matmul":
        want = a @ b
    elif ref == "bmm_chain":
        want = (a @ b) @ c
    else:
        t = (a @ b) * 0.5
        e = np.exp(t - t.max(-1, keepdims=True))
        want = (e / e.sum(-1, keepdims=True)) @ c
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_device_arch():
    from polycomp.errors import TargetError
    from polycomp.hw.cuda.launcher import device_arch
    assert device_arch(80, 80) == 80 and device_arch(80, 86) == 80     # same major: the target
    assert device_arch(80, 90) == 90 and device_arch(90, 100) == 100   # newer major: the device
    with pytest.raises(TargetError, match="sm_90"):
        device_arch(90, 80)


def _bench():
    spec = importlib.util.spec_from_file_location(
        "gpu_bundle_bench", os.path.join(ROOT, "scripts", "gpu_bundle_bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_hopper_case_records_arch_and_tensor_maps(tmp_path, monkeypatch):
    """A simulated cuda-sm90a GEMM is recorded with its architecture (the runner builds
    it for sm_90a) and the count of its kernels' TMA tensor maps (the runner gets them
    from the source's ``<entry>_tensormaps``)."""
    from polycomp.frontend import ops
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    ck = compile_kernel(ops.matmul_kernel("float16"), "hopper",
                        {"tc_tile": {"block": (64, 64), "warp": (64, 64), "stages": 2}})
    rng = np.random.default_rng(3)
    a = rng.standard_normal((70, 33)).astype(np.float16)
    b = rng.standard_normal((33, 65)).astype(np.float16)
    out, _ = simulate(ck, a, b)
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32),
                               rtol=1e-2, atol=1e-2)
    (case,) = [p[:-5] for p in os.listdir(tmp_path / "cases") if p.endswith(".json")]
    m = json.loads((tmp_path / "cases" / f"{case}.json").read_text())
    assert m["arch"] == "90a" and m["target"] == "cuda-sm90a"
    assert sum(k["tensormaps"] for k in m["kernels"]) >= 2        # A and B at least
    assert f"{m['entry']}_tensormaps" in ck.source
    run = _runner()
    sha = os.path.basename(m["source"])[:-3]
    assert run.source_archs(str(tmp_path)) == {sha: "90a"}
    assert run.arch_flags("90", "90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert run.arch_flags("90", "") == ["-arch=sm_90"]
    with pytest.raises(RuntimeError, match="needs sm_90a"):
        run.arch_flags("80", "90a")


@pytest.mark.slow
def test_hopper_bench_cases_load(tmp_path):
    """``--set hopper --quick``: timed sm_90a GEMM cases whose matmul reference is
    left to the GPU (ref_device); every case loads in the runner."""
    n = _bench().hopper_cases(str(tmp_path), quick=True)
    names = sorted(p[:-5] for p in os.listdir(tmp_path / "cases") if p.endswith(".json"))
    assert n == len(names) == 8     # per dtype: 2048^3 with f32 and 16-bit out, 2 transformer
    run = _runner()
    for name in names:
        case = run.Case(str(tmp_path), name)
        assert case.m["arch"] == "90a" and case.m["extra"]["ref_device"] == "1"
        assert case.ref_pending is not None and int(case.m["extra"]["flops"]) > 0
        assert case.m["extra"]["baseline"] in ("torch_matmul", "torch_matmul_bf16")
