"""Ascend C source printed from the NPU IR (:class:`~polycomp.hw.npu.program.NpuModule`,
``CompiledKernel.final_ir``, the object the simulator runs), for the Atlas A2
generation (``__NPU_ARCH__`` 2201), in the documented static-tensor style.

One file per kernel:

* the tiling data struct (the sizes, the sizes the host derives, each vector phase's UB
  tiling ``TR``/``CP``/``TRP``, the number of blocks ``NB``);
* on the host (``__NPU_ARCH__`` undefined): the tiling function, which fills the struct
  from the arguments' sizes and the chip's core counts, picks the vector tiles (as many
  rows as UB holds, at most 255), and returns ``numBlocks`` and the workspace bytes;
* on the device: ``extern "C" __global__ __aicore__`` with the GM arguments, the
  workspace and the tiling argument (``GET_TILING_DATA_WITH_STRUCT``), the kernel type
  (``KERNEL_TASK_TYPE_DEFAULT``), ``InitSocState()``, the ``GlobalTensor``s, then per
  core kind (``if ASCEND_IS_AIC`` / ``if ASCEND_IS_AIV``) and per phase the
  ``LocalTensor``s at the simulator's addresses (``LocalTensor<T>(TPosition, addr,
  size)``) and the body: API calls with their parameter structs, ``SetFlag``/
  ``WaitFlag``, ``CrossCoreSetFlag``/``CrossCoreWaitFlag``; ``PipeBarrier<PIPE_ALL>()``
  at the end.

Every piece of source text of the NPU targets is made here."""
from __future__ import annotations

from polycomp.hw.npu.program import (
    BID,
    BNUM,
    SUB,
    Barrier,
    CrossSet,
    CrossWait,
    DataCopyGm2L1,
    DataCopyNd2Nz,
    DataCopyPadIn,
    DataCopyPadOut,
    FixpipeCall,
    GlobalTensor,
    GmRef,
    Ix,
    Kernel,
    Let,
    LoadData2D,
    LoadData3D,
    LoadDataTranspose,
    LocalBuf,
    Loop,
    MmadCall,
    NpuModule,
    Program,
    Scalar,
    SetFlag,
    Slot,
    TransData5HD,
    VecCall,
    WaitFlag,
    walk,
)

from .lower_vector import LONG_CHUNK, PITCH_PAD_LIMIT, pitch_itemsize
from .target import npu_params, npu_spec

_CT = {"float16": "half", "float32": "float", "uint8": "uint8_t", "int8": "int8_t",
       "int32": "int32_t", "bfloat16": "bfloat16_t", "uint64": "uint64_t"}
_C_OPS = {"+": "+", "-": "-", "*": "*", "floordiv": "/", "mod": "%", "==": "==", "and": "&&"}
_C_FUNCS = {"ceildiv": "PcCeilDiv", "min": "PcMin", "max": "PcMax"}
_KTYPE = {"aic": "KERNEL_TYPE_AIC_ONLY", "aiv": "KERNEL_TYPE_AIV_ONLY",
          "mix": "KERNEL_TYPE_MIX_AIC_1_2"}


def c_expr(e: Ix, names: dict | None = None) -> str:
    """An index expression as C (``names`` renames variables)."""
    op, a = e.op, e.args
    if op == "const":
        return str(a[0])
    if op == "var":
        return (names or {}).get(a[0], a[0])
    x, y = c_expr(a[0], names), c_expr(a[1], names)
    if op in _C_FUNCS:
        return f"{_C_FUNCS[op]}({x}, {y})"
    return f"({x} {_C_OPS[op]} {y})"


def c_slot(s: Slot) -> str:
    """A buffer copy (and offset) as a LocalTensor expression."""
    out = s.buf.name
    if s.buf.copies > 1:
        out += f"[{c_expr(s.index)}]"
    if not s.offset.is_const(0):
        out += f"[{c_expr(s.offset)}]"
    return out


def _gm(r: GmRef) -> str:
    return f"g{r.tensor.name}[{c_expr(r.offset)}]"


def _float(v: float) -> str:
    if v != v:
        return '__builtin_nan("")'
    if v in (float("inf"), float("-inf")):
        return "__builtin_huge_val()" if v > 0 else "-__builtin_huge_val()"
    return repr(float(v))


