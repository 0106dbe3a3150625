"""CUDA row reductions with constant and symbolic row lengths, on the GPU simulator.

Regression for the miscompilation of row reductions with a *constant* row length: the
row-reduction mapping puts one row on each warp (``i -> (bx, ty)``, columns on the
lanes), so the kernel's first band (the row band) lies below the thread mapping.
Shared-memory promotion took the child of that band as a per-block site: the box of
*one* row was copied into one block-wide buffer by the threads of warp 0 only (the
copy's filter dealt its 32 elements to threads ``tx + 32 ty < 32``), every warp then
reduced warp 0's row, and the barrier sat inside the per-row guard (divergent in a
partial last block).  A symbolic row length has an unbounded footprint, so it was
never promoted and worked.  Shared promotion now refuses sites whose instances depend
on the thread ids; row-reduction kernels stay warp-synchronous (no shared memory, no
barrier) for every row length.

Each kernel is simulated from both the mapped IR and the flattened IR that codegen
prints (strict: races, divergent barriers, incomplete warp shuffles raise), and a few
emitted ``.cu`` files are compiled with ``nvcc -arch=sm_80 -cubin``.
"""

import functools
import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp as pc
from polycomp.driver import compile_kernel, interpret
from polycomp.frontend import ops
from polycomp.hw.cuda.codegen import split_kernels
from polycomp.hw.cuda.simulator import simulate
from polycomp.scheduler.gpu.rowstate import row_kernels
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.record import promotion_state

SYM = "sym"          # a symbolic extent (N for rows, M for the row length)
KINDS = ("sum", "max", "softmax", "layernorm", "two_outputs", "dead_sum", "mean_out")


# ----------------------------------------------------------------------------- kernels

def _kernel(kind: str, rows, width):
    """The DSL kernel ``kind`` over ``X: (rows, width)`` (``SYM`` for a symbol)."""
    N = pc.sym("N") if rows == SYM else rows
    W = pc.sym("M") if width == SYM else width

    def red(name, fn, op=pc.sum):
        j = pc.reduce_axis(W, f"j_{name}")
        return pc.compute((N,), lambda i: op(fn(i, j), axis=j), name=name)

    if kind == "layernorm":
        @pc.tensor_expr
        def layernorm(X: pc.Tensor[(N, W), "float32"], g: pc.Tensor[(W,), "float32"],
                      b: pc.Tensor[(W,), "float32"]):
            return ops.layernorm(X, g, b)
        return layernorm

    @pc.tensor_expr
    def rows_kernel(X: pc.Tensor[(N, W), "float32"]):
        if kind in ("sum", "max"):
            return red("S", lambda i, j: X[i, j], pc.sum if kind == "sum" else pc.max)
        if kind == "softmax":
            mx = red("mx", lambda i, j: X[i, j], pc.max)
            e = pc.compute((N, W), lambda i, c: pc.exp(X[i, c] - mx[i]), name="e")
            s = red("s", lambda i, j: e[i, j])
            return pc.compute((N, W), lambda i, c: e[i, c] / s[i], name="y")
        if kind == "two_outputs":      # S is an output nothing else reads
            Y = pc.compute((N, W), lambda i, c: X[i, c] * 2.0 + 1.0, name="Y")
            return Y, red("S", lambda i, j: X[i, j])
        if kind == "dead_sum":         # S is computed and never used
            red("S", lambda i, j: X[i, j])
            return pc.compute((N, W), lambda i, c: X[i, c] + 1.0, name="Y")
        if kind == "mean_out":         # a row-wise stage of the row value is an output
            S = red("S", lambda i, j: X[i, j])
            mu = pc.compute((N,), lambda i: S[i] * 0.5, name="mu")
            return mu, pc.compute((N, W), lambda i, c: X[i, c] - mu[i], name="Y")
        raise AssertionError(kind)
    return rows_kernel


def _reference(kind: str, args):
    x = args[0].astype(np.float64)
    if kind == "sum":
        return (x.sum(axis=1),)
    if kind == "max":
        return (x.max(axis=1),)
    if kind == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True),)
    if kind == "layernorm":
        g, b = args[1].astype(np.float64), args[2].astype(np.float64)
        d = x - x.mean(axis=1, keepdims=True)
        return (d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * g + b,)
    if kind == "two_outputs":
        return (x * 2.0 + 1.0, x.sum(axis=1))
    if kind == "dead_sum":
        return (x + 1.0,)
    if kind == "mean_out":
        mu = x.sum(axis=1) * 0.5
        return (mu, x - mu[:, None])
    raise AssertionError(kind)


