"""Gathers (indirect reads, ``table[idx[i], j]``) through the whole pipeline.

The model over-approximates a gather's access (a may-read of the whole indexed
dimension), the IR carries the index as ``gather_index(idx[i], V)`` and every backend
checks it: an index outside ``[0, V)`` is an ``IndexOutOfRangeError`` (the interpreter
and the CUDA simulator at the faulting instance, the compiled C after the call), never a
read outside the array.  Checked against numpy on random, odd/prime, extent-1 and
symbolic shapes, repeated and boundary indices, int32 and int64 index tensors.
"""
import numpy as np
import pytest

import polycomp as pc
from polycomp.driver import build, compile_kernel, interpret
from polycomp.errors import IndexOutOfRangeError, TargetError
from polycomp.hw.cuda.launcher import gpu_available
from polycomp.hw.cuda.simulator import simulate

V, D, N, M = pc.sym("V D N M")


def _emb(idx_dtype):
    @pc.tensor_expr(name=f"emb_{idx_dtype}")
    def emb(table: pc.Tensor[(V, D), "float32"], idx: pc.Tensor[(N,), idx_dtype]):
        return pc.compute((N, D), lambda i, j: table[idx[i], j], name="out")
    return emb


EMB = {d: _emb(d) for d in ("int32", "int64")}


@pc.tensor_expr
def take_last(X: pc.Tensor[(N, D), "float32"], idx: pc.Tensor[(M,), "int32"]):
    # gather along the innermost dimension (the vectorised loop indexes with data)
    return pc.compute((N, M), lambda i, j: X[i, idx[j]] * 2.0, name="out")


@pc.tensor_expr
def bag_sum(table: pc.Tensor[(V, D), "float32"], idx: pc.Tensor[(N, M), "int64"]):
    # embedding bag: a reduction over gathered rows
    k = pc.reduce_axis(M, "k")
    return pc.compute((N, D), lambda i, j: pc.sum(table[idx[i, k], j], axis=k), name="out")


@pc.tensor_expr
def emb_matmul(table: pc.Tensor[(V, D), "float32"], idx: pc.Tensor[(N,), "int64"],
               W: pc.Tensor[(D, M), "float32"]):
    # a contraction over gathered rows: no packing / panels of the gathered operand
    k = pc.reduce_axis(D, "k")
    return pc.compute((N, M), lambda i, j: pc.sum(table[idx[i], k] * W[k, j], axis=k),
                      name="out")


@pc.tensor_expr
def gather_temp(table: pc.Tensor[(V, D), "float32"], idx: pc.Tensor[(N,), "int32"]):
    # the table and the index are both computed in the kernel: the dependences of the
    # gather come from its over-approximated relation
    T = pc.compute((V, D), lambda v, d: table[v, d] + 1.0, name="T")
    J = pc.compute((N,), lambda i: idx[i] + 1, name="J")
    return pc.compute((N, D), lambda i, j: T[J[i], j], name="out")


@pc.tensor_expr
def guarded(table: pc.Tensor[(V, D), "float32"], idx: pc.Tensor[(N,), "int64"]):
    # a select whose data-dependent condition excludes the bad indices: no error
    return pc.compute((N, D), lambda i, j: pc.select((idx[i] >= 0) & (idx[i] < V),
                                                     table[idx[i], j], 0.0), name="out")


CPU = ["c", "cpu-avx2"]
SHAPES = [(37, 13, 101), (1, 1, 1), (5, 64, 7), (2, 9, 1)]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _indices(rng, v, n, dtype):
    ix = rng.integers(0, v, n).astype(dtype)
    ix[0] = v - 1                       # the boundary indices
    ix[-1] = 0
    if n > 3:
        ix[1] = ix[2] = ix[0]           # repeated
    return ix


def test_access_relation_is_a_may_read_of_the_whole_dimension():
    m = EMB["int64"].polyhedral_model()
    (s,) = m.statements
    idx_read, table_read, write = s.accesses
    assert (idx_read.buffer.name, idx_read.indirect) == ("idx", ())
    assert (table_read.buffer.name, table_read.indirect) == ("table", (0,))
    assert write.indirect == ()
    # golden: instance out[i, j] may read table[g, j] for every 0 <= g < V
    want = "[V, D, N] -> { out[i, j] -> table[g, j] : 0 <= i < N and 0 <= j < D and 0 <= g < V }"
    assert table_read.relation.is_equal(
        __import__("islpy").Map.read_from_str(m.ctx, want).intersect_params(m.context))
    assert idx_read.relation.is_equal(__import__("islpy").Map.read_from_str(
        m.ctx, "[V, D, N] -> { out[i, j] -> idx[i] : 0 <= i < N and 0 <= j < D }"
    ).intersect_params(m.context))
    assert "table[gather_index(idx[i], V), j]" in m.text()