def _scalar(x, ct: str) -> str:
    if isinstance(x, Scalar):
        v = f"static_cast<double>({c_expr(x.value)})" if isinstance(x.value, Ix) \
            else _float(x.value)
        if x.inv:
            v = f"(1.0 / {v})"
        if x.neg:
            v = f"-{v}" if not v.startswith("-") else v[1:]
        return f"static_cast<{ct}>({v})"
    if isinstance(x, Ix):
        return f"static_cast<{ct}>({c_expr(x)})"
    return f"static_cast<{ct}>({_float(float(x))})"


def _vec(s: VecCall) -> str:
    ct = _CT[s.dst.buf.dtype]
    if s.api in ("Compare", "Compares", "Select") and len(s.srcs) > 1:
        tens = [x for x in s.srcs if isinstance(x, Slot)]
        ct = _CT[tens[-1].buf.dtype] if s.api == "Select" else _CT[tens[0].buf.dtype]
    ops = [c_slot(s.dst), *(c_slot(x) if isinstance(x, Slot) else _scalar(x, ct)
                            for x in s.srcs)]
    if s.api == "Brcb":
        assert s.rep is not None
        (blk, rep), = s.rep.strides
        return (f"Brcb({ops[0]}, {ops[1]}, {c_expr(s.rep.repeat)}, "
                f"BrcbRepeatParams({c_expr(blk)}, {c_expr(rep)}));")
    if s.api == "ReduceRepeat":
        assert s.rep is not None
        (_, drep), (sblk, srep) = s.rep.strides
        return (f"ReduceRepeat<ReduceType::{s.attr}>({ops[0]}, {ops[1]}, "
                f"{c_expr(s.rep.mask)}, {c_expr(s.rep.repeat)}, {c_expr(drep)}, "
                f"{c_expr(sblk)}, {c_expr(srep)}, ReduceOrder::ORDER_ONLY_VALUE);")
    if s.api == "Cast":
        mode = f"RoundMode::{s.attr}"
        if s.count is not None:
            return f"Cast({ops[0]}, {ops[1]}, {mode}, {c_expr(s.count)});"
        assert s.rep is not None
        (db, dr), (sb, sr) = s.rep.strides
        return (f"Cast({ops[0]}, {ops[1]}, {mode}, {c_expr(s.rep.mask)}, "
                f"{c_expr(s.rep.repeat)}, UnaryRepeatParams({c_expr(db)}, {c_expr(sb)}, "
                f"{c_expr(dr)}, {c_expr(sr)}));")
    if s.api in ("Compare", "Compares"):
        assert s.count is not None
        return f"{s.api}({', '.join(ops)}, CMPMODE::{s.attr}, {c_expr(s.count)});"
    if s.api == "Select":
        assert s.count is not None
        return f"Select({', '.join(ops)}, SELMODE::{s.attr}, {c_expr(s.count)});"
    if s.count is not None:
        return f"{s.api}({', '.join(ops)}, {c_expr(s.count)});"
    assert s.rep is not None
    r = s.rep
    blks = [c_expr(b) for b, _ in r.strides]
    reps = [c_expr(p) for _, p in r.strides]
    kind = "BinaryRepeatParams" if len(r.strides) == 3 else "UnaryRepeatParams"
    return (f"{s.api}({', '.join(ops)}, {c_expr(r.mask)}, {c_expr(r.repeat)}, "
            f"{kind}({', '.join(blks + reps)}));")


def _instr(s, ind: str) -> list[str]:
    if isinstance(s, Loop):
        v = s.var
        lo = "" if s.start.is_const(0) else f"{c_expr(s.start)} + "
        return [f"{ind}for (int64_t {v} = {c_expr(s.start)}; {v} < {lo}{c_expr(s.extent)}; "
                f"++{v}) {{", *(x for b in s.body for x in _instr(b, ind + "    ")),
                f"{ind}}}"]
    if isinstance(s, Let):
        return [f"{ind}const int64_t {s.var} = {c_expr(s.value)};"]
    if isinstance(s, (SetFlag, WaitFlag)):
        return [f"{ind}{type(s).__name__}<HardEvent::{s.src_pipe}_{s.dst_pipe}>"
                f"({c_expr(s.event)});"]
    if isinstance(s, Barrier):
        return [f"{ind}PipeBarrier<PIPE_{s.pipe}>();"]
    if isinstance(s, CrossSet):
        return [f"{ind}CrossCoreSetFlag<{s.mode}, PIPE_{s.pipe}>({c_expr(s.flag)});"]
    if isinstance(s, CrossWait):
        return [f"{ind}CrossCoreWaitFlag({c_expr(s.flag)});"]
    return _call(s, ind)


