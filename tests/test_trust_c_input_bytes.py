"""The C front end on bytes that are not UTF-8 text, and literals that do not fit
(issue #24): the preprocessor's output is decoded as the C file is (bytes that are not
UTF-8 are replaced: a Latin-1 string in an included header does not stop the reader),
a binary file is one clear ``CParseError`` naming it, never a ``UnicodeDecodeError``;
an integer literal that does not fit its dtype is reported at the C file's line, not
at the Python caller."""
import os

import numpy as np
import pytest

from polycomp import cli
from polycomp.driver import build
from polycomp.errors import DTypeError, PolycompError
from polycomp.frontend.c_program import CParseError
from polycomp.frontend.c_reader import load_c_kernel, load_c_kernels, read_c_kernel

KERNEL = b"""void k(int N, float A[N], float B[N]) {
  for (int i = 0; i < N; i++)
    B[i] = A[i] + 1;
}
"""


def _write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


def test_latin1_string_in_an_included_header(tmp_path):
    _write(tmp_path / "lat.h", b'static const char* who = "Jos\xe9 M\xfcller";\n#define ONE 1\n')
    c = _write(tmp_path / "k.c", b'#include "lat.h"\n' + KERNEL.replace(b"+ 1", b"+ ONE"))
    k = load_c_kernel(c)
    a = np.arange(5, dtype=np.float32)
    (b,) = [build(k, "c")(a, np.zeros(5, np.float32))]
    np.testing.assert_array_equal(b, a + 1)


def test_latin1_comment_in_the_c_file_and_a_header(tmp_path):
    _write(tmp_path / "c.h", b"/* r\xe9sum\xe9 */\n")
    c = _write(tmp_path / "k.c", b'#include "c.h"\n/* na\xefve */\n' + KERNEL)
    assert [k.name for k in load_c_kernels(c)] == ["k"]


def test_binary_header_is_a_clear_error(tmp_path):
    _write(tmp_path / "blob.h", bytes(range(256)) * 4)
    c = _write(tmp_path / "k.c", b'#include "blob.h"\n' + KERNEL)
    with pytest.raises(CParseError, match=r"blob.h is not C source text: it contains NUL"):
        load_c_kernels(c)


def test_binary_c_file_is_a_clear_error(tmp_path):
    c = _write(tmp_path / "k.c", open("/bin/true", "rb").read()[:4096])
    with pytest.raises(CParseError, match=r"k.c is not C source text"):
        load_c_kernels(c)


def test_non_utf8_header_without_nul_bytes_is_a_polycomp_error(tmp_path):
    _write(tmp_path / "hi.h", bytes(range(0x80, 0x100)) * 8 + b"\n")
    c = _write(tmp_path / "k.c", b'#include "hi.h"\n' + KERNEL)
    with pytest.raises(PolycompError) as ei:
        load_c_kernels(c)
    assert "hi.h" in str(ei.value)


@pytest.mark.parametrize("data", [
    b'#include "blob.h"\n' + KERNEL,
    b'#include "lat.h"\n' + KERNEL,
])
def test_cli_never_shows_a_unicode_error(tmp_path, capsys, data):
    _write(tmp_path / "blob.h", b"\x00\x01\xff\xfe" * 64)
    _write(tmp_path / "lat.h", b'static const char* s = "\xe9";\n')
    c = _write(tmp_path / "k.c", data)
    rc = cli.main(["compile", c, "-o", "-"])
    err = capsys.readouterr().err
    assert rc in (0, 2)
    assert "UnicodeDecodeError" not in err and "internal error" not in err


# ------------------------------------------------------------------ literals


@pytest.mark.parametrize("src, line, const", [
    ("void k(int N, int A[N], int B[N]) {\n  for (int i = 0; i < N; i++)\n"
     "    B[i] = A[i] + 3000000000;\n}\n", 3, "3000000000"),
    ("void k(int N, long A[N], long B[N]) {\n  for (int i = 0; i < N; i++)\n"
     "    B[i] = A[i] * 99999999999999999999;\n}\n", 3, "99999999999999999999"),
    ("void k(int N, float A[N], float B[N]) {\n  for (int i = 0; i < 99999999999999999999; "
     "i++)\n    B[0] = A[0];\n}\n", 2, "99999999999999999999"),
    ("void k(int N, float A[99999999999999999999], float B[N]) {\n"
     "  for (int i = 0; i < N; i++)\n    B[i] = A[i];\n}\n", 1, "99999999999999999999"),
])
def test_int_literal_errors_point_at_the_c_line(tmp_path, src, line, const):
    c = _write(tmp_path / "lit.c", src.encode())
    with pytest.raises(DTypeError, match=f"the constant {const} does not fit") as ei:
        load_c_kernels(c)
    loc = ei.value.location
    assert loc is not None and os.path.basename(loc.filename) == "lit.c", loc
    assert loc.lineno == line and const in loc.text
    with pytest.raises(DTypeError) as ei:
        read_c_kernel(src, filename="mem.c")
    assert ei.value.location.filename == "mem.c" and ei.value.location.lineno == line


def test_int_literal_error_on_the_command_line(tmp_path, capsys):
    c = _write(tmp_path / "lit.c", b"void k(int N, int A[N], int B[N]) {\n"
               b"  for (int i = 0; i < N; i++)\n    B[i] = A[i] + 3000000000;\n}\n")
    assert cli.main(["compile", c, "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "lit.c:3: B[i] = A[i] + 3000000000;" in err
    assert "bin/polycomp" not in err and "test_trust" not in err
