"""The target registry, typed options and the pass manager's steps: a new target is a
backend registered in one place; options are validated per target; every step of a
compile is timed and can be dumped."""
import os

import numpy as np
import pytest

from polycomp import cli
from polycomp.driver import compile_kernel, interpret
from polycomp.errors import OptionError, TargetError
from polycomp.frontend.ops import matmul_kernel, softmax_kernel
from polycomp.hw.memory import ComputeUnit, CopyRule, MemoryHierarchy, MemoryLevel
from polycomp.hw.options import CpuOptions, CudaOptions
from polycomp.hw.registry import (
    Backend,
    backend_for_name,
    canonical_name,
    register,
    target_names,
    unregister,
)
from polycomp.hw.target import Target, get_target
from polycomp.lowering.ir_pass import body_pass
from polycomp.lowering.simplify import simplify
from polycomp.options import Options

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "matmul_relu.py")


class ToyBackend(Backend):
    """A target that prints the IR and runs the interpreter: everything a backend
    needs, in one class."""
    family = "toy"
    names = ("toy",)
    aliases = {"toy-alias": "toy"}
    options_class = Options
    suffix = ".toy"
    descriptions = {"toy": "test target"}

    def make_target(self, name):
        memory = MemoryHierarchy(
            levels=(MemoryLevel("memory", "global", 0, 8, ("host",)),
                    MemoryLevel("scratch", "local", 4096, 32, ("core",))),
            copies=(CopyRule("memory", "scratch", "dma", "fence"),))
        return Target("toy", "toy", memory, (ComputeUnit("alu", "vector", (8,), ("float32",)),))

    def ir_passes(self, state):
        return [body_pass("simplify", simplify)]

    def emit(self, func, state):
        from polycomp.lowering.printer import func_str
        return func_str(func)


@pytest.fixture(scope="module")
def toy():
    register(ToyBackend())
    yield backend_for_name("toy")
    unregister("toy")


def test_a_registered_backend_compiles_and_runs(toy):
    ck = compile_kernel(softmax_kernel(), "toy-alias")
    assert ck.target.name == "toy" and ck.suffix() == ".toy"
    assert "func softmax_m1_float32(" in ck.source
    x = np.random.default_rng(0).random((4, 7)).astype(np.float32)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(interpret(ck, x), ref / ref.sum(1, keepdims=True), rtol=1e-5)
    assert get_target("toy").memory.copy_rule("memory", "scratch").sync == "fence"
    with pytest.raises(TargetError, match="no copy from scratch to memory"):
        get_target("toy").memory.copy_rule("scratch", "memory")


def test_registering_a_taken_name_or_family_is_refused(toy):
    class Clash(ToyBackend):
        family = "clash"
        names = ("cuda",)
        aliases = {}
    with pytest.raises(TargetError, match="'cuda' is already registered"):
        register(Clash())

    class SameFamily(ToyBackend):
        family = "c"
        names = ("other",)
        aliases = {}
    with pytest.raises(TargetError, match="family 'c' is already registered"):
        register(SameFamily())
    assert "clash" not in target_names() and "other" not in target_names()


@pytest.mark.parametrize("attrs,message", [
    ({"names": ()}, "declares no family or no target names"),
    ({"options_class": None}, "declares no options_class"),
    ({"aliases": {"t2": "nowhere"}}, "alias 't2' names 'nowhere'"),
])
def test_malformed_backends_are_refused(attrs, message):
    bad = type("Bad", (ToyBackend,), {"family": "bad", "names": ("bad",), "aliases": {},
                                      **attrs})
    with pytest.raises(TargetError, match=message):
        register(bad())


def test_a_backend_without_runner_or_checker(toy, tmp_path, capsys):
    """`polycomp run` falls back to the IR's reference executor; --check says it is not
    available."""
    path = tmp_path / "k.py"
    path.write_text(open(EXAMPLE).read())
    assert cli.main(["run", str(path), "-t", "toy", "-s", "N=5,M=3,K=4"]) == 0
    out = capsys.readouterr().out
    assert "ran on:    toy IR reference executor" in out and "OK" in out
    assert cli.main(["compile", str(path), "-t", "toy", "-o", str(tmp_path / "k.toy"),
                     "--check"]) == 2
    assert "--check is not available for target toy" in capsys.readouterr().err


def test_broken_plugin_is_reported_by_name(monkeypatch):
    import importlib.metadata as md

    from polycomp.hw import registry

    class EP:
        name, value = "broken", "nowhere.module"

        def load(self):
            raise ImportError("no module named nowhere")
    monkeypatch.setattr(md, "entry_points", lambda group: [EP()])
    monkeypatch.setattr(registry, "_loaded", False)
    with pytest.warns(UserWarning, match="plug-in 'broken' .*ImportError"):
        registry._load()
    assert "cuda" in target_names()