def _call(s, ind: str) -> list[str]:
    """The lines of one data-movement, cube or vector API call."""
    if isinstance(s, DataCopyNd2Nz):
        p = ", ".join(c_expr(x) for x in (s.nd_num, s.n_value, s.d_value, s.src_nd_stride,
                                          s.src_d_value, s.dst_c0_stride, s.dst_n_stride,
                                          s.dst_nd_stride))
        return [f"{ind}DataCopy({c_slot(s.dst)}, {_gm(s.src)}, Nd2NzParams({p}));"]
    if isinstance(s, DataCopyGm2L1):
        p = ", ".join(c_expr(x) for x in (s.block_count, s.block_len, s.src_gap, s.dst_gap))
        return [f"{ind}DataCopy({c_slot(s.dst)}, {_gm(s.src)}, DataCopyParams({p}));"]
    if isinstance(s, DataCopyPadIn):
        ct = _CT[s.dst.buf.dtype]
        p = ", ".join(c_expr(x) for x in (s.block_count, s.block_len, s.src_stride,
                                          s.dst_stride))
        return [f"{ind}DataCopyPad({c_slot(s.dst)}, {_gm(s.src)}, DataCopyExtParams({p}, 0), "
                f"DataCopyPadExtParams<{ct}>(false, 0, 0, static_cast<{ct}>(0)));"]
    if isinstance(s, DataCopyPadOut):
        p = ", ".join(c_expr(x) for x in (s.block_count, s.block_len, s.src_stride,
                                          s.dst_stride))
        return [f"{ind}DataCopyPad({_gm(s.dst)}, {c_slot(s.src)}, DataCopyExtParams({p}, 0));"]
    if isinstance(s, LoadData2D):
        p = (f"{c_expr(s.start)}, {c_expr(s.repeat)}, {c_expr(s.src_stride)}, 0, "
             f"{c_expr(s.dst_gap)}, {str(s.transpose).lower()}, 0")
        return [f"{ind}LoadData({c_slot(s.dst)}, {c_slot(s.src)}, LoadData2DParams({p}));"]
    if isinstance(s, LoadDataTranspose):
        p = ", ".join(c_expr(x) for x in (s.start, s.repeat, s.src_stride, s.dst_gap,
                                          s.dst_frac_gap))
        return [f"{ind}LoadDataWithTranspose({c_slot(s.dst)}, {c_slot(s.src)}, "
                f"LoadData2dTransposeParams({p}, 0));"]
    if isinstance(s, MmadCall):
        return [f"{ind}Mmad({c_slot(s.c)}, {c_slot(s.a)}, {c_slot(s.b)}, MmadParams("
                f"{c_expr(s.m)}, {c_expr(s.n)}, {c_expr(s.k)}, 0, false, "
                f"static_cast<bool>({c_expr(s.init)})));"]
    if isinstance(s, FixpipeCall):
        ct = _CT[s.dst.tensor.dtype]
        p = ", ".join(c_expr(x) for x in (s.n_size, s.m_size, s.src_stride, s.dst_stride))
        st = _CT[s.src.buf.dtype]
        deq = "" if s.deq is None else f"  // deqScalar: the bits of scale {s.deq!r}f"
        word = str(s.deq_scalar)
        if s.quant == "REQ8":
            deq += " | 1 << 46 (signed result)"
            word = f"0x{s.deq_scalar:X}ULL"
        cbuf = "" if s.cbuf is None else f"{c_slot(s.cbuf)}, "
        call = [f"{ind}Fixpipe<{ct}, {st}, CFG_ROW_MAJOR>({_gm(s.dst)}, {c_slot(s.src)}, "
                f"{cbuf}FixpipeParamsV220({p}, false, QuantMode_t::{s.quant}, "
                f"{word}, 1, 0, 0, 0));{deq}"]
        if s.atomic:      # added to GM (a split-K part)
            return [f"{ind}SetAtomicAdd<{ct}>();", *call, f"{ind}SetAtomicNone();"]
        return call
    if isinstance(s, VecCall):
        return [f"{ind}{_vec(s)}"]
    return _layout_call(s, ind)


