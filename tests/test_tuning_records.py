"""Tuning records and `polycomp tune` on hostile and unusual input (issue #24): every
case is the right answer or one clear line, never an internal error, a silently ignored
file or a record that is not JSON."""
from __future__ import annotations

import json
import math
import sys
import textwrap

import pytest

from polycomp.cli import main
from polycomp.errors import UsageError
from polycomp.scheduler.tuning import records as rec
from polycomp.scheduler.tuning.tune import safe_measure, tune

MM = textwrap.dedent('''
    import polycomp as pc
    N, M, K = pc.sym("N M K")

    @pc.tensor_expr
    def mm(A: pc.Tensor[(N, K), "float32"], B: pc.Tensor[(K, M), "float32"]):
        k = pc.reduce_axis(K, "k")
        return pc.compute((N, M), lambda i, j: pc.sum(A[i, k] * B[k, j], axis=k), name="C")
''')
EW = textwrap.dedent('''
    import polycomp as pc
    N, M = pc.sym("N M")

    @pc.tensor_expr
    def ew(A: pc.Tensor[(N, M), "float32"]):
        return pc.compute((N, M), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
''')
TOTAL = textwrap.dedent('''
    import polycomp as pc
    N = pc.sym("N")

    @pc.tensor_expr
    def total(A: pc.Tensor[(N,), "float32"]):
        i = pc.reduce_axis(N, "i")
        return pc.compute((1,), lambda z: pc.sum(A[i], axis=i), name="S")
''')
SHAPE = {"N": 24, "M": 40, "K": 16}
BUCKET = "K=16,M=64,N=32"
GOOD = {"microkernel": True, "parallel": False, "gemm_register": [4, 2],
        "gemm_tiles": [8, 16, 32]}


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    for name, text in (("mm.py", MM), ("ew.py", EW), ("total.py", TOTAL)):
        (tmp_path / name).write_text(text)
    return tmp_path


def kernel_of(path):
    from polycomp.cli import find_kernels, load_module
    return find_kernels(load_module(str(path)))[0]


def _line(**over) -> str:
    d = {"kernel": "k", "target": "cpu-avx2", "bucket": BUCKET, "config": {},
         "seconds": 1e-3, "shape": SHAPE, "machine": "m"}
    d.update(over)
    return json.dumps(d)


def test_nan_time_never_wins(files):
    """A record whose time is NaN used to win ``min`` (every comparison with NaN is
    false) and its config was used; it is skipped with a warning naming its line."""
    k = kernel_of(files / "mm.py")
    h = rec.kernel_hash(k)
    f = files / "r.jsonl"
    f.write_text(_line(kernel=h, seconds=float("nan"), config={"parallel": True}) + "\n"
                 + _line(kernel=h, seconds=2e-3, config=GOOD) + "\n")
    assert "NaN" in f.read_text()
    with pytest.warns(rec.TuningRecordWarning, match=r"r.jsonl:1: .*seconds is nan"):
        assert rec.options_from_records(k, "cpu-avx2", str(f), SHAPE) == GOOD


