"""The NPU program as a pipeline stage: the lowering ``npu-lower`` (lowered function +
typed plans -> NPU IR) and the NPU IR passes ``npu-double-buffer`` and ``npu-sync``
run through the pass manager, timed and dumped; ``CompiledKernel.final_ir`` is the NPU
IR the printer prints and the simulator runs.

Goldens (``tests/golden/npu/<case>.<step>.nir``) hold the NPU IR text after each step:
the lowering's output is the double-buffering pass's input, whose output is the flag
placement's input (IR in, IR out, as the schedule passes' tree goldens)."""
import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import chain_kernels as K
import numpy as np
import pytest

from polycomp.driver import compile_kernel
from polycomp.frontend.ops import OPS, matmul_kernel
from polycomp.hw.npu.backend import run_module, simulate
from polycomp.hw.npu.ir_text import module_text
from polycomp.hw.npu.passes import NpuDoubleBufferPass, double_buffer_kernel
from polycomp.hw.npu.printer import print_module
from polycomp.hw.npu.program import NpuModule, SetFlag, WaitFlag, walk

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("npu-lower", "npu-isa", "npu-ub-reuse", "npu-double-buffer", "npu-ub-banks",
         "npu-sync")

#: case -> (kernel maker, target): a cube program, a vector program, a cube program
#: with a vector epilogue, an implicit-GEMM convolution, phases, a fused chain
CASES = {
    "matmul_f16": (lambda: OPS["matmul"].kernel("float16"), "npu-lite"),
    "softmax_f16": (lambda: OPS["softmax"].kernel("float16"), "npu-lite"),
    "matmul_bias_relu_f16": (lambda: OPS["matmul_bias_relu"].kernel("float16"), "npu-lite"),
    "conv2d_s2_p1_f16": (lambda: OPS["conv2d_s2_p1"].kernel("float16"), "npu-lite"),
    "attention_f32": (lambda: OPS["attention"].kernel("float32"), "npu-lite"),
    "bmm_chain_f16": (lambda: K.npu_bmm_chain_f16, "npu-lite"),
    "matmul_i8": (lambda: OPS["matmul"].kernel("int8"), "npu-lite"),
    "matmul_bf16": (lambda: matmul_kernel("bfloat16", "bfloat16"), "npu-lite"),
    "layernorm_f16": (lambda: OPS["layernorm"].kernel("float16"), "npu"),
}
_CK: dict = {}


