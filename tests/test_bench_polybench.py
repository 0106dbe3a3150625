"""``polycomp bench polybench`` on a two-kernel PolyBench-shaped folder written here
(PolyBench itself is not in the repository): each kernel runs in its own process, so a
peer build that crashes costs its cell and a crash in polycomp's steps costs its row,
never the run; the command's exit status says when a kernel's process died."""
from __future__ import annotations

import textwrap

import pytest

from benchmarks import polybench as pb

KERNEL = textwrap.dedent("""\
    #include <polybench.h>
    void kernel_{name}(int n, double A[n], double B[n])
    {{
    #pragma scop
      for (int i = 0; i < n; i++)
        B[i] = 2.0 * A[i] + 1.0;
    #pragma endscop
    }}
    int main(void)
    {{
      int n = N;
      return n < 0;
    }}
    """)

#: a header forced into the "Polly" peer's build whose constructor crashes on load
CRASH_ON_LOAD = "#include <signal.h>\nstatic void __attribute__((constructor)) crash(void) " \
                "{ raise(SIGSEGV); }\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("polybench")
    (root / "utilities").mkdir()
    (root / "utilities" / "polybench.h").write_text(
        "#ifdef MINI_DATASET\n#define N 7\n#else\n#define N 31\n#endif\n")
    for name in ("axpy", "bxpy"):
        (root / "toy" / name).mkdir(parents=True)
        (root / "toy" / name / f"{name}.c").write_text(KERNEL.format(name=name))
    header = root / "crash.h"
    header.write_text(CRASH_ON_LOAD)
    return root


def test_a_crashing_peer_costs_its_cell_not_the_run(folder):
    flags = ("-O1", "-include", str(folder / "crash.h"))
    res = pb.run(str(folder), "SMALL", threads=1, rounds=1, polly="gcc", polly_flags=flags)
    assert [r["name"] for r in res["rows"]] == ["axpy", "bxpy"]
    for r in res["rows"]:
        assert r["read"] and r["error"] == ""
        assert r["exact"] == {"c": True, "cpu": True}
        assert r["speedup"] is not None and r["rel_err"] == 0.0     # polycomp and gcc kept
        assert r["vs_polly"] is None
        assert r["polly_error"] == "crashed (killed by SIGSEGV)"
        assert "SIGSEGV" in r["died"] and "Polly" in r["died"]
    assert res["died"] == 0                       # the peer's crash is not polycomp's
    text = pb.table(res)
    assert "| crashed |" in text and "axpy vs Polly: crashed (killed by SIGSEGV)" in text


def test_a_working_peer_is_timed(folder):
    res = pb.run(str(folder), "SMALL", threads=1, rounds=1, kernels=["bxpy"], polly="gcc",
                 polly_flags=("-O2",))
    (r,) = res["rows"]
    assert r["vs_polly"] is not None and r["polly_error"] == "" and r["died"] == ""


def test_a_kernel_process_that_dies_makes_the_command_fail(folder, tmp_path, monkeypatch,
                                                          capsys):
    """polycomp's own build crashes on load (``CC`` forces the crashing header into
    shared-library builds, not the reader's preprocessing; a
    fresh kernel cache so nothing built before is reused): the row names the step, the
    table is still printed, and the command exits with status 1."""
    wrapper = tmp_path / "cc-crash"
    wrapper.write_text('#!/bin/sh\ncase "$*" in *-shared*) exec gcc -include '
                       f'{folder / "crash.h"} "$@";; esac\nexec gcc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))
    rc = pb.main(["--polybench", str(folder), "--dataset", "SMALL", "--threads", "1",
                  "--rounds", "1", "--kernels", "axpy"])
    out = capsys.readouterr()
    assert rc == 1
    assert "axpy: the kernel's process died: killed by SIGSEGV during the exactness check" \
        in out.out
    assert "| axpy | yes |" in out.out
    assert "1 kernel process(es) died" in out.err
