"""The ``polycomp`` command line: compile, explain, run, bench, and its error reporting.

Most tests call :func:`polycomp.cli.main` in-process (fast); a few run the installed
console script in a subprocess to check real exit statuses and stderr.
"""
import os
import subprocess
import sys
import sysconfig
import textwrap
import types

import pytest

from polycomp import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "matmul_relu.py")


def polycomp_script() -> str:
    """The console script pip installed next to this interpreter."""
    path = os.path.join(sysconfig.get_path("scripts"), "polycomp")
    assert os.path.exists(path), f"console script not installed at {path} (pip install -e .)"
    return path


def run_script(*args, cwd=None):
    return subprocess.run([polycomp_script(), *args], capture_output=True, text=True, cwd=cwd)


def write(tmp_path, name, text) -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


# --------------------------------------------------------------------------- compile


@pytest.mark.nvcc
def test_compile_cuda_writes_a_cu_that_nvcc_compiles(tmp_path, capsys):
    out = tmp_path / "deep" / "dir" / "mm.cu"            # parent dirs are created
    assert cli.main(["compile", EXAMPLE, "--target", "cuda", "-o", str(out)]) == 0
    assert out.exists()
    src = out.read_text()
    assert "__global__" in src and "matmul_relu" in src
    assert f"wrote {out}" in capsys.readouterr().out
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "mm.cubin"),
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "mm.cubin").stat().st_size > 0