def test_unknown_target_lists_the_registered_ones():
    with pytest.raises(TargetError, match=r"unknown target 'gpu'; known: c, cpu, .*cuda"):
        get_target("gpu")


def test_targets_command_resolves_names(capsys):
    assert cli.main(["targets", "nosuch"]) == 2
    assert "unknown target 'nosuch'" in capsys.readouterr().err
    assert cli.main(["targets", "cuda-sm80"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cuda (alias cuda-sm80)") and "cuda-sm90" not in out
    assert canonical_name("cuda-sm80") == "cuda"


def test_targets_command_prints_hierarchies_units_and_options(capsys):
    assert cli.main(["targets", "cuda", "cpu-avx512", "--options"]) == 0
    out = capsys.readouterr().out
    assert "cuda (alias cuda-sm80)" in out and "shared       shared       48 KiB" in out
    assert "copy global -> shared (async): cp.async" in out
    assert "unit mma.sync (matrix 16x8x16)" in out
    assert "unit AVX-512 FMA (vector 16)" in out
    assert "option gemm_tiles = None" in out and "option tc_tile = None" in out
    assert "parameters: sm=80, shared_memory_optin=166912" in out


def test_every_backend_package_is_installed_and_registered():
    """A backend folder under hw/ is a package listed in pyproject.toml and its
    backend module is registered."""
    import re
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "pyproject.toml")) as f:
        listed = set(re.findall(r'"(polycomp[\w.]*)"', f.read()))
    from polycomp.hw.registry import BUILTIN_BACKENDS
    for folder in sorted(os.listdir(os.path.join(root, "hw"))):
        if os.path.isfile(os.path.join(root, "hw", folder, "backend.py")):
            assert f"polycomp.hw.{folder}" in listed
            assert f"polycomp.hw.{folder}.backend" in BUILTIN_BACKENDS


def test_cuda_hierarchy_data():
    t = get_target("cuda-sm90")
    assert t.shared_memory_per_block == 48 * 1024 and t.cuda.shared_memory_optin == 227 * 1024
    assert [lv.name for lv in t.memory.levels] == ["global", "shared", "registers"]
    assert t.memory.copy_rule("global", "shared").sync == "__syncthreads()"
    assert "wait_group" in t.memory.copy_rule("global", "shared", "async").sync


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize("target,options,message", [
    ("cpu-avx2", {"paralel": False}, r"unknown option 'paralel' for target cpu-avx2 "
                                     r"\(did you mean 'parallel'\?\); valid options: "),
    ("c", {"tile": {"block": (32, 32)}}, r"unknown option 'tile' for target c"),
    ("cuda", {"microkernel": False}, r"unknown option 'microkernel' for target cuda"),
    ("cpu-avx2", {"tail": "vector"}, r"option tail takes one of 'mask', 'scalar'"),
    ("cpu-avx2", {"reduce_unroll": 0}, r"option reduce_unroll takes an integer >= 1"),
    ("cpu-avx2", {"gemm_tiles": (64, 64)}, r"option gemm_tiles takes 3 integers"),
    ("cpu-avx2", {"parallel": "maybe"}, r"option parallel takes True or False"),
    ("cuda", {"tile": {"k": 0}}, r"option tile.k takes an integer >= 1, got 0"),
    ("cuda", {"tile": {"block": (64,), "kk": 4}}, r"option tile has unknown keys \['kk'\]"),
    ("cuda", {"gpu": "fast"}, r"option gpu takes one of 'tiled', 'baseline'"),
    ("cuda", {"tc_tile": {"warp": (32, 32, 32)}}, r"option tc_tile.warp takes 2 integers"),
])
def test_bad_options_are_rejected_with_the_valid_ones(target, options, message):
    with pytest.raises(OptionError, match=message):
        compile_kernel(matmul_kernel(), target, options)


@pytest.mark.parametrize("cls,kwargs,message", [
    (CpuOptions, {"tail": "bogus"}, "option tail takes one of"),
    (CpuOptions, {"reduce_unroll": 0}, "option reduce_unroll takes an integer >= 1"),
    (CudaOptions, {"tile": {"k": 0}}, "option tile.k takes an integer >= 1"),
    (CudaOptions, {"gpu": "baseline", "block": (4096,)}, "asks for 4096 threads per block"),
    (CudaOptions, {"tile": {"threads": (64, 32)}}, "asks for 2048 threads"),
    (CudaOptions, {"gpu": "baseline", "tile": {"k": 8}}, "option tile applies to the tiled"),
    (CudaOptions, {"tc_tile": {"k": 16}}, "option tc_tile.k takes 32 or 64"),
    (CudaOptions, {"tc_tile": {"stages": 9}}, "option tc_tile.stages takes 1..8"),
    (CudaOptions, {"tc_tile": {"block": (64, 64), "warp": (48, 32)}}, "must divide"),
])
def test_options_objects_built_directly_are_checked(cls, kwargs, message):
    with pytest.raises(OptionError, match=message):
        cls(**kwargs)