@functools.cache
def _compiled(kind: str, rows, width):
    return compile_kernel(_kernel(kind, rows, width), "cuda")


def _inputs(kind: str, n: int, w: int, seed: int):
    rng = np.random.default_rng(seed)
    args = [(3 * rng.standard_normal((n, w))).astype(np.float32)]
    if kind == "layernorm":
        args += [rng.standard_normal(w).astype(np.float32) for _ in range(2)]
    return args


def _check(kind: str, n: int, w: int, const_rows: bool, const_width: bool, seed: int = 0):
    """Simulate the compiled kernel from both IR stages and compare with numpy."""
    ck = _compiled(kind, n if const_rows else SYM, w if const_width else SYM)
    args = _inputs(kind, n, w, seed)
    expected = _reference(kind, args)
    _, kernels = split_kernels(ck.final_ir)
    for stage in ("final", "ir"):
        out, rep = simulate(ck, *args, ir_stage=stage)
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(expected)
        for o, e in zip(outs, expected):
            assert not np.isnan(o).any(), f"{stage}: some outputs were never written"
            tol = 1e-5 * max(1.0, float(np.abs(e).max())) * max(1, w) ** 0.5
            np.testing.assert_allclose(o, e, rtol=1e-5, atol=tol,
                                       err_msg=f"{kind} {n}x{w} ({stage})")
        assert rep.ok, rep.summary()
        assert len(rep.kernels) == len(kernels)
    return ck


def _row_kernel_is_warp_synchronous(ck) -> None:
    """The row-reduction kernel uses shared memory and barriers only when a row spans
    several warps (the block class: one scratch element per warp and reduction, one
    barrier per reduction); rows of a warp or less are combined by warp shuffles alone
    (none for one thread per row)."""
    notes = ck.notes.get("gpu-row-reduction", [])
    assert notes, f"{ck.name}: no row-reduction kernel ({ck.notes})"
    rks = row_kernels(ck.state).kernels
    assert rks
    m = next(iter(rks.values())).mapping
    if m.threads > 1:
        assert "__shfl_xor_sync" in ck.source
    if m.threads <= 32:
        assert "__shared__" not in ck.source
        assert "__syncthreads" not in ck.source
    else:
        assert m.rows == 1
        assert ck.source.count("__syncthreads") == sum(
            1 for p in ck.state.promotions if p.warp is not None)


# ------------------------------------------------------------------ the issue's cases

