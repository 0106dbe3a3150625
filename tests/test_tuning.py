"""`polycomp tune`, tuning records and their reuse by compile/run/build
(scheduler/tuning/tune.py, records.py, cli.py), and Ray trials (distributed.py)."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from polycomp.cli import main
from polycomp.driver import build, compile_kernel
from polycomp.errors import UsageError
from polycomp.scheduler.tuning import records as rec
from polycomp.scheduler.tuning.tune import tune

KERNEL = textwrap.dedent('''
    import polycomp as pc
    N, M, K = pc.sym("N M K")

    @pc.tensor_expr
    def mm(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
        k = pc.reduce_axis(K, "k")
        return pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
''')
SHAPE = {"N": 24, "M": 40, "K": 16}


@pytest.fixture
def kfile(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / "mm.py"
    p.write_text(KERNEL)
    return p


def kernel_of(path):
    from polycomp.cli import find_kernels, load_module
    return find_kernels(load_module(str(path)))[0]


def test_buckets():
    assert [rec.bucket_of(n) for n in (1, 2, 3, 32, 33, 512, 513)] == \
        [1, 2, 4, 32, 64, 512, 1024]
    assert rec.shape_bucket({"N": 33, "K": 1024, "M": 1}) == "K=1024,M=1,N=64"


def test_records_merge_and_best(tmp_path, kfile):
    k = kernel_of(kfile)
    h = rec.kernel_hash(k)
    assert h == rec.kernel_hash(kernel_of(kfile))          # structure, not identity
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rec.append(str(a), [rec.TuningRecord(h, "cpu-avx2", "K=16,M=64,N=32", {"parallel": False},
                                         2e-3, {"N": 24, "M": 40, "K": 16}, "m1")])
    rec.append(str(b), [rec.TuningRecord(h, "cpu-avx2", "K=16,M=64,N=32", {"parallel": True},
                                         1e-3, {"N": 24, "M": 40, "K": 16}, "m2"),
                        rec.TuningRecord(h, "cpu-avx2", "K=1,M=1,N=1", {"fuse": False},
                                         1e-6, {"N": 1, "M": 1, "K": 1}, "m2"),
                        rec.TuningRecord("other", "cpu-avx2", "K=16,M=64,N=32", {}, 1e-9)])
    merged = tmp_path / "all.jsonl"
    merged.write_text(a.read_text() + b.read_text())        # merging is concatenation
    both = rec.load(str(merged))
    assert len(both) == 4 and {r.machine for r in both[:3]} == {"m1", "m2"}
    assert rec.options_from_records(k, "cpu-avx2", str(merged), SHAPE) == {"parallel": True}
    # no shape: the largest bucket's best
    assert rec.options_from_records(k, "cpu-avx2", str(merged)) == {"parallel": True}
    with pytest.warns(rec.TuningRecordWarning, match=r"no tuning record .* applies to "
                      r"kernel mm .* on cpu-avx512 .*3 of other targets.*default config"):
        assert rec.options_from_records(k, "cpu-avx512", str(merged), SHAPE) == {}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kernel": 1}\n' + a.read_text())
    with pytest.warns(rec.TuningRecordWarning, match="bad.jsonl:1: not a tuning record"):
        assert len(rec.load(str(bad))) == 1          # the damaged line alone is skipped


@pytest.mark.slow
def test_tune_end_to_end_records_reused_by_build_and_compile(kfile, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    shape = ",".join(f"{k}={v}" for k, v in SHAPE.items())
    assert main(["tune", str(kfile), "-t", "cpu-avx2", "--shape", shape, "--budget", "4",
                 "--repeat", "1", "--records", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "4 trials" in text and "best config" in text
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 4 and lines[0]["config"] == {}
    assert all(x["bucket"] == "K=16,M=64,N=32" and x["target"] == "cpu-avx2" and
               x["machine"] and np.isfinite(x["seconds"]) for x in lines)
    assert len({json.dumps(x["config"], sort_keys=True) for x in lines}) >= 3
    # a second run appends (records from several runs/machines accumulate)
    assert main(["tune", str(kfile), "-t", "cpu-avx2", "--shape", shape, "--budget", "1",
                 "--repeat", "1", "--records", str(out), "--no-progress", "--seed", "1"]) == 0
    assert len(out.read_text().splitlines()) == 5
    # build() with the recorded best: correct, and it is the fastest record's config
    k = kernel_of(kfile)
    opts = rec.options_from_records(k, "cpu-avx2", str(out), SHAPE)
    best = min((json.loads(x) for x in out.read_text().splitlines()),
               key=lambda x: x["seconds"])
    assert opts == best["config"]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((SHAPE["N"], SHAPE["K"]), dtype=np.float32)
    b = rng.standard_normal((SHAPE["K"], SHAPE["M"]), dtype=np.float32)
    np.testing.assert_allclose(build(k, "cpu-avx2", opts)(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert main(["run", str(kfile), "-t", "cpu-avx2", "--shape", shape, "--records",
                 str(out), "--repeat", "1"]) == 0


def test_compile_uses_records_and_options_override(kfile, tmp_path):
    k = kernel_of(kfile)
    cfg = {"microkernel": True, "parallel": False, "gemm_register": [4, 2],
           "gemm_tiles": [8, 16, 32]}
    r = tmp_path / "r.jsonl"
    rec.append(str(r), [rec.TuningRecord(rec.kernel_hash(k), "cpu-avx2", "K=16,M=64,N=32",
                                         cfg, 1e-3, SHAPE)])
    src = {}
    for name, extra in [("default", []), ("records", ["--records", str(r)]),
                        ("override", ["--records", str(r), "-O", "parallel=True"])]:
        o = tmp_path / f"{name}.c"
        assert main(["compile", str(kfile), "-t", "cpu-avx2", "-o", str(o), *extra]) == 0
        src[name] = o.read_text()
    assert src["records"] == compile_kernel(k, "cpu-avx2", cfg).source != src["default"]
    assert src["override"] == compile_kernel(k, "cpu-avx2", {**cfg, "parallel": True}).source


def test_tune_rejects_npu_targets_and_bad_workers(kfile):
    k = kernel_of(kfile)
    with pytest.raises(UsageError, match="nothing to tune for kernel mm on npu"):
        tune(k, "npu", SHAPE, budget=1)
    with pytest.raises(UsageError, match="must bind every size symbol of kernel mm: "
                                         "missing K, M"):
        tune(k, "cuda", {"N": 24}, budget=1)
    with pytest.raises(UsageError, match="nothing to tune for kernel mm on cuda"):
        tune(k, "cuda", SHAPE, budget=1)        # float32: no Tensor Core tiles apply
    with pytest.raises(UsageError, match="local:N"):
        tune(k, "cpu-avx2", SHAPE, budget=1, workers="local:0")


def test_tune_cuda_writes_model_records_and_explain_plans(tmp_path, capsys):
    """No GPU: ``tune -t cuda`` records the analytic model's choice per shape (marked as
    not measured); ``explain -t cuda --records`` plans the one-.cu versions from them."""
    f = tmp_path / "mm16.py"
    f.write_text("from polycomp.frontend.ops import matmul_kernel\n"
                 "mm = matmul_kernel('float16', 'float32')\n")
    r = tmp_path / "gpu.jsonl"
    for n in (32, 256, 4096):
        assert main(["tune", str(f), "-t", "cuda", "--shape", f"N={n},M=3072,K=1024",
                     "--records", str(r), "--no-progress"]) == 0
    recs = rec.load(str(r))
    assert len(recs) == 3 and all("not measured" in x.machine for x in recs)
    assert len({str(x.config) for x in recs}) >= 2
    capsys.readouterr()
    assert main(["explain", str(f), "-t", "cuda", "--records", str(r)]) == 0
    out = capsys.readouterr().out
    assert "versions in one .cu" in out and "floor(blocks / W_v)" in out


@pytest.mark.slow
def test_ray_local_trials(kfile):
    """--workers local:2: trials run as Ray tasks on a local Ray (worker processes), in
    batches of two; every trial's output was checked against the default config's."""
    import os

    import ray
    k = kernel_of(kfile)
    try:
        recs = tune(k, "cpu-avx2", SHAPE, budget=2, repeat=1, workers="local:2")
        assert ray.is_initialized()
        pids = ray.get([ray.remote(lambda: os.getpid()).remote() for _ in range(2)])
        assert os.getpid() not in pids                     # tasks run out of process
    finally:
        ray.shutdown()
    assert len(recs) == 2 and recs[0].config == {} and recs[1].config != {}
    assert all(np.isfinite(r.seconds) for r in recs)
    # Ray starts its workers with OMP_NUM_THREADS=1: the remote trial must still run
    # with this process's thread count, and say so in its record (issue #24)
    from polycomp.hw.target import get_target
    assert [r.threads for r in recs] == [get_target("cpu-avx2").cpu.threads] * 2


def test_docs_tuning_python_examples_run(tmp_path, monkeypatch):
    """docs/tuning.md's Python blocks run (tests/test_docs.py covers a fixed page list)."""
    import os
    import re
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(root, "docs", "tuning.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    ns: dict = {}
    for k, b in enumerate(blocks):
        exec(compile(b, f"docs/tuning.md (python block {k})", "exec"), ns)
