"""The NPU program of a kernel: classify its stages and build the program.

* One stage that is a plain (batch) matmul contraction -> :mod:`.cube` (the cube);
* anything else -> :mod:`.vector` (the vector unit on UB), which raises
  :class:`~polycomp.errors.TargetError` naming the stage it cannot map
  (docs/npu.md, "What does not run").
"""
from __future__ import annotations

from polycomp import ir
from polycomp.errors import PolycompInternalError, TargetError
from polycomp.hw.npu.program import Program, ix
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


def _is_cast_of(s, producer) -> bool:
    """``s`` is ``cast(producer[iters])`` (the output cast of a matmul): the cube path
    casts on the way out of L0C."""
    b = s.body
    return not s.is_reduction and isinstance(b, ir.Cast) and isinstance(b.value, ir.Load) \
        and b.value.buffer.name == producer.name and list(b.value.indices) == list(s.iters)


def npu_program(model, target: Target, options, schedule=None) -> Program:
    """The NPU program of ``model``'s kernel: one cube or vector program, or failing
    that, phases of them (:mod:`.phases`) when the kernel holds a matmul; its pipe
    flags placed by dependence analysis (:mod:`.sync`)."""
    from polycomp.scheduler.chain.npu_pass import chain_tiles_of

    from .sync import place_flags
    tiles = chain_tiles_of(schedule)
    if tiles is not None:         # the npu-chain-fuse pass fused a chain (docs/fusion.md)
        from polycomp.scheduler.chain.npu_detect import NpuChain, detect_npu_chain
        from polycomp.scheduler.chain.npu_program import chain_program
        chain = detect_npu_chain(model)
        if not isinstance(chain, NpuChain):
            raise PolycompInternalError(f"npu: the tree has an npu_chain mark but the "
                                        f"kernel is no chain: {chain}")
        name = model.graph.name if hasattr(model.graph, "name") else "kernel"
        return place_flags(chain_program(name, model.graph, chain, tiles,
                                         options.double_buffer))
    return place_flags(_build(model, target, options, schedule))


def _build(model, target: Target, options, schedule) -> Program:
    try:
        return _single(model, target, options, schedule)
    except TargetError as first:
        from .phases import phased_program
        stages = model.graph.stages
        if len(stages) < 2 or not any(
                s.is_reduction and isinstance(c := match_contraction(s), Contraction)
                and _is_matmul(c) for s in stages):
            raise
        try:
            return phased_program(model.graph, target, options, _is_matmul)
        except TargetError as e:
            raise TargetError(f"{first}; as phases: {e}") from e


def _plain_matmul(stages) -> Contraction | None:
    if 1 <= len(stages) <= 2 and stages[0].is_reduction and \
            (len(stages) == 1 or _is_cast_of(stages[1], stages[0])):
        c = match_contraction(stages[0])
        if isinstance(c, Contraction) and _is_matmul(c):
            return c
    return None


def _epilogue_matmul(model) -> Contraction | None:
    stages = model.graph.stages
    if len(stages) > 1 and stages[0].is_reduction:
        c = match_contraction(stages[0])
        if isinstance(c, Contraction) and _is_matmul(c) and len(c.out_dims) == 2:
            return c
    return None


def cube_plan(model, target: Target, options) -> tuple[str, bool, CubeTiles] | None:
    """``(stage, batched, tiles)`` of a kernel the cube path takes as one (batch) matmul
    (with an output cast or a vector epilogue), tiles fitted to the target; None for
    others (convolutions, phases and vector kernels fit their tiles when built)."""
    stages = model.graph.stages
    c = _plain_matmul(stages)
    copies = 2 if options.double_buffer else 1
    if c is not None:
        size = 2 if c.a.load.dtype == "float16" else 4
        tiles = check_tiles(CubeTiles(*options.cube_tile)) if options.cube_tile else \
            fit_cube_tiles(target, size, copies)
        return stages[0].name, len(c.out_dims) == 3, tiles
    c = _epilogue_matmul(model)
    if c is None:
        return None
    from .epilogue import ub_bytes
    operands = {c.a.load.buffer.name, c.b.load.buffer.name}
    extra = [t for t in model.graph.inputs if t.name not in operands]
    try:
        need = ub_bytes(model.graph, stages[0], extra, copies)
    except TargetError:
        return None
    tiles = check_tiles(CubeTiles(*options.cube_tile)) if options.cube_tile else \
        fit_cube_tiles(target, 2 if c.a.load.dtype == "float16" else 4, copies, need)
    return stages[0].name, False, tiles