def test_dependences_stay_sound_through_a_gather():
    import islpy as isl
    m = gather_temp.polyhedral_model()
    flow = m.flow
    # every write of T may reach every gather instance with the same column
    want = isl.UnionMap.read_from_str(
        m.ctx, "[V, D, N] -> { T[v, d] -> out[i, d] : 0 <= v < V and 0 <= d < D and "
               "0 <= i < N }").intersect_params(m.context)
    assert want.is_subset(flow)
    want_j = isl.UnionMap.read_from_str(
        m.ctx, "[V, D, N] -> { J[i] -> out[i, d] : 0 <= d < D and 0 <= i < N }"
    ).intersect_params(m.context)
    assert want_j.is_subset(flow)


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
@pytest.mark.parametrize("target", CPU)
def test_embedding_cpu(target, idx_dtype):
    f = build(EMB[idx_dtype], target)          # one compile, several symbolic sizes
    rng = _rng(1)
    for v, d, n in SHAPES:
        t = rng.standard_normal((v, d)).astype(np.float32)
        ix = _indices(rng, v, n, idx_dtype)
        np.testing.assert_array_equal(f(t, ix), t[ix])


def test_embedding_interpreter_and_nan():
    rng = _rng(2)
    t = rng.standard_normal((11, 3)).astype(np.float32)
    t[4, 1] = np.nan
    ix = np.array([4, 4, 10, 0], np.int64)
    np.testing.assert_array_equal(interpret(EMB["int64"], t, ix), t[ix])


