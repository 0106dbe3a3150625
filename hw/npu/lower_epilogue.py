"""Vector epilogues of a cube backbone: the elementwise stages after a matmul
(``relu(A @ B + bias)``, ``gelu(X @ W + b)``) run on each output tile on its way out:
on the A2 generation L0C -> GM workspace (FIX, on the cube core) -> UB (MTE2, on the
vector cores) -> vector unit -> GM (MTE3); the hand-over is :mod:`.lower_cube`'s.

Assumes: every stage after the contraction is elementwise over its ``(M, N)`` output
and reads the contraction's tile at the same indices, row vectors ``(N)`` and scalars.
Guarantees: the UB buffers of the epilogue (accumulator tile, temporaries, output tile
and row vectors; marked ``pingpong`` where another pipe touches them) are sized by the
cube tile and counted in the tile fit (:func:`ub_bytes`, which the ``npu-map`` pass
asks for through :class:`~polycomp.hw.npu.lower.LoweringModel`).
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp.errors import TargetError
from polycomp.scheduler.npu.view import VectorView, dim_key, tensor_keys

from .lower_vector import Val, _Builder, _stage, ping_pong
from .program import GlobalTensor, LocalBuf


@dataclass(frozen=True)
class Frame:
    """Where the epilogue sits: the roles of the backbone's output dimensions (row:
    the GEMM's M, columns: its N), the GM dimensions of a vector along the columns
    (None: not mapped) and along the rows, and the output's GM dimensions (and its
    own shape when the program sees it reshaped)."""
    view: VectorView
    row_vector_dims: tuple | None
    col_vector_dims: tuple
    out_dims: tuple
    out_view: tuple | None = None


def matmul_frame(mm_stage) -> Frame:
    mk, nk = (dim_key(e, mm_stage.name) for e in mm_stage.output.shape)
    if mk is None or nk is None:
        raise TargetError(f"npu: matmul {mm_stage.name} with a unit dimension has no "
                          f"vector epilogue")
    return Frame(VectorView(mk, (nk,), (), ()), ("N",), ("M",), ("M", "N"))


@dataclass(frozen=True)
class Epilogue:
    acc: LocalBuf                                     # UB, fp32, the L0C tile in ND
    rows_in: tuple[tuple[GlobalTensor, LocalBuf, str], ...]  # vectors (ROW / COL), per tile
    ops: tuple                                        # (op, dst, srcs) as in vector.py
    out: LocalBuf
    out_tensor: GlobalTensor
    buffers: tuple[LocalBuf, ...]


def build_epilogue(graph, mm_stage, extra_inputs, rows: int | str, cols: int | str,
                   frame: Frame | None = None) -> Epilogue:
    fr = frame or matmul_frame(mm_stage)
    bld = _Builder(graph.name, fr.view, tile_rows=rows, tile_cols=cols)
    # the L0C tile as Fixpipe writes it: fp32, or int32 from int8 operands (the
    # epilogue's casts dequantise it)
    acc_dtype = "int32" if mm_stage.output.dtype == "int32" else "float32"
    acc = bld.new("ND", acc_dtype, pingpong=True)
    bld.values[mm_stage.name] = Val("ND", acc)
    bld.keys[mm_stage.name] = tensor_keys(mm_stage.output)
    rows_in = []
    for t in extra_inputs:
        keys = tensor_keys(t)
        role = [fr.view.role(k) for k in keys]
        kind = {"c": "ROW", "r": "COL"}.get(role[0]) if len(role) == 1 else None
        dims = fr.row_vector_dims if kind == "ROW" else fr.col_vector_dims
        if kind is None or dims is None or t.dtype not in ("float16", "float32"):
            raise TargetError(f"npu: epilogue input {t.name}: only float vectors along "
                              f"the output's rows or columns are mapped")
        b = bld.new(kind, t.dtype, pingpong=True)
        bld.inputs[t.name] = Val(kind, b)
        bld.keys[t.name] = keys
        rows_in.append((GlobalTensor(t.name, t.dtype, dims), b, kind))
    for s in graph.stages[1:]:
        if s.is_reduction:
            raise TargetError(f"npu: stage {s.name} after the matmul is a reduction; only "
                              f"elementwise epilogues are fused on the cube's output")
        _stage(bld, s)
    o = graph.outputs[0]
    out = ping_pong(bld, bld.values[o.name])
    return Epilogue(acc, tuple(rows_in), tuple(bld.ops), out,
                    GlobalTensor(o.name, o.dtype, fr.out_dims, is_output=True,
                                 view=fr.out_view),
                    tuple(bld.buffers))


def ub_bytes(graph, mm_stage, extra_inputs, copies: int, frame: Frame | None = None):
    """``(m0, n0) -> UB bytes`` of one vector core's buffers for an ``m0 x n0`` output
    tile (each vector core takes ``m0 / 2`` rows), its rotating buffers with ``copies``
    copies, the temporaries ``npu-isa`` adds included."""
    from .isa import expand_program
    from .program import Program, Slot, VecOp, ix
    e = build_epilogue(graph, mm_stage, extra_inputs, "TR", "CP", frame)
    ops = tuple(VecOp(op, Slot(d), tuple(Slot(x) if isinstance(x, LocalBuf) else x
                                         for x in srcs), ix("TR")) for op, d, srcs in e.ops)
    prog = expand_program(Program("fit", "AIV", e.buffers, ops))

    def need(m0: int, n0: int) -> int:
        env = {"TR": max(1, m0 // 2), "CP": n0}
        return sum(b.size(env) * (copies if b.pingpong else b.copies) for b in prog.buffers)
    return need
