"""The row-reduction GPU check bundle (scripts/gpu_bundle_rowreduce.py) and the runner's
additions for it (scripts/gpu_bundle_run.py: numpy references, torch peers, the copy
peer, bytes and GB/s): the timed cases are recorded with constant shapes and the
mapping they were compiled with, the numpy references agree with the DSL kernels in the
simulator at small shapes, and the torch peers (eager, on the CPU here) agree with the
references.  The timing itself needs a GPU (the issue's measurement)."""
from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.hw.cuda.simulator import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts",
                                                                      name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: group -> (shape arguments of the DSL kernel at a small size, extra)
SMALL = {"softmax": ((6, 40), {}), "layernorm": ((6, 40), {"eps": "1e-05"}),
         "row_sum": ((6, 40), {}), "row_max": ((6, 40), {}),
         "bias_residual_layernorm": ((6, 40), {"eps": "1e-05"}),
         "scale_mask_softmax": ((16, 8), {"scale": "0.125"}), "bias_gelu": ((6, 40), {})}


@pytest.mark.parametrize("group", list(SMALL))
def test_references_match_the_kernels(group):
    """The runner's numpy reference of each timed group computes what the bundle's DSL
    kernel computes (simulated here at a small shape)."""
    run = _script("gpu_bundle_run")
    kernels = _script("gpu_bundle_rowreduce")._kernels("float32")
    shape, extra = SMALL[group]
    ck = compile_kernel(kernels[group](*shape), "cuda-sm90")
    rng = np.random.default_rng(3)
    ins = [rng.standard_normal([int(x) for x in _shape(b)]).astype(np.float32)
           for b in ck.final_ir.inputs]
    out, rep = simulate(ck, *ins)
    assert rep.ok
    want = run.REFERENCES[group](ins, extra)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


def _shape(b):
    return [d.value for d in b.shape]


@pytest.mark.parametrize("group", list(SMALL))
def test_torch_peers_match_the_references(group):
    """The torch peer of each group (eager; torch.compile wraps the same function)
    computes the reference."""
    torch = pytest.importorskip("torch")
    run = _script("gpu_bundle_run")
    kernels = _script("gpu_bundle_rowreduce")._kernels("float32")
    shape, extra = SMALL[group]
    ck = compile_kernel(kernels[group](*shape), "cuda-sm90")
    rng = np.random.default_rng(4)
    ins = [rng.standard_normal(_shape(b)).astype(np.float32) for b in ck.final_ir.inputs]
    got = run._torch_fn(group, extra)(*[torch.from_numpy(x) for x in ins])
    np.testing.assert_allclose(got.numpy(), run.REFERENCES[group](ins, extra),
                               rtol=2e-5, atol=2e-5)


def test_case_bytes():
    run = _script("gpu_bundle_run")
    m = {"args": [{"shape": [4, 8], "dtype": "float32"}, {"shape": [4], "dtype": "float16"}]}
    assert run.case_bytes(m) == 4 * 8 * 4 + 4 * 2


@pytest.mark.slow
def test_quick_bundle(tmp_path):
    """``--quick``: one timed case per group and variant, constant shapes, the mapping
    and the model's estimate in the case's note, the peers named; the runner's dry run
    loads every case (references at the real sizes)."""
    mod = _script("gpu_bundle_rowreduce")
    n = mod.cases(str(tmp_path), quick=True)
    names = sorted(os.listdir(tmp_path / "cases"))
    manifests = [json.load(open(tmp_path / "cases" / f)) for f in names if f.endswith(".json")]
    assert len(manifests) == n
    groups = {m["extra"]["group"] for m in manifests}
    assert {"softmax", "layernorm", "row_sum", "row_max", "bias_residual_layernorm",
            "scale_mask_softmax", "bias_gelu", "softmax-float16"} <= groups
    for m in manifests:
        e = m["extra"]
        assert m["params"] == {} and e["time"] == "1"
        assert e["baseline"] == f"torch_{e['ref']},torch_compile_{e['ref']},copy"
        assert e["variant"] in ("model", "before")
        if e["group"] != "bias_gelu":
            assert "model" in e["note"] and ("T=" in e["note"])
    before = [m for m in manifests if m["extra"]["variant"] == "before"]
    assert all("warp T=32 R=8 V=1" in m["extra"]["note"] for m in before)
    run = _script("gpu_bundle_run")
    for m in manifests[:3]:                  # the runner loads them (inputs drawn there)
        case = run.Case(str(tmp_path), m["case"])
        assert any(k.startswith("ref:") for k in case.arrays)
