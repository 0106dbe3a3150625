"""Unknown and invalid options are rejected from the command line (issue #14, "Options
and CLI"): every case exits with status 2 and a one-line message naming the option, and
no kernel is built or run."""

import os

import pytest

from polycomp import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "softmax.py")


@pytest.mark.parametrize("extra, message", [
    (["-O", "bogus=1"], "unknown option 'bogus' for target c"),
    (["-O", "vectorise=1"], "did you mean 'vectorize'?"),
    (["-O", "parallel=maybe"], "option parallel takes True or False, got 'maybe'"),
    (["-O", "fuse=3"], "option fuse takes True or False, got 3"),
    (["-O", "reduce_unroll=-2"], "option reduce_unroll takes an integer >= 1, got -2"),
    (["-O", "gemm_tiles=abc"], "option gemm_tiles takes a tuple of integers >= 1"),
    (["-O", "tail=weird"], "option tail takes one of 'mask', 'scalar', got 'weird'"),
    (["-O", "nokeyvalue"], "-O takes KEY=VALUE, got 'nokeyvalue'"),
    (["--threads", "8"], "target c does not take it"),
    (["-t", "cuda", "--tile", "0,8"], "--tile takes positive integers, got '0,8'"),
    (["-t", "cuda", "--tile", "a,b"], "--tile takes integers separated by commas"),
    (["-t", "cuda", "--tile-k", "-4"], "option tile.k takes an integer >= 1, got -4"),
])
def test_compile_rejects_bad_options(extra, message, capsys):
    assert cli.main(["compile", EXAMPLE, "-o", "-", *extra]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""          # nothing was emitted
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("extra, message", [
    (["--repeat", "0"], "argument --repeat: takes an integer >= 1, got '0'"),
    (["--repeat", "-1"], "argument --repeat: takes an integer >= 1, got '-1'"),
    (["--repeat", "x"], "argument --repeat: takes an integer >= 1, got 'x'"),
    (["--tol", "-1"], "argument --tol: takes a finite number >= 0, got '-1'"),
    (["--tol", "nan"], "argument --tol: takes a finite number >= 0, got 'nan'"),
    (["--tol", "inf"], "argument --tol: takes a finite number >= 0, got 'inf'"),
    (["--seed", "-1"], "argument --seed: takes an integer >= 0, got '-1'"),
])
def test_run_rejects_bad_arguments(extra, message, capsys):
    # Before the fix: --repeat 0/-1 ran anyway, --tol -1/nan reported a spurious FAIL
    # (status 1), --seed -1 ended in "internal error (a polycomp bug): ValueError".
    with pytest.raises(SystemExit) as ei:
        cli.main(["run", EXAMPLE, "-s", "N=4,M=4", *extra])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "internal error" not in err


def test_run_accepts_the_boundary_values(capsys):
    assert cli.main(["run", EXAMPLE, "-s", "N=4,M=4", "--repeat", "1", "--tol", "0.001",
                     "--seed", "0"]) == 0
    assert "OK" in capsys.readouterr().out