def _ck(case: str):
    if case not in _CK:
        make, target = CASES[case]
        _CK[case] = compile_kernel(make(), target, dump=True)
    return _CK[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_npu_ir_goldens(case, goldens):
    """The NPU IR after each target step, as the pass manager recorded it."""
    ck = _ck(case)
    recs = [r for r in ck.records if r.stage == "target"]
    assert [r.name for r in recs] == list(STEPS)
    for r in recs:
        assert r.tree is not None and r.tree.startswith("npu.module ")
        assert r.tree.strip() == goldens.expected(f"npu/{case}.{r.name}.nir", r.tree)
    # the last step's IR is final_ir; the source is its printed text, nothing else
    assert isinstance(ck.final_ir, NpuModule)
    assert recs[-1].tree == module_text(ck.final_ir) == str(ck.final_ir)
    assert ck.source == print_module(ck.final_ir, ck.target)
    assert ck.name == ck.final_ir.name == ck.ir.name
    # and the records come after the IR passes, before emission, in pipeline order
    stages = [r.stage for r in ck.records]
    assert stages.index("target") > stages.index("ir") and stages[-1] == "emit"


def test_flags_come_from_the_sync_pass():
    """Only ``npu-sync`` adds flags; ``npu-double-buffer`` adds copies only."""
    ck = _ck("matmul_f16")
    trees = {r.name: r.tree for r in ck.records if r.stage == "target"}
    lowered, isa, doubled = (trees[s] for s in ("npu-lower", "npu-isa", "npu-double-buffer"))
    assert all("set_flag" not in t for t in (lowered, isa, doubled))
    assert " x2" not in lowered and " x2" not in isa
    assert doubled.count(" x2 pingpong") == 5              # l1A, l1B, l0A, l0B, l0C
    assert any(isinstance(s, SetFlag) for p in ck.final_ir.program.programs
               for s in walk(p.body))


def test_double_buffer_pass():
    """Every ``pingpong`` buffer gets two copies, its slots ``counter % 2``; the other
    buffers and the instructions stay; off, the pass changes nothing; the result
    computes the same numbers (the simulator checks the flags placed on it)."""
    ck = compile_kernel(OPS["matmul_bias_relu"].kernel("float16"), "npu-lite",
                        {"double_buffer": False, "cube_tile": (16, 32, 32, 64)})
    single = ck.final_ir.program
    assert single.kind == "mix" and all(b.copies == 1 for p in single.programs
                                        for b in p.buffers)
    assert NpuDoubleBufferPass().run(ck.final_ir, ck.state) == ck.final_ir   # option off
    from polycomp.hw.npu.sync import place_kernel_flags, strip_flags
    doubled = double_buffer_kernel(single.map_programs(
        lambda p: dataclasses.replace(p, body=strip_flags(p.body))))
    for one, two in zip(single.programs, doubled.programs):
        assert one.core == two.core
        for b, d in zip(one.buffers, two.buffers):
            assert (d.copies, d.name) == (2 if b.pingpong else 1, b.name)
        slots = {(s.buf.name, repr(s.index)) for s in _slots(two.body) if s.buf.copies == 2}
        assert slots and all("'mod'" in i and "2" in i for _, i in slots)
    # 5 cube buffers on the AIC; the accumulator tile, the bias and the output on the AIV
    assert [sum(b.pingpong for b in p.buffers) for p in single.programs] == [5, 3]
    rng = np.random.default_rng(0)
    a, b, bias = (rng.standard_normal(s).astype(np.float16) for s in ((40, 150), (150, 70),
                                                                       (70,)))
    one, _ = simulate(ck, a, b, bias)
    two, _ = run_module(ck.final_ir.with_program(place_kernel_flags(doubled)), ck.target,
                        a, b, bias)
    np.testing.assert_array_equal(one, two)


def _slots(body):
    from polycomp.hw.npu.program import Slot
    for s in walk(body):
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, Slot):
                    yield x


def test_no_flags_without_sync_pass():
    """The lowering's program is flag-free; the sync pass's output balances them."""
    ck = _ck("softmax_f16")
    trees = {r.name: r.tree for r in ck.records if r.stage == "target"}
    assert all("set_flag" not in trees[s] for s in STEPS[:3])
    for prog in ck.final_ir.program.programs:
        sets = sum(isinstance(s, SetFlag) for s in walk(prog.body))
        waits = sum(isinstance(s, WaitFlag) for s in walk(prog.body))
        assert sets == waits > 0


def test_explain_and_dump_dir_show_the_npu_ir(tmp_path):
    """``polycomp explain -t npu`` prints the NPU IR after each target step and
    ``--dump-dir`` writes it as numbered files next to the trees and the IR."""
    k = tmp_path / "k.py"
    k.write_text("from polycomp.frontend.ops import matmul_kernel\n"
                 "mm = matmul_kernel('float16')\n")
    cli = [sys.executable, "-m", "polycomp.cli"]
    out = subprocess.run(cli + ["explain", str(k), "--target", "npu-lite"],
                         capture_output=True, text=True, check=True).stdout
    assert "##### target IR" in out
    for step in STEPS:
        assert f"--- after {step} (" in out
    assert "npu.module matmul_float16(" in out and "M    mmad l0C[" in out
    assert "note [npu-map]: matmul: cube; output tiles 64x32" in out
    d = tmp_path / "dump"
    subprocess.run(cli + ["compile", str(k), "--target", "npu-lite", "-o",
                          str(tmp_path / "k.cpp"), "--dump-dir", str(d)],
                   capture_output=True, text=True, check=True)
    names = sorted(p.name for p in d.iterdir())
    for step in STEPS:
        assert any(n.endswith(f"-{step}.ir") for n in names), names
    sync = next(p for p in d.iterdir() if p.name.endswith("-npu-sync.ir")).read_text()
    assert "set_flag MTE2->MTE1" in sync


