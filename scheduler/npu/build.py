"""The NPU program of a kernel: classify its stages and build the program.

* One stage that is a plain (batch) matmul contraction -> :mod:`.cube` (the cube);
* anything else -> :class:`~polycomp.errors.TargetError` naming the stage: the vector
  mapping of memory-bound stages is not built yet (docs/npu.md, "What does not run").
"""
from __future__ import annotations

from polycomp.errors import TargetError
from polycomp.hw.npu.program import Program
from polycomp.hw.target import Target
from polycomp.scheduler.common.contraction import Contraction, match_contraction

from .cube import CubeTiles, check_tiles, cube_program, fit_cube_tiles


def _is_matmul(c: Contraction) -> bool:
    """``out[b?, i, j] = sum_k a[b?, i, k] * b[b?, k, j]`` with plain iterators."""
    if len(c.reduce_dims) != 1 or len(c.out_dims) not in (2, 3) or c.a.guard or c.b.guard:
        return False
    *bd, i, j = c.out_dims
    k = c.reduce_dims[0]
    return list(c.a.load.indices) == [*bd, i, k] and list(c.b.load.indices) == [*bd, k, j] \
        and c.a.load.dtype in ("float16", "float32") and c.a.load.dtype == c.b.load.dtype


def npu_program(model, target: Target, options) -> Program:
    stages = list(model.graph.stages)
    name = model.graph.name if hasattr(model.graph, "name") else "kernel"
    if len(stages) == 1 and stages[0].is_reduction:
        c = match_contraction(stages[0])
        if isinstance(c, Contraction) and _is_matmul(c):
            in_dt, out_dt = c.a.load.dtype, stages[0].output.dtype
            if out_dt not in ("float16", "float32"):
                raise TargetError(f"npu: {stages[0].name} writes {out_dt}; the cube path "
                                  f"writes float16 or float32")
            copies = 2 if options.double_buffer else 1
            tiles = check_tiles(CubeTiles(*options.cube_tile)) if options.cube_tile else \
                fit_cube_tiles(target, 2 if in_dt == "float16" else 4, copies)
            return cube_program(name, in_dt, out_dt, len(c.out_dims) == 3, tiles,
                                options.double_buffer)
    what = ", ".join(s.name for s in stages)
    raise TargetError(f"target {target.name}: kernel stages ({what}) are not a plain "
                      f"matmul / batch_matmul; the NPU vector mapping of other stages is "
                      f"not built yet (see docs/npu.md)")