def test_options_of_another_family_are_refused():
    with pytest.raises(OptionError, match="CpuOptions given for target cuda, which takes "
                                          "CudaOptions"):
        compile_kernel(matmul_kernel(), "cuda", CpuOptions())


def test_numpy_values_and_tile_configs_are_accepted():
    from polycomp.scheduler.gpu.tile import TileConfig
    from polycomp.scheduler.tensorcore.tile import TcConfig
    o = CpuOptions.from_mapping({"reduce_unroll": np.int64(2), "parallel": np.False_,
                                 "gemm_tiles": np.array([64, 128, 256])})
    assert o.reduce_unroll == 2 and o.parallel is False and o.gemm_tiles == (64, 128, 256)
    c = CudaOptions(tile=TileConfig((64, 32), (16, 8), 16), tc_tile=TcConfig())
    assert c.tile.block == (64, 32) and c.tile.threads == (16, 8) and c.tile.k == 16
    assert c.tc_tile.k == 32 and c.tc_tile.stages == 3


@pytest.mark.parametrize("target,option,step", [
    ("cpu-avx2", "parallel", "cpu-parallel"), ("cpu-avx2", "fuse", "cpu-fuse"),
    ("cpu-avx2", "microkernel", "cpu-backbone-tile"), ("cpu-avx2", "contract", "contract"),
    ("cpu-avx2", "vectorize", "vectorize"), ("cpu-avx2", "prefetch", "prefetch"),
    ("cpu-avx512", "vector_lift", "lift"),
    ("cuda", "promote", "promote-shared"), ("cuda", "unroll", "unroll-point-loops"),
])
def test_each_switch_removes_its_step(target, option, step):
    from polycomp.frontend.ops import softmax_kernel
    kernel = matmul_kernel() if option in ("microkernel", "promote") else softmax_kernel()
    on = [r.name for r in compile_kernel(kernel, target).records]
    off = [r.name for r in compile_kernel(kernel, target, {option: False}).records]
    assert step in on and step not in off


def test_options_are_typed_and_defaulted():
    o = CpuOptions.from_mapping({"parallel": "false", "gemm_tiles": [64, 128, 256]})
    assert o.parallel is False and o.gemm_tiles == (64, 128, 256) and o.fuse is True
    c = CudaOptions.from_mapping({"tile": {"block": [64, 32], "k": 8}})
    assert c.tile.block == (64, 32) and c.tile.threads is None and c.tile.k == 8
    assert CudaOptions.from_mapping(c) is c


@pytest.mark.parametrize("argv,message", [
    (["-O", "paralel=False"], "unknown option 'paralel'"),
    (["--tile-k", "0", "-t", "cuda"], "option tile.k takes an integer >= 1, got 0"),
    (["--tile", "64,32"], "--tile, --threads and --tile-k set the CUDA option tile; target c"),
])
def test_cli_rejects_bad_options(argv, message, capsys):
    assert cli.main(["compile", EXAMPLE, "-o", "-", *argv]) == 2
    err = capsys.readouterr().err
    assert any(m in err for m in message.split("|")), err


# --------------------------------------------------------------------------- steps


def test_every_step_is_timed_and_dumped(tmp_path):
    ck = compile_kernel(matmul_kernel(), "cpu-avx2", dump_dir=str(tmp_path))
    stages = [r.stage for r in ck.records]
    assert stages[:2] == ["model", "schedule"] and stages[-1] == "emit"
    order = ["model", "schedule", "lower", "ir", "codegen", "emit"]
    assert [order.index(s) for s in stages] == sorted(order.index(s) for s in stages)
    assert {"lower", "ir", "codegen"} <= set(stages)
    assert all(r.seconds >= 0 and r.tree for r in ck.records)
    files = sorted(os.listdir(tmp_path))
    assert len(files) == len(ck.records)
    assert files[:2] == ["00-model.model", "01-initial.tree"] and files[-1].endswith("-emit.c")
    assert any(f.endswith("-lower.ir") for f in files)
    with open(tmp_path / files[-1]) as f:
        assert f.read().rstrip("\n") == ck.source.rstrip("\n")
    compile_kernel(matmul_kernel(), "c", {"parallel": False}, dump_dir=str(tmp_path))
    again = sorted(os.listdir(tmp_path))   # the first compile's files are gone
    assert len(again) < len(files) and sum(f.endswith("-emit.c") for f in again) == 1



def test_explain_dump_dir_option(tmp_path, capsys):
    d = tmp_path / "steps"
    assert cli.main(["explain", EXAMPLE, "-t", "cuda", "--dump-dir", str(d)]) == 0
    files = sorted(os.listdir(d))
    assert files[-1].endswith("-emit.cu") and any("promote-shared" in f for f in files)
