"""Row-reduction thread mappings per shape class (issue #26): the cost model
(scheduler/gpu/rowplan.py), the mapping pass (scheduler/gpu/rowreduce.py: golden trees
per class), the CUDA side (hw/cuda/rowreduce.py: combine, vector loops, register caches,
row-length checks), checked in the strict simulator against numpy on odd, prime,
extent-1 and symbolic shapes with NaN / infinity rows, compiled by nvcc for sm_80 and
sm_90 (ptxas: no spills; SASS: 128-bit accesses, shuffles, barriers where expected), and
the multi-version dispatch of symbolic row lengths (scheduler/tuning/row_versions.py)."""
from __future__ import annotations

import functools
import shutil

import islpy as isl
import numpy as np
import pytest
from row_kernels import SYM, inputs, kernel, reference, tolerance

from polycomp.driver import compile_kernel, schedule_passes
from polycomp.errors import OptionError
from polycomp.hw.cuda.simulator import MisalignedAccessError, SimulatorError, simulate
from polycomp.hw.target import get_target
from polycomp.islutil import context
from polycomp.scheduler.gpu.rowplan import RowMapping, RowShape, choose, estimate
from polycomp.scheduler.gpu.rowstate import row_kernels
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.state import CompileState

H100 = get_target("cuda-sm90")
A100 = get_target("cuda")


# ----------------------------------------------------------------------------- the model

def _shape(n, w, passes=3, outs=1, red=2, itemsize=4, **kw):
    return RowShape(n, w, itemsize, passes=passes, in_arrays=1, out_arrays=outs,
                    reductions=red, **kw)


@pytest.mark.parametrize("n,w,kind", [
    (64, 30000, "block"),        # few long rows: a block per row
    (4096, 4096, "block"),
    (8192, 1024, "warp"),
    (750000, 32, "packed"),      # many short rows: several rows per warp
    (12288, 128, "packed"),
])
def test_model_classes_at_the_issue_shapes(n, w, kind):
    m, cost = choose(_shape(n, w), H100)
    assert m.kind == kind, (m, cost)
    assert m.vector == 4 and m.cache                 # 16-byte columns, one read
    assert m.block_threads <= 1024 and cost.seconds > 0
    assert cost.bytes == n * w * 4 * 2               # read once, written once


def test_model_symbolic_width_takes_the_warp_class():
    m, _ = choose(_shape(None, None), H100)
    assert (m.threads, m.rows, m.vector, m.cache) == (32, 8, 1, False)
    m, _ = choose(_shape(None, None, bound=4096), H100)   # a bound: the model chooses
    assert m.cache and m.bound == 4096


def test_model_penalises_what_it_should():
    s = _shape(64, 30000)
    one_warp = estimate(RowMapping(32, 8, 4, False), s, H100)
    block = estimate(RowMapping(1024, 1, 4, False), s, H100)
    assert one_warp.blocks == 8 and block.blocks == 64
    assert block.seconds < one_warp.seconds        # 8 blocks leave most SMs idle
    s = _shape(750000, 32, passes=1, red=1, outs=0)
    scalar = estimate(RowMapping(1, 256, 1, False), s, H100)    # 4-byte row chunks
    vector = estimate(RowMapping(8, 32, 4, False), s, H100)     # 128-byte row chunks
    assert vector.seconds < scalar.seconds
    s = _shape(8192, 4096)
    cached = estimate(RowMapping(128, 1, 4, True), s, H100)
    uncached = estimate(RowMapping(128, 1, 4, False), s, H100)
    assert cached.bytes * 2 == uncached.bytes       # 1 read instead of 3
    assert cached.seconds < uncached.seconds
    assert estimate(RowMapping(32, 8, 4, True), _shape(10 ** 6, 1024), A100).waves > 1


def test_model_a_row_sum_is_not_cached():
    m, _ = choose(_shape(8192, 1024, passes=1, red=1, outs=0), H100)
    assert not m.cache


# ----------------------------------------------------------------------- golden trees

#: (case, kind, rows, width, row_map): one per shape class
GOLDEN = [("packed", "softmax", (20,), 128, {"threads": 4, "vector": 4, "cache": True}),
          ("warp", "softmax", (20,), SYM, {"threads": 32}),
          ("block", "layernorm", (3,), 512, {"threads": 64, "vector": 4, "cache": True}),
          ("rows2d", "softmax", (SYM, SYM), 64, {"threads": 8, "vector": 2})]


