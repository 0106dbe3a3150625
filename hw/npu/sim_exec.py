"""Semantics and cycle cost of each Ascend C API call the NPU IR holds (used by
:mod:`.sim`): what the call does to flat buffers, from its parameters, as the
asc-devkit documentation describes it (docs/npu.md lists the sources).

Logical instructions are not executed: the simulator runs what the printer prints
(``npu-isa`` has expanded them)."""
from __future__ import annotations

import numpy as np

from polycomp import dtypes
from polycomp.errors import NpuCapacityError, PolycompInternalError
from polycomp.hw.npu.program import (
    LOGICAL,
    DataCopyGm2L1,
    DataCopyNd2Nz,
    DataCopyPadIn,
    DataCopyPadOut,
    FixpipeCall,
    LoadData2D,
    LoadData3D,
    LoadDataTranspose,
    MmadCall,
    TransData5HD,
    VecCall,
)
from polycomp.hw.npu.target import ALIGN, FRACTAL_BYTES, MAX_REPEAT

from .sim import Core
from .vector_ops import trans_data, vec_call


def _burst(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _range(what: str, name: str, v: int, lo: int, hi: int) -> int:
    if not lo <= v <= hi:
        raise NpuCapacityError(f"{what}: {name} = {v} outside its range [{lo}, {hi}]")
    return v


def _check(what: str, arr: np.ndarray, idx: np.ndarray, name: str) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
        raise NpuCapacityError(f"{what}: elements [{idx.min()}, {idx.max()}] of buffer "
                               f"{name} outside its {arr.size}")


def execute(core: Core, s, env: dict) -> int:
    if isinstance(s, LOGICAL):
        raise PolycompInternalError(f"NPU simulator: {type(s).__name__} is a logical "
                                    f"instruction (run the npu-isa pass)")
    if isinstance(s, VecCall):
        return vec_call(core, s, env)
    fn = _EXEC.get(type(s))
    if fn is None:
        raise PolycompInternalError(f"NPU simulator: unknown instruction {type(s).__name__}")
    return fn(core, s, env)


def _nd2nz(core: Core, s: DataCopyNd2Nz, env: dict) -> int:
    b = s.dst.buf
    what = f"DataCopy {s.src.tensor.name} -> {b.name} (Nd2NzParams)"
    v = {f: getattr(s, f).eval(env) for f in ("nd_num", "n_value", "d_value",
                                               "src_nd_stride", "src_d_value",
                                               "dst_c0_stride", "dst_n_stride",
                                               "dst_nd_stride")}
    nd = _range(what, "ndNum", v["nd_num"], 0, 4095)
    n = _range(what, "nValue", v["n_value"], 0, 16384)
    d = _range(what, "dValue", v["d_value"], 0, 65535)
    _range(what, "srcNdMatrixStride", v["src_nd_stride"], 0, 65535)
    _range(what, "srcDValue", v["src_d_value"], 1, 65535)
    _range(what, "dstNzC0Stride", v["dst_c0_stride"], 1, 16384)
    _range(what, "dstNzNStride", v["dst_n_stride"], 1, 16384)
    _range(what, "dstNzMatrixStride", v["dst_nd_stride"], 0, 16384)
    if not (nd and n and d):
        return core.p.local_latency
    q = 32 // b.itemsize
    dpad = -(-d // q) * q
    k, r, c = np.meshgrid(np.arange(nd), np.arange(n), np.arange(dpad), indexing="ij")
    src_off = s.src.offset.eval(env)
    dst_off = s.dst.offset.eval(env)
    didx = (dst_off + k * v["dst_nd_stride"] + (c // q) * v["dst_c0_stride"] * q
            + r * v["dst_n_stride"] * q + c % q)
    valid = c < d
    sidx = src_off + k * v["src_nd_stride"] + r * v["src_d_value"] + c
    g = core.gm(s.pipe, s.src.tensor, sidx[valid], False, what)
    dst = core.buffer(s.pipe, s.dst, env, True, what)
    _check(what, dst, didx, b.name)
    vals = np.zeros(didx.shape, dst.dtype)
    vals[valid] = g[sidx[valid]]
    dst[didx] = vals
    nbytes = nd * n * _burst(d * b.itemsize)
    core.count_bytes("GM->L1", nbytes)
    return core.p.transfer_latency + -(-nbytes // core.p.gm_bytes_per_cycle)


def _load2d(core: Core, s: LoadData2D, env: dict) -> int:
    src_b, dst_b = s.src.buf, s.dst.buf
    what = f"LoadData {src_b.name} -> {dst_b.name}"
    rep = _range(what, "repeatTimes", s.repeat.eval(env), 0, MAX_REPEAT)
    if s.transpose and src_b.itemsize != 2:
        raise NpuCapacityError(f"{what}: ifTranspose takes b16 data only, not {src_b.dtype}")
    if not rep:
        return core.p.local_latency
    f = FRACTAL_BYTES // src_b.itemsize
    start, stride, gap = (x.eval(env) for x in (s.start, s.src_stride, s.dst_gap))
    i = np.arange(rep)[:, None]
    e = np.arange(f)[None, :]
    sidx = s.src.offset.eval(env) + (start + i * stride) * f + e
    didx = s.dst.offset.eval(env) + i * (1 + gap) * f + e
    src = core.buffer(s.pipe, s.src, env, False, what)
    _check(what, src, sidx, src_b.name)
    vals = src[sidx]
    if s.transpose:
        vals = vals.reshape(rep, 16, 16).transpose(0, 2, 1).reshape(rep, f)
    dst = core.buffer(s.pipe, s.dst, env, True, what)
    _check(what, dst, didx, dst_b.name)
    dst[didx] = vals
    nbytes = rep * FRACTAL_BYTES
    core.count_bytes(f"L1->{dst_b.level}", nbytes)
    return core.p.local_latency + -(-nbytes // core.p.l1_bytes_per_cycle)


def _load_transpose(core: Core, s: LoadDataTranspose, env: dict) -> int:
    src_b, dst_b = s.src.buf, s.dst.buf
    what = f"LoadDataWithTranspose {src_b.name} -> {dst_b.name}"
    if src_b.itemsize not in (1, 4):
        raise PolycompInternalError(f"{what}: only the b8 and b32 forms are modelled")
    rep = _range(what, "repeatTimes", s.repeat.eval(env), 0, MAX_REPEAT)
    if not rep:
        return core.p.local_latency
    if src_b.itemsize == 1:
        return _load_transpose_b8(core, s, env, rep, what)
    start, stride, gap, fgap = (x.eval(env) for x in (s.start, s.src_stride, s.dst_gap,
                                                      s.dst_frac_gap))
    f = 128                                           # a 16x8 fp32 fractal
    i = np.arange(rep)[:, None]
    sidx = s.src.offset.eval(env) + (start + i * stride) * 2 * f + np.arange(2 * f)[None, :]
    src = core.buffer(s.pipe, s.src, env, False, what)
    _check(what, src, sidx, src_b.name)
    sq = src[sidx].reshape(rep, 2, 16, 8)             # two 16x8 fractals side by side
    m = np.concatenate([sq[:, 0], sq[:, 1]], axis=2)  # 16 x 16 (rows k, columns n)
    t = m.transpose(0, 2, 1)                          # rows n, columns k
    first = s.dst.offset.eval(env) + i * (1 + gap) * f
    second = first + (1 + fgap) * f
    e = np.arange(f)[None, :]
    dst = core.buffer(s.pipe, s.dst, env, True, what)
    for base, part in ((first, t[:, :, :8]), (second, t[:, :, 8:])):
        idx = base + e
        _check(what, dst, idx, dst_b.name)
        dst[idx] = part.reshape(rep, f)
    nbytes = rep * 2 * FRACTAL_BYTES
    core.count_bytes(f"L1->{dst_b.level}", nbytes)
    return core.p.local_latency + -(-nbytes // core.p.l1_bytes_per_cycle)


def _load_transpose_b8(core: Core, s: LoadDataTranspose, env: dict, rep: int,
                       what: str) -> int:
    """The b8 form: each repeat takes a 32 x 32 square (two 16 x 32 fractals, one under
    the other, 1 KiB: square ``start + i * srcStride``) and writes its transpose as two
    16 x 32 fractals (rows 0-15, then 16-31 of the transpose), the second
    ``dstFracGap`` fractals after the first, repeats ``dstGap`` fractals apart."""
    start, stride, gap, fgap = (x.eval(env) for x in (s.start, s.src_stride, s.dst_gap,
                                                      s.dst_frac_gap))
    f = 512                                           # a 16x32 int8 fractal
    i = np.arange(rep)[:, None]
    sidx = s.src.offset.eval(env) + (start + i * stride) * 2 * f + np.arange(2 * f)[None, :]
    src = core.buffer(s.pipe, s.src, env, False, what)
    _check(what, src, sidx, s.src.buf.name)
    t = src[sidx].reshape(rep, 32, 32).transpose(0, 2, 1)
    first = s.dst.offset.eval(env) + i * (1 + gap) * f
    second = first + (1 + fgap) * f
    e = np.arange(f)[None, :]
    dst = core.buffer(s.pipe, s.dst, env, True, what)
    for base, part in ((first, t[:, :16]), (second, t[:, 16:])):
        idx = base + e
        _check(what, dst, idx, s.dst.buf.name)
        dst[idx] = part.reshape(rep, f)
    nbytes = rep * 2 * FRACTAL_BYTES
    core.count_bytes(f"L1->{s.dst.buf.level}", nbytes)
    return core.p.local_latency + -(-nbytes // core.p.l1_bytes_per_cycle)


#: Mmad's type combinations on the A2 generation (dst, operands)
_MMAD_TYPES = {("float32", "float16"), ("float32", "bfloat16"), ("float32", "float32"),
               ("int32", "int8")}


def _mmad(core: Core, s: MmadCall, env: dict) -> int:
    a_b, b_b, c_b = s.a.buf, s.b.buf, s.c.buf
    what = f"Mmad {c_b.name} += {a_b.name} x {b_b.name}"
    m = _range(what, "m", s.m.eval(env), 0, 4095)
    n = _range(what, "n", s.n.eval(env), 0, 4095)
    k = _range(what, "k", s.k.eval(env), 0, 4095)
    if not (m and n and k):
        return 1
    if m == 1:
        raise NpuCapacityError(f"{what}: m = 1 switches the cube to GEMV (L0A read as ND)")
    if (c_b.dtype, a_b.dtype) not in _MMAD_TYPES or a_b.dtype != b_b.dtype:
        raise NpuCapacityError(f"{what}: Mmad has no {c_b.dtype} <- {a_b.dtype} x "
                               f"{b_b.dtype} form on this generation")
    q = 32 // a_b.itemsize                            # C0 of the operands
    f = 16 * q
    mf, nf, kf = -(-m // 16), -(-n // 16), -(-k // q)
    mm = np.arange(mf * 16)[:, None]
    kk = np.arange(k)[None, :]
    aidx = s.a.offset.eval(env) + ((mm // 16) * kf + kk // q) * f + (mm % 16) * q + kk % q
    kk2 = np.arange(k)[:, None]
    nn = np.arange(nf * 16)[None, :]
    bidx = s.b.offset.eval(env) + ((kk2 // q) * nf + nn // 16) * f + (nn % 16) * q + kk2 % q
    a = core.buffer(s.pipe, s.a, env, False, what)
    b = core.buffer(s.pipe, s.b, env, False, what)
    _check(what, a, aidx, a_b.name)
    _check(what, b, bidx, b_b.name)
    acc = np.int64 if c_b.dtype == "int32" else np.float32
    with np.errstate(all="ignore"):
        prod = a[aidx].astype(acc) @ b[bidx].astype(acc)
    init = bool(s.init.eval(env))
    c = core.buffer(s.pipe, s.c, env, True, what)
    if (m // 16) * (n // 16) < 10:       # docs: small Mmads need PipeBarrier<PIPE_M>
        k_c = s.c.index.eval(env) if c_b.copies > 1 else 0
        core.in_pipe("M", (c_b.name, k_c), core.seq["M"] + 1, True, what)
    m16 = mf * 16
    cm = np.arange(m16)[:, None]
    cn = np.arange(nf * 16)[None, :]
    cidx = s.c.offset.eval(env) + (cn // 16) * m16 * 16 + cm * 16 + cn % 16
    _check(what, c, cidx, c_b.name)
    with np.errstate(all="ignore"):
        if c_b.dtype == "int32":          # wraps around as the int32 accumulator does
            c[cidx] = (prod if init else c[cidx].astype(np.int64) + prod).astype(np.int32)
        else:
            c[cidx] = prod if init else c[cidx] + prod
    # one 16 x 16 x (32 bytes of k) product per cycle: 16 k of b16, 32 of int8; fp32
    # operands take cube_fp32_factor cycles per 16 k
    ops = mf * nf * -(-k // max(16, q))
    return ops * (core.p.cube_fp32_factor if a_b.itemsize == 4 else 1)


#: what Fixpipe writes per (quantPre, L0C type)
_QUANT_OUT = {("F322F16", "float32"): np.dtype(np.float16),
              ("F322BF16", "float32"): dtypes.to_numpy("bfloat16"),
              ("NoQuant", "float32"): np.dtype(np.float32),
              ("NoQuant", "int32"): np.dtype(np.int32),
              ("DEQF16", "int32"): np.dtype(np.float16),
              ("VDEQF16", "int32"): np.dtype(np.float16),
              ("REQ8", "int32"): np.dtype(np.int8),
              ("VREQ8", "int32"): np.dtype(np.int8)}

#: the Fixpipe buffer holds 256 quantisation parameters: a tensor-quantised Fixpipe of
#: more columns runs in chunks of 128 (GenFixpipeTilingV220, impl/basic_api/dav_c220/
#: kernel_operator_fixpipe_v2_impl.h), each after an L1 -> FB copy of its parameters in
#: 128-byte bursts (CopyDeqTensorToFbuf) and a PipeBarrier<PIPE_FIX>
FB_QUANT_MAX, FB_QUANT_CHUNK, FB_BURST = 256, 128, 128


def fixpipe_scale(bits) -> np.ndarray:
    """What Fixpipe multiplies by for quantisation parameters ``bits`` (uint64): bits
    [31:13] read as a float32 with 10 mantissa bits (the lower 13 dropped; asc-devkit
    docs, "随路量化", QUANT_PRE table for __NPU_ARCH__ 2201)."""
    b = np.asarray(bits, np.uint64) & np.uint64(0xFFFFE000)
    return b.astype(np.uint32).view(np.float32)


def fixpipe_params_error(n: int, m: int, src_stride: int, dst_stride: int,
                         nz2nd: bool = True) -> str | None:
    """What is wrong with ``FixpipeParamsV220{nSize = n, mSize = m, srcStride,
    dstStride}`` (L0C -> GM), or None.  The ranges of the docs' FixpipeParamsV220 table
    (Fixpipe, L0C -> GM: nSize in [0, 4095]; mSize in [0, 8192] with NZ2ND, [0, 65535]
    without; srcStride in [0, 65535] C0 units, at least mSize rounded up to 16;
    dstStride not 0) and its constraint that destinations do not overlap (with NZ2ND a
    row is ``dstStride`` elements apart: at least ``nSize``).  nSize must be a multiple
    of 16 without NZ2ND (an NZ result); with NZ2ND it is the tile's valid columns, any
    value (the NZ2ND pseudo code walks ceil(nSize / 16) blocks; the API's own Matmul
    passes a tail's width, ``copy_cube_out_utils.h``; the A3510 check allows 1..4095 to
    GM) -- docs/npu.md, "Fixpipe's nSize", cites the sources and the one table that
    says otherwise."""
    if not 0 <= n <= 4095:
        return f"nSize = {n} outside [0, 4095]"
    top = 8192 if nz2nd else 65535
    if not 0 <= m <= top:
        return f"mSize = {m} outside [0, {top}]" + (" (NZ2ND)" if nz2nd else "")
    if not nz2nd and n % 16:
        return f"nSize = {n} is not a multiple of 16 (an NZ result)"
    if not (n and m):
        return None                  # a NOP
    if not -(-m // 16) * 16 <= src_stride <= 65535:
        return f"srcStride = {src_stride} outside [{-(-m // 16) * 16}, 65535] (mSize {m})"
    if dst_stride == 0:
        return "dstStride = 0"
    if nz2nd and m > 1 and dst_stride < n:
        return f"dstStride = {dst_stride} < nSize = {n}: the rows overlap in GM"
    return None


def requant_int8(acc: np.ndarray, words) -> np.ndarray:
    """Fixpipe's ``REQ8`` / ``VREQ8`` of int32 values ``acc`` with quantisation
    parameters ``words`` (uint64, broadcast over ``acc``) into int8: the value as float32
    times the scale read with 10 mantissa bits (:func:`fixpipe_scale`), in float32;
    clamped to [-256, 255], rounded to nearest even, saturated to [-128, 127] (the
    docs' golden script ``fixpipe_l0c2gm/scripts/gen_data_s322s8.py``: ``np.clip``
    then ``np.round``; integer results only saturate).  The shift (MCB, bits [36:32])
    and offset (bits [45:37]) fields are not modelled -- polycomp leaves them 0 and the
    docs' table and golden script disagree on the shift -- and bit 46 must mark the
    signed result."""
    w = np.asarray(words, np.uint64)
    if ((w >> np.uint64(32)) & np.uint64(0x3FFF)).any():
        raise NpuCapacityError("Fixpipe REQ8: the shift / offset fields of the "
                               "quantisation parameters are not modelled (set to 0)")
    if not ((w >> np.uint64(46)) & np.uint64(1)).all():
        raise NpuCapacityError("Fixpipe REQ8 into int8 without the signed-result flag "
                               "(bit 46) of its quantisation parameters: that writes uint8")
    x = acc.astype(np.float32) * fixpipe_scale(w)
    return np.rint(np.clip(x, -256.0, 255.0)).clip(-128, 127).astype(np.int8)


def _fb_chunks(n: int) -> list[int]:
    """The columns of each chunk of a tensor-quantised Fixpipe of ``n`` columns."""
    if n <= FB_QUANT_MAX:
        return [n]
    return [FB_QUANT_CHUNK] * (n // FB_QUANT_CHUNK) + ([n % FB_QUANT_CHUNK] if n % FB_QUANT_CHUNK
                                                      else [])


def _fixpipe(core: Core, s: FixpipeCall, env: dict) -> int:
    b = s.src.buf
    what = f"Fixpipe {b.name} -> {s.dst.tensor.name}"
    n, m = s.n_size.eval(env), s.m_size.eval(env)
    src_stride, dst_stride = s.src_stride.eval(env), s.dst_stride.eval(env)
    err = fixpipe_params_error(n, m, src_stride, dst_stride)
    if err:
        raise NpuCapacityError(f"{what}: FixpipeParamsV220 {err}")
    if not (n and m):
        return core.p.local_latency
    mm = np.arange(m)[:, None]
    nn = np.arange(n)[None, :]
    sidx = s.src.offset.eval(env) + (nn // 16) * src_stride * 16 + mm * 16 + nn % 16
    src = core.buffer(s.pipe, s.src, env, False, what)
    _check(what, src, sidx, b.name)
    didx = s.dst.offset.eval(env) + mm * dst_stride + nn
    g = core.gm(s.pipe, s.dst.tensor, didx.ravel(), True, what, s.atomic)
    out_dt = _QUANT_OUT.get((s.quant, b.dtype))
    if out_dt is None:
        raise NpuCapacityError(f"{what}: quantPre {s.quant} is not modelled from {b.dtype}")
    if np.dtype(out_dt) != g.dtype:
        raise NpuCapacityError(f"{what}: quantPre {s.quant} writes {np.dtype(out_dt)} into "
                               f"{g.dtype}")
    cycles = 0
    with np.errstate(all="ignore"):
        if s.quant == "DEQF16":      # the int32 value times the scale, rounded to fp16
            assert s.deq is not None
            m1 = fixpipe_scale(np.uint64(s.deq_scalar & 0xFFFFFFFF))
            g[didx] = (src[sidx].astype(np.float32) * m1).astype(out_dt)
        elif s.quant == "REQ8":      # times the scale, rounded and saturated to int8
            assert s.deq is not None
            g[didx] = requant_int8(src[sidx], np.uint64(s.deq_scalar))
        elif s.quant in ("VDEQF16", "VREQ8"):   # the column's scale, from L1 via the FB
            assert s.cbuf is not None
            q = core.buffer(s.pipe, s.cbuf, env, False, what)
            qidx = s.cbuf.offset.eval(env) + np.arange(n)
            _check(what, q, qidx, s.cbuf.buf.name)
            if s.quant == "VREQ8":
                g[didx] = requant_int8(src[sidx], q[qidx][None, :])
            else:
                m1 = fixpipe_scale(q[qidx])
                g[didx] = (src[sidx].astype(np.float32) * m1[None, :]).astype(out_dt)
            chunks = _fb_chunks(n)
            fb = sum(-(-c * 8 // FB_BURST) * FB_BURST for c in chunks)
            core.count_bytes("L1->FB", fb)
            # per chunk: the L1 -> FB copy, the barrier, one more transfer start-up
            cycles = len(chunks) * core.p.local_latency + -(-fb // core.p.fb_bytes_per_cycle) \
                + (len(chunks) - 1) * core.p.transfer_latency
        elif s.atomic:               # SetAtomicAdd: added to what GM holds
            if s.quant != "NoQuant":
                raise NpuCapacityError(f"{what}: an atomic add is modelled without a "
                                       f"cast only (quantPre NoQuant), not {s.quant}")
            g[didx] = g[didx] + src[sidx].astype(out_dt)
        else:
            g[didx] = src[sidx].astype(out_dt)
    nbytes = m * _burst(n * g.itemsize)
    core.count_bytes("L0C->GM", nbytes)
    return cycles + core.p.transfer_latency + -(-nbytes // core.p.out_bytes_per_cycle)


def _gm2l1(core: Core, s: DataCopyGm2L1, env: dict) -> int:
    b = s.dst.buf
    what = f"DataCopy {s.src.tensor.name} -> {b.name} (DataCopyParams)"
    count = _range(what, "blockCount", s.block_count.eval(env), 0, 4095)
    blen = _range(what, "blockLen", s.block_len.eval(env), 0, 65535)
    sgap = _range(what, "srcGap", s.src_gap.eval(env), 0, 65535)
    dgap = _range(what, "dstGap", s.dst_gap.eval(env), 0, 65535)
    if not (count and blen):
        return core.p.local_latency
    q = 32 // b.itemsize
    r = np.arange(count)[:, None]
    e = np.arange(blen * q)[None, :]
    sidx = s.src.offset.eval(env) + r * (blen + sgap) * q + e
    didx = s.dst.offset.eval(env) + r * (blen + dgap) * q + e
    g = core.gm(s.pipe, s.src.tensor, sidx.ravel(), False, what)
    dst = core.buffer(s.pipe, s.dst, env, True, what)
    _check(what, dst, didx, b.name)
    dst[didx] = g[sidx]
    nbytes = count * blen * 32
    core.count_bytes("GM->L1", nbytes)
    return core.p.transfer_latency + -(-nbytes // core.p.gm_bytes_per_cycle)


def _pad_in(core: Core, s: DataCopyPadIn, env: dict) -> int:
    b = s.dst.buf
    size = b.itemsize
    what = f"DataCopyPad {s.src.tensor.name} -> {b.name}"
    count = _range(what, "blockCount", s.block_count.eval(env), 0, 4095)
    blen = _range(what, "blockLen", s.block_len.eval(env), 0, 2097151)
    sstride, dstride = s.src_stride.eval(env), s.dst_stride.eval(env)
    if blen % size or sstride % size:
        raise NpuCapacityError(f"{what}: blockLen {blen} / srcStride {sstride} not a "
                               f"multiple of the element size")
    if not (count and blen):
        return core.p.local_latency
    per = blen // size
    blocks = -(-blen // 32)
    q = 32 // size
    r = np.arange(count)[:, None]
    e = np.arange(blocks * q)[None, :]
    sidx = s.src.offset.eval(env) + r * (per + sstride // size) + np.minimum(e, per - 1)
    # past the block's data: the pad fill repeats the block's first element
    sidx = np.where(e < per, sidx, s.src.offset.eval(env) + r * (per + sstride // size))
    g = core.gm(s.pipe, s.src.tensor, sidx[:, :per].ravel(), False, what)
    didx = s.dst.offset.eval(env) + r * (blocks + dstride) * q + e
    dst = core.buffer(s.pipe, s.dst, env, True, what)
    _check(what, dst, didx, b.name)
    dst[didx] = g[sidx]
    nbytes = count * blocks * 32
    core.count_bytes("GM->UB", nbytes)
    return core.p.transfer_latency + -(-nbytes // core.p.gm_bytes_per_cycle)


def _pad_out(core: Core, s: DataCopyPadOut, env: dict) -> int:
    b = s.src.buf
    size = b.itemsize
    what = f"DataCopyPad {b.name} -> {s.dst.tensor.name}"
    count = _range(what, "blockCount", s.block_count.eval(env), 0, 4095)
    blen = _range(what, "blockLen", s.block_len.eval(env), 0, 2097151)
    sstride, dstride = s.src_stride.eval(env), s.dst_stride.eval(env)
    if blen % size or dstride % size:
        raise NpuCapacityError(f"{what}: blockLen {blen} / dstStride {dstride} not a "
                               f"multiple of the element size")
    if not (count and blen):
        return core.p.local_latency
    per = blen // size
    blocks = -(-blen // 32)
    q = 32 // size
    r = np.arange(count)[:, None]
    e = np.arange(per)[None, :]
    sidx = s.src.offset.eval(env) + r * (blocks + sstride) * q + e
    src = core.buffer(s.pipe, s.src, env, False, what)
    _check(what, src, sidx, b.name)
    didx = s.dst.offset.eval(env) + r * (per + dstride // size) + e
    g = core.gm(s.pipe, s.dst.tensor, didx.ravel(), True, what)
    if g.dtype != src.dtype:
        raise NpuCapacityError(f"{what}: {src.dtype} into {g.dtype}")
    g[didx] = src[sidx]
    nbytes = count * _burst(blen)
    core.count_bytes("UB->GM", nbytes)
    return core.p.transfer_latency + -(-nbytes // core.p.out_bytes_per_cycle)


def _load3d(core: Core, s: LoadData3D, env: dict) -> int:
    """im2col of the NC1HWC0 image in L1 (``l1h x l1w``, ``channel`` channels) -> L0A
    (zZ) or L0B (nZ, the transposed matrix): rows ``m_start +: m_ext`` (output
    positions of the window over the padded image), columns ``k_start +: k_ext``
    (``(c1, kh, kw, c0)``)."""
    src_b, dst_b = s.src.buf, s.dst.buf
    what = f"LoadData3D {src_b.name} -> {dst_b.name}"
    q = 32 // src_b.itemsize
    h, w, ch = s.l1h.eval(env), s.l1w.eval(env), s.channel.eval(env)
    kext, mext = s.k_ext.eval(env), s.m_ext.eval(env)
    k0, m0 = s.k_start.eval(env), s.m_start.eval(env)
    fh, fw = s.filter_h.eval(env), s.filter_w.eval(env)
    if not (h and w and ch and kext and mext):
        return core.p.local_latency
    if k0 % q or (ch % q and ch > q):
        raise NpuCapacityError(f"{what}: kStartPt {k0} / channelSize {ch} not whole "
                               f"{q}-channel groups")
    pl, pr, pt, pb = (x.eval(env) for x in s.pad)
    ow = (w + pl + pr - s.dil_w * (fw - 1) - 1) // s.stride_w + 1
    p = m0 + np.arange(-(-mext // 16) * 16)[:, None]          # output positions
    kk = k0 + np.arange(-(-kext // q) * q)[None, :]
    c1, rest = kk // (fh * fw * q), kk % (fh * fw * q)
    kh, kw, cc = rest // (fw * q), (rest // q) % fw, rest % q
    y = (p // ow) * s.stride_h + kh * s.dil_h - pt
    x = (p % ow) * s.stride_w + kw * s.dil_w - pl
    inside = (y >= 0) & (y < h) & (x >= 0) & (x < w) & (c1 * q + cc < max(ch, q))
    sidx = s.src.offset.eval(env) + ((c1 * h + np.clip(y, 0, h - 1)) * w
                                     + np.clip(x, 0, w - 1)) * q + cc
    src = core.buffer(s.pipe, s.src, env, False, what)
    _check(what, src, sidx[inside], src_b.name)
    vals = np.where(inside, src[np.where(inside, sidx, 0)], 0).astype(src.dtype)
    mf, kf = vals.shape[0] // 16, vals.shape[1] // q
    f = 16 * q
    if dst_b.level == "L0A":          # zZ: fractal (i, j) at i*kf + j, rows of q
        pi = np.arange(mf * 16)[:, None]
        ki = np.arange(kf * q)[None, :]
        didx = ((pi // 16) * kf + ki // q) * f + (pi % 16) * q + ki % q
    else:                             # nZ of the transposed matrix (k rows, p columns)
        pi = np.arange(mf * 16)[:, None]
        ki = np.arange(kf * q)[None, :]
        didx = ((ki // q) * mf + pi // 16) * f + (pi % 16) * q + ki % q
    didx = didx + s.dst.offset.eval(env)
    dst = core.buffer(s.pipe, s.dst, env, True, what)
    _check(what, dst, didx, dst_b.name)
    dst[didx] = vals
    nbytes = vals.size * src_b.itemsize
    core.count_bytes(f"L1->{dst_b.level}", nbytes)
    return core.p.local_latency + -(-nbytes // core.p.l1_bytes_per_cycle)


_EXEC = {DataCopyNd2Nz: _nd2nz, DataCopyGm2L1: _gm2l1, LoadData2D: _load2d,
         LoadDataTranspose: _load_transpose,
         MmadCall: _mmad, FixpipeCall: _fixpipe, DataCopyPadIn: _pad_in,
         DataCopyPadOut: _pad_out, LoadData3D: _load3d, TransData5HD: trans_data}