def _layout_call(s, ind: str) -> list[str]:
    """The lines of a call with a local parameter array (``LoadData3DV2``'s pad list,
    ``TransDataTo5HD``'s address lists)."""
    if isinstance(s, LoadData3D):
        ct = _CT[s.src.buf.dtype]
        pad = ", ".join(c_expr(x) for x in s.pad)
        p = ", ".join([*(c_expr(x) for x in (s.l1h, s.l1w, s.channel, s.k_ext, s.m_ext,
                                              s.k_start, s.m_start)),
                       str(s.stride_w), str(s.stride_h), c_expr(s.filter_w),
                       c_expr(s.filter_h), str(s.dil_w), str(s.dil_h)])
        return [f"{ind}{{",
                f"{ind}    const uint8_t padList[PAD_SIZE] = {{{pad}}};",
                f"{ind}    LoadData({c_slot(s.dst)}, {c_slot(s.src)}, LoadData3DParamsV2<{ct}>("
                f"padList, {p}, false, false, static_cast<{ct}>(0)));",
                f"{ind}}}"]
    if isinstance(s, TransData5HD):
        ct = _CT[s.src.buf.dtype]
        d = ", ".join(c_slot(s.dst.at(o)) for o in s.dst_offsets)
        src = ", ".join(c_slot(s.src.at(o)) for o in s.src_offsets)
        return [f"{ind}{{",
                f"{ind}    LocalTensor<{ct}> dstList[NCHW_CONV_ADDR_LIST_SIZE] = {{{d}}};",
                f"{ind}    LocalTensor<{ct}> srcList[NCHW_CONV_ADDR_LIST_SIZE] = {{{src}}};",
                f"{ind}    TransDataTo5HD<{ct}>(dstList, srcList, TransDataTo5HDParams(false, "
                f"false, {c_expr(s.repeat)}, {c_expr(s.dst_rep)}, {c_expr(s.src_rep)}));",
                f"{ind}}}"]
    raise TypeError(f"the NPU printer prints API calls only, not {type(s).__name__}")


# --------------------------------------------------------------------------- buffers


def _positions(p: Program) -> dict[str, str]:
    """The TPosition of each buffer: A1 / B1 for the L1 tiles of the left / right
    operand, C1 for Fixpipe's quantisation parameters (the docs' cbufWorkspace), A2, B2,
    CO1, VECCALC."""
    pos = {"L0A": "A2", "L0B": "B2", "L0C": "CO1", "UB": "VECCALC", "L1": "A1"}
    out = {b.name: "C1" if b.level == "L1" and b.layout == "VEC" else pos[b.level]
           for b in p.buffers}
    for s in walk(p.body):
        src, dst = getattr(s, "src", None), getattr(s, "dst", None)
        if isinstance(src, Slot) and isinstance(dst, Slot) and src.buf.level == "L1" and \
                dst.buf.level == "L0B":
            out[src.buf.name] = "B1"
    return out


def _dim(v: int | str, names: dict | None = None) -> str:
    return str(v) if isinstance(v, int) else (names or {}).get(v, v)


def _size_c(b: LocalBuf) -> str:
    """Bytes of one copy as C (UB: whole 256-byte repeats)."""
    n = f"{_dim(b.rows)} * {_dim(b.cols)} * {b.itemsize}"
    return f"PcAlignUp({n}, {b.quantum})"


def _addresses(p: Program, target) -> tuple[dict[str, str], list[str]]:
    """Each buffer's address as C -- a number where every size is a constant (the
    simulator's allocation), else a constant computed from the tiling values -- and the
    declarations of those constants."""
    if all(isinstance(v, int) for b in p.buffers for v in (b.rows, b.cols)):
        from .sim import allocate
        return {k: str(a) for k, (_, a) in allocate(p, target).items()}, []
    tops: dict[str, str] = {}
    out, decls = {}, []
    for b in p.buffers:
        align = max(target.memory.level(b.level).alignment, 32)
        name = f"{b.name}_addr"
        if b.bank_phase is None:
            at = f"PcAlignUp({tops.get(b.level, '0')}, {align})"
        else:                   # the bank placement: the next 256-byte boundary that
            # is the phase modulo 512
            a = f"PcAlignUp({tops.get(b.level, '0')}, 256)"
            at = f"{a} + ({b.bank_phase} + 512 - {a} % 512) % 512"
        decls.append(f"const uint32_t {name} = {at};")
        out[b.name] = name
        tops[b.level] = f"{name} + {b.copies} * {_size_c(b)}"
    return out, decls


