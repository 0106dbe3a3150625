"""The CUDA chain program tree (scheduler/chain/cuda_tree.py) and the IR passes that
expand its marks (hw/cuda/chain_passes.py): the split program's golden tree (two
kernels, the combining one an extension statement), legality checked with isl for every
dependence but the online softmax's (and refused when those are not excluded), the marks'
payloads, what each IR pass leaves (the ring's loop as isl generated it, the steps'
micro-kernels, block and thread loops with no block parameter left free), and chains
over two batch dimensions through the simulator (float32 and float16)."""
import dataclasses
import os
import re
from unittest import mock

import chain_kernels as ck
import islpy as isl
import numpy as np
import pytest

import polycomp as pc
from polycomp import ir
from polycomp.driver import compile_kernel
from polycomp.frontend import ops
from polycomp.hw.cuda.simulator import simulate
from polycomp.hw.target import get_target
from polycomp.scheduler.chain.cuda_tree import (
    CudaChainFusePass,
    CudaChainProgram,
    StepRole,
    chain_program,
    checked_dependences,
    program_tree,
)
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.state import CompileState

FORCE = {"chain": "force"}


def test_golden_tree_split(goldens):
    """``l`` split 3 ways: kernel 0 walks its split's ``l`` tiles ``[bl0, bh0)`` and
    writes the partial tile (``O_part``); kernel 1 (``O_combine``, an extension at the
    root) combines the partials."""
    from chain_trees import check_golden_tree
    with mock.patch.dict(os.environ, {"POLYCOMP_CHAIN_SPLITS": "3"}):
        sched = check_golden_tree(ck.bmm_softmax_chain, "cuda", FORCE,
                                  "test_chain_cuda_golden/bmm_softmax_chain_split3.chain-fuse.isl",
                                  goldens, ["acc_init", "first", "softmax", "second",
                                            "write_out"])
    text = sched.to_str()
    assert "64bl0 <= " in text and " < 64bh0" in text
    assert "O_part" in text and "O_combine" in text and "kernel:1" in text


def _state(kernel, options=None, target="cuda") -> CompileState:
    model = kernel.polyhedral_model()
    return CompileState(model, get_target(target), FORCE if options is None else options)


@pytest.mark.parametrize("name", ["bmm_softmax_chain", "causal_attention", "mm_relu_chain"])
def test_only_the_online_softmax_is_reassociated(name):
    """The tree satisfies every dependence but those between two instances of one
    reduction update and those from the softmax's row max to ``S_exp`` and its row sum
    to the quotient ``S``; with a softmax it does violate those (the online softmax is a
    reassociation, not a schedule of the model's statements)."""
    st = _state(getattr(ck, name))
    CudaChainFusePass().run(st.model.initial_schedule, st)
    prog = chain_program(st)
    assert prog.plan is not None
    _, _, core = program_tree(prog.plan, prog.tiles, st.model, CudaChainProgram())
    kept = checked_dependences(prog.plan, st.model)
    assert violated_dependences(core, kept).is_empty()
    all_but_self = checked_dependences(
        dataclasses.replace(prog.plan, match=dataclasses.replace(prog.plan.match, softmax=())),
        st.model)
    bad = violated_dependences(core, all_but_self)
    names: set = set()
    bad.foreach_map(lambda m: names.add((m.get_tuple_name(isl.dim_type.in_),
                                         m.get_tuple_name(isl.dim_type.out))))
    if prog.plan.match.has_softmax:
        assert names == {("S_max_update", "S_exp"), ("S_sum_update", "S")}, names
    else:
        assert not names


def test_tree_refused_when_a_dependence_would_break():
    """Checked with isl: without the online softmax's exclusions the tree violates the
    row max's and sum's flow, and the pass keeps its input (with a note)."""
    from polycomp.scheduler.chain import cuda_tree
    st = _state(ck.causal_attention)
    with mock.patch.object(cuda_tree, "checked_dependences",
                           lambda plan, model: model.dependences):
        out = CudaChainFusePass().run(st.model.initial_schedule, st)
    assert out is st.model.initial_schedule
    assert any("would violate" in n for n in st.remarks["chain-fuse"])
    assert chain_program(st).plan is None


def _records(c) -> dict[str, str]:
    return {r.name: r.output or "" for r in c.records}


def _attrs(f: ir.LoweredFunc, key: str) -> list[ir.AttrStmt]:
    found: list[ir.AttrStmt] = []
    ir.walk(f.body, lambda n: found.append(n)
            if isinstance(n, ir.AttrStmt) and n.key == key else None)
    return found


