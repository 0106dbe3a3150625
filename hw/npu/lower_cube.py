"""Lowering of a cube plan (a matmul, batch_matmul or convolution backbone with the
tiles the schedule passes chose) to the NPU IR: fractal re-tiling on the copies, the
loops of the tiled tree (``b / mo / no`` output tiles, ``ko`` L1 stages, ``ki`` L0
steps), the output cast or a vector epilogue.

Assumes: one sum-reduction stage ``C[b?, i, j] = sum_k A[b?, i, k] * B[b?, k, j]``
(operands float16 or float32, accumulation float32), as
:func:`polycomp.scheduler.common.contraction.match_contraction` recognises it, and
tiles that fit their levels (:func:`polycomp.scheduler.npu.cube.fit_cube_tiles`; the
simulator and the printer check the allocation again).  Guarantees: tails are
zero-padded on the way in and clipped on the way out.  The program has one copy of
each buffer and no flags: its L1, L0 and L0C buffers (and the epilogue's UB tiles) are
marked ``pingpong`` with their rotation counters (``ko``, ``ki``, the output tile
number) as slot indices, for the double-buffering pass; :mod:`.sync` places the flags.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from polycomp.scheduler.npu.cube import CubeTiles

from .program import (
    ConvGeom,
    CopyIm2Col,
    CopyIn,
    CopyLocal,
    CopyOut,
    GlobalTensor,
    GmRegion,
    Ix,
    Load2D,
    LocalBuf,
    Loop,
    Mmad,
    Program,
    Slot,
    Tiling,
    VecOp,
    ceildiv,
    eq,
    imin,
    ix,
    land,
)

if TYPE_CHECKING:  # pragma: no cover
    from .lower_epilogue import Epilogue


@dataclass(frozen=True)
class CubeGemm:
    """The GEMM the cube program computes: ``c[b?] (m x n) = a[b?] (m x k) @ b[b?] (k x n)``
    over GM tensors (``tensors``: in argument order); ``im2col``: ``b`` is an image
    read through the im2col addressing of a convolution (:mod:`.conv`), ``a`` shared by
    the batch; ``derived``: sizes the host computes."""
    a: GlobalTensor
    b: GlobalTensor
    c: GlobalTensor
    m: Ix
    n: Ix
    k: Ix
    batch: Ix | None
    tensors: tuple
    derived: dict
    im2col: ConvGeom | None = None


def matmul_gemm(a_dtype: str, out_dtype: str, batched: bool) -> CubeGemm:
    bd: tuple[str, ...] = ("B",) if batched else ()
    A = GlobalTensor("A", a_dtype, (*bd, "M", "K"))
    B = GlobalTensor("B", a_dtype, (*bd, "K", "N"))
    C = GlobalTensor("C", out_dtype, (*bd, "M", "N"), is_output=True)
    return CubeGemm(A, B, C, ix("M"), ix("N"), ix("K"), ix("B") if batched else None,
                    (A, B, C), {})


def _epilogue_tail(e: Epilogue, l0c: Slot, u: Ix, bidx: tuple, one: tuple,
                   m_ext: Ix, n_ext: Ix, mo: Ix, no: Ix, t: CubeTiles) -> tuple:
    """L0C -> UB (FIX), row vectors in (MTE2), the vector ops, the tile out (MTE3);
    ``u``: the output tile number, the rotation counter of the epilogue's ping-pong
    tiles."""
    def slot(b: LocalBuf) -> Slot:
        return Slot(b, u if b.pingpong else ix(0))

    vec = tuple(VecOp(op, slot(d), tuple(slot(x) if isinstance(x, LocalBuf) else x
                                         for x in srcs), m_ext) for op, d, srcs in e.ops)
    rows_in = tuple(CopyIn(GmRegion(g, (no * t.n0,), (n_ext,)) if kind == "ROW" else
                           GmRegion(g, (mo * t.m0,), (m_ext,), split=0), slot(b))
                    for g, b, kind in e.rows_in)
    return (CopyLocal(l0c, slot(e.acc)), *rows_in, *vec,
            CopyOut(slot(e.out), GmRegion(e.out_tensor, (*bidx, mo * t.m0, no * t.n0),
                                          (*one, m_ext, n_ext)), pipe="MTE3"))


def cube_program(name: str, a_dtype: str, out_dtype: str, batched: bool,
                 tiles: CubeTiles, epilogue: Epilogue | None = None,
                 gemm: CubeGemm | None = None) -> Program:
    """The program of ``C = A @ B`` (per batch) for the cube; see the module docstring."""
    t = tiles
    g = gemm or matmul_gemm(a_dtype, out_dtype, batched)
    A, B, C = g.a, g.b, g.c
    batched = g.batch is not None
    l1a = LocalBuf("l1A", "L1", a_dtype, t.m0, t.kl1, "NZ", pingpong=True)
    l1b = LocalBuf("l1B", "L1", a_dtype, t.kl1, t.n0, "NZ", pingpong=True)
    l0a = LocalBuf("l0A", "L0A", a_dtype, t.m0, t.k0, "zZ", pingpong=True)
    l0b = LocalBuf("l0B", "L0B", a_dtype, t.k0, t.n0, "nZ", pingpong=True)
    l0c = LocalBuf("l0C", "L0C", "float32", t.m0, t.n0, "NZ", pingpong=True)

    M, N, K = g.m, g.n, g.k
    mo, no, ko, ki = ix("mo"), ix("no"), ix("ko"), ix("ki")
    bidx: tuple[Ix, ...] = (ix("b"),) if batched else ()
    one: tuple[Ix, ...] = (ix(1),) if batched else ()
    a_b, a_one = ((), ()) if g.im2col else (bidx, one)
    tile_no = (ix("b") * ceildiv(M, t.m0) + mo) * ceildiv(N, t.n0) + no if batched \
        else mo * ceildiv(N, t.n0) + no
    s1, s0, cs = ko, ki, tile_no          # rotation counters (the double-buffering pass)
    m_ext, n_ext = imin(t.m0, M - mo * t.m0), imin(t.n0, N - no * t.n0)
    k_ext = imin(t.kl1, K - ko * t.kl1)

    k_inner = (
        Load2D(Slot(l1a, s1), Slot(l0a, s0), ki * (t.k0 // 16)),
        Load2D(Slot(l1b, s1), Slot(l0b, s0), ki * (t.k0 // 16)),
        Mmad(Slot(l0c, cs), Slot(l0a, s0), Slot(l0b, s0), land(eq(ko, 0), eq(ki, 0))),
    )
    k_outer = (
        CopyIn(GmRegion(A, (*a_b, mo * t.m0, ko * t.kl1), (*a_one, m_ext, k_ext)),
               Slot(l1a, s1)),
        CopyIm2Col(B, ix("b"), ko * t.kl1, k_ext, no * t.n0, n_ext, g.im2col, Slot(l1b, s1))
        if g.im2col else
        CopyIn(GmRegion(B, (*bidx, ko * t.kl1, no * t.n0), (*one, k_ext, n_ext)),
               Slot(l1b, s1)),
        Loop("ki", ceildiv(k_ext, t.k0), k_inner),
    )
    if epilogue is None:
        tail: tuple = (CopyOut(Slot(l0c, cs), GmRegion(C, (*bidx, mo * t.m0, no * t.n0),
                                                      (*one, m_ext, n_ext))),)
    else:
        tail = _epilogue_tail(epilogue, Slot(l0c, cs), cs, bidx, one, m_ext, n_ext, mo, no, t)
    tile = (Loop("ko", ceildiv(K, t.kl1), k_outer), *tail)
    nest: tuple = (Loop("mo", ceildiv(M, t.m0), (Loop("no", ceildiv(N, t.n0), tile),)),)
    if batched:
        assert g.batch is not None
        nest = (Loop("b", g.batch, nest),)
    tensors: tuple = g.tensors
    buffers: tuple = (l1a, l1b, l0a, l0b, l0c)
    if epilogue is not None:
        tensors = (*g.tensors[:-1], *(v for v, _, _ in epilogue.rows_in),
                   epilogue.out_tensor)
        buffers += epilogue.buffers
    return Program(name, "cube", tensors, buffers, nest,
                   Tiling((("m0", t.m0), ("n0", t.n0), ("k0", t.k0), ("kL1", t.kl1)),
                          tuple(g.derived.items())))
