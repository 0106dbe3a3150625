"""Compile-time rewrites that must give the same results as the code they replaced.

Each test compares a faster form with the direct computation it stands for (the
differential checks of whole kernels are the goldens and the fuzzer: their generated
source is unchanged).
"""
from __future__ import annotations

import random
import shutil
import subprocess

import islpy as isl
import pytest

from polycomp import ir
from polycomp.affine import AffForm, aff_to_ir
from polycomp.errors import NonAffineIndexError


@pytest.mark.parametrize("text", [
    "[N] -> { [i, j] -> [(3i - 2j + N + 5)] }",
    "[N, M] -> { [i, j] -> [(floor((i + 2N)/4) - 7)] }",
    "{ [i] -> [(floor((3i + floor((i)/2))/5))] }",
    "[N] -> { [i, j] -> [(-j)] }",
    "{ [] -> [(12)] }",
])
def test_aff_form_builds_what_aff_to_ir_builds(text):
    """AffForm read once, converted for two sets of inputs: the expression
    aff_to_ir builds (same tree, structurally)."""
    aff = isl.Aff(text)
    n_in = aff.dim(isl.dim_type.in_)
    params = {aff.get_dim_name(isl.dim_type.param, k): ir.Var(f"p{k}", is_param=True)
              for k in range(aff.dim(isl.dim_type.param))}
    form = AffForm(aff)
    for ins in ([ir.Var(f"x{k}") for k in range(n_in)],
                [ir.IntImm(k + 3) for k in range(n_in)]):
        assert ir.structural_equal(form.to_ir(ins, params), aff_to_ir(aff, ins, params))


def test_aff_form_names_a_parameter_without_a_value():
    form = AffForm(isl.Aff("[N] -> { [i] -> [(i + N)] }"))
    with pytest.raises(NonAffineIndexError, match="'N'"):
        form.to_ir([ir.Var("i")], {})


class _Plus(ir.Binary):
    """A subclass of a node class: Mutator.generic treats it as its base class."""


def test_mutator_generic_on_a_subclass_and_on_leaves():
    x, y = ir.Var("x"), ir.Var("y")
    e = _Plus("+", x, ir.IntImm(1), "int64")
    sub = ir.substitute(ir.Store(ir.Buffer("B", "int64", (ir.IntImm(4),)), (x,), e), {x: y})
    assert ir.structural_equal(sub.value, ir.Binary("+", y, ir.IntImm(1), "int64"))
    assert ir.substitute(e, {ir.Var("z"): y}) is e          # unchanged: same node
    leaf = ir.IntImm(3)
    assert ir.Mutator().visit(leaf) is leaf


def _live_direct(r, name):
    """The live range as first written: every access's loops, each tested against
    every access (the definition _live computes)."""
    ps = r.pos[name]
    lo, hi = min(ps), max(ps)
    for stack in r.loops[name]:
        for lid in stack:
            a, b = r.spans[lid]
            if not all(a <= q <= b for q in ps):
                lo, hi = min(lo, a), max(hi, b)
    return lo, hi


def test_ub_reuse_live_ranges_match_the_definition():
    from polycomp.hw.npu.ub_reuse import _live, _Ranges
    rng = random.Random(5)
    for _ in range(200):
        r = _Ranges()
        r.spans = []
        for _ in range(rng.randint(1, 6)):
            a = rng.randint(0, 30)
            r.spans.append([a, a + rng.randint(0, 10)])
        ps = sorted(rng.sample(range(40), rng.randint(1, 6)))
        r.pos["b"] = ps
        r.loops["b"] = [tuple(rng.sample(range(len(r.spans)), rng.randint(0, len(r.spans))))
                        for _ in ps]
        assert _live(r, "b") == _live_direct(r, "b")


# ------------------------------------------------------------------ C reader


def _count_model_builds(monkeypatch) -> list:
    from polycomp.frontend import c_model
    calls: list = []
    real = c_model.build_c_model

    def counted(program):
        calls.append(program)
        return real(program)
    monkeypatch.setattr(c_model, "build_c_model", counted)
    return calls


@pytest.mark.parametrize("nest", ["A[i] = A[i] * 0.5f + {s}.0f;", "B{s}[i] = A[i] + {s}.0f;"],
                         ids=["in-place", "own-arrays"])