def _read(text):
    return isl.Schedule.read_from_str(context(), text)


def _same(a, text) -> bool:
    return _read(a.to_str()).plain_is_equal(_read(text))


@pytest.mark.parametrize("case,kind,rows,width,row_map", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_mapping_golden(case, kind, rows, width, row_map, goldens):
    """The tree into and out of ``gpu-row-reduction`` for each shape class."""
    model = kernel(kind, rows, width).polyhedral_model()
    opts = {"row_map": row_map}
    ctx = CompileState(model, get_target("cuda"), opts)
    passes = schedule_passes(ctx)
    sched = model.initial_schedule
    k = [p.name for p in passes].index("gpu-row-reduction")
    for p in passes[:k]:
        sched = p.run(sched, ctx)
    stored_in = goldens.expected(f"rowmap.{case}.in.isl", sched.to_str(),
                                 lambda s: _same(sched, s))
    assert _same(sched, stored_in)
    out = passes[k].run(_read(stored_in), ctx)
    stored_out = goldens.expected(f"rowmap.{case}.out.isl", out.to_str(),
                                  lambda s: _same(out, s))
    assert _same(out, stored_out), "gpu-row-reduction produced a different tree"
    m = row_kernels(ctx).kernels[0].mapping
    assert m.threads == row_map["threads"]
    assert gpu_kernels(ctx).launches[0].block == (m.threads, m.rows, 1)


# --------------------------------------------------------------------- the simulator

@functools.cache
def _compiled(kind, rows, width, row_map=None, dtype="float32", target="cuda"):
    opts = {"row_map": dict(row_map)} if row_map else None
    return compile_kernel(kernel(kind, rows, width, dtype), target, opts)


def _check(kind, shape, rows=None, width=None, row_map=None, dtype="float32",
           special=False, seed=0, stages=("final", "ir")):
    """Compile (``rows``/``width`` given: constant, else from ``shape``), simulate from
    both IR stages (strict) and compare with numpy, NaN positions included."""
    rows = rows if rows is not None else shape[:-1]
    width = width if width is not None else shape[-1]
    key = tuple(sorted(row_map.items())) if row_map else None
    ck = _compiled(kind, tuple(rows), width, key, dtype)
    start = ck.source.index("__global__")
    kernels = ck.source[start:ck.source.index('extern "C"', start)]
    for buf in ck.state.inlined:       # recomputed where read: never stored or read back
        assert f" {buf}[" not in kernels and f"({buf}[" not in kernels, buf
    args = inputs(kind, shape, seed, dtype, special)
    expected = reference(kind, args)
    for stage in stages:
        out, rep = simulate(ck, *args, ir_stage=stage)
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(expected)
        for o, e in zip(outs, expected):
            o = np.asarray(o, dtype=np.float64)
            scale = np.nanmax(np.abs(np.where(np.isfinite(e), e, 0)), initial=1.0)
            np.testing.assert_allclose(o, e, rtol=tolerance(dtype, shape[-1]),
                                       atol=tolerance(dtype, shape[-1]) * scale,
                                       err_msg=f"{kind} {shape} {row_map} ({stage})")
        assert rep.ok, rep.summary()
    return ck


#: forced mappings of every class (vector widths where the width allows them)
MAPS = [{"threads": 1}, {"threads": 2, "vector": 2}, {"threads": 4, "vector": 4},
        {"threads": 8, "cache": False}, {"threads": 16, "vector": 4, "cache": True},
        {"threads": 32, "vector": 4, "cache": True}, {"threads": 32, "cache": False},
        {"threads": 64, "vector": 2}, {"threads": 128, "vector": 4, "cache": True},
        {"threads": 256, "vector": 4, "cache": False}, {"threads": 1024, "cache": True}]


def _fits(row_map, width):
    return width % row_map.get("vector", 1) == 0


@pytest.mark.parametrize("row_map", MAPS, ids=lambda m: "-".join(f"{k}{v}" for k, v in m.items()))
@pytest.mark.parametrize("kind", ["softmax", "layernorm", "sum", "two_outputs"])
@pytest.mark.parametrize("n,w", [(13, 36), (1, 8)])
def test_every_class(kind, n, w, row_map):
    """Each class on a prime row count (a partial last block) and on one row."""
    assert _fits(row_map, w)
    if kind == "sum" and row_map.get("cache"):     # one pass: nothing to keep
        with pytest.raises(OptionError, match="nothing reads it twice"):
            _compiled(kind, (n,), w, tuple(sorted(row_map.items())))
        return
    ck = _check(kind, (n, w), row_map=row_map)
    m = row_kernels(ck.state).kernels[0].mapping
    assert m.threads == row_map["threads"]
    assert m.vector == row_map.get("vector", m.vector)


@pytest.mark.parametrize("kind", ["softmax", "layernorm", "max", "min", "mean_out"])
@pytest.mark.parametrize("w", [1, 7, 31, 33, 97, 128, 770])
def test_model_mapping_widths(kind, w):
    """The model's own choice at widths below, at and above a warp, prime and odd."""
    _check(kind, (11, w))


@pytest.mark.parametrize("kind", ["softmax", "layernorm", "max", "sum"])
@pytest.mark.parametrize("row_map", [None, {"threads": 4, "vector": 4},
                                     {"threads": 64, "vector": 4},
                                     {"threads": 8, "cache": False},
                                     {"threads": 128, "vector": 4, "cache": False}],
                         ids=["model", "packed", "block", "packed-online", "block-online"])
def test_special_rows(kind, row_map):
    """Rows of NaN, of -inf, with one +inf, with one NaN, of zeros: numpy's answers
    (NaN where numpy's is NaN), for the two-pass softmax over registers and the online
    one over memory alike."""
    if kind in ("max", "sum") and row_map and row_map.get("cache") is False:
        row_map = {k: v for k, v in row_map.items() if k != "cache"}
    _check(kind, (7, 40), row_map=row_map, special=True)


@pytest.mark.parametrize("kind", ["softmax", "layernorm", "sum"])
@pytest.mark.parametrize("shape,row_map", [((3, 5, 40), None), ((2, 7, 64), {"threads": 8}),
                                           ((2, 3, 5, 33), None),
                                           ((2, 3, 5, 48), {"threads": 64, "vector": 4})])
def test_rows_of_two_and_three_dimensions(kind, shape, row_map):
    """Rows ``B x S`` and ``B x H x S``: the outer rows on grid y/z, constant and
    symbolic row extents."""
    ck = _check(kind, shape, row_map=row_map)
    launch = gpu_kernels(ck.state).launches[0]
    assert len(launch.grid) == len(shape) - 1
    _check(kind, shape, rows=(SYM,) * (len(shape) - 1), row_map=row_map)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["softmax", "layernorm", "sum"])