@pytest.mark.parametrize("bad, why", [
    ('"seconds": "fast"', "seconds is 'fast', not a number"),
    ('"config": "abc"', "config is 'abc', not an object of options"),
    ('"config": [1, 2]', "config is [1, 2], not an object of options"),
    ('"seconds": true', "seconds is True, not a number"),
    ('"seconds": -1', "seconds is -1, not a time"),
    ('"shape": {"N": "x"}', "shape is {'N': 'x'}, not an object of integer sizes"),
    ('"threads": 0', "threads is 0, not a thread count"),
])
def test_bad_fields_are_skipped_with_file_and_line(files, capsys, bad, why):
    """Records with fields of the wrong type were an internal error (exit 3) once used;
    now the line is skipped with a warning naming file and line and the good record of
    the same file is used."""
    k = kernel_of(files / "mm.py")
    h = rec.kernel_hash(k)
    good = _line(kernel=h, seconds=2e-3, config=GOOD)
    key, _, value = bad.partition(": ")
    d = json.loads(_line(kernel=h, seconds=1e-6))
    d[json.loads(key)] = json.loads(value)
    f = files / "bad.jsonl"
    f.write_text(json.dumps(d) + "\n" + good + "\n")
    out = files / "out.c"
    assert main(["compile", str(files / "mm.py"), "-t", "cpu-avx2", "--records", str(f),
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {f}:1: not a tuning record, skipped ({why})" in err, err
    from polycomp.driver import compile_kernel
    assert out.read_text() == compile_kernel(k, "cpu-avx2", GOOD).source


def test_non_utf8_and_non_json_lines(files, capsys):
    k = kernel_of(files / "mm.py")
    h = rec.kernel_hash(k)
    f = files / "bin.jsonl"
    f.write_bytes(b'{"kernel": "\xff\xfe"}\n' + b"not json\n[1, 2]\n"
                  + _line(kernel=h, config=GOOD).encode() + b"\n")
    assert main(["compile", str(files / "mm.py"), "-t", "cpu-avx2", "--records", str(f),
                 "-o", str(files / "o.c")]) == 0
    err = capsys.readouterr().err
    assert f"{f}:1: not a tuning record, skipped (not UTF-8 text at byte 13)" in err
    assert f"{f}:2: not a tuning record, skipped (not JSON" in err
    assert f"{f}:3: not a tuning record, skipped (a JSON list, not an object)" in err


@pytest.mark.parametrize("content, why", [
    ("", "the file has no records"),
    (_line(kernel="0123456789abcdef") + "\n", "1 of other kernels"),
])
def test_no_applicable_record_says_so(files, capsys, content, why):
    """An empty file, or records of another kernel, fell back to the default config
    without a word."""
    f = files / "r.jsonl"
    f.write_text(content)
    assert main(["compile", str(files / "mm.py"), "-t", "cpu-avx2", "--records", str(f),
                 "-o", str(files / "o.c")]) == 0
    err = capsys.readouterr().err
    assert "warning: no tuning record in" in err and why in err
    assert "using the default configuration" in err


def test_other_bucket_and_other_threads_say_so(files):
    k = kernel_of(files / "mm.py")
    h = rec.kernel_hash(k)
    f = files / "r.jsonl"
    f.write_text(_line(kernel=h, bucket="K=1,M=1,N=1") + "\n")
    with pytest.warns(rec.TuningRecordWarning, match="1 of other buckets"):
        assert rec.options_from_records(k, "cpu-avx2", str(f), SHAPE) == {}


def test_records_of_another_thread_count_never_mix(files, monkeypatch):
    """A record measured on one thread (e.g. a Ray worker with OMP_NUM_THREADS=1) is not
    compared with records measured on two."""
    k = kernel_of(files / "mm.py")
    h = rec.kernel_hash(k)
    f = files / "r.jsonl"
    fast_one_thread = {"parallel": True}
    f.write_text(_line(kernel=h, seconds=1e-6, config=fast_one_thread, threads=1) + "\n"
                 + _line(kernel=h, seconds=1e-3, config=GOOD, threads=2) + "\n")
    # the thread count follows torch when torch is imported (hw/cpu/target.py
    # requested_threads); here the process without torch, where OMP_NUM_THREADS decides
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert rec.options_from_records(k, "cpu-avx2", str(f), SHAPE) == GOOD
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert rec.options_from_records(k, "cpu-avx2", str(f), SHAPE) == fast_one_thread
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    with pytest.warns(rec.TuningRecordWarning, match="2 measured with another thread count"):
        assert rec.options_from_records(k, "cpu-avx2", str(f), SHAPE) == {}


def test_failed_trial_is_json_null_never_infinity(tmp_path):
    f = tmp_path / "r.jsonl"
    rec.append(str(f), [rec.TuningRecord("k", "cpu", BUCKET, {}, math.inf, SHAPE, "m", 2)])

    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")
    d = json.loads(f.read_text(), parse_constant=no_constants)
    assert d["seconds"] is None and d["threads"] == 2
    (r,) = rec.load(str(f))
    assert r.seconds == math.inf and not r.ok


def test_tune_unknown_symbol_is_an_error_up_front(files, capsys):
    """``--shape ...,Z=3`` made every trial inf, printed ``inf ms (nanx)``, exited 0 and
    wrote ``Infinity`` into the records."""
    out = files / "r.jsonl"
    assert main(["tune", str(files / "mm.py"), "-t", "cpu-avx2", "--shape",
                 "N=16,M=16,K=16,Z=3", "--budget", "2", "--repeat", "1", "--records",
                 str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: --shape binds Z, which kernel mm has no size symbol "
                                "of (its symbols: N, K, M)"]
    assert not out.exists()


def test_tune_missing_symbols_named_without_an_internal_location(files, capsys):
    assert main(["tune", str(files / "mm.py"), "-t", "cpu-avx2", "--shape", "N=64",
                 "--budget", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: --shape must bind every size symbol of kernel mm: "
                                "missing K, M (e.g. --shape N=64,K=64,M=64)"]


def test_tune_without_contraction_offers_only_parallel(files, capsys):
    """An elementwise kernel was offered the GEMM knobs (which do not change its code);
    now only ``parallel`` is tried and the output says so."""
    from polycomp.driver import compile_kernel
    k = kernel_of(files / "ew.py")
    ck = compile_kernel(k, "cpu-avx2")
    space = ck.backend.tuning_space(ck, {"N": 33, "M": 17})
    assert [p.options() for p in space.points] == [{"parallel": False}, {"parallel": True}]
    assert "parallel only" in space.about
    out = files / "r.jsonl"
    assert main(["tune", str(files / "ew.py"), "-t", "cpu-avx2", "--shape", "N=33,M=17",
                 "--budget", "3", "--repeat", "1", "--records", str(out),
                 "--no-progress"]) == 0
    configs = [json.loads(x)["config"] for x in out.read_text().splitlines()]
    assert configs[0] == {} and all(c in ({"parallel": False}, {"parallel": True})
                                    for c in configs[1:])
    text = capsys.readouterr().out
    assert "space: parallel only" in text


def test_tune_with_nothing_to_tune_says_so(files):
    k = kernel_of(files / "total.py")
    with pytest.raises(UsageError, match="nothing to tune for kernel total on cpu-avx2: no "
                                         "knob changes"):
        tune(k, "cpu-avx2", {"N": 37}, budget=2, repeat=1)


def test_gemm_space_kept_for_contractions(files):
    from polycomp.driver import compile_kernel
    from polycomp.scheduler.tuning.space import CpuPoint
    k = kernel_of(files / "mm.py")
    ck = compile_kernel(k, "cpu-avx2")
    space = ck.backend.tuning_space(ck, SHAPE)
    assert len(space.points) > 10 and all(isinstance(p, CpuPoint) for p in space.points)
    assert space.measured and space.threads == ck.target.cpu.threads


def test_trials_run_with_the_given_thread_count(files, tmp_path):
    """A Ray worker starts with OMP_NUM_THREADS=1; the measurement sets the tuning
    process's count in its timing thread and reports what it ran with (run here in a
    child process with OMP_NUM_THREADS=1, as a worker would be)."""
    import subprocess
    import sys
    code = textwrap.dedent(f'''
        import json
        from polycomp.cli import find_kernels, load_module
        from polycomp.scheduler.tuning.tune import safe_measure
        k = find_kernels(load_module({str(files / "mm.py")!r}))[0]
        shape = {SHAPE!r}
        cfg = {{"parallel": True}}
        print(json.dumps([safe_measure(k, "cpu-avx2", cfg, shape, 1, n).threads
                          for n in (3, None, 2)]))
    ''')
    import os
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [3, 1, 2]
    assert safe_measure(kernel_of(files / "mm.py"), "cpu-avx2", {}, {"N": 1}, 1).threads \
        is None                                      # a failed trial ran nothing
