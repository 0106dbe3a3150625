"""Every example in examples/ compiles for C and CUDA, the .cu passes nvcc, and
`polycomp run` agrees with the example's reference on the C target and on the CUDA path
(the simulator, or the interpreter where the simulator is absent)."""
import os
import subprocess

import pytest

from polycomp import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (example, small symbolic sizes with odd/prime extents and an extent 1)
EXAMPLES = [
    ("matmul_relu", "N=13,M=7,K=1"),
    ("softmax", "N=3,M=37"),
    ("conv2d", "B=1,C=2,F=3,H=5,W=7"),
    ("layernorm", "N=2,D=19"),
]


def path(name):
    return os.path.join(ROOT, "examples", f"{name}.py")


def test_every_example_is_listed():
    have = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "examples")) if f.endswith(".py"))
    assert have == sorted(n for n, _ in EXAMPLES)


@pytest.mark.parametrize("name, shapes", EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_example_runs_on_c(name, shapes, capsys):
    rc = cli.main(["run", path(name), "--target", "c", "--shape", shapes, "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "OK" in out and "FAIL" not in out


@pytest.mark.nvcc
@pytest.mark.parametrize("name, shapes", [  # the two larger kernels are in the slow lane
    pytest.param(n, s, id=n, marks=pytest.mark.slow if n in ("conv2d", "matmul_relu") else ())
    for n, s in EXAMPLES])
def test_example_cuda_compiles_with_nvcc_and_runs(name, shapes, tmp_path, capsys):
    cu = tmp_path / f"{name}.cu"
    assert cli.main(["compile", path(name), "--target", "cuda", "-o", str(cu)]) == 0
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    capsys.readouterr()
    rc = cli.main(["run", path(name), "--target", "cuda", "--shape", shapes])
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    assert "OK" in captured.out