def test_sixteen_bit(kind, dtype):
    """16-bit rows: 8 columns per 16-byte access, float accumulation."""
    ck = _check(kind, (9, 64), dtype=dtype)
    assert row_kernels(ck.state).kernels[0].mapping.vector == 8


def test_stitched_bias_gelu_and_sum():
    """A row-wise bias, its gelu (an output) and its row sum in one kernel."""
    ck = _check("bias_gelu_sum", (9, 40))
    assert len(gpu_kernels(ck.state).launches) == 1


# ---------------------------------------------------------------- the online softmax

@pytest.mark.parametrize("kind,rows,width,row_map", [
    ("softmax", (SYM,), SYM, None),                            # the symbolic default
    ("softmax", (9,), 64, {"threads": 16, "cache": False}),
    ("softmax", (3,), 1000, {"threads": 128, "vector": 4, "cache": False}),
    ("softmax", (SYM, SYM), 33, {"threads": 8, "cache": False}),
    ("softmax", (7,), 1, {"threads": 1, "cache": False}),          # extent 1, one thread
    ("softmax", (4,), 97, {"threads": 32, "cache": False})])       # a prime width
def test_online_max_and_sum(kind, rows, width, row_map):
    """An uncached softmax computes its maximum and sum in one pass (the row is read
    twice, not three times): one combine of (max, sum) pairs, legal in debug mode
    against the rewritten statements' dependences; NaN/inf rows as numpy."""
    rm = tuple(sorted(row_map.items())) if row_map else None
    ck = _compiled(kind, rows, width, rm)
    rk = row_kernels(ck.state)
    assert len(rk.online) == 1
    assert any("one pass" in n for n in ck.notes["gpu-row-reduction"])
    m = rk.kernels[0].mapping
    steps = int(np.log2(m.segment)) + (int(np.log2(m.warps_per_row)) if m.threads > 32 else 0)
    assert ck.source.count("__shfl_xor_sync") == 2 * steps        # one pair combine
    assert ck.source.count("__syncthreads") == (1 if m.threads > 32 else 0)
    shape = tuple(5 if r == SYM else r for r in rows) + (37 if width == SYM else width,)
    _check(kind, shape, rows=rows, width=width, row_map=dict(row_map) if row_map else None,
           special=True)
    opts = {"row_map": dict(row_map)} if row_map else None
    compile_kernel(kernel(kind, rows, width), "cuda", opts, debug=True)   # legal


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_online_sixteen_bit(dtype):
    """The online pair of 16-bit rows: the running maximum and sum in float."""
    ck = _check("softmax", (6, 296), row_map={"threads": 32, "vector": 8, "cache": False},
                dtype=dtype, special=True)
    assert len(row_kernels(ck.state).online) == 1