def test_reading_and_compiling_a_c_kernel_builds_its_model_once(monkeypatch, nest):
    """Arrays whose statements share no loop cannot be privatised (the expansion is
    indexed by loops around every access): the reader builds no model for them; the
    model it builds (to report errors, or to test the candidates of its own nests when
    nothing is privatised) is the first compile's.  A second compile
    builds its own (each compile's model is its own object)."""
    from polycomp.driver import compile_kernel
    from polycomp.frontend.c_reader import read_c_kernel
    calls = _count_model_builds(monkeypatch)
    nests = "\n".join("  for (int i = 0; i < N; i++) " + nest.format(s=s) for s in range(4))
    arrays = "".join(f", float B{s}[N]" for s in range(4))
    k = read_c_kernel(f"void k(int N, float A[N]{arrays}) {{\n{nests}\n}}\n")
    assert len(calls) == 1
    first = compile_kernel(k, "c")
    assert len(calls) == 1
    second = compile_kernel(k, "c")
    assert len(calls) == 2 and second.model is not first.model
    assert second.source == first.source


def test_privatisation_still_builds_the_model_it_needs(monkeypatch):
    """An array written then read in each iteration of a loop (doitgen's sum): the
    reader builds the model for the expansion and again after it, and privatises."""
    from polycomp.frontend.c_reader import read_c_kernel
    calls = _count_model_builds(monkeypatch)
    k = read_c_kernel(
        "void k(int n, int m, float A[n][m], float B[n][m], float s[m]) {\n"
        "  for (int i = 0; i < n; i++) {\n"
        "    for (int j = 0; j < m; j++) s[j] = A[i][j] * 2.0f;\n"
        "    for (int j = 0; j < m; j++) B[i][j] = s[j] + s[m - 1 - j];\n"
        "  }\n}\n")
    assert len(calls) == 2       # the expansion's analysis, the error check after it
    assert any(t.name.startswith("s_priv") for t in k.graph.temporaries)


# ------------------------------------------------------------------ NPU API check


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this host")
@pytest.mark.parametrize("flags", [[], ["-D__NPU_ARCH__=2201"]], ids=["host", "device"])
def test_npu_api_check_reads_the_precompiled_header(tmp_path, flags):
    """The API check's header is precompiled per side and g++ reads the ``.gch`` in
    place of the text (``-H`` marks it with ``!``; the sources the declarations
    reject are still rejected: tests/test_npu_sim.py)."""
    from polycomp.hw.npu.api_header import HEADER
    from polycomp.hw.npu.backend import _precompiled_api_header
    d = _precompiled_api_header(HEADER, ["-std=c++17", *flags])
    assert d is not None
    src = tmp_path / "k.cpp"
    src.write_text('#include "kernel_operator.h"\nusing namespace AscendC;\n')
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-H", *flags, "-I", d, str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("! ") and first.endswith("kernel_operator.h.gch"), first


# ------------------------------------------------------------------ CUDA host program


def _geometry_direct(info, func, temps):
    """What host_program fills per kernel, computed as first written: one walk (or
    call) per question."""
    from polycomp.hw.cuda.ptx_hopper import tensor_maps, uses_call
    grid, block = [ir.IntImm(1)] * 3, [1, 1, 1]
    axis = {"x": 0, "y": 1, "z": 2}

    def fn(n):
        if isinstance(n, ir.For) and n.kind == "gpu_block":
            grid[axis[n.annotation("axis")]] = n.extent
        elif isinstance(n, ir.For) and n.kind == "gpu_thread":
            block[axis[n.annotation("axis")]] = int(n.annotation("threads"))
    ir.walk(info.body, fn)
    used = {b.name for b in ir.buffers_of(info.body)}
    return (grid, block, tuple(tensor_maps(info.body)), uses_call(info.body, "pc_wgmma_desc"),
            tuple(b for b in func.args + tuple(temps) if b.name in used))