@pytest.mark.parametrize("name,half", [("causal_attention", False), ("causal_attention", True)])
def test_ir_passes(name, half):
    """After lowering, the kernel region holds the step marks and the ring's ``l`` loop
    (the model's statements on the global intermediates); ``chain-ring`` turns the loop
    into the streamed one (float32: isl's loop with the Z tile's ``cp.async`` at its top;
    Tensor Cores: prologue, item loop, drain), ``chain-steps`` the other steps into their
    micro-kernels, ``chain-kernels`` wraps them: no block parameter is left free, the
    intermediates are not allocated, the marks stay (comments in the source)."""
    k = ck.HALF["float16"][name] if half else getattr(ck, name)
    c = compile_kernel(k, "cuda", None if half else {**FORCE, "chain_tiles": (16, 16)},
                       dump=True)
    rec = _records(c)
    lowered = rec["lower"]
    assert "// chain_ring: 0" in lowered and "T[" in lowered and "S_max[" in lowered
    ring = rec["chain-ring"]
    inside = ring.split("// chain_ring: 0")[1]
    inside = inside[:inside.index("// chain_step: 5")]     # WRITE_OUT: chain-steps' job
    assert "ptx_cp_async(" in inside and not re.search(r"\b(T|S_max|S_exp)\[", inside)
    if half:     # prologue, the item loop over (l tile, k chunk), mma on the fragments
        assert "tpro" in inside and "tq_it" in inside and "ptx_mma" in inside
    assert re.search(r"\bO\[", rec["chain-steps"].split("// chain_step: 5")[1])
    f = c.ir
    prog = chain_program(c.state)
    steps = [marks.attr_index(a, marks.CHAIN_STEP) for a in _attrs(f, marks.CHAIN_STEP)]
    assert sorted(steps) == list(range(len(prog.steps)))
    assert [prog.steps[i].role for i in steps][:2] == [StepRole.ACC_INIT, StepRole.FIRST]
    free = {v.name for v in ir.free_vars(f.body)}
    assert free <= {p.name for p in f.params}, free
    allocs: list[str] = []
    ir.walk(f.body, lambda n: allocs.append(n.buffer.name)
            if isinstance(n, ir.Allocate) and n.buffer.scope == "global" else None)
    assert allocs == []
    kinds = {n.kind for n in _loops(f)}
    assert {"gpu_block", "gpu_thread"} <= kinds
    assert "// chain_step: 1" in c.source


def _loops(f):
    out = []
    ir.walk(f.body, lambda n: out.append(n) if isinstance(n, ir.For) else None)
    return out


def test_ir_passes_split():
    """With ``S = 2``: two kernels, the split's partial tiles allocated in global memory
    around them, the block parameters ``bs0, bl0, bh0`` bound to ``blockIdx.z``."""
    with mock.patch.dict(os.environ, {"POLYCOMP_CHAIN_SPLITS": "2"}):
        c = compile_kernel(ck.bmm_softmax_chain, "cuda", {**FORCE, "chain_tiles": (16, 16)})
    f = c.ir
    assert len(_attrs(f, marks.KERNEL)) == 2
    assert isinstance(f.body, ir.Allocate) and f.body.buffer.name == "cpart_o"
    free = {v.name for v in ir.free_vars(f.body)}
    assert not free & {"bs0", "bl0", "bh0", "bx0", "by0", "bz0"}
    assert c.source.count("__global__") == 2


B, H, S, D = pc.sym("B H S D")


def _mh(dtype: str):
    def w(x):
        return pc.cast(x, "float32") if dtype != "float32" else x

    @pc.tensor_expr(name=f"mh_attention_{dtype}")
    def mh(Q: pc.Tensor[(B, H, S, D), dtype], KT: pc.Tensor[(B, H, D, S), dtype],
           V: pc.Tensor[(B, H, S, D), dtype]):
        k = pc.reduce_axis(D, "k")
        t = pc.compute((B, H, S, S), lambda b, h, i, j: pc.sum(
            w(Q[b, h, i, k]) * w(KT[b, h, k, j]), axis=k), name="T")
        sc = pc.compute((B, H, S, S), lambda b, h, i, j: t[b, h, i, j] * 0.25, name="Sc")
        p = ops.softmax(sc, axis=-1, name="P")
        r = pc.reduce_axis(S, "r")
        return pc.compute((B, H, S, D), lambda b, h, i, j: pc.sum(
            p[b, h, i, r] * w(V[b, h, r, j]), axis=r), name="O")
    return mh


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(2, 3, 19, 8), (1, 2, 1, 3), (3, 1, 33, 17)])
def test_two_batch_dimensions(dtype, shape):
    """Attention over ``[B, H, S, D]``: one block parameter per batch dimension
    (``bz0_0``, ``bz0_1``), bound to the flattened ``blockIdx.z``; numpy's result."""
    b, h, s, d = shape
    opts = {**FORCE, "chain_tiles": (16, 16)} if dtype == "float32" else None
    c = compile_kernel(_mh(dtype), "cuda", opts)
    assert "chain-cuda" in c.state.remarks
    assert chain_program(c.state).kernels[0].batch == ("bz0_0", "bz0_1")
    rng = np.random.default_rng(sum(shape))
    q = rng.standard_normal((b, h, s, d)).astype(dtype)
    kt = rng.standard_normal((b, h, d, s)).astype(dtype)
    v = rng.standard_normal((b, h, s, d)).astype(dtype)
    out, _ = simulate(c, q, kt, v)
    f = [x.astype(np.float32) for x in (q, kt, v)]
    ref = ck.np_softmax((f[0] @ f[1]) * np.float32(0.25)) @ f[2]
    tol = 1e-4 if dtype == "float32" else 4e-3
    assert np.allclose(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["split", "tc"])