@pytest.mark.parametrize("kind,row_map", [("softmax", {"threads": 32, "cache": True}),
                                          ("layernorm", {"threads": 32, "cache": False}),
                                          ("max", {"threads": 32})])
def test_no_online_pair(kind, row_map):
    """A cached softmax (the row is read from registers anyway), a layernorm (no sum of
    ``exp(. - max)``) and a lone maximum keep their reductions apart."""
    ck = _check(kind, (5, 64), row_map=row_map)
    assert row_kernels(ck.state).online == []
    assert not any("one pass" in n for n in ck.notes.get("gpu-row-reduction", []))


def test_row_online_off():
    """``row_online=False``: the uncached softmax's maximum and sum stay two passes
    (the GPU bundle's ``before``), one combine each, numpy's answers."""
    rm = {"threads": 16, "cache": False}
    ck = compile_kernel(kernel("softmax", (9,), 64), "cuda",
                        {"row_map": rm, "row_online": False})
    assert row_kernels(ck.state).online == []
    assert ck.source.count("__shfl_xor_sync") == 2 * 4            # two combines of 4 steps
    args = inputs("softmax", (9, 64), 0, "float32", True)
    out, rep = simulate(ck, *args)
    np.testing.assert_allclose(out, reference("softmax", args)[0], rtol=1e-5, atol=1e-6)
    assert rep.ok, rep.summary()


# ------------------------------------------------------------------- symbolic lengths

def test_symbolic_width_with_assumptions_checks_them():
    """``row_map`` with a vector and a bound on a symbolic length: isl generates code
    for ``M mod 4 = 0 and M <= 256``, the kernel checks both and traps otherwise."""
    rm = {"threads": 16, "vector": 4, "cache": True, "bound": 256}
    for w in (4, 64, 252, 256):
        _check("softmax", (5, w), rows=(SYM,), width=SYM, row_map=rm)
    ck = _compiled("softmax", (SYM,), SYM, tuple(sorted(rm.items())))
    assert "__trap()" in ck.source
    for w in (66, 260):
        x = inputs("softmax", (3, w))[0]
        with pytest.raises(SimulatorError, match="__trap"):
            simulate(ck, x)


def test_misaligned_vector_access_is_found():
    """The simulator checks the alignment of the accesses codegen prints as vectors
    (a kernel assuming ``M mod 4 = 0``, run through its IR with the check removed)."""
    from polycomp import ir
    from polycomp.hw.cuda.rowreduce import TRAP
    rm = (("threads", 8), ("vector", 4))
    ck = _compiled("sum", (SYM,), SYM, rm)

    class NoTrap(ir.Mutator):
        def visit_IfThenElse(self, s):
            if isinstance(s.then, ir.Evaluate) and getattr(s.then.value, "name", "") == TRAP:
                return ir.Evaluate(ir.IntImm(0))
            return self.generic(s)
    f = ck.final_ir.with_body(NoTrap().visit(ck.final_ir.body))
    with pytest.raises(MisalignedAccessError):
        simulate(f, inputs("sum", (3, 6))[0])