def _tree_tiles(schedule) -> CubeTiles:
    from .tile import tiles_of
    t = tiles_of(schedule)
    if t is None:
        raise PolycompInternalError("npu: the schedule tree has no npu_cube mark: the cube "
                                    "tiling pass did not run")
    return t


def _single(model, target: Target, options, schedule) -> Program:
    stages = list(model.graph.stages)
    name = model.graph.name if hasattr(model.graph, "name") else "kernel"
    c = _plain_matmul(stages)
    if c is not None:
        in_dt, out_dt = c.a.load.dtype, stages[-1].output.dtype
        if out_dt not in ("float16", "float32"):
            raise TargetError(f"npu: {stages[0].name} writes {out_dt}; the cube path "
                              f"writes float16 or float32")
        return cube_program(name, in_dt, out_dt, len(c.out_dims) == 3,
                            _tree_tiles(schedule), options.double_buffer)
    if stages and stages[0].is_reduction:
        from .conv import match_conv
        conv = match_conv(stages[0], model.graph.inputs)
        if conv is not None:
            return _conv(name, model.graph, conv, target, options)
    c = _epilogue_matmul(model)
    if c is not None:
        from .epilogue import ub_bytes
        operands = {c.a.load.buffer.name, c.b.load.buffer.name}
        ub_bytes(model.graph, stages[0], [t for t in model.graph.inputs
                                          if t.name not in operands], 1)  # or TargetError
        return _with_epilogue(name, model.graph, c, _tree_tiles(schedule), options)
    from .vector import vector_program
    return vector_program(model.graph, options.double_buffer)


def _with_epilogue(name: str, graph, c: Contraction, tiles: CubeTiles, options) -> Program:
    """A 2-d matmul followed by elementwise stages: the cube with a vector epilogue."""
    from .epilogue import build_epilogue
    mm = graph.stages[0]
    operands = {c.a.load.buffer.name, c.b.load.buffer.name}
    extra = [t for t in graph.inputs if t.name not in operands]
    copies = 2 if options.double_buffer else 1
    e = build_epilogue(graph, mm, extra, tiles.m0, tiles.n0, copies)
    return cube_program(name, c.a.load.dtype, e.out_tensor.dtype, False, tiles,
                        options.double_buffer, e)


def _conv(name: str, graph, conv, target: Target, options) -> Program:
    """A convolution as implicit GEMM on the cube (:mod:`.conv`), with the elementwise
    stages after it (bias, relu) as a vector epilogue."""
    from .conv import conv_tensors
    from .cube import CubeGemm
    from .epilogue import Frame, build_epilogue, ub_bytes
    from .view import VectorView, tensor_keys
    stage = graph.stages[0]
    out_dt = stage.output.dtype if len(graph.stages) == 1 else "float32"
    if out_dt not in ("float16", "float32"):
        raise TargetError(f"npu: {stage.name} writes {out_dt}; the cube path writes float16 "
                          f"or float32")
    a, b, c, derived, (N, *_rest) = conv_tensors(conv, stage.output.name, out_dt)
    gemm = CubeGemm(a, b, c, ix(a.dims[0]), ix("P"), ix("KD"), ix(N), (b, a, c), derived,
                    conv.geom)
    copies = 2 if options.double_buffer else 1
    itemsize = 2 if conv.dtype == "float16" else 4
    epi, ub_need = None, None
    if len(graph.stages) > 1:
        keys = tensor_keys(stage.output)
        if None in keys:
            raise TargetError(f"npu: conv {stage.name} with a unit dimension has no vector "
                              f"epilogue")
        nk, fk, ohk, owk = (str(k) for k in keys)
        frame = Frame(VectorView(fk, (ohk, owk), (nk,), ()), None, (a.dims[0],),
                      (N, a.dims[0], "P"), (N, a.dims[0], "OH", "OW"))
        extra = [t for t in graph.inputs if t.name not in (a.name, b.name)]
        ub_need = ub_bytes(graph, stage, extra, copies, frame)
    tiles = check_tiles(CubeTiles(*options.cube_tile)) if options.cube_tile else \
        fit_cube_tiles(target, itemsize, copies, ub_need)
    if len(graph.stages) > 1:
        epi = build_epilogue(graph, stage, extra, tiles.m0, tiles.n0, copies, frame)
        out_dt = epi.out_tensor.dtype
    return cube_program(name, conv.dtype, out_dt, True, tiles, options.double_buffer,
                        epi, gemm=gemm)