@pytest.mark.parametrize("n", [8, 13])
def test_issue_row_sum_of_32_wide_rows(n):
    """x: (N, 32) summed over the row: N = 8 was off by up to 14 (every warp summed
    warp 0's row), N = 13 raised BarrierDivergenceError (barrier under the row guard)."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 32)).astype(np.float32)
    ck = _compiled("sum", SYM, 32)
    out = interpret(ck, x)
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    _row_kernel_is_warp_synchronous(ck)
    assert any("below the kernel's thread mapping" in s for s in ck.notes["promote-shared"])
    _check("sum", n, 32, const_rows=False, const_width=True)
    _check("sum", n, 32, const_rows=True, const_width=True)


@pytest.mark.parametrize("kind,n,w", [("layernorm", 8192, 768), ("sum", 750000, 32),
                                      ("softmax", 8192, 768)])
def test_issue_real_shapes_are_warp_synchronous(kind, n, w):
    """The shapes of the report compile to the row mapping the cost model chooses (no
    shared copy; shared memory only for a block-class combine), with the launch that
    mapping implies; the same row length is simulated with fewer rows."""
    ck = _compiled(kind, n, w)
    _row_kernel_is_warp_synchronous(ck)
    m = row_kernels(ck.state).kernels[0].mapping
    launch = gpu_kernels(ck.state).launches[0]
    assert launch.block == (m.threads, m.rows, 1)
    assert str(launch.grid[0]) == f"{{ [({-(-n // m.rows)})] }}"
    small = 13 if w <= 32 else 9
    _check(kind, small, w, const_rows=False, const_width=True)
    _check(kind, small, w, const_rows=True, const_width=True)


@pytest.mark.parametrize("kind", ["sum", "layernorm"])
def test_privatised_accumulators_are_register_records(kind):
    """Each row reduction's accumulator is recorded as a one-element ``registers``
    promotion of its kernel carrying the warp butterfly (no register *tile*: the point
    loop unrolling does not take it for one), and its kernel is a ``kernel:<n>`` mark."""
    ck = _compiled(kind, SYM, 32)
    records = [p for p in promotion_state(ck.state).promotions if p.warp is not None]
    assert records, promotion_state(ck.state).promotions
    for p in records:
        assert p.level == "registers" and p.local.scope == "local"
        assert [e.value for e in p.local.shape] == [1]
        assert p.kernel in gpu_kernels(ck.state).launches
        assert any(c.kind == "warp_allreduce" for c in p.copies.values())
    assert "unroll-point-loops" not in ck.notes


@pytest.mark.parametrize("kind", ["two_outputs", "dead_sum", "mean_out"])
@pytest.mark.parametrize("n", [1, 8, 13])
def test_unused_row_reduction_keeps_other_outputs(kind, n):
    """A constant-length row reduction whose result nothing else reads (an output, or
    dead) no longer corrupts the other output of the same kernel."""
    ck = _check(kind, n, 32, const_rows=False, const_width=True)
    _row_kernel_is_warp_synchronous(ck)
    _check(kind, n, 32, const_rows=True, const_width=True)


@pytest.mark.parametrize("kind", ["sum", "softmax", "layernorm"])
@pytest.mark.parametrize("n,w", [(1, 1), (5, 7), (9, 31), (17, 33), (3, 100), (20, 768)])
def test_constant_widths(kind, n, w):
    """Widths below, at and above one warp, with a partial last block of rows."""
    ck = _check(kind, n, w, const_rows=False, const_width=True)
    _row_kernel_is_warp_synchronous(ck)


@pytest.mark.parametrize("kind", ["sum", "softmax", "layernorm", "two_outputs"])
def test_symbolic_widths_unchanged(kind):
    """The symbolic-width kernels (which always worked) still do."""
    for n, w in [(1, 1), (13, 32), (9, 37), (4, 100)]:
        ck = _check(kind, n, w, const_rows=False, const_width=False)
    _row_kernel_is_warp_synchronous(ck)


# ------------------------------------------------------------------ other row kernels

def _other(name: str, const: bool):
    """(kernel, inputs, references, keyword symbols) of a few more row-kernel shapes:
    two reduce axes, a strided row, an integer sum, a vector every warp reads, a
    column sum (rows are columns), two float64 reductions of one row."""
    rng = np.random.default_rng(7)
    N = 13 if const else pc.sym("N")
    W = 40 if const else pc.sym("M")
    if name == "two_axes":
        A, B = (5, 7) if const else pc.sym("A B")

        @pc.tensor_expr
        def two_axes(X: pc.Tensor[(N, A, B), "float32"]):
            a, b = pc.reduce_axis(A, "a"), pc.reduce_axis(B, "b")
            return pc.compute((N,), lambda i: pc.sum(X[i, a, b], axis=[a, b]), name="S")
        x = rng.standard_normal((13, 5, 7)).astype(np.float32)
        return two_axes, [x], [x.sum(axis=(1, 2))], {}
    if name == "strided":
        H = 20 if const else pc.sym("H")

        @pc.tensor_expr
        def strided(X: pc.Tensor[(N, 2 * H), "float32"]):
            j = pc.reduce_axis(H, "j")
            return pc.compute((N,), lambda i: pc.sum(X[i, 2 * j], axis=j), name="S")
        x = rng.standard_normal((13, 40)).astype(np.float32)
        return strided, [x], [x[:, ::2].sum(axis=1)], ({} if const else {"H": 20})
    if name == "int_sum":
        @pc.tensor_expr
        def int_sum(X: pc.Tensor[(N, W), "int32"]):
            j = pc.reduce_axis(W, "j")
            return pc.compute((N,), lambda i: pc.sum(X[i, j], axis=j), name="S")
        x = rng.integers(-100, 100, (13, 40)).astype(np.int32)
        return int_sum, [x], [x.sum(axis=1)], {}
    if name == "shared_vector":
        @pc.tensor_expr
        def shared_vector(X: pc.Tensor[(N, W), "float32"], g: pc.Tensor[(W,), "float32"]):
            j = pc.reduce_axis(W, "j")
            S = pc.compute((N,), lambda i: pc.sum(X[i, j] * g[j], axis=j), name="S")
            return pc.compute((N, W), lambda i, c: X[i, c] * S[i] + g[c], name="Y")
        x = rng.standard_normal((13, 40)).astype(np.float32)
        g = rng.standard_normal(40).astype(np.float32)
        xd = x.astype(np.float64)
        return shared_vector, [x, g], [xd * (xd @ g)[:, None] + g], {}
    if name == "column_sum":
        @pc.tensor_expr
        def column_sum(X: pc.Tensor[(N, W), "float32"]):
            r = pc.reduce_axis(N, "r")
            return pc.compute((W,), lambda j: pc.sum(X[r, j], axis=r), name="S")
        x = rng.standard_normal((13, 40)).astype(np.float32)
        return column_sum, [x], [x.sum(axis=0)], {}
    if name == "sum_max_f64":
        @pc.tensor_expr
        def sum_max_f64(X: pc.Tensor[(N, W), "float64"]):
            k, k2 = pc.reduce_axis(W, "k"), pc.reduce_axis(W, "k2")
            return (pc.compute((N,), lambda i: pc.sum(X[i, k], axis=k), name="S"),
                    pc.compute((N,), lambda i: pc.max(X[i, k2], axis=k2), name="Mx"))
        x = rng.standard_normal((13, 40))
        return sum_max_f64, [x], [x.sum(axis=1), x.max(axis=1)], {}
    raise AssertionError(name)


@pytest.mark.parametrize("const", [True, False], ids=["constant", "symbolic"])
@pytest.mark.parametrize("name", ["two_axes", "strided", "int_sum", "shared_vector",
                                  "column_sum", "sum_max_f64"])
def test_other_row_kernels(name, const):
    kernel, args, expected, syms = _other(name, const)
    ck = compile_kernel(kernel, "cuda")
    _row_kernel_is_warp_synchronous(ck)
    for stage in ("final", "ir"):
        out, rep = simulate(ck, *args, ir_stage=stage, **syms)
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(expected)
        for o, e in zip(outs, expected):
            np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-4, err_msg=f"{name} ({stage})")
        assert rep.ok, rep.summary()


# ------------------------------------------------------------------ random extents

def _extent(lo: int, hi: int):
    """An extent in [lo, hi]: the low end, a prime, an odd size, or anything."""
    primes = [p for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 61,
                          67, 71, 97) if lo <= p <= hi]
    return st.one_of(st.just(lo), st.sampled_from(primes),
                     st.integers(lo, hi).map(lambda k: k | 1).filter(lambda k: k <= hi),
                     st.integers(lo, hi))


WIDTHS = st.one_of(st.sampled_from([1, 31, 32, 33, 64, 65]), _extent(1, 100))


@settings(max_examples=12)
@given(kind=st.sampled_from(["sum", "max", "softmax", "two_outputs"]), n=_extent(1, 20),
       w=WIDTHS, const_rows=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_random_constant_widths(kind, n, w, const_rows, seed):
    _check(kind, n, w, const_rows=const_rows, const_width=True, seed=seed)


@settings(max_examples=6)
@given(n=_extent(1, 12), w=WIDTHS, const_rows=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_random_layernorm(n, w, const_rows, seed):
    _check("layernorm", n, w, const_rows=const_rows, const_width=True, seed=seed)


@settings(max_examples=8)
@given(kind=st.sampled_from(KINDS), n=_extent(1, 20), w=_extent(1, 100),
       seed=st.integers(0, 2 ** 16))
def test_random_symbolic_widths(kind, n, w, seed):
    _check(kind, n, w, const_rows=False, const_width=False, seed=seed)


# ------------------------------------------------------------------ nvcc

NVCC_CASES = [("sum", SYM, 32), ("sum", 750000, 32), ("layernorm", 8192, 768),
              ("softmax", SYM, 7), ("two_outputs", SYM, 33), ("mean_out", 13, 100),
              ("softmax", SYM, SYM)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("kind,rows,width", NVCC_CASES,
                         ids=[f"{k}-{r}x{w}" for k, r, w in NVCC_CASES])
def test_nvcc_compiles(kind, rows, width, tmp_path):
    ck = _compiled(kind, rows, width)
    kernels = re.findall(r"__global__ void(?: __launch_bounds__\(\d+\))? (\w+)\(", ck.source)
    assert kernels, "no __global__ kernel emitted"
    cu = tmp_path / f"{ck.name}.cu"
    cu.write_text(ck.source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, f"nvcc failed on {cu.name}:\n{r.stderr[-4000:]}"
    assert (tmp_path / "k.cubin").stat().st_size > 0