@pytest.mark.parametrize("target", CPU)
def test_gather_innermost_bag_and_matmul_cpu(target):
    rng = _rng(3)
    fl, fb, fm = (build(k, target) for k in (take_last, bag_sum, emb_matmul))
    for n, v, d, m in [(3, 17, 29, 23), (1, 1, 1, 1), (8, 40, 33, 16)]:
        X = rng.standard_normal((n, d)).astype(np.float32)
        jx = _indices(rng, d, m, np.int32)
        np.testing.assert_array_equal(fl(X, jx), X[:, jx] * 2)
        t = rng.standard_normal((v, d)).astype(np.float32)
        bag = rng.integers(0, v, (n, m))
        np.testing.assert_allclose(fb(t, bag), t[bag].sum(axis=1), rtol=1e-5, atol=1e-5)
        W = rng.standard_normal((d, m)).astype(np.float32)
        ix = _indices(rng, v, n, np.int64)
        np.testing.assert_allclose(fm(t, ix, W), t[ix] @ W, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", CPU)
def test_gather_from_computed_table_and_index(target):
    f = build(gather_temp, target)
    rng = _rng(4)
    t = rng.standard_normal((19, 5)).astype(np.float32)
    ix = rng.integers(-1, 18, 23).astype(np.int32)
    np.testing.assert_array_equal(f(t, ix), (t + 1)[ix + 1])


def test_gathered_table_is_never_packed_or_promoted():
    # the gathered operand is no GEMM operand (no packed panel); on CUDA the affine
    # operands are promoted to shared memory, the gathered table is read in place
    ck = compile_kernel(emb_matmul, "cpu-avx2")
    assert "table_pk" not in ck.source and "pc_gather_index(idx[" in ck.source
    ck = compile_kernel(emb_matmul, "cuda")
    assert "W_shared" in ck.source and "table_shared" not in ck.source
    assert "table[(((pc_gather_index(idx_shared0[" in ck.source


@pytest.mark.parametrize("bad", [-1, 37, 2 ** 40, -(2 ** 63)])
@pytest.mark.parametrize("target", ["interpret"] + CPU)
def test_out_of_range_index_raises(target, bad):
    rng = _rng(5)
    t = rng.standard_normal((37, 6)).astype(np.float32)
    ix = _indices(rng, 37, 20, np.int64)
    ix[7] = bad
    with pytest.raises(IndexOutOfRangeError, match="table.* out of range"):
        if target == "interpret":
            interpret(EMB["int64"], t, ix)
        else:
            build(EMB["int64"], target)(t, ix)
    if target != "interpret":                   # the flag is cleared: the next call is fine
        ix[7] = 36
        np.testing.assert_array_equal(build(EMB["int64"], target)(t, ix), t[ix])


def test_out_of_range_int32_index_in_the_vector_loop_raises():
    rng = _rng(6)
    X = rng.standard_normal((4, 9)).astype(np.float32)
    jx = np.arange(16, dtype=np.int32) % 9
    jx[11] = 9
    with pytest.raises(IndexOutOfRangeError):
        build(take_last, "cpu-avx2")(X, jx)


def test_cuda_simulator():
    rng = _rng(7)
    ck_e, ck_l, ck_m = (compile_kernel(k, "cuda") for k in (EMB["int32"], take_last,
                                                             emb_matmul))
    for v, d, n in [(37, 13, 29), (1, 1, 1)]:
        t = rng.standard_normal((v, d)).astype(np.float32)
        ix = _indices(rng, v, n, np.int32)
        out, _ = simulate(ck_e, t, ix)
        np.testing.assert_array_equal(out, t[ix])
        X = rng.standard_normal((n, d)).astype(np.float32)
        jx = _indices(rng, d, v, np.int32)
        out, _ = simulate(ck_l, X, jx)
        np.testing.assert_array_equal(out, X[:, jx] * 2)
        W = rng.standard_normal((d, n)).astype(np.float32)
        i64 = _indices(rng, v, n, np.int64)
        out, _ = simulate(ck_m, t, i64, W)
        np.testing.assert_allclose(out, t[i64] @ W, rtol=1e-4, atol=1e-4)
    ix[-1] = v
    with pytest.raises(IndexOutOfRangeError):
        simulate(ck_e, t, ix)


@pytest.mark.nvcc
def test_nvcc_compiles_the_gather(tmp_path):
    import subprocess
    ck_m = compile_kernel(emb_matmul, "cuda")
    cu = tmp_path / "k.cu"
    cu.write_text(ck_m.source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-o", str(tmp_path / "k.cubin"),
                        str(cu)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_npu_refuses_a_gather():
    with pytest.raises(TargetError, match="npu: out gathers from table"):
        compile_kernel(EMB["int64"], "npu")


def test_a_guarded_gather_checks_only_the_indices_it_reads():
    rng = _rng(8)
    t = rng.standard_normal((7, 19)).astype(np.float32)
    ix = np.array([0, 7, -3, 6, 100, -(2 ** 63)])
    ref = np.where(((ix >= 0) & (ix < 7))[:, None], t[np.clip(ix, 0, 6)], 0)
    np.testing.assert_array_equal(interpret(guarded, t, ix), ref)
    for target in CPU:
        np.testing.assert_array_equal(build(guarded, target)(t, ix), ref)
    np.testing.assert_array_equal(simulate(compile_kernel(guarded, "cuda"), t, ix)[0], ref)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(),
                    reason="hardware: no NVIDIA GPU (with pycuda or cupy) here")
def test_cuda_gather_on_the_gpu():
    f = build(EMB["int64"], "cuda")
    rng = _rng(9)
    for v, d, n in SHAPES:
        t = rng.standard_normal((v, d)).astype(np.float32)
        ix = _indices(rng, v, n, np.int64)
        np.testing.assert_array_equal(f(t, ix), t[ix])
    ix[-1] = v                                   # the device flag: raised after the call
    with pytest.raises(IndexOutOfRangeError):
        f(t, ix)
    ix[-1] = 0                                   # and cleared for the next one
    np.testing.assert_array_equal(f(t, ix), t[ix])


def test_computed_table_and_bag_on_cuda_simulator_and_avx512():
    rng = _rng(10)
    t = rng.standard_normal((19, 5)).astype(np.float32)
    ix = rng.integers(-1, 18, 23).astype(np.int32)
    bag = rng.integers(0, 19, (4, 6))
    out, _ = simulate(compile_kernel(gather_temp, "cuda"), t, ix)
    np.testing.assert_array_equal(out, (t + 1)[ix + 1])
    out, _ = simulate(compile_kernel(bag_sum, "cuda"), t, bag)
    np.testing.assert_allclose(out, t[bag].sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(build(gather_temp, "cpu-avx512")(t, ix), (t + 1)[ix + 1])
    np.testing.assert_array_equal(build(EMB["int32"], "cpu-avx512")(t, ix + 1), t[ix + 1])