# --------------------------------------------------------------------------- structure

def _py(*globs: str) -> list[Path]:
    return sorted(p for g in globs for p in ROOT.glob(g) if p.name != "__init__.py")


SCHEDULER_NPU = ("scheduler/npu/*.py", "scheduler/chain/npu_*.py")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def test_scheduler_does_not_import_the_npu_backend():
    """The NPU schedule passes read target data only; what only the lowering knows
    they ask through the NpuLoweringModel the backend hands them."""
    bad = [(p.relative_to(ROOT), m) for p in _py(*SCHEDULER_NPU) for m in _imports(p)
           if m.startswith("polycomp.hw.") and m not in ("polycomp.hw.target",
                                                          "polycomp.hw.memory",
                                                          "polycomp.hw.options")]
    assert not bad, bad
    assert _py(*SCHEDULER_NPU)


def test_no_module_level_caches():
    """No module of the NPU pipeline keeps state between compiles: no module-level
    weak or plain dictionary, list or set that starts empty (a cache)."""
    bad = []
    for p in _py("hw/npu/*.py", *SCHEDULER_NPU):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                v = node.value
                empty = (isinstance(v, (ast.Dict, ast.List, ast.Set)) and
                         not getattr(v, "keys", getattr(v, "elts", None))) or \
                    (isinstance(v, ast.Call) and "Weak" in ast.unparse(v.func)) or \
                    (isinstance(v, ast.Call) and ast.unparse(v.func) in ("dict", "list", "set")
                     and not v.args)
                if empty:
                    bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
        text = p.read_text()
        if "lru_cache" in text or "functools.cache" in text or "npu_schedule" in text:
            bad.append(str(p.relative_to(ROOT)))
    assert not bad, bad


def _strings(path: Path) -> list[str]:
    """The string constants of a module (f-string parts included), docstrings aside."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs]


def test_source_text_only_in_the_printer():
    """The Ascend C-style text is made by hw/npu/printer.py (and the declarations of
    hw/npu/api_header.py): no other module of the NPU pipeline builds source text."""
    import re
    api = re.compile(r"\b(DataCopy|DataCopyPad|LoadData|Mmad|Fixpipe|AllocLocal|PipeBarrier|"
                     r"SetGlobalBuffer|CeilDiv|Min|AlignUp)\(|HardEvent::|TPosition::|"
                     r"__aicore__|#include|LocalTensor<|GlobalTensor<|Params\{")
    bad = [(p.relative_to(ROOT), t) for p in _py("hw/npu/*.py", *SCHEDULER_NPU)
           if p.name not in ("printer.py", "api_header.py")
           for t in _strings(p) if api.search(t)]
    assert not bad, bad
    assert sum(bool(api.search(t)) for t in _strings(ROOT / "hw/npu/printer.py")) > 20


def test_npu_docs_name_real_modules_and_run(capsys):
    """docs/npu.md and the NPU section of docs/fusion.md name modules that exist, and
    npu.md's Python example runs."""
    import re
    npu = (ROOT / "docs/npu.md").read_text()
    fusion = (ROOT / "docs/fusion.md").read_text()
    fusion = fusion[fusion.index("## NPU"):]
    for text in (npu, fusion):
        for path in set(re.findall(r"`((?:hw|scheduler|tests)/[A-Za-z0-9_/]+\.py)`", text)):
            assert (ROOT / path).exists(), path
    for block in re.findall(r"```python\n(.*?)```", npu, re.S):
        exec(compile(block, "docs/npu.md", "exec"), {"__name__": "doc_npu"})
    capsys.readouterr()