def test_gpu_bundle_records_chain_cases(case, tmp_path, monkeypatch):
    """The GPU check bundle's recording side (hw/cuda/gpu_bundle.py) on chain kernels:
    a split float32 chain (two kernels, the partial tiles as global temporaries) and a
    Tensor Core chain are recorded with their launch geometry, and the runner
    (scripts/gpu_bundle_run.py, needs no polycomp) loads them."""
    import importlib.util
    import json

    from polycomp.hw.cuda.gpu_bundle import ENV_VAR
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "gpu_bundle_run", os.path.join(root, "scripts", "gpu_bundle_run.py"))
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    rng = np.random.default_rng(5)
    if case == "split":
        monkeypatch.setenv("POLYCOMP_CHAIN_SPLITS", "2")
        c = compile_kernel(ck.bmm_softmax_chain, "cuda", {**FORCE, "chain_tiles": (16, 16)})
        xs = ck.float32_inputs("bmm_softmax_chain", 1, 5, 3, 40, 6, rng, False)
    else:
        c = compile_kernel(ck.HALF["float16"]["causal_attention"], "cuda")
        xs = [rng.standard_normal(s).astype(np.float16)
              for s in ((1, 9, 16), (1, 16, 24), (1, 24, 8))]
    out, _ = simulate(c, *xs)
    names = sorted(p[:-5] for p in os.listdir(tmp_path / "cases") if p.endswith(".json"))
    assert len(names) == 1
    m = json.loads((tmp_path / "cases" / (names[0] + ".json")).read_text())
    assert (tmp_path / m["source"]).read_text() == c.source
    assert len(m["kernels"]) == (2 if case == "split" else 1)
    assert [t["name"] for t in m["temps"]] == (["cpart_o", "cpart_m", "cpart_s"]
                                              if case == "split" else [])
    loaded = runner.Case(str(tmp_path), names[0])
    np.testing.assert_array_equal(loaded.arrays["sim:" + m["args"][-1]["name"]], out)


def test_schedule_side_imports_no_backend():
    """The CUDA chain's schedule side (scheduler/chain: the tree, tiles, gate) reads
    target data only (hw/target.py, hw/memory.py, hw/options.py), never a backend
    package; the instruction-level IR is hw/cuda's."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parent.parent / "scheduler" / "chain"
    for name in ("cuda_tree.py", "cuda_kernel.py", "tc_kernel.py", "cuda_gate.py"):
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for mod in mods:
                assert not mod.startswith(("polycomp.hw.cuda", "polycomp.hw.cpu",
                                           "polycomp.hw.npu")), (name, mod)


@pytest.mark.parametrize("group,shape,dtype", [
    ("bmm", (1, 1, 1, 1, 1), "float32"),              # every extent 1
    ("bmm+softmax", (2, 3, 5, 7, 16), "float32"),     # L <= TL: isl leaves no l loop
    ("attention", (1, 1, 8), "float16"),
    ("attention", (2, 13, 8), "bfloat16")])
def test_constant_shapes_with_one_l_tile(group, shape, dtype):
    """Constant extents where the ring's band has one value (a constant ``L <= TL``):
    isl substitutes it, the ring is that one tile; numpy's result."""
    from polycomp import dtypes as pdt
    from polycomp.benchmarks.chains import _kernel, attention_kernel
    rng = np.random.default_rng(len(shape))
    if group == "attention":
        b, s, d = shape
        c = compile_kernel(attention_kernel(b, s, d, dtype=dtype), "cuda")
        h = pdt.to_numpy(dtype)
        xs = [rng.standard_normal(x).astype(h) for x in ((b, s, d), (b, d, s), (b, s, d))]
        f = [x.astype(np.float32) for x in xs]
        ref, tol = ck.np_softmax((f[0] @ f[1]) / np.float32(np.sqrt(d))) @ f[2], 2e-2
    else:
        b, m, n, k, l = shape  # noqa: E741
        c = compile_kernel(_kernel(group, shape), "cuda", FORCE)
        xs = [rng.standard_normal(x).astype(np.float32) for x in ((b, m, k), (b, k, l), (b, l, n))]
        ref = ck.reference("bmm_chain" if group == "bmm" else "bmm_softmax_chain", *xs)
        tol = 2e-4
    assert "chain-cuda" in c.state.remarks
    out, _ = simulate(c, *xs)
    assert np.allclose(out, ref, rtol=tol, atol=tol)
