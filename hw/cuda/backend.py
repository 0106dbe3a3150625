"""The CUDA backend (targets ``cuda``/``cuda-sm80``, ``cuda-sm90``): registration,
schedule passes, IR passes and code generation.

* Schedule passes (after program order): pattern schedules, Tensor Core tiling (f16/bf16
  contractions), multi-level tiling, row-reduction mapping, block/thread mapping,
  shared-memory and register promotion, unrolling, Tensor Core mapping.
  ``gpu='baseline'`` uses the untiled baseline mapping.  Models without DSL stages (C
  SCoPs) choose per loop nest (:mod:`polycomp.scheduler.gpu.scop_groups`): nests with
  coincident outer loops take the tiled passes, the others the baseline mapping.
* IR passes: tensorization (``mma.sync``/``ldmatrix``), ``cp.async`` pipelines, kernel
  wrapping (grid/block loops, per-block and per-thread buffers), row-reduction kernels
  (vector loops, shared scratch, row-length checks: :mod:`.rowreduce`), simplification.
* A model that is one chain of two contractions (docs/fusion.md) has the schedule pass
  ``chain-fuse`` alone (:mod:`polycomp.scheduler.chain.cuda_tree`: the kernel's program
  tree) and the IR passes ``chain-ring``, ``chain-steps``, ``chain-kernels``
  (:mod:`.chain_passes`: its marks expanded into the micro-kernels of
  :mod:`.chain_simt` / :mod:`.chain_tc`), then simplification.
* Code generation: flattening, the CUDA printer.

Options: :class:`polycomp.options.CudaOptions`.
"""
from __future__ import annotations

from types import MappingProxyType

from polycomp import ir
from polycomp.frontend.c_model import CScopModel
from polycomp.frontend.dsl_model import DslModel
from polycomp.hw.options import CudaOptions
from polycomp.hw.registry import Backend, Runner, register
from polycomp.hw.target import Target
from polycomp.lowering.flatten import flatten
from polycomp.lowering.ir_pass import IRPass, body_pass, ir_pass
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.record import promotion_state
from polycomp.state import CompileState

from .target import cuda_target


def _chain_decision(state: CompileState) -> tuple[bool, str]:
    """Whether the model is one chain of two contractions fused into one kernel
    (scheduler/chain, docs/fusion.md: the tiled pipeline, option ``chain`` on, and where
    it is not ``"force"``, the rule of :mod:`~polycomp.scheduler.chain.cuda_gate`), and
    why not where a chain was found but is not fused."""
    from polycomp.scheduler.chain.cuda_tree import cuda_plan
    from polycomp.scheduler.chain.tree import plan_for
    o = state.cuda_options
    if not (o.chain and o.gpu != "baseline" and not o.isl_scheduler
            and isinstance(state.model, DslModel)):
        return False, ""
    if plan_for(state)[0] is None:
        return False, ""
    plan, why = cuda_plan(state)
    return plan is not None, "" if plan is not None else str(why)


def _chain(state: CompileState) -> bool:
    return _chain_decision(state)[0]


def _wgmma_plans(state: CompileState) -> bool:
    """Whether a Tensor Core group of the compile has an sm_90a ``wgmma`` plan."""
    from polycomp.scheduler.tensorcore.hopper import is_wgmma
    return any(is_wgmma(p.config) for p in gpu_kernels(state).tc_plans.values())


def _baseline(state: CompileState) -> bool:
    """The untiled baseline mapping for the whole kernel (asked for)."""
    return state.cuda_options.gpu == "baseline"


#: First line of a ``.cu`` compiled with ``fp_exact``: nvcc contracts ``a*b + c`` into an
#: FMA unless told not to (the launcher passes the flag; say so to whoever builds it).
FP_EXACT_CU_NOTE = "// fp_exact: build with nvcc -fmad=false (no FMA contraction)\n"


