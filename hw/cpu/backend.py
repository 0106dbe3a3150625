"""The C backend (targets ``c``, ``cpu``, ``cpu-avx2``, ``cpu-avx512``): registration,
schedule passes, IR passes and code generation.

* Schedule passes (after program order): for a fusible chain ``chain-fuse`` (the fused
  program is the schedule tree, :mod:`polycomp.scheduler.chain.program` /
  ``conv_program``) and ``cpu-pack``; for C SCoPs ``scop-gemm``, ``scop-stencil``,
  ``scop-tile`` (:mod:`polycomp.scheduler.cpu.scop_gemm` and its neighbours),
  ``scop-split``, ``scop-interleave``, ``dead-store-contract`` and ``scop-parallel``
  instead of ``cpu-fuse`` and ``cpu-parallel``;
  ``cpu-backbone-tile`` and ``cpu-pack`` (vector
  targets: matmul-like and convolution backbones get cache/register tiles, packing
  requests and micro-kernel marks), ``cpu-reduce-interchange`` (vector targets: column
  reductions), ``cpu-fuse``, ``cpu-parallel``.
* IR passes (interpretable): packing (:mod:`.pack`, before simplification, while the
  loops still carry isl's iterator names), the fused chains' tile-local buffers
  (:mod:`.local_tile`), simplification, ``cpu_parallel`` marks to
  OpenMP loops.
* Code-generation passes: contraction of temporaries, per-thread heap buffers, scalar
  replacement, flattening; for vector targets the micro-kernels, the vectoriser
  (:mod:`polycomp.lowering.vectorize`), next-row prefetches (:mod:`.prefetch`); then the
  C or AVX2/AVX-512 printer (:mod:`.vector_printer`).

Options: :class:`polycomp.options.CpuOptions`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import MappingProxyType

from polycomp import ir
from polycomp.frontend.c_model import CScopModel
from polycomp.hw.clike import legalize_names
from polycomp.hw.options import CpuOptions
from polycomp.hw.registry import Backend, Runner, register
from polycomp.hw.target import Target
from polycomp.lowering.flatten import flatten
from polycomp.lowering.ir_pass import IRPass, body_pass, ir_pass
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState

from .target import cpu_target


class CpuBackend(Backend):
    family = "c"
    names = ("c", "cpu", "cpu-avx2", "cpu-avx512", "cpu-avx512-bf16")
    options_class = CpuOptions
    suffix = ".c"
    descriptions = MappingProxyType({
        "c": "portable C99 + OpenMP (scalar)",
        "cpu": "C for this machine's widest vector ISA",
        "cpu-avx2": "C with AVX2/FMA intrinsics",
        "cpu-avx512": "C with AVX-512 intrinsics (SIMDe where the host lacks it)",
        "cpu-avx512-bf16": "cpu-avx512 declaring the AVX512_BF16 and AVX512_VNNI dot-product "
                           "units (bf16 / int8 products, docs/cpu_backend.md)",
    })

    def make_target(self, name: str) -> Target:
        return cpu_target(name)

    def schedule_passes(self, state: CompileState) -> list[Pass]:
        from polycomp.scheduler.cpu.backbone_tile import CpuBackboneTilePass
        from polycomp.scheduler.cpu.fuse import CpuFusePass
        from polycomp.scheduler.cpu.parallel import CpuParallelPass
        from polycomp.scheduler.cpu.reduce_interchange import CpuReduceInterchangePass
        from polycomp.scheduler.cpu.scop_gemm import ScopGemmPass
        from polycomp.scheduler.promotion.cpu_pack import CpuPackPass
        o, isa = state.cpu_options, state.target.isa
        if o.chain:
            from polycomp.scheduler.chain.tree import ChainFusePass, plan_for
            if plan_for(state)[0] is not None:     # docs/fusion.md
                return [ChainFusePass(), CpuPackPass()]
            from polycomp.scheduler.chain.conv_tree import conv_chain_passes
            conv = conv_chain_passes(state)        # conv -> conv chains (docs/fusion.md)
            if conv is not None:
                return conv
        scop = isinstance(state.model, CScopModel)
        passes: list[Pass] = []
        if scop:   # C SCoPs: scheduler/cpu/scop_*.py
            from polycomp.scheduler.cpu.scop_stencil import ScopStencilPass
            from polycomp.scheduler.cpu.scop_tile import ScopTilePass
            if isa and o.microkernel:
                from polycomp.scheduler.cpu.scop_factor import ScopFactorPass
                passes.append(ScopFactorPass())     # LU / Cholesky: right-looking blocks
                from polycomp.scheduler.cpu.scop_trmm import ScopTrmmPass
                passes.append(ScopTrmmPass())       # trmm: row blocks, GEMM below
                from polycomp.scheduler.cpu.scop_symm import ScopSymmPass
                passes.append(ScopSymmPass())       # symm: three phases, GEMMs
                passes.append(ScopGemmPass())       # GEMM-like nests: micro-kernel
            if isa:
                from polycomp.scheduler.cpu.scop_push import ScopPushPass
                passes.append(ScopPushPass())       # int max/min reductions: row pushes
            if o.parallel:
                passes.append(ScopStencilPass())    # stencils: time tiles, wavefronts
            if isa and o.microkernel:
                passes.append(ScopTilePass())       # strided nests: unit-stride tiles
        if isa and o.microkernel:
            passes += [CpuBackboneTilePass(), CpuPackPass()]
        if isa and o.interchange:
            passes.append(CpuReduceInterchangePass())
        if o.fuse and not scop:   # (DSL stage chains only)
            passes.append(CpuFusePass())
        if o.parallel:
            if scop:   # parallel loops below sequential ones too
                from polycomp.scheduler.cpu.scop_interleave import ScopInterleavePass
                from polycomp.scheduler.cpu.scop_parallel import ScopParallelPass
                from polycomp.scheduler.cpu.scop_split import ScopSplitPass
                passes.append(ScopSplitPass())      # index-set splits: parallel pieces
                passes.append(ScopInterleavePass())  # recurrences: strips side by side
                if o.dead_store_contract:
                    from polycomp.scheduler.cpu.scop_dead_store import ScopDeadStorePass
                    passes.append(ScopDeadStorePass())  # dead stores: per-thread buffers
                passes.append(ScopParallelPass())
            else:
                passes.append(CpuParallelPass())
        return passes

    def lowering_statements(self, state: CompileState, var) -> dict:
        """The builders of the fused chains' own statements (the online softmax's,
        docs/fusion.md) and of the statements reading a reference packed on its own
        (:func:`polycomp.hw.cpu.pack.aliased_statement_builders`)."""
        from polycomp.scheduler.chain.plan import chain_plans

        from .pack import aliased_statement_builders
        out = dict(chain_plans(state).statement_builders())
        out.update(aliased_statement_builders(state, var))
        return out

    def ir_passes(self, state: CompileState) -> list[IRPass]:
        from .local_tile import localize
        from .pack import pack
        from .parallel_marks import parallelize_marked
        from .row_ranges import realise_row_ranges
        passes = [ir_pass("row-ranges", realise_row_ranges),  # before pack
                  ir_pass("pack", pack),  # before simplify
                  ir_pass("local-tiles", localize),  # before simplify
                  body_pass("simplify", simplify)]
        if state.cpu_options.parallel:
            passes.append(ir_pass("omp-parallel", parallelize_marked))
        return passes

    def codegen_passes(self, state: CompileState) -> list[IRPass]:
        from .contract import contract
        from .hoist_alloc import hoist_allocations
        from .scalar_replace import scalar_replace
        o, target = state.cpu_options, state.target
        passes: list[IRPass] = []
        if o.contract:
            passes += [ir_pass("contract", lambda f, s: contract(f)),
                       ir_pass("hoist-alloc", lambda f, s: hoist_allocations(f)),
                       ir_pass("scalar-replace", lambda f, s: scalar_replace(f))]
        passes += [ir_pass("flatten", lambda f, s: flatten(f)), body_pass("simplify", simplify)]
        from .jam import stencil_jam
        # AVX-512 vector rows (the stored-row windows keep the second step's loads off
        # the first step's pending stores), and fp_exact builds: the same loops, scalar,
        # so the PolyBench exactness check (gcc -O0) covers the jammed loop structure
        # (POLYCOMP_STENCIL_JAM=0: one step per pass, for same-process comparisons)
        jam = o.stencil_jam and os.environ.get("POLYCOMP_STENCIL_JAM", "1") != "0" and (
            (o.vector_window and target.isa == "avx512" and _vector(state))
            or state.options.fp_exact)
        passes.append(ir_pass("stencil-jam", lambda f, s: stencil_jam(
            f, lambda text: s.note("stencil-jam", text), enabled=jam)))
        from .prefetch import prefetch_marked_rows
        if not _vector(state):
            return passes + [ir_pass("prefetch-marked-rows", lambda f, s: prefetch_marked_rows(
                f, enabled=False)), _LEGALIZE_NAMES]
        from polycomp.lowering.lift import lift, lifts_on
        from polycomp.lowering.vectorize import vectorize
        from polycomp.scheduler.cpu.state import cpu_microkernels

        from .forward_loads import forward_loads
        from .microkernel import microkernels
        from .negate_update import negate_updates
        from .pack import packed_buffers
        passes += [
            ir_pass("negate-updates", lambda f, s: negate_updates(f)),
            ir_pass("microkernels", lambda f, s: microkernels(
                f, target.vector_lanes, cpu_microkernels(s).dots, packed_buffers(s),
                lambda text: s.note("microkernels", text), prefetch=o.prefetch,
                dead=cpu_microkernels(s).chain_temporaries,
                chains=cpu_microkernels(s).chains,
                acc_init_split=o.acc_init_split and target.isa == "avx2" and
                os.environ.get("POLYCOMP_ACC_INIT_SPLIT", "1") != "0")),
        ]
        if o.vector_lift and lifts_on(target):
            passes.append(ir_pass("lift", lambda f, s: lift(
                f, target.vector_lanes, lambda text: s.note("lift", text),
                masked_loads=target.isa == "avx512")))
        passes += [
            ir_pass("vectorize", lambda f, s: vectorize(
                f, target.vector_lanes, tail=o.tail, reduce_unroll=o.reduce_unroll,
                reciprocal=o.reciprocal,
                window=o.vector_window and target.isa == "avx512")),
            ir_pass("forward-loads", lambda f, s: forward_loads(f)),
        ]
        passes.append(ir_pass("prefetch-marked-rows", lambda f, s: prefetch_marked_rows(
            f, enabled=o.prefetch)))
        if o.prefetch:
            from .prefetch import prefetch_next_rows
            passes.append(ir_pass("prefetch", lambda f, s: prefetch_next_rows(
                f, max_bytes=target.l2_bytes // 4)))
        # last before the names: each repeated index expression bound once (masked
        # triangle tiles: syr2k's AVX2 C 250 -> ~80 KB, docs/cpu_backend.md)
        from polycomp.lowering.index_cse import index_cse
        passes.append(ir_pass("index-cse", lambda f, s: index_cse(
            f, enabled=o.index_cse and os.environ.get("POLYCOMP_INDEX_CSE", "1") != "0")))
        return passes + [_LEGALIZE_NAMES]

    def emit(self, func: ir.LoweredFunc, state: CompileState) -> str:
        """The C source; under ``options.fp_exact`` it starts with
        :data:`~polycomp.hw.cpu.codegen.FP_EXACT_C_PRAGMA` (gcc contracts no FMA in it)."""
        from .codegen import FP_EXACT_C_PRAGMA
        first = FP_EXACT_C_PRAGMA if state.options.fp_exact else ""
        return first + self._emit(func, state)

    def _emit(self, func: ir.LoweredFunc, state: CompileState) -> str:
        from .codegen import emit_c
        printer, header = self.printer_and_header(func, state)
        return emit_c(func, printer, "".join(header),
                      names_legal=state.slot(LegalNames).func is func)

    def printer_and_header(self, func: ir.LoweredFunc, state: CompileState
                           ) -> tuple[type, list[str]]:
        """The printer class of ``func`` and the parts of the header it needs after
        :data:`~.codegen.C_HEADER` (the vector prelude with the dot tiles it calls)."""
        from .codegen import CPrinter
        if not _vector(state):
            return CPrinter, []
        from .vector_prelude import prelude
        from .vector_printer import dot_calls, printer_for
        t = state.target
        assert t.cpu is not None
        return printer_for(t.isa, t.cpu.has_fma), [prelude(t.isa, dot_calls(func))]

    def load(self, ck):
        """The kernel's C built and loaded: natively, or, for AVX-512 code on a host
        without AVX-512 (a ``cpu-avx512`` kernel checked on an AVX2 machine), through
        SIMDe's emulation at ``-O1`` (:func:`~.simd_build.build_simde`: the same
        translation unit the native flags would emulate at ``-O3``, 2-3x faster to
        compile; an emulated build is for checking results, not for speed)."""
        from .build import CFunction, build_shared
        from .simd_build import build_simde, has_native_avx512, simde_available
        if ck.target.isa == "avx512" and not has_native_avx512() and simde_available():
            return CFunction(ck.final_ir, build_simde(ck.source))
        return CFunction(ck.final_ir, build_shared(ck.source))

    def runner(self, ck):
        return Runner(self.load(ck), "gcc-built shared library", native=True)

    def check(self, path: str, ck) -> str:
        import os
        import tempfile

        from .build import DEFAULT_FLAGS, compiler_command, run_compiler
        with tempfile.TemporaryDirectory() as tmp:
            flags = [f for f in DEFAULT_FLAGS if f != "-shared"]
            cmd = [*compiler_command(), *flags, "-c", "-o", os.path.join(tmp, "k.o"), path]
            run_compiler(cmd, os.path.join(tmp, "k.o"), path)
        return f"checked: {' '.join(cmd[:3])} ... ok"


    # ------------------------------------------------------------ tuning, multi-version
    def tuning_space(self, ck, shape):
        from .tuning import tuning_space
        return tuning_space(ck, shape)

    def measure(self, ck, arrays, shape, repeat, threads=None):
        from .tuning import measure
        return measure(self, ck, arrays, shape, repeat, threads)

    def multiversion_module(self, versions, selector, comments=()):
        from .multiversion import multiversion_module
        return multiversion_module(versions, selector, comments)

    def emit_module(self, module, versions):
        from .codegen import emit_module
        return emit_module(self, module, versions)

    def load_module(self, module, source, versions):
        from .multiversion import load_module
        return load_module(module, source)


@dataclass(eq=False)
class LegalNames:
    """State slot (``state.slot(LegalNames)``): the function the ``legalize-names``
    pass returned.  Its names are legal (:func:`~polycomp.hw.clike.legalize_names`
    returns such a function unchanged), so :meth:`CpuBackend.emit` prints it without
    checking them again when it is the function to print (identity: a target pass
    that rebuilt it gets the check)."""
    func: ir.LoweredFunc | None = None


def _legalize_names(func: ir.LoweredFunc, state: CompileState) -> ir.LoweredFunc:
    out = state.slot(LegalNames).func = legalize_names(func)
    return out


#: Last codegen pass: the kernel's entry point, buffers and variables get names that
#: no C keyword, macro, libc/OpenMP function or intrinsic uses (``final_ir`` then has
#: the names the source has, so the loader finds the entry point).
_LEGALIZE_NAMES = ir_pass("legalize-names", _legalize_names)


def _vector(state: CompileState) -> bool:
    return bool(state.target.isa) and state.cpu_options.vectorize


register(CpuBackend())
