"""Multi-version dispatch (scheduler/tuning/multiversion.py): guards partition the
dispatch symbol, every bucket boundary and odd shapes give numpy's product, and explain
shows the versions and the rule."""
from __future__ import annotations

import numpy as np
import pytest

from polycomp.cli import main
from polycomp.frontend.ops import matmul_kernel
from polycomp.scheduler.tuning import records as rec
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


def test_every_boundary_and_odd_shapes(records_file, tmp_path, monkeypatch):
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    mv = MultiVersionKernel(matmul_kernel(), "cpu-avx2", str(records_file))
    rng = np.random.default_rng(0)
    expect = {1: 0, 15: 0, 16: 0, 17: 1, 63: 1, 64: 1, 65: 1, 127: 1, 128: 1, 129: 2, 257: 2}
    for n, idx in expect.items():
        assert mv.select(n) == idx, n
        for m, k in ((24, 20), (7, 13), (1, 1), (33, 5)):   # odd, prime and unit extents
            a = rng.standard_normal((n, k), dtype=np.float32)
            b = rng.standard_normal((k, m), dtype=np.float32)
            np.testing.assert_allclose(mv(a, b), a @ b, rtol=1e-4, atol=1e-4,
                                       err_msg=f"N={n} M={m} K={k}")
    text = mv.explain()
    assert "3 versions, dispatch on N" in text and "16 < N <= 128" in text
    assert "128 < N " in text


def test_explain_shows_versions(records_file, tmp_path, capsys):
    f = tmp_path / "mm.py"
    f.write_text("from polycomp.frontend.ops import matmul_kernel\nmm = matmul_kernel()\n")
    assert main(["explain", str(f), "-t", "cpu-avx2", "--records", str(records_file)]) == 0
    out = capsys.readouterr().out
    assert "--- versions (--records) ---" in out
    assert "v0: 0 < N <= 16" in out and "v2: 128 < N" in out