@pytest.mark.parametrize("op", ["softmax_3d_1", "matmul_bias_relu"])
def test_host_program_one_walk_matches_the_direct_questions(op):
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import OPS
    from polycomp.hw.cuda.codegen import host_program, program_kernels
    func = compile_kernel(OPS[op].kernel("float32"), "cuda").final_ir
    temps, program = host_program(func)
    kernels = program_kernels(program)
    assert kernels
    for info in kernels:
        grid, block, maps, wgmma, buffers = _geometry_direct(info, func, temps)
        assert all(ir.structural_equal(a, b) for a, b in zip(info.grid, grid))
        assert info.block == block and info.tensor_maps == maps and not wgmma
        assert info.buffers == buffers


_ROW_TEMP = ("void k(int n, int m, float A[n][m], float B[n][m], float s[m]) {\n"
             "  for (int i = 0; i < n; i++) {\n"
             "    for (int j = 0; j < m; j++) s[j] = A[i][j] * 2.0f;\n"
             "    for (int j = 0; j < m; j++) B[i][j] = s[j] + s[m - 1 - j];\n"
             "  }\n}\n")


@pytest.mark.parametrize("kernel", ["row_temp", "syr2k_like.c", "lu_like.c",
                                    "seidel_like.c", "fdtd2d_like.c"])
def test_privatisation_flow_under_the_flat_order_equals_the_tree_one(kernel, monkeypatch):
    """expand_arrays' dataflow analysis of an array under the flat program order of
    its statements gives the relation the analysis under the whole schedule tree
    gives (and the same verdict on reads without a source)."""
    import os

    from polycomp.frontend import c_reader
    from polycomp.frontend.c_expand import _flow, _uses
    from polycomp.frontend.c_model import build_c_model
    from polycomp.frontend.c_reader import load_c_kernels
    if kernel == "row_temp":    # before privatisation: s is written, then read
        monkeypatch.setattr(c_reader, "expand_arrays", lambda program: None)
        program = c_reader.read_c_kernel(_ROW_TEMP).program
    else:
        path = os.path.join(os.path.dirname(__file__), "c_scop_kernels", kernel)
        program = load_c_kernels(path)[0].program
    model = build_c_model(program)
    by_name = {s.name: s for s in model.statements}
    arrays = [a.buffer for a in program.graph.arrays] + \
        [t.buffer for t in program.graph.temporaries]
    checked, flows = 0, 0
    for buf in arrays:
        users = [cs for cs in program.statements if _uses(cs, buf)]
        if not users:
            continue
        tree, flat = (_flow(model, by_name, buf, users, flat=f) for f in (False, True))
        assert (tree is None) == (flat is None), buf.name
        if tree is not None:
            assert tree.is_equal(flat), buf.name
            flows += not tree.is_empty()
        checked += 1
    assert checked and (flows or kernel != "row_temp")


# --------------------------------------------------------------------------- twelfth round


def _random_index_expr(rng, depth, dtype, leaves):
    if depth == 0 or rng.random() < 0.2:
        if rng.random() < 0.6:
            return rng.choice(leaves[dtype])
        return ir.IntImm(rng.choice([0, 1, -1, 2, 3, -4, 2 ** 62, -2 ** 63, 2 ** 31])
                         if dtype == "int64" else rng.choice([0, 1, -1, 5, -2 ** 31]), dtype)
    op = rng.choice(["+", "+", "-", "-", "*", "//", "%", "min", "max", "neg", "mix"])
    if op == "neg":
        return ir.Unary("neg", _random_index_expr(rng, depth - 1, dtype, leaves), dtype)
    if op == "mix":       # an atom of another dtype
        other = "int32" if dtype == "int64" else "int64"
        return ir.Binary("+", ir.Cast(_random_index_expr(rng, depth - 1, other, leaves), dtype),
                         _random_index_expr(rng, depth - 1, dtype, leaves), dtype)
    b = _random_index_expr(rng, depth - 1, dtype, leaves)
    if op in ("//", "%") and rng.random() < 0.7:
        b = ir.IntImm(rng.choice([1, 2, 4, 8]), dtype)
    return ir.Binary(op, _random_index_expr(rng, depth - 1, dtype, leaves), b, dtype)