def _buffer(b: LocalBuf, addr: str, pos: str) -> str:
    t = _CT[b.dtype]
    n = f"{_dim(b.rows)} * {_dim(b.cols)}"
    one = [f"LocalTensor<{t}>(TPosition::{pos}, {addr}"
           f"{f' + {k} * {_size_c(b)}' if k else ''}, {n})" for k in range(b.copies)]
    if b.copies == 1:
        return f"LocalTensor<{t}> {b.name}(TPosition::{pos}, {addr}, {n});  // {b.level} {b.layout}"
    return (f"LocalTensor<{t}> {b.name}[{b.copies}] = {{{', '.join(one)}}};  "
            f"// {b.level} {b.layout}, ping-pong")


def _program(p: Program, target, ind: str) -> list[str]:
    addresses, decls = _addresses(p, target)
    pos = _positions(p)
    out = [ind + d for d in decls]
    out += [ind + _buffer(b, addresses[b.name], pos[b.name]) for b in p.buffers]
    for s in p.body:
        out += _instr(s, ind)
    return out


# --------------------------------------------------------------------------- the file


def _vector_progs(k: Kernel) -> list[tuple[int, Program]]:
    return [(n, p) for n, ph in enumerate(k.phases) for p in ph.programs
            if p.core == "AIV" and p.tiling.rows is not None]


def _tiling_fields(k: Kernel) -> list[str]:
    out = list(k.size_names)
    for n, p in _vector_progs(k):
        out += [f"{v}_{n}" for v in _tiling_values(p)]
    return out + ["NB"]


def _tiling_values(p: Program) -> tuple[str, ...]:
    """The host tiling values of a vector program (``LR``, ``CW``: its long-row form)."""
    return ("TR", "CP", "TRP", "LR", "CW") if p.tiling.long else ("TR", "CP", "TRP")


