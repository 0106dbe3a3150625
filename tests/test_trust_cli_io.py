"""The command line's files, compiler and sizes give one clear error line (issue #24):
a kernel file that calls ``sys.exit`` at import, ``-o`` naming a directory or an
unwritable file, a ``CC`` that writes nothing or is a command with arguments, and
``polycomp run`` sizes whose arrays cannot exist (refused before any input is drawn)."""
import os
import stat

import pytest

from polycomp import cli
from polycomp.errors import BuildError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATMUL = os.path.join(ROOT, "examples", "matmul_relu.py")

KERNEL = '''import polycomp as pc
N = pc.sym("N")


@pc.tensor_expr
def inc(A: pc.Tensor[(N,), "float32"]):
    return pc.compute((N,), lambda i: A[i] + 1, name="B")
'''


@pytest.fixture
def kfile(tmp_path):
    p = tmp_path / "k.py"
    p.write_text(KERNEL)
    return p


def _main(argv, capsys):
    rc = cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("code", ["0", "1", "'bye'"])
def test_sys_exit_at_import_is_an_error_not_success(tmp_path, capsys, code):
    k = tmp_path / "k.py"
    k.write_text(KERNEL + f"\nimport sys\nsys.exit({code})\n")
    out = tmp_path / "out.c"
    rc, _, err = _main(["compile", k, "-o", out], capsys)
    assert rc == 2
    assert f"called sys.exit({code})" in err and 'if __name__ == "__main__"' in err
    assert "k.py:10" in err                       # the user's line
    assert not out.exists()


def test_script_guarded_by_main_still_loads(tmp_path, capsys):
    k = tmp_path / "k.py"
    k.write_text(KERNEL + "\nif __name__ == '__main__':\n    raise SystemExit(0)\n")
    rc, out, _ = _main(["compile", k, "-o", tmp_path / "o.c"], capsys)
    assert rc == 0 and "wrote" in out


@pytest.mark.parametrize("suffix", ["", "/"])
def test_output_naming_a_directory(kfile, tmp_path, capsys, suffix):
    d = tmp_path / "outdir"
    d.mkdir()
    rc, _, err = _main(["compile", kfile, "-o", str(d) + suffix], capsys)
    assert rc == 2
    assert "is a directory" in err and "internal error" not in err
    assert os.listdir(d) == []


def test_output_ending_in_a_slash_that_does_not_exist(kfile, tmp_path, capsys):
    rc, _, err = _main(["compile", kfile, "-o", str(tmp_path / "new") + "/"], capsys)
    assert rc == 2 and "is a directory" in err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("target", ["/proc/version", "/dev/full"])
def test_output_that_cannot_be_written(kfile, capsys, target):
    if not os.path.exists(target):
        pytest.fail(f"{target} missing on this Linux host")
    rc, _, err = _main(["compile", kfile, "-o", target], capsys)
    assert rc == 2
    assert f"-o {target}: cannot write the output file" in err
    assert "internal error" not in err


def test_output_below_a_file(kfile, capsys):
    rc, _, err = _main(["compile", kfile, "-o", str(kfile) + "/x.c"], capsys)
    assert rc == 2 and "cannot write the output file" in err


def test_output_in_a_read_only_folder(kfile, tmp_path, capsys):
    if os.geteuid() == 0:
        target = "/proc/sys/out.c"         # root writes anywhere else
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
        target = str(ro / "out.c")
    rc, _, err = _main(["compile", kfile, "-o", target], capsys)
    assert rc == 2 and "cannot write the output file" in err


# ------------------------------------------------------------------ the C compiler


def test_cc_that_writes_nothing_is_a_build_error(kfile, capsys, monkeypatch):
    monkeypatch.setenv("CC", "/bin/true")
    rc, _, err = _main(["run", kfile, "-s", "N=10"], capsys)
    assert rc == 2
    assert "exited with status 0 but wrote no" in err and "is CC a C compiler?" in err
    assert "FileNotFoundError" not in err and "internal error" not in err


def test_cc_with_arguments_works(kfile, tmp_path, capsys, monkeypatch):
    """``CC="ccache gcc"``: a launcher (here a wrapper script, ccache need not be
    installed) followed by the compiler."""
    wrapper = tmp_path / "launch"
    log = tmp_path / "launched"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", f"{wrapper} gcc")
    rc, out, err = _main(["run", kfile, "-s", "N=10"], capsys)
    assert rc == 0, err
    assert "OK" in out
    assert log.read_text().startswith("gcc ")     # the launcher ran gcc


@pytest.mark.parametrize("cc, message", [
    ("no-such-compiler-xyz", "C compiler 'no-such-compiler-xyz'"),
    ("no-such-launcher-xyz gcc", "C compiler 'no-such-launcher-xyz'"),
    ("gcc '", "cannot be split into words"),
    ("  ", "is empty"),
])
def test_bad_cc_is_a_build_error(cc, message, monkeypatch):
    from polycomp.hw.cpu.build import compiler
    monkeypatch.setenv("CC", cc)
    with pytest.raises(BuildError, match=message):
        compiler()


def test_compiler_identity_covers_launcher_arguments():
    from polycomp.cache import compiler_version
    a, b = compiler_version("gcc"), compiler_version("env gcc")
    assert a != b and "gcc" in b


# ------------------------------------------------------------------ run sizes


@pytest.fixture
def no_inputs(monkeypatch):
    """Fail instead of drawing inputs: the sizes must be refused before."""
    def refuse(*a, **k):
        raise AssertionError("random inputs were drawn for sizes that must be refused")
    monkeypatch.setattr(cli, "random_inputs", refuse)


def test_run_larger_than_memory_is_a_resource_limit_error(capsys, no_inputs):
    rc, _, err = _main(["run", MATMUL, "--shape", "N=100000,M=100000,K=100000"], capsys)
    assert rc == 2
    assert "more than this machine's memory" in err
    assert "A 40 GB" in err and "D 40 GB" in err
    assert "MemoryError" not in err


def test_run_unaddressable_sizes_refused_up_front(capsys, no_inputs):
    rc, _, err = _main(["run", MATMUL, "--shape", "N=3037000500,M=3037000500,K=1"], capsys)
    assert rc == 2
    assert "D of shape (N, M)" in err and "more than a kernel can index" in err


def test_run_memory_check_counts_inputs_outputs_and_the_draw(capsys, monkeypatch, no_inputs):
    """On a machine with 1 MB: a 64x64x64 matmul needs 3 x 16 KB + 32 KB (fits), a
    256x256x256 one 3 x 256 KB + 512 KB (does not)."""
    import polycomp.shapes as shapes
    monkeypatch.setattr(shapes, "_physical_memory", lambda: 1 << 20)
    cli.check_run_memory(_func(), {"N": 64, "M": 64, "K": 64})
    rc, _, err = _main(["run", MATMUL, "--shape", "N=256,M=256,K=256"], capsys)
    assert rc == 2 and "more than this machine's memory" in err


def _func():
    from polycomp.driver import compile_kernel
    _, kernels = cli.load_kernels(MATMUL)
    return compile_kernel(kernels[0], "c").final_ir