def _leaves(data):
    i, j, n = ir.Var("i"), ir.Var("j"), ir.Var("n", is_param=True)
    buf = ir.Buffer("A", "int64", (ir.IntImm(8),))
    load = ir.Load(buf, (i,), "int64")
    return {"int64": [i, j, n, load, data, ir.Binary("//", i, ir.IntImm(4), "int64")],
            "int32": [ir.Var("a", "int32"), ir.Var("b", "int32")]}


def _merge_atoms_pairwise(terms):
    """The former _merge_atoms: every atom compared with every kept key."""
    out: dict = {}
    for atom, c in terms.items():
        for k in out:
            if k is atom or (not isinstance(k, ir.Var) and ir.structural_equal(k, atom)):
                out[k] += c
                break
        else:
            out[atom] = c
    return out


def test_simplifier_forms_are_what_linear_reads_back():
    """The linear forms the simplifier records for the sums it builds are linear() of
    those sums (same atoms in the same order, same coefficients); simplifying with the
    forms gives the tree simplifying without them gives; _merge_atoms merges as
    comparing every atom with every key does."""
    from polycomp.lowering import simplify as S
    rng = random.Random(12)
    leaves = _leaves(ir.Var("d"))
    recorded = 0
    for _ in range(1500):
        e = _random_index_expr(rng, rng.randint(1, 8), rng.choice(["int64", "int32"]), leaves)
        s = S.Simplifier()
        out = s.visit(e)
        assert ir.structural_equal(out, S.Simplifier(remember_forms=False).visit(e))
        assert s._forms is not None
        for node, form in s._forms.values():
            direct = S.linear(node)
            assert direct == form and list(direct[0]) == list(form[0])
            recorded += 1
        lin = S.linear(e)
        if lin is not None:
            assert list(S._merge_atoms(lin[0]).items()) == \
                list(_merge_atoms_pairwise(lin[0]).items())
    assert recorded > 1000


class _DirectIndexPrinter:
    """A printer that asks is_index at every node (the former behaviour)."""

    def _index_arith(self, e):
        return self.is_index(e)


def test_printer_index_memo_prints_what_is_index_at_every_node_prints():
    """CPrinter remembers that the operands of index arithmetic are index arithmetic;
    the C it prints is the C of asking is_index at every node, also for expressions
    mixing loads, data-bound lets and index values."""
    from polycomp.hw.cpu.codegen import CPrinter
    direct_cls = type("DirectCPrinter", (_DirectIndexPrinter, CPrinter), {})
    rng = random.Random(14)
    d = ir.Var("d")
    leaves = _leaves(d)
    out_buf = ir.Buffer("B", "int64", (ir.IntImm(8),))
    for _ in range(400):
        es = [_random_index_expr(rng, rng.randint(1, 7), "int64", leaves) for _ in range(3)]
        data = ir.Load(ir.Buffer("A", "int64", (ir.IntImm(8),)), (ir.Var("i"),), "int64")
        body = ir.seq(ir.Store(out_buf, (ir.IntImm(0),), es[0]),
                      ir.LetStmt(d, ir.Binary("+", data, ir.IntImm(1), "int64"),
                                 ir.seq(ir.Store(out_buf, (ir.IntImm(1),), es[1]),
                                        ir.Store(out_buf, (ir.IntImm(2),), es[0]))),
                      ir.Store(out_buf, (ir.IntImm(3),), es[2]))
        a, b = CPrinter(), direct_cls()
        a.stmt(body)
        b.stmt(body)
        assert a.lines == b.lines


def test_cpu_emit_skips_the_name_check_of_the_legalized_function():
    """The CPU emit prints the function the legalize-names pass returned without
    checking its names again: legalize_names returns that function unchanged, and the
    source equals the one printed after the check."""
    from polycomp.driver import compile_kernel
    from polycomp.frontend.ops import OPS
    from polycomp.hw.clike import legalize_names
    from polycomp.hw.cpu.backend import LegalNames
    from polycomp.hw.cpu.codegen import emit_c
    ck = compile_kernel(OPS["softmax"].kernel("float32"), "c")
    assert ck.state.slot(LegalNames).func is ck.final_ir
    assert legalize_names(ck.final_ir) is ck.final_ir
    assert emit_c(ck.final_ir) == emit_c(ck.final_ir, names_legal=True)
    assert ck.source.endswith(emit_c(ck.final_ir).split("\n", 1)[1])
