"""Tuning on the CUDA targets (``Backend.tuning_space``, docs/tuning.md): the Tensor
Core tile space (:func:`polycomp.scheduler.tuning.gpu_space.gpu_space`) ranked by the wave
model, not measured (no GPU is timed here).

The space is offered for kernels whose code the ``tc_tile`` knobs change (two points
with different tiles give different sources: f16/bf16 contractions on Tensor Cores);
other kernels have nothing to tune on CUDA.
"""
from __future__ import annotations

from collections.abc import Mapping

from polycomp.errors import UsageError
from polycomp.scheduler.tuning.space import TuningSpace


def tuning_space(ck, shape: Mapping[str, int]) -> TuningSpace:
    from polycomp.driver import compile_kernel
    from polycomp.scheduler.tuning.cuda_versions import gemm_symbols
    from polycomp.scheduler.tuning.gpu_space import gpu_space, mma_shape, rank
    t = ck.target
    name = ck.kernel.name
    try:
        mma_shape(t)
        syms = gemm_symbols(ck.final_ir)
    except (ValueError, UsageError) as e:
        return TuningSpace((), about=f"{e} (the Tensor Core tile knobs apply to GEMMs)")
    points = gpu_space(t)
    a, b = points[0], points[-1]
    if compile_kernel(ck.kernel, t, a.options()).source == \
            compile_kernel(ck.kernel, t, b.options()).source:
        return TuningSpace((), about=f"the Tensor Core tile knobs (tc_tile) do not change "
                                     f"kernel {name}'s code on {t.name} (no f16/bf16 "
                                     f"contraction on Tensor Cores)")
    assert t.cuda is not None
    M, N, K = (int(shape[x]) for x in (syms.rows, syms.cols, syms.depth))
    return TuningSpace(tuple(points), measured=False,
                       model=lambda: rank(t, M, N, K),
                       model_name=f"wave-model (not measured) sm_{t.cuda.sm}",
                       about="Tensor Core tiles ranked by the wave model (no GPU timed)")
