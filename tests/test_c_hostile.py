"""Hostile C input (issue #14, C front end): a Latin-1 byte in a comment, K&R
definitions, huge loop steps, '$' in identifiers and a newline in the file name each
compile right or end in a clear PolycompError at the C line."""
import numpy as np
import pytest

from polycomp.driver import build
from polycomp.errors import PolycompError, UnsupportedConstructError
from polycomp.frontend.c_reader import load_c_kernel

DOUBLE = b"void k(int n, float A[n]) {\n  for (int i = 0; i < n; i++) A[i] = A[i] * 2;\n}\n"


def _write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _doubles(path):
    f = build(load_c_kernel(path), "c")
    x = np.arange(7, dtype=np.float32)
    np.testing.assert_array_equal(f(x), x * 2)


def test_latin1_byte_in_a_comment(tmp_path):
    _doubles(_write(tmp_path, "latin1.c", b"/* caf\xe9 */\n" + DOUBLE))


def test_newline_and_quote_in_the_file_name(tmp_path):
    _doubles(_write(tmp_path, 'new\nline "q".c', DOUBLE))


def test_kr_definition_is_a_clear_error(tmp_path):
    src = b"void k(n, A)\nint n; float A[10];\n{\n  for (int i = 0; i < n; i++) A[i] = 1;\n}\n"
    with pytest.raises(UnsupportedConstructError, match="K&R") as e:
        load_c_kernel(_write(tmp_path, "kr.c", src))
    assert e.value.location is not None and e.value.location.lineno == 1


def test_dollar_in_an_identifier_is_a_clear_error(tmp_path):
    src = b"void k(int n, float A$x[n]) {\n  for (int i = 0; i < n; i++) A$x[i] = 1;\n}\n"
    with pytest.raises(UnsupportedConstructError, match=r"'\$' in a name"):
        load_c_kernel(_write(tmp_path, "dollar.c", src))


@pytest.mark.parametrize("step", ["9223372036854775807", "4611686018427387904",
                                  "18446744073709551616"])
def test_huge_loop_step(tmp_path, step):
    src = (f"void k(int n, float A[n]) {{\n  for (long i = 0; i < n; i += {step}) "
           f"A[i] = A[i] + 1;\n}}\n").encode()
    path = _write(tmp_path, "step.c", src)
    try:
        f = build(load_c_kernel(path), "c")
    except PolycompError:
        return                      # a clear error is an acceptable answer
    x = np.zeros(5, dtype=np.float32)
    want = x.copy()
    want[0] = 1.0
    np.testing.assert_array_equal(f(x), want)


def test_2000_term_expression():
    """pycparser and the SCoP reader recurse over the expression tree: a 2,000-term sum
    used to end in a raw RecursionError."""
    from polycomp.frontend.c_reader import read_c_kernel
    expr = " + ".join(["A[i]"] * 2000)
    src = (f"void k(int n, float A[n], float B[n]) {{\n"
           f"  for (int i = 0; i < n; i++) B[i] = {expr};\n}}\n")
    f = build(read_c_kernel(src), "c")
    np.testing.assert_array_equal(f(np.ones(4, np.float32), np.zeros(4, np.float32)),
                                  np.full(4, 2000, np.float32))
