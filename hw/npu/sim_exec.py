"""Semantics and cycle cost of each NPU instruction (used by :mod:`.sim`)."""
from __future__ import annotations

import numpy as np

from polycomp.errors import NpuCapacityError, PolycompInternalError
from polycomp.hw.npu.program import (
    CopyIm2Col,
    CopyIn,
    CopyLocal,
    CopyOut,
    Load2D,
    Mmad,
    VecOp,
)
from polycomp.hw.npu.target import ALIGN

from .sim import Simulator, from_layout, to_layout
from .vector_ops import vec_cycles, vec_execute


def _burst(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _as_matrix(a: np.ndarray, split: int) -> np.ndarray:
    """A GM box as rows x columns: its last ``split`` dimensions are the columns."""
    cols = int(np.prod(a.shape[len(a.shape) - split:])) if split else 1
    return a.reshape(-1, cols) if a.size else a.reshape(0, cols)


def execute(sim: Simulator, s, env: dict) -> int:
    if isinstance(s, CopyIn):
        return _copy_in(sim, s, env)
    if isinstance(s, CopyIm2Col):
        return _im2col(sim, s, env)
    if isinstance(s, Load2D):
        return _load2d(sim, s, env)
    if isinstance(s, Mmad):
        return _mmad(sim, s, env)
    if isinstance(s, CopyOut):
        return _copy_out(sim, s, env)
    if isinstance(s, CopyLocal):
        return _copy_local(sim, s, env)
    if isinstance(s, VecOp):
        return vec_execute(sim, s, env) and vec_cycles(sim, s, env)
    raise PolycompInternalError(f"NPU simulator: unknown instruction {type(s).__name__}")


def _copy_in(sim: Simulator, s: CopyIn, env: dict) -> int:
    b = s.dst.buf
    arr, box = sim.region(s.src, env)
    tile = _as_matrix(arr[box], s.src.split)
    r, c = tile.shape
    br, bc = b.shape(env)
    if r > br or c > bc:
        raise NpuCapacityError(f"DataCopy of {r}x{c} elements of {s.src.tensor.name} into "
                               f"{b.name} ({br}x{bc})")
    nd = np.zeros((br, bc), np.dtype(b.dtype))
    nd[:r, :c] = tile
    dst = sim.access(s.pipe, s.dst, env, True, f"DataCopy {s.src.tensor.name} -> {b.name}")
    dst[...] = to_layout(nd, b.layout)
    nbytes = r * _burst(c * b.itemsize) if s.src.split else _burst(r * b.itemsize)
    sim.count_bytes(f"GM->{b.level}", nbytes)
    return sim.p.transfer_latency + -(-nbytes // sim.p.gm_bytes_per_cycle)


def _load2d(sim: Simulator, s: Load2D, env: dict) -> int:
    src, dst = s.src.buf, s.dst.buf
    k = s.k_offset.eval(env) * 16
    what = f"LoadData {src.name} -> {dst.name}"
    nd = from_layout(sim.access(s.pipe, s.src, env, False, what), src.layout)
    part = nd[:, k:k + dst.cols] if dst.level == "L0A" else nd[k:k + dst.rows, :]
    if part.shape != (dst.rows, dst.cols):
        raise NpuCapacityError(f"{what}: slice {part.shape} at fractal {k // 16} does not "
                               f"fill {dst.name} ({dst.rows}x{dst.cols})")
    sim.access(s.pipe, s.dst, env, True, what)[...] = to_layout(part, dst.layout)
    sim.count_bytes(f"L1->{dst.level}", dst.nbytes)
    return sim.p.local_latency + -(-dst.nbytes // sim.p.l1_bytes_per_cycle)


def _mmad(sim: Simulator, s: Mmad, env: dict) -> int:
    a_b, b_b, c_b = s.a.buf, s.b.buf, s.c.buf
    what = f"Mmad {c_b.name} += {a_b.name} x {b_b.name}"
    a = from_layout(sim.access(s.pipe, s.a, env, False, what), a_b.layout)
    b = from_layout(sim.access(s.pipe, s.b, env, False, what), b_b.layout)
    init = bool(s.init.eval(env))
    c_arr = sim.access(s.pipe, s.c, env, True, what)
    prod = a.astype(np.float32) @ b.astype(np.float32)
    acc = prod if init else from_layout(c_arr, c_b.layout) + prod
    c_arr[...] = to_layout(acc.astype(np.float32), c_b.layout)
    ops = (a_b.rows // 16) * (b_b.cols // 16) * (a_b.cols // 16)
    return ops * (sim.p.cube_fp32_factor if a_b.dtype == "float32" else 1)


def _copy_out(sim: Simulator, s: CopyOut, env: dict) -> int:
    b = s.src.buf
    arr, box = sim.region(s.dst, env)
    what = f"{'Fixpipe' if s.pipe == 'FIX' else 'DataCopy'} {b.name} -> {s.dst.tensor.name}"
    nd = from_layout(sim.access(s.pipe, s.src, env, False, what), b.layout)
    shape = arr[box].shape
    r, c = _as_matrix(arr[box], s.dst.split).shape
    if b.layout == "COL":     # one value per row (column 0)
        if c != 1:
            raise NpuCapacityError(f"{what}: a value per row written to a {r}x{c} box")
        arr[box] = nd[:r, 0].astype(arr.dtype).reshape(shape)
    else:
        arr[box] = nd[:r, :c].astype(arr.dtype).reshape(shape)
    nbytes = r * _burst(c * arr.dtype.itemsize) if s.dst.split else \
        _burst(r * arr.dtype.itemsize)
    sim.count_bytes(f"{b.level}->GM", nbytes)
    return sim.p.transfer_latency + -(-nbytes // sim.p.out_bytes_per_cycle)


def _copy_local(sim: Simulator, s: CopyLocal, env: dict) -> int:
    src, dst = s.src.buf, s.dst.buf
    what = f"{'Fixpipe' if s.pipe == 'FIX' else 'DataCopy'} {src.name} -> {dst.name}"
    nd = from_layout(sim.access(s.pipe, s.src, env, False, what), src.layout)
    out = sim.access(s.pipe, s.dst, env, True, what)
    if (dst.rows, dst.cols) != nd.shape:
        raise NpuCapacityError(f"{what}: {nd.shape} into {(dst.rows, dst.cols)}")
    out[...] = to_layout(nd.astype(out.dtype), dst.layout)   # UB -> L1 (MTE3): nd2nz
    nbytes = dst.size(env)
    sim.count_bytes(f"{src.level}->{dst.level}", nbytes)
    return sim.p.local_latency + -(-nbytes // sim.p.out_bytes_per_cycle)


def _im2col(sim: Simulator, s: CopyIm2Col, env: dict) -> int:
    """The gather of an im2col tile: row k = (c, kh, kw), column p = (y, z)."""
    b, g = s.dst.buf, s.geom
    x = sim.gm[s.src.name]
    _, _, H, W = x.shape
    KH, KW, OW = g.kh.eval(env), g.kw.eval(env), g.ow.eval(env)
    n, k0, ke, p0, pe = (v.eval(env) for v in (s.n, s.k0, s.k_ext, s.p0, s.p_ext))
    br, bc = b.shape(env)
    if ke > br or pe > bc:
        raise NpuCapacityError(f"im2col copy of {ke}x{pe} elements into {b.name} ({br}x{bc})")
    k = np.arange(k0, k0 + ke)[:, None]
    p = np.arange(p0, p0 + pe)[None, :]
    c, kh, kw = k // (KH * KW), (k // KW) % KH, k % KW
    h = (p // OW) * g.sh + kh * g.dh - g.ph
    w = (p % OW) * g.sw + kw * g.dw - g.pw
    inside = (h >= 0) & (h < H) & (w >= 0) & (w < W)
    vals = x[n, c, np.clip(h, 0, H - 1), np.clip(w, 0, W - 1)]
    nd = np.zeros((br, bc), np.dtype(b.dtype))
    nd[:ke, :pe] = np.where(inside, vals, 0)
    dst = sim.access(s.pipe, s.dst, env, True, f"Im2Col {s.src.name} -> {b.name}")
    dst[...] = to_layout(nd, b.layout)
    # bursts: a run of output columns in one image row is contiguous in X for stride 1
    run = min(pe, OW) if g.sw == 1 else 1
    nbytes = ke * -(-pe // run) * _burst(run * b.itemsize)
    sim.count_bytes(f"GM->{b.level}", nbytes)
    return sim.p.transfer_latency + -(-nbytes // sim.p.gm_bytes_per_cycle)