def test_compile_c_default_output_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compile", EXAMPLE, "--target", "c"]) == 0
    out = tmp_path / "build" / "matmul_relu.c"
    assert out.exists()
    src = out.read_text()
    assert "void matmul_relu(" in src
    assert "build/matmul_relu.c" in capsys.readouterr().out
    r = subprocess.run(["gcc", "-O2", "-fopenmp", "-std=gnu11", "-c", "-o",
                        str(tmp_path / "mm.o"), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.nvcc
def test_compile_check_reports_ptxas_resources(tmp_path, capsys):
    out = tmp_path / "mm.cu"
    assert cli.main(["compile", EXAMPLE, "-t", "cuda", "-o", str(out), "--check"]) == 0
    text = capsys.readouterr().out
    assert "nvcc -arch=sm_80 -cubin" in text and "registers" in text


def test_compile_to_stdout(capsys):
    assert cli.main(["compile", EXAMPLE, "-t", "c", "-o", "-"]) == 0
    assert "void matmul_relu(" in capsys.readouterr().out


def test_console_script_compiles(tmp_path):
    r = run_script("compile", EXAMPLE, "--target", "cuda", "-o", "out/k.cu", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "k.cu").exists()


def test_tile_options_reach_the_pipeline(capsys):
    assert cli.main(["compile", EXAMPLE, "-t", "cuda", "-o", "-"]) == 0
    default = capsys.readouterr().out
    assert cli.main(["compile", EXAMPLE, "-t", "cuda", "-o", "-", "--tile", "32,32",
                     "--threads", "8,8"]) == 0
    tiled = capsys.readouterr().out
    assert tiled != default


def test_option_parsing():
    p = cli._parser()
    args = p.parse_args(["compile", "f.py", "-t", "cuda", "--tile", "64x32", "--threads",
                         "16,8", "--tile-k", "16", "--isl-scheduler", "-O", "parallel=False",
                         "-O", "name=abc"])
    opts = cli._compile_options(args)
    assert opts == {"tile": {"block": (64, 32), "threads": (16, 8), "k": 16},
                    "isl_scheduler": True, "parallel": False, "name": "abc"}


# --------------------------------------------------------------------------- explain


def test_explain_prints_model_trees_and_ir(capsys):
    assert cli.main(["explain", EXAMPLE, "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "=== polyhedral model of matmul_relu ===" in out
    assert "C_update (update): C[i, j] = C[i, j] + A[i, k] * B[k, j]" in out
    assert "flow dependences:" in out
    # one tree per pass, each with its time
    from polycomp.driver import compile_kernel
    ck = compile_kernel(cli.find_kernels(cli.load_module(EXAMPLE))[0], "cuda", dump=True)
    names = [r.name for r in ck.records]
    stages = [r.stage for r in ck.records]
    assert stages[:2] == ["model", "schedule"] and "lower" in stages and stages[-1] == "emit"
    assert out.count("--- after ") == len(names) - 2   # the model is printed first
    for name in names[1:-1]:
        assert f"--- after {name} (" in out
    assert out.count("domain: ") >= stages.count("schedule")
    assert "##### code-generation passes #####" in out and "func matmul_relu(" in out
    assert "--- step times ---" in out and " lower " in out


def test_explain_shows_pass_notes(tmp_path, capsys, monkeypatch):
    import polycomp.driver as driver
    real = driver.compile_kernel

    def noting(kernel, target="c", options=None, **kw):
        ck = real(kernel, target, options, **kw)
        ck.notes.setdefault("program-order", []).append("a note from the pass")
        ck.notes.setdefault("elsewhere", []).append("a note without a pass record")
        return ck
    monkeypatch.setattr(driver, "compile_kernel", noting)
    assert cli.main(["explain", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "note [program-order]: a note from the pass" in out
    assert "note [elsewhere]: a note without a pass record" in out


def test_explain_with_source(capsys):
    assert cli.main(["explain", EXAMPLE, "-t", "c", "--source"]) == 0
    assert "=== c source ===" in capsys.readouterr().out


# --------------------------------------------------------------------------- run


def test_run_c_against_the_interpreter(capsys):
    rc = cli.main(["run", EXAMPLE, "--target", "c", "--shape", "N=37", "--shape", "M=19,K=5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "IR interpreter on the program-order IR" in out
    assert "max abs error" in out and "max rel error" in out and " OK" in out
    assert "time:" in out


def test_run_cuda_without_gpu_uses_the_simulator(capsys):
    from polycomp.hw.cuda.launcher import gpu_available
    rc = cli.main(["run", EXAMPLE, "-t", "cuda", "-s", "N=17,M=9,K=3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK" in out
    if not gpu_available():
        assert "ran on:    CUDA simulator" in out and "of simulation" in out


def test_run_uses_the_file_reference_and_fails_on_a_wrong_one(tmp_path, capsys):
    good = write(tmp_path, "scale.py", """
        import numpy as np
        import polycomp as pc
        N = pc.sym("N")

        @pc.tensor_expr
        def scale(A: pc.Tensor[(N,), "float32"]):
            return pc.compute((N,), lambda i: A[i] * 3.0 + 1.0)

        def reference(A):
            return A * 3.0 + 1.0
        """)
    assert cli.main(["run", good, "--shape", "N=100"]) == 0
    out = capsys.readouterr().out
    assert "reference() in" in out and "OK" in out

    bad = write(tmp_path, "scale_bad.py", open(good).read().replace("A * 3.0 + 1.0",
                                                                    "A * 3.0 + 1.01"))
    assert cli.main(["run", bad, "--shape", "N=100"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_run_exit_status_propagates_from_the_console_script(tmp_path):
    bad = write(tmp_path, "neg.py", """
        import polycomp as pc
        N = pc.sym("N")

        @pc.tensor_expr
        def neg(A: pc.Tensor[(N,), "float32"]):
            return pc.compute((N,), lambda i: -A[i])

        def reference_neg(A):
            return A
        """)
    r = run_script("run", bad, "--shape", "N=8")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in r.stdout


GEMM_C = """
    void gemm(int N, int M, int K, float C[N][M], float A[N][K], float B[K][M]) {
    #pragma scop
      for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++)
          for (int k = 0; k < K; k++)
            C[i][j] += A[i][k] * B[k][j];
    #pragma endscop
    }
    """


def test_c_file_compile_and_run(tmp_path, capsys):
    f = write(tmp_path, "gemm.c", GEMM_C)
    assert cli.main(["run", f, "--shape", "N=13,M=6,K=5"]) == 0
    out = capsys.readouterr().out
    assert "kernel gemm" in out and "output C" in out and "OK" in out
    assert cli.main(["compile", f, "-t", "cuda", "-o", str(tmp_path / "g.cu")]) == 0
    assert "__global__" in (tmp_path / "g.cu").read_text()


def test_run_needs_every_symbol(capsys):
    assert cli.main(["run", EXAMPLE, "--shape", "N=4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--shape K=..." in err and "--shape M=..." in err


def test_run_rejects_unknown_symbols_and_bad_shapes(capsys):
    assert cli.main(["run", EXAMPLE, "--shape", "N=4,M=4,K=4,Q=3"]) == 2
    assert "Q" in capsys.readouterr().err
    assert cli.main(["run", EXAMPLE, "--shape", "N=four"]) == 2
    assert "NAME=INT" in capsys.readouterr().err
    assert cli.main(["run", EXAMPLE, "--shape", "N=0,M=1,K=1"]) == 2
    assert ">= 1" in capsys.readouterr().err


def test_compare_is_nan_aware():
    import numpy as np
    a = np.array([1.0, np.nan, 3.0])
    assert cli.compare(a, a.copy(), "float32")[2]
    assert not cli.compare(a, np.array([1.0, 2.0, 3.0]), "float32")[2]
    assert not cli.compare(np.array([1.0, 2.0]), np.array([1.0, 2.1]), "float32")[2]
    assert cli.compare(np.array([1, 2]), np.array([1, 2]), "int32") == (0.0, 0.0, True)


# --------------------------------------------------------------------------- errors


BAD_KERNEL = """
    import polycomp as pc
    N = pc.sym("N")

    @pc.tensor_expr
    def bad(A: pc.Tensor[(N, N), "float32"]):
        return pc.compute((N, N), lambda i, j: A[i * j, j])
    """


def test_error_exit_code_and_message_without_traceback(tmp_path):
    f = write(tmp_path, "bad.py", BAD_KERNEL)
    r = run_script("compile", f, "--target", "cuda")
    assert r.returncode == 2
    assert r.stderr.startswith("error: ")
    assert "i * j" in r.stderr and "not affine" in r.stderr
    assert f"{f}:7: return pc.compute" in r.stderr      # the user's source line
    assert "Traceback" not in r.stderr and "isl" not in r.stderr.split("not affine")[0]
    assert r.stdout == ""


def test_traceback_flag_shows_the_traceback(tmp_path):
    f = write(tmp_path, "bad.py", BAD_KERNEL)
    for args in (["--traceback", "compile", f], ["compile", f, "--traceback"]):
        r = run_script(*args)
        assert r.returncode == 2
        assert "Traceback" in r.stderr and "NonAffineIndexError" in r.stderr
        assert "error: " in r.stderr


def test_several_kernels_need_kernel_flag(tmp_path, capsys):
    f = write(tmp_path, "two.py", """
        import polycomp as pc
        N = pc.sym("N")

        @pc.tensor_expr
        def first(A: pc.Tensor[(N,), "float32"]):
            return pc.compute((N,), lambda i: A[i] + 1.0)

        @pc.tensor_expr
        def second(A: pc.Tensor[(N,), "float32"]):
            return pc.compute((N,), lambda i: A[i] * 2.0)
        """)
    assert cli.main(["compile", f, "-o", str(tmp_path / "x.c")]) == 2
    err = capsys.readouterr().err
    assert "first, second" in err and "--kernel" in err
    assert cli.main(["compile", f, "--kernel", "nope", "-o", str(tmp_path / "x.c")]) == 2
    assert "no kernel named 'nope'" in capsys.readouterr().err
    assert cli.main(["compile", f, "--kernel", "second", "-o", str(tmp_path / "x.c")]) == 0
    assert "void second(" in (tmp_path / "x.c").read_text()


def test_missing_file_and_file_without_kernels(tmp_path, capsys):
    assert cli.main(["compile", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    empty = write(tmp_path, "empty.py", "x = 1\n")
    assert cli.main(["explain", empty]) == 2
    assert "defines no @tensor_expr kernel" in capsys.readouterr().err


def test_user_file_that_raises_points_at_its_line(tmp_path, capsys):
    f = write(tmp_path, "raises.py", """
        import polycomp as pc
        x = {}
        y = x["missing"]
        """)
    assert cli.main(["compile", f]) == 2
    err = capsys.readouterr().err
    assert "KeyError" in err and f"{f}:4" in err
    syn = write(tmp_path, "syntax.py", "def f(:\n")
    assert cli.main(["compile", syn]) == 2
    assert "syntax error" in capsys.readouterr().err


def test_unknown_target_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["compile", EXAMPLE, "--target", "tpu"])
    assert ei.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# --------------------------------------------------------------------------- bench


def test_bench_dispatches_to_the_suite_module(monkeypatch):
    seen = []
    fake = types.ModuleType("polycomp.benchmarks.fake_suite")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "polycomp.benchmarks.fake_suite", fake)
    assert cli.main(["bench", "fake_suite", "--size", "64", "x"]) == 0
    assert seen == [["--size", "64", "x"]]


def test_bench_missing_suite_is_a_clear_error(capsys):
    assert cli.main(["bench", "no_such_suite"]) == 2
    err = capsys.readouterr().err
    assert "no benchmark suite 'no_such_suite'" in err and "available:" in err