class CudaBackend(Backend):
    family = "cuda"
    names = ("cuda", "cuda-sm90", "cuda-sm90a")
    aliases = MappingProxyType({"cuda-sm80": "cuda", "hopper": "cuda-sm90a"})
    options_class = CudaOptions
    suffix = ".cu"
    descriptions = MappingProxyType({
        "cuda": "CUDA C++ for sm_80 (A100-class)",
        "cuda-sm90": "CUDA C++ for sm_90 (H100-class)",
        "cuda-sm90a": "CUDA C++ for sm_90a (H100/H200: wgmma, TMA, mbarrier pipelines)",
    })

    def make_target(self, name: str) -> Target:
        return cuda_target(name)

    def schedule_passes(self, state: CompileState) -> list[Pass]:
        from polycomp.scheduler.common.pattern_schedule import PatternSchedulePass
        from polycomp.scheduler.gpu.baseline import GpuBaselineMappingPass
        from polycomp.scheduler.gpu.map import GpuMappingPass
        from polycomp.scheduler.gpu.rowreduce import RowReductionMappingPass
        from polycomp.scheduler.gpu.scop_groups import (
            ScopBaselinePass,
            ScopGroupingPass,
        )
        from polycomp.scheduler.gpu.scop_singles import ScopSinglesPass
        from polycomp.scheduler.gpu.tile import GpuTilingPass
        from polycomp.scheduler.gpu.unroll import UnrollPointLoopsPass
        from polycomp.scheduler.promotion.registers import RegisterPromotionPass
        from polycomp.scheduler.promotion.shared import SharedPromotionPass
        from polycomp.scheduler.tensorcore.map import TensorCoreMappingPass
        from polycomp.scheduler.tensorcore.tile import TensorCoreTilingPass
        o = state.cuda_options
        fuse_chain, why_not = _chain_decision(state)
        if fuse_chain:
            from polycomp.scheduler.chain.cuda_tree import CudaChainFusePass
            return [CudaChainFusePass()]
        if why_not:
            state.note("chain-fuse", f"chain not fused: {why_not}")
        if _baseline(state):
            return [GpuBaselineMappingPass()]
        scop = isinstance(state.model, CScopModel)
        passes: list[Pass]
        if scop:    # per nest: tiled (backbone marks) or baseline (mapped right away);
            # half-precision GEMM nests rewritten for the Tensor Core tiling in between
            from polycomp.scheduler.tensorcore.scop import ScopTensorCorePass
            passes = [ScopSinglesPass(), ScopGroupingPass(), ScopTensorCorePass(),
                      ScopBaselinePass()]
        else:
            passes = [] if o.isl_scheduler else [PatternSchedulePass()]
        tensor_cores = o.tensor_cores and (scop or not o.isl_scheduler)
        if tensor_cores:  # f16/bf16 contractions: mma tiles (kernels mapped after the rest)
            passes.append(TensorCoreTilingPass())
        passes += [GpuTilingPass(), RowReductionMappingPass(), GpuMappingPass()]
        if o.promote:
            passes += [SharedPromotionPass(), RegisterPromotionPass()]
        if o.unroll:
            passes.append(UnrollPointLoopsPass())
        if tensor_cores:
            passes.append(TensorCoreMappingPass())
        return passes

    def lowering_statements(self, state: CompileState, var) -> dict:
        if _chain(state):       # the chain program's write-out / combine statements
            from .chain_passes import chain_statement_builders
            return chain_statement_builders(state, var)
        if not promotion_state(state).promotions and not state.inlined:
            return {}
        from .promoted import promoted_builders
        from .rowreduce import row_builders
        from .scop_reduce import block_reduction_builders
        out = promoted_builders(state.model, promotion_state(state).promotions, var,
                                state.inlined)
        out.update(row_builders(state, var, out))  # row caches' loads, online sums
        out.update(block_reduction_builders(state))  # a C SCoP's one-element reductions
        return out

    def ir_passes(self, state: CompileState) -> list[IRPass]:
        from .mapping import map_gpu_loops, wrap_kernels
        if _chain(state):        # the chain program's marks become its micro-kernels
            from .chain_passes import expand_rings, expand_steps, wrap_chain_kernels
            return [ir_pass("chain-ring", expand_rings), ir_pass("chain-steps", expand_steps),
                    ir_pass("chain-kernels", wrap_chain_kernels),
                    body_pass("simplify", simplify)]
        if _baseline(state):
            passes = [ir_pass("map-gpu-loops", map_gpu_loops)]
        else:
            from .async_pipeline import lower_pipelines
            from .rowreduce import lower_row_kernels
            from .tensorize import tensorize
            passes = [ir_pass("tensorize", tensorize),             # tensor-core kernels only
                      ir_pass("cp-async-pipeline", lower_pipelines),
                      ir_pass("wrap-kernels", wrap_kernels),
                      ir_pass("row-kernels", lower_row_kernels)]   # row-reduction kernels only
            if _wgmma_plans(state):   # sm_90a: TMA producer / wgmma consumers (hopper.py)
                from .hopper import warp_specialize
                passes.insert(0, ir_pass("wgmma-warp-specialize", warp_specialize))
            if gpu_kernels(state).baseline:   # a C SCoP's nests on the baseline mapping
                passes.insert(0, ir_pass("map-gpu-loops", map_gpu_loops))
        return passes + [body_pass("simplify", simplify)]

    def codegen_passes(self, state: CompileState) -> list[IRPass]:
        from polycomp.hw.clike import legalize_names

        from .codegen import kernel_function_names
        # last: the entry point, kernels, buffers and variables get names no keyword,
        # macro or library function uses (final_ir has the names the source has)
        return [ir_pass("flatten", lambda f, s: flatten(f)), body_pass("simplify", simplify),
                ir_pass("legalize-names",
                        lambda f, s: legalize_names(f, taken=kernel_function_names))]

    def emit(self, func: ir.LoweredFunc, state: CompileState) -> str:
        """The ``.cu``; under ``options.fp_exact`` it starts with
        :data:`FP_EXACT_CU_NOTE` (the launcher builds it with ``nvcc -fmad=false``)."""
        from .codegen import emit_cuda
        return (FP_EXACT_CU_NOTE if state.options.fp_exact else "") + emit_cuda(func)

    def load(self, ck):
        from .launcher import CudaFunction
        return CudaFunction(ck)

    def runner(self, ck):
        from .launcher import gpu_available
        if gpu_available():
            return Runner(self.load(ck), "CUDA device (pycuda)", native=True)
        from .simulator import simulate

        def run_sim(*arrays, **params):
            return simulate(ck, *arrays, **params)[0]
        return Runner(run_sim, "CUDA simulator on the emitted kernels (no GPU here; "
                      "`polycomp compile --check` compiles the .cu with nvcc)", native=False)

    def execute(self, ck, inputs: tuple, params: dict):
        """The GPU-semantics simulator (strict: races, divergent barriers and
        out-of-bounds accesses raise), since the CUDA-level IR uses per-block shared
        memory, per-thread registers and barriers."""
        from .simulator import simulate
        outs, _ = simulate(ck, *inputs, **params)
        return outs

    def check(self, path: str, ck) -> str:
        import os
        import shutil
        import subprocess
        import tempfile

        from polycomp.errors import BuildError
        if shutil.which("nvcc") is None:
            raise BuildError("--check needs nvcc on PATH")
        assert ck.target.cuda is not None
        with tempfile.TemporaryDirectory() as tmp:
            cmd = ["nvcc", f"-arch=sm_{ck.target.cuda.arch}", "-cubin", "-Xptxas", "-v",
                   "-o", os.path.join(tmp, "k.cubin"), path]
            r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"{' '.join(cmd)} failed:\n{r.stderr[-4000:]}")
        lines, entry = [], None
        for ln in (r.stdout + r.stderr).splitlines():  # ptxas -v: per entry function
            if "Compiling entry function" in ln:
                entry = ln.split("'")[1] if "'" in ln else None
            elif "Used" in ln and "registers" in ln:
                used = ln.split(":", 1)[-1].strip()
                lines.append(f"{entry}: {used}" if entry else used)
        return f"checked: {' '.join(cmd[:3])} ... ok" + "".join(f"\n  {ln}" for ln in lines)

    # ------------------------------------------------------------ tuning, multi-version
    def tuning_space(self, ck, shape):
        from .tuning import tuning_space
        return tuning_space(ck, shape)

    def version_plan(self, kernel, target, records, func):
        """Tensor Core GEMM versions chosen at run time by the wave model, from the
        model's records (``polycomp tune -t cuda``)."""
        from polycomp.scheduler.tuning.cuda_versions import wave_plan
        return wave_plan(kernel, target, records, func)

    def multiversion_module(self, versions, selector, comments=()):
        from .multiversion import multiversion_module
        return multiversion_module(versions, selector, comments)

    def emit_module(self, module, versions):
        from .codegen import emit_module
        return emit_module(module, versions)

    def execute_module(self, module, source, versions, inputs, params):
        """The selected version in the simulator; with a GPU check bundle being recorded
        the run becomes a case of the module's ``.cu`` (its dispatcher on a GPU)."""
        from polycomp.shapes import infer_params

        from .multiversion import record_dispatch
        out, i = super().execute_module(module, source, versions, inputs, params)
        f = module.function(module.name).func
        values = infer_params(f.params, f.inputs, list(inputs), params, outputs=f.outputs)
        record_dispatch(module, source, i, versions[i], versions[i].target.name, inputs,
                        values, out)
        return out, i


register(CudaBackend())