def test_multiversion_by_row_length():
    """One module: a version per row-length bucket (vector versions guarded by ``M mod
    4``), the selector IR in Python and the Python rule agree, every version checked
    against numpy in the simulator."""
    from polycomp.scheduler.tuning.row_versions import RowMultiVersion
    mv = RowMultiVersion(kernel("softmax", (SYM,), SYM), "cuda", buckets=(32, 256, 2048))
    plan = mv.plan
    assert plan.symbol == "M"
    used = set()
    for n, w in [(3, 1), (5, 32), (4, 33), (3, 100), (2, 256), (2, 258), (2, 1000),
                 (1, 2048), (1, 2051), (1, 3000)]:
        x = inputs("softmax", (n, w), seed=w)[0]
        y, i = mv.execute(x)
        np.testing.assert_allclose(y, reference("softmax", [x])[0], rtol=1e-5, atol=1e-6)
        assert i == plan.select({"N": n, "M": w}) == mv.select(N=n, M=w)
        v = plan.versions[i]
        assert (v.lo is None or v.lo < w) and (v.hi is None or w <= v.hi)
        assert w % v.multiple_of == 0
        used.add(i)
    assert plan.versions[-1].guards("M") == ()          # the last always holds
    assert len(used) >= 5
    assert mv.module.selector.name in mv.source and "__trap()" in mv.source
    assert "M <= 32" in mv.explain()


# ------------------------------------------------------------------------- options

@pytest.mark.parametrize("row_map,msg", [
    ({"threads": 3}, "power of two"), ({"vector": 3}, "1, 2, 4, 8 or 16"),
    ({"threads": 64, "rows": 2}, "a block of its own"), ({"speed": 1}, "unknown keys"),
    ({"threads": 16, "rows": 128}, "2048 threads")])
def test_bad_row_map_options(row_map, msg):
    with pytest.raises(OptionError, match=msg):
        compile_kernel(kernel("sum", (4,), 8), "cuda", {"row_map": row_map})


@pytest.mark.parametrize("row_map,msg", [
    ({"threads": 8, "vector": 4}, "not a multiple of 4"),
    ({"threads": 8, "vector": 8}, "16-byte"),
    ({"threads": 8, "cache": True}, "nothing reads it twice")])
def test_row_map_that_does_not_fit_the_kernel(row_map, msg):
    with pytest.raises(OptionError, match=msg):
        compile_kernel(kernel("sum", (4,), 6 if row_map.get("vector") == 4 else 8), "cuda",
                       {"row_map": row_map})


# ---------------------------------------------------------------------------- nvcc

NVCC = [("softmax", (4096,), 4096, None), ("softmax", (64,), 30000, None),
        ("softmax", (750000,), 32, None), ("layernorm", (8192,), 768, None),
        ("sum", (8192,), 1024, None), ("softmax", (SYM,), SYM, None),
        ("softmax", (SYM,), SYM, (("bound", 1024), ("cache", True), ("threads", 32),
                                   ("vector", 4))),
        ("layernorm", (SYM, SYM), 768, None), ("softmax", (SYM,), 4096, None),
        ("softmax", (64,), 4096, (("cache", False), ("threads", 256), ("vector", 4))),
        ("softmax", (512,), 100, (("cache", False), ("threads", 8)))]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("kind,rows,width,row_map", NVCC,
                         ids=[f"{k}-{'x'.join(map(str, r))}x{w}" + ("-map" if m else "")
                              for k, r, w, m in NVCC])
def test_nvcc_sm80_sm90(kind, rows, width, row_map):
    """nvcc -cubin for sm_80 and sm_90: no stack frame or spills (the register caches
    stay in registers), 128-bit global loads where the columns are vectors, shuffles
    for rows wider than a thread, a barrier only for a block-class row."""
    from polycomp.hw.cuda.sass import compile_archs, has_opcode
    ck = _compiled(kind, rows, width, row_map)
    m = row_kernels(ck.state).kernels[0].mapping
    built = compile_archs(ck.source, (80, 90))
    for sm, (ops, resources) in built.items():
        assert resources
        for r in resources:
            assert r.stack_bytes == 0 and r.spill_stores == 0 and r.spill_loads == 0, r
        if m.vector * 4 == 16:
            assert has_opcode(ops, "LDG.E.128"), (sm, sorted(ops))
        if m.threads > 1:
            assert has_opcode(ops, "SHFL.BFLY"), sm
        assert has_opcode(ops, "BAR") == (m.threads > 32), (sm, m)