def _host(k: Kernel, target) -> list[str]:
    """The host tiling function (module docstring)."""
    spec = npu_spec(target)
    ub = target.capacity("UB")
    name = k.name
    args = [s for s in k.size_names if s not in k.derived]
    out = ["#ifndef __NPU_ARCH__",
           "// host side: fills the tiling data from the arguments' sizes (in the order",
           f"// {', '.join(args) or 'none'}) and the chip's cores; returns numBlocks (0: no "
           f"tiling fits)",
           f"inline uint32_t {name}_Tiling(const int64_t* sizes, uint32_t aicNum, uint32_t aivNum,",
           f"                              {name}_TilingData* t, uint64_t* workspaceBytes)",
           "{"]
    for i, s in enumerate(args):
        out.append(f"    const int64_t {s} = sizes[{i}];")
        out.append(f"    t->{s} = {s};")
    for s, e in k.derived.items():
        out.append(f"    const int64_t {s} = {c_expr(e)};")
        out.append(f"    t->{s} = {s};")
    env_names: dict[str, str] = {}
    for n, p in _vector_progs(k):
        assert p.tiling.rows is not None and p.tiling.cols is not None
        names = {"TR": "tr", "CP": "cp", "TRP": "PcAlignUp(tr, 16)", "CW": "cw"}
        need = " + ".join(f"{b.copies} * PcAlignUp({_dim(b.rows, names)} * "
                          f"{_dim(b.cols, names)} * {b.itemsize}, {b.quantum})"
                          + (f" + {b.reserve}" if b.reserve else "")
                          for b in p.buffers) or "0"
        rows = f"PcMax(PcMin({c_expr(p.tiling.rows)}, 255), 1)"
        head = f"    {{   // phase {n}: UB tiling (rows of CP elements, TR rows, at most " \
               f"255; UB {ub} B)"
        isz = pitch_itemsize(p)
        pitch = [] if not isz else [
            "        {   // rows an odd multiple of 256 B apart (the UB bank groups' halves "
            "alternate; bank_pitch)",
            f"            const int64_t pcB = cp * {isz}, pcM = PcCeilDiv(pcB, 256) | 1;",
            f"            if (pcB > 256 && PcCeilDiv(pcB, 32) <= 255 && pcM * 8 <= 255 && "
            f"pcM * 256 * {PITCH_PAD_LIMIT} <= pcB * {PITCH_PAD_LIMIT + 1}) "
            f"{{ cp = pcM * 256 / {isz}; }}",
            "        }"]
        if not p.tiling.long:
            out += [head,
                    f"        int64_t cp = PcAlignUp({c_expr(p.tiling.cols)}, 16);",
                    *pitch,
                    f"        int64_t tr = {rows};"]
        else:       # a row that does not fit: chunks of cw elements (lower_vector.py)
            out += [head,
                    f"        int64_t cp = PcAlignUp({c_expr(p.tiling.cols)}, 16);",
                    *pitch,
                    "        int64_t tr = 1, cw = 0, lr = 0;",
                    f"        if (({need}) > {ub}) {{   // rows in chunks of CW elements",
                    f"            lr = 1; cw = PcMin(cp, {LONG_CHUNK}); cp = 0;",
                    f"            while (cw > 16 && ({need}) > {ub}) {{ "
                    f"cw = PcMax(16, cw / 32 * 16); }}",
                    "        }",
                    f"        tr = {rows};"]
        out += [f"        while (tr > 1 && ({need}) > {ub}) {{ --tr; }}",
                f"        if (({need}) > {ub}) {{ return 0; }}"]
        if k.kind == "aiv":     # the fewest rows on the busiest core (lower_vector.py)
            def rounds(v: str) -> str:
                tiles = c_expr(k.blocks, {"TR": v, "CP": "cp", "CW": "cw"})
                return f"PcCeilDiv({tiles}, static_cast<int64_t>(aivNum))"
            out += ["        {   // balance the row tiles over the vector cores: the fewest",
                    "            // rows per tile that keep the busiest core's tile count",
                    f"            const int64_t pcRounds = {rounds('tr')};",
                    "            while (tr > 1) {",
                    "                const int64_t pcTr1 = tr - 1;",
                    f"                if ({rounds('pcTr1')} != pcRounds) {{ break; }}",
                    "                tr = pcTr1;",
                    "            }",
                    "        }"]
        out += [
                f"        t->TR_{n} = tr; t->CP_{n} = cp; t->TRP_{n} = PcAlignUp(tr, 16);"
                + (f" t->LR_{n} = lr; t->CW_{n} = cw;" if p.tiling.long else ""),
                "    }"]
        if k.kind == "aiv":
            env_names = {v: f"t->{v}_{n}" for v in _tiling_values(p)}
    cores = "aivNum" if k.kind == "aiv" else "aicNum"
    out.append(f"    const int64_t NB = PcMax(1, PcMin(static_cast<int64_t>({cores}), "
               f"{c_expr(k.blocks, env_names)}));")
    out.append("    t->NB = NB;")
    ws = " + ".join(f"PcAlignUp({' * '.join(_dim(d) for d in w.dims)} * {w.itemsize}, 512)"
                    for w in k.workspaces) or "0"
    out.append(f"    *workspaceBytes = static_cast<uint64_t>({ws});")
    out += ["    return static_cast<uint32_t>(NB);", "}",
            f"// {spec.product}: aicNum = {npu_params(target).aic_cores}, aivNum = "
            f"{npu_params(target).aiv_cores}"]
    for q in k.quant_args:
        out += _quant_host(k, q)
    return out + ["#else"]


def _quant_host(k: Kernel, q) -> list[str]:
    """The host conversion of a float32 scale argument to Fixpipe's uint64 quantisation
    parameters (:class:`~.program.QuantArg`; backend.quant_params does the same for the
    simulator): the float's bits in [31:0] (and bit 46 for a signed int8 result of
    VREQ8), zeros up to the padded length; returns false on an inf, NaN or subnormal
    scale."""
    t = next(t for t in k.tensors if t.name == q.name)
    n = _dim(t.view[0]) if t.view else _dim(t.dims[0])
    sign = " | (1ull << 46)" if q.signed else ""
    return ["#include <cstring>",
            f"// host side: {q.name} (float32, {n} scales) -> Fixpipe's quantisation "
            f"parameters ({q.padded} x uint64)",
            f"inline bool {k.name}_QuantParams_{q.name}(const float* scale, int64_t n, "
            f"int64_t padded, uint64_t* out)",
            "{",
            "    for (int64_t j = 0; j < padded; ++j) {",
            "        uint32_t bits = 0;",
            "        if (j < n) { std::memcpy(&bits, &scale[j], sizeof(bits)); }",
            "        const uint32_t e = (bits >> 23) & 0xFFu;",
            "        if (e == 0xFFu || (e == 0u && (bits & 0x7FFFFFu) != 0u)) { return false; }",
            f"        out[j] = j < n ? static_cast<uint64_t>(bits){sign} : 0;",
            "    }",
            "    return true;",
            "}"]


