"""Vector API calls (pipe V) on UB buffers: semantics and cycle cost (used by
:mod:`.sim`).

Two forms, as the A2 vector API has them:

* the first n elements (``count``): element ``i`` of every tensor operand at its offset
  plus ``i``;
* the repeat form (:class:`~polycomp.hw.npu.program.Rep`): ``repeat`` iterations of one
  256-byte repeat (8 data blocks of 32 bytes); in iteration ``r`` lane ``e`` (``e <
  mask``, continuous mask mode) of an operand with strides ``(blk, rep)`` is element
  ``offset + r * rep * B + (e // B) * blk * B + e % B``, ``B`` the elements of a block;
  ``repeat`` at most 255.  ``Brcb`` writes each of 8 elements per repeat over a whole
  block; ``ReduceRepeat`` reduces one repeat's lanes to one value
  (``ORDER_ONLY_VALUE``: values ``dstRepStride`` elements apart).

Arithmetic is in float32 and rounded to the destination's type on the store; a
comparison writes one bit per element (bit ``i % 8`` of byte ``i // 8``) of a uint8
mask that ``Select`` reads back.  Cost: the issue latency plus one cycle per repeat
(the first-n form: the 256-byte repeats it covers).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from polycomp.errors import NpuCapacityError, PolycompInternalError
from polycomp.hw.npu.program import Scalar, Slot, TransData5HD, VecCall
from polycomp.hw.npu.target import MAX_REPEAT, UB_BANK_GROUPS, UB_BANK_SHIFT

Fn = Callable[..., Any]
UNARY: dict[str, Fn] = {
    "Exp": np.exp, "Ln": np.log, "Sqrt": np.sqrt, "Rsqrt": lambda x: 1 / np.sqrt(x),
    "Abs": np.abs, "Reciprocal": lambda x: 1 / x, "Relu": lambda x: np.maximum(x, 0)}
BINARY: dict[str, Fn] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "Max": np.maximum, "Min": np.minimum}
SCALAR: dict[str, Fn] = {"Adds": np.add, "Muls": np.multiply, "Maxs": np.maximum,
                         "Mins": np.minimum}
CMP: dict[str, Fn] = {"GT": np.greater, "GE": np.greater_equal, "LT": np.less,
                      "LE": np.less_equal, "EQ": np.equal, "NE": np.not_equal}
#: dst = src0 * dst + src1 (the destination is read too)
FMA = ("FusedMulAdd",)
REDUCE: dict[str, Fn] = {"SUM": np.sum, "MAX": np.max, "MIN": np.min}


def _idx_count(off: int, n: int) -> np.ndarray:
    return off + np.arange(n)


def _idx_rep(off: int, blk: int, rep: int, mask: int, repeat: int, q: int) -> np.ndarray:
    r = np.arange(repeat)[:, None]
    e = np.arange(mask)[None, :]
    return off + r * rep * q + (e // q) * blk * q + e % q


def _arr(core, pipe: str, x: Slot, env: dict, write: bool, what: str) -> np.ndarray:
    return core.buffer(pipe, x, env, write, what)


def _check(what: str, arr: np.ndarray, idx: np.ndarray, name: str) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
        raise NpuCapacityError(f"{what}: elements [{idx.min()}, {idx.max()}] of buffer "
                               f"{name} outside its {arr.size}")


def _bits(mask_arr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return (mask_arr[idx // 8] >> (idx % 8).astype(np.uint8)) & 1


def _count_indices(s: VecCall, env: dict, what: str, tensors: list) -> tuple[list, int]:
    """The element indices of each operand (the destination first) of a first-n call
    (``count`` elements), and its repeats."""
    assert s.count is not None
    dst_b = s.dst.buf
    n = s.count.eval(env)
    if n < 0:
        raise NpuCapacityError(f"{what}: count {n}")
    if s.api in ("Compare", "Compares") and (n * tensors[0].buf.itemsize) % 256:
        raise NpuCapacityError(f"{what}: count {n} is not whole 256-byte repeats")
    idx = [_idx_count(x.offset.eval(env), n) for x in (s.dst, *tensors)]
    repeats = -(-n * max(dst_b.itemsize, *(x.buf.itemsize for x in tensors), 1) // 256)
    if s.api in ("Compare", "Compares"):
        repeats = -(-n * tensors[0].buf.itemsize // 256)
    return idx, repeats


def _repeat_indices(s: VecCall, env: dict, what: str, tensors: list) -> tuple[list, int]:
    """The element indices of each operand of a repeat-form call (mask, repeatTimes,
    block and repeat strides, each checked against its field's range), and its repeats."""
    assert s.rep is not None
    dst_b = s.dst.buf
    lanes = 256 // dst_b.itemsize
    mask, repeat = s.rep.mask.eval(env), s.rep.repeat.eval(env)
    if not 0 <= repeat <= MAX_REPEAT:
        raise NpuCapacityError(f"{what}: repeatTimes {repeat} outside [0, {MAX_REPEAT}]")
    wide = 256 // max(dst_b.itemsize, *(x.buf.itemsize for x in tensors))
    if not 0 <= mask <= (wide if s.api == "Cast" else lanes):
        raise NpuCapacityError(f"{what}: mask {mask} outside [0, "
                               f"{wide if s.api == 'Cast' else lanes}]")
    for blk, rep in s.rep.strides:
        if not (0 <= blk.eval(env) <= 65535 and 0 <= rep.eval(env) <= 255):
            raise NpuCapacityError(f"{what}: strides ({blk.eval(env)}, "
                                   f"{rep.eval(env)}) outside the uint8 repeat stride")
    idx = [_idx_rep(x.offset.eval(env), st[0].eval(env), st[1].eval(env), mask, repeat,
                    32 // x.buf.itemsize)
           for x, st in zip((s.dst, *tensors), s.rep.strides)]
    return idx, (repeat if mask else 0)


def vec_call(core, s: VecCall, env: dict) -> int:
    what = f"{s.api}{'<' + s.attr + '>' if s.attr else ''} -> {s.dst.buf.name}"
    dst_b = s.dst.buf
    # operand index arrays (the destination first)
    tensors = [x for x in s.srcs if isinstance(x, Slot)]
    if s.api in UNARY or s.api in BINARY or s.api in SCALAR or s.api in FMA or \
            s.api == "Brcb":
        for x in tensors:
            if x.buf.dtype != dst_b.dtype:
                raise NpuCapacityError(f"{what}: operand {x.buf.name} is {x.buf.dtype}, the "
                                       f"destination {dst_b.dtype} (one type T per call)")
    if s.api == "Brcb":
        return _brcb(core, s, env, what)
    if s.api == "ReduceRepeat":
        return _reduce(core, s, env, what)
    idx, repeats = (_count_indices if s.count is not None else _repeat_indices)(
        s, env, what, tensors)
    srcs = []
    k = 0
    for x in s.srcs:
        if isinstance(x, Slot):
            arr = _arr(core, s.pipe, x, env, False, what)
            _check(what, arr, idx[1 + k], x.buf.name)
            srcs.append((arr, idx[1 + k]))
            k += 1
        else:
            srcs.append(x)
    dst = _arr(core, s.pipe, s.dst, env, True, what)
    didx = idx[0]
    if s.api in ("Compare", "Compares"):
        _check(what, dst, didx // 8, dst_b.name)
    else:
        _check(what, dst, didx, dst_b.name)

    with np.errstate(all="ignore"):
        _compute(s, srcs, dst, didx, env, what)
    extra = 0
    if core.p.ub_bank_conflicts and s.api not in ("Compare", "Compares", "Select"):
        ops = [s.dst, *tensors]
        rep0 = [s.rep is not None and st[1].eval(env) == 0 for st in s.rep.strides] \
            if s.rep is not None else [False] * len(ops)
        lanes = 256 // max(x.buf.itemsize for x in ops)
        banked = [(core.ub_address(x, env), x.buf.itemsize, i, z)
                  for x, i, z in zip(ops, idx, rep0)]
        if s.api in FMA:                              # the destination is read too
            banked.append(banked[0])
        extra = bank_conflicts(core, banked, lanes)
    return core.p.vector_latency + repeats + extra


def _per_repeat(idx: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """(repeat, element) of every element a call touches: the rows of a repeat-form
    index array, or ``lanes`` consecutive elements a repeat of a first-n call."""
    if idx.ndim == 2:
        return np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()
    return np.arange(idx.size) // lanes, idx


def bank_conflicts(core, ops: list, lanes: int) -> int:
    """The cycles a vector call loses to UB bank conflicts (A2: 16 bank groups of 3
    banks, target.py), per the documented rule: in each cycle (one repeat) a bank group
    serves one read and one write, a bank one access.  ``ops``: the destination first,
    then the sources, each as (byte address of its buffer, item size, element indices,
    repeat stride 0).  An operand reads each distinct 32-byte block of a repeat once
    (block stride 0 reads one block), and once over all repeats with repeat stride 0;
    the same block read by two operands in one repeat is read once (an assumption).
    The destination's writes of repeat r land in cycle r + 1 when its blocks of the
    first repeat are in the banks of a source's (the hardware's delayed write), else in
    cycle r.  A cycle costs the most accesses any group (reads or writes) or bank
    (reads plus writes) takes in it; the result is the cycles beyond one a repeat.
    Counts go to the chip report's ``bank_conflict_cycles`` by kind."""
    reads: list[np.ndarray] = []
    w_rep = w_blk = None
    first: list[set] = []
    for k, (base, size, idx, rep0) in enumerate(ops):
        r, e = _per_repeat(np.asarray(idx), lanes)
        if r.size == 0:
            return 0
        blk = (base + e * size) // 32
        key = np.unique(r * (1 << 20) + blk)
        rr, bb = key >> 20, key & ((1 << 20) - 1)
        if rep0 and k:
            rr, bb = rr[rr == 0], bb[rr == 0]
        first.append(set((bb[rr == 0] % UB_BANK_GROUPS + UB_BANK_GROUPS
                          * ((bb[rr == 0] * 32) >> UB_BANK_SHIFT)).tolist()))
        if k == 0:
            w_rep, w_blk = rr, bb
        else:
            reads.append(rr * (1 << 20) + bb)
    assert w_rep is not None and w_blk is not None
    rkey = np.unique(np.concatenate(reads)) if reads else np.zeros(0, np.int64)
    r_rep, r_blk = rkey >> 20, rkey & ((1 << 20) - 1)
    delay = 1 if any(first[0] == f for f in first[1:]) else 0
    w_rep = w_rep + delay
    slots = int(max(r_rep.max(initial=0), w_rep.max(initial=0))) + 1

    def count(rep: np.ndarray, blk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = blk % UB_BANK_GROUPS
        bank = g + UB_BANK_GROUPS * ((blk * 32) >> UB_BANK_SHIFT)
        grp = np.bincount(rep * UB_BANK_GROUPS + g, minlength=slots * UB_BANK_GROUPS)
        bnk = np.bincount(rep * 4 * UB_BANK_GROUPS + bank,
                          minlength=slots * 4 * UB_BANK_GROUPS)
        return grp.reshape(slots, -1), bnk.reshape(slots, -1)
    rg, rb = count(r_rep, r_blk)
    wg, wb = count(w_rep, w_blk)
    rr_c = np.maximum(rg.max(axis=1), 1)
    ww_c = np.maximum(wg.max(axis=1), 1)
    rw_c = np.maximum(np.where(wb > 0, rb + wb, 0).max(axis=1), 1)
    cost = np.maximum(np.maximum(rr_c, ww_c), rw_c)
    extra = int((cost - 1).sum())
    if extra:
        rep = core.chip.report.bank_conflict_cycles
        for kind, c in (("read-read", rr_c), ("write-write", ww_c), ("read-write", rw_c)):
            rep[kind] = rep.get(kind, 0) + int(((c == cost) & (cost > 1)).sum())
    return extra


def _compute(s: VecCall, srcs: list, dst: np.ndarray, didx: np.ndarray, env: dict,
             what: str) -> None:
    """Apply the call's operation to its operands (``srcs``: (array, indices) pairs or
    scalars) into ``dst[didx]`` (a bit mask for ``Compare``/``Compares``)."""
    def val(x) -> Any:
        if isinstance(x, tuple):
            a, i = x
            return a[i].astype(np.float32)
        if isinstance(x, Scalar):
            return np.float32(x.eval(env))
        raise PolycompInternalError(f"{what}: operand {x!r}")
    if s.api in UNARY:
        res = UNARY[s.api](val(srcs[0]))
    elif s.api in BINARY:
        res = BINARY[s.api](val(srcs[0]), val(srcs[1]))
    elif s.api in SCALAR:
        res = SCALAR[s.api](val(srcs[0]), val(srcs[1]))
    elif s.api in FMA:
        res = val(srcs[0]) * dst[didx].astype(np.float32) + val(srcs[1])
    elif s.api == "Cast":
        res = val(srcs[0])
        if s.attr == "CAST_TRUNC" and dst.dtype == np.float16:     # the mantissa cut
            res = trunc_half(res)                                  # toward zero
        elif dst.dtype == np.int8:          # toward zero (CAST_TRUNC), saturating
            res = np.clip(np.trunc(res), -128, 127)
    elif s.api == "Duplicate":
        res = np.broadcast_to(val(srcs[0]), didx.shape)
    elif s.api in ("Compare", "Compares"):
        bits = CMP[s.attr](val(srcs[0]), val(srcs[1])).astype(np.uint8).ravel()
        flat = didx.ravel()
        out = np.zeros(-(-flat.size // 8) * 8, np.uint8)
        out[:flat.size] = bits
        packed = np.packbits(out.reshape(-1, 8), axis=1, bitorder="little").ravel()
        dst[flat[::8] // 8] = packed
        return
    elif s.api == "Select":
        m_arr, m_idx = srcs[0]
        bit = _bits(m_arr, m_idx)
        res = np.where(bit != 0, val(srcs[1]), val(srcs[2]))
    else:
        raise PolycompInternalError(f"NPU simulator: unknown vector call {s.api}")
    dst[didx] = np.broadcast_to(np.asarray(res, np.float32), didx.shape).astype(dst.dtype)


def trunc_half(x) -> np.ndarray:
    """float32 -> float16 rounded toward zero (``Cast`` with ``CAST_TRUNC``; overflow
    to the largest half, NaN kept)."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16)
        over = np.abs(h.astype(np.float32)) > np.abs(x)
        h = np.where(over, np.nextafter(h, np.float16(0)), h)
    return h.astype(np.float32)


def _brcb(core, s: VecCall, env: dict, what: str) -> int:
    assert s.rep is not None
    repeat = s.rep.repeat.eval(env)
    if not 0 <= repeat <= MAX_REPEAT:
        raise NpuCapacityError(f"{what}: repeatTimes {repeat} outside [0, {MAX_REPEAT}]")
    blk, rep = (x.eval(env) for x in s.rep.strides[0])
    src_s = s.srcs[0]
    q = 32 // s.dst.buf.itemsize
    i = np.arange(repeat)[:, None, None]
    j = np.arange(8)[None, :, None]
    w = np.arange(q)[None, None, :]
    didx = s.dst.offset.eval(env) + (i * rep + j * max(blk, 1)) * q + w
    sidx = src_s.offset.eval(env) + i * 8 + j + 0 * w
    src = _arr(core, s.pipe, src_s, env, False, what)
    _check(what, src, sidx, src_s.buf.name)
    dst = _arr(core, s.pipe, s.dst, env, True, what)
    _check(what, dst, didx, s.dst.buf.name)
    dst[didx] = src[sidx]
    return core.p.vector_latency + repeat


def _reduce(core, s: VecCall, env: dict, what: str) -> int:
    assert s.rep is not None
    mask, repeat = s.rep.mask.eval(env), s.rep.repeat.eval(env)
    if not 0 <= repeat <= MAX_REPEAT:
        raise NpuCapacityError(f"{what}: repeatTimes {repeat} outside [0, {MAX_REPEAT}]")
    (_, dst_rep), (sblk, srep) = ((a.eval(env), b.eval(env)) for a, b in s.rep.strides)
    src_s = s.srcs[0]
    q = 32 // src_s.buf.itemsize
    if not 0 < mask <= 8 * q:
        raise NpuCapacityError(f"{what}: mask {mask} outside [1, {8 * q}]")
    sidx = _idx_rep(src_s.offset.eval(env), sblk, srep, mask, repeat, q)
    didx = s.dst.offset.eval(env) + np.arange(repeat) * dst_rep
    src = _arr(core, s.pipe, src_s, env, False, what)
    _check(what, src, sidx, src_s.buf.name)
    dst = _arr(core, s.pipe, s.dst, env, True, what)
    _check(what, dst, didx, s.dst.buf.name)
    with np.errstate(all="ignore"):
        dst[didx] = REDUCE[s.attr](src[sidx].astype(np.float32), axis=1).astype(dst.dtype)
    return core.p.vector_latency + repeat


def trans_data(core, s: TransData5HD, env: dict) -> int:
    """TransDataTo5HD: from the 16 source blocks, element ``j`` of each -> destination
    block ``j`` (b16); for b32, elements ``j`` of source blocks 0-7 -> destination block
    ``2j`` and of blocks 8-15 -> ``2j + 1``.  With ``repeat > 1`` iteration ``r`` adds
    ``r`` times the repeat strides (blocks) to every address; with ``repeat == 1`` the
    strides are added once."""
    what = f"TransDataTo5HD {s.src.buf.name} -> {s.dst.buf.name}"
    repeat = s.repeat.eval(env)
    if not 0 <= repeat <= MAX_REPEAT:
        raise NpuCapacityError(f"{what}: repeatTimes {repeat} outside [0, {MAX_REPEAT}]")
    if not repeat:
        return core.p.vector_latency
    size = s.src.buf.itemsize
    q = 32 // size
    drep, srep = s.dst_rep.eval(env), s.src_rep.eval(env)
    r = np.arange(repeat) if repeat > 1 else np.ones(1, np.int64)
    soffs = np.array([o.eval(env) for o in s.src_offsets]) + s.src.offset.eval(env)
    doffs = np.array([o.eval(env) for o in s.dst_offsets]) + s.dst.offset.eval(env)
    src = _arr(core, s.pipe, s.src, env, False, what)
    dst = _arr(core, s.pipe, s.dst, env, True, what)
    for it in r:
        sidx = soffs[:, None] + it * srep * q + np.arange(q)[None, :]     # 16 x q
        _check(what, src, sidx, s.src.buf.name)
        blocks = src[sidx]                                                # 16 blocks
        if size == 2:
            out = blocks.T                                                # 16 x 16
        else:                                    # b32: 8 rows of 16 -> 16 halves
            t = blocks.T                                                  # 8 x 16
            out = t.reshape(8, 2, 8).reshape(16, 8)
        didx = doffs[:, None] + it * drep * q + np.arange(q)[None, :]
        _check(what, dst, didx, s.dst.buf.name)
        dst[didx] = out
    return core.p.vector_latency + 2 * repeat