def _globals(k: Kernel) -> list[str]:
    out = []
    for t in k.tensors:
        ct = _CT[t.dtype]
        size = " * ".join(map(str, t.dims)) or "1"
        out += [f"    GlobalTensor<{ct}> g{t.name};",
                f"    g{t.name}.SetGlobalBuffer((__gm__ {ct}*){t.name}_, {size});"]
    if k.workspaces:
        out.append("    GM_ADDR usrWorkspace = GetUserWorkspace(workspace);")
        off = "0"
        for w in k.workspaces:
            ct = _CT[w.dtype]
            size = " * ".join(_dim(d) for d in w.dims)
            out += [f"    GlobalTensor<{ct}> g{w.name};",
                    f"    g{w.name}.SetGlobalBuffer((__gm__ {ct}*)(usrWorkspace + {off}), "
                    f"{size});"]
            off = f"{off} + PcAlignUp({size} * {w.itemsize}, 512)"
    return out


def _core(k: Kernel, core: str, target) -> list[str]:
    ratio = " * GetTaskRatio()" if core == "AIV" and k.kind == "mix" else ""
    out = [f"    if ASCEND_IS_{core} {{",
           f"        const int64_t {BID} = GetBlockIdx();",
           f"        const int64_t {BNUM} = GetBlockNum(){ratio};"]
    if core == "AIV" and k.kind == "mix":
        out.append(f"        const int64_t {SUB} = GetSubBlockIdx();")
    used = False
    for n, ph in enumerate(k.phases):
        p = ph.aic if core == "AIC" else ph.aiv
        if p is None:
            continue
        used = True
        body = [f"        {{   // phase {n} ({ph.label})"]
        if p.core == "AIV" and p.tiling.rows is not None:
            body += [f"            const int64_t {v} = tilingData.{v}_{n};"
                     for v in _tiling_values(p)]
        body += _program(p, target, "            ")
        out += body + ["        }"]
    out.append("    }")
    return out if used else []


def print_module(m: NpuModule, target) -> str:
    """The source of ``m`` (what ``emit`` returns)."""
    return print_kernel(m.program, target)


def print_kernel(k: Kernel, target) -> str:
    spec = npu_spec(target)
    name = k.name
    fields = _tiling_fields(k)
    args = [*(t.name for t in k.tensors)]
    out = [f"// Generated by polycomp: kernel {name} for {spec.product}",
           f"// (__NPU_ARCH__ {spec.arch}, target {target.name}); static-tensor Ascend C, "
           f"see docs/npu.md",
           '#include "kernel_operator.h"', "using namespace AscendC;", "",
           "__aicore__ inline int64_t PcCeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }",
           "__aicore__ inline int64_t PcAlignUp(int64_t a, int64_t b) "
           "{ return (a + b - 1) / b * b; }",
           "__aicore__ inline int64_t PcMin(int64_t a, int64_t b) { return a < b ? a : b; }",
           "__aicore__ inline int64_t PcMax(int64_t a, int64_t b) { return a > b ? a : b; }",
           "",
           "// the tiling data: written by the host tiling function, read by the kernel",
           f"struct {name}_TilingData {{",
           *(f"    int64_t {f};" for f in fields), "};", ""]
    out += _host(k, target)
    out += [f"extern \"C\" __global__ __aicore__ void {name}("
            + "".join(f"GM_ADDR {a}_, " for a in args) + "GM_ADDR workspace, GM_ADDR tiling)",
            "{",
            f"    KERNEL_TASK_TYPE_DEFAULT({_KTYPE[k.kind]});",
            f"    GET_TILING_DATA_WITH_STRUCT({name}_TilingData, tilingData, tiling);",
            "    InitSocState();"]
    out += [f"    const int64_t {s} = tilingData.{s};" for s in k.size_names]
    out.append("    const int64_t NB = tilingData.NB;")
    out += _globals(k)
    for core in ("AIC", "AIV"):
        out += _core(k, core, target)
    out += ["    PipeBarrier<PIPE_ALL>();", "}", "#endif"]
    return "\n".join(out) + "\n"


__all__ = ["print_module", "print_kernel", "c_expr", "c_slot", "GlobalTensor"]
