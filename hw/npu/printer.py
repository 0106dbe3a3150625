"""Ascend C-style source printed from the NPU IR (:class:`~polycomp.hw.npu.program.NpuModule`,
``CompiledKernel.final_ir``, the object the simulator runs): one ``__aicore__`` kernel
with ``GlobalTensor`` arguments, ``LocalTensor`` buffers at the simulator's addresses,
the instruction body with its loops, and the host-side tiling data as a struct.

Every piece of source text of the NPU targets is made here: index expressions
(:func:`c_expr`), buffer slots, instructions, declarations."""
from __future__ import annotations

from polycomp.hw.npu.program import (
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
    NpuModule,
    Program,
    SetFlag,
    Slot,
    VecOp,
    WaitFlag,
    ix,
)

_CT = {"float16": "half", "float32": "float"}
_POS = {"L1": "A1", "L0A": "A2", "L0B": "B2", "L0C": "CO1", "UB": "VECCALC"}
_C_OPS = {"+": "+", "-": "-", "*": "*", "floordiv": "/", "mod": "%", "==": "==", "and": "&&"}
_C_FUNCS = {"ceildiv": "CeilDiv", "min": "Min"}


def c_expr(e: Ix) -> str:
    """An index expression as C (``CeilDiv``/``Min`` from the API header)."""
    op, a = e.op, e.args
    if op == "const":
        return str(a[0])
    if op == "var":
        return a[0]
    x, y = c_expr(a[0]), c_expr(a[1])
    if op in _C_FUNCS:
        return f"{_C_FUNCS[op]}({x}, {y})"
    return f"({x} {_C_OPS[op]} {y})"


def c_slot(s: Slot) -> str:
    """A buffer copy as C: the buffer, or the array element of its copy."""
    if s.buf.copies == 1:
        return s.buf.name
    return f"{s.buf.name}[{c_expr(s.index)}]"


def _linear(r: GmRegion) -> Ix:
    off: Ix = ix(0)
    for d, o in zip(r.tensor.dims, r.offsets):
        off = off * ix(d) + o if isinstance(d, str) else off * d + o
    return off


def _rows_cols(r: GmRegion, b: LocalBuf) -> tuple[str, str]:
    """Rows and columns of a box as C: its leading extents flattened are the rows, its
    last ``split`` extents the columns (extent-1 dimensions left out)."""
    def prod(exts) -> str:
        parts = [c_expr(e) for e in exts if not (e.op == "const" and e.args[0] == 1)]
        return " * ".join(parts) if parts else "1"
    cut = len(r.extents) - r.split
    return prod(r.extents[:cut]), prod(r.extents[cut:])


def _dims_product(t: GlobalTensor) -> str:
    return " * ".join(map(str, t.dims)) or "1"


def _instr(s, ind: str) -> list[str]:
    if isinstance(s, Loop):
        out = [f"{ind}for (int64_t {s.var} = 0; {s.var} < {c_expr(s.extent)}; ++{s.var}) {{"]
        for x in s.body:
            out += _instr(x, ind + "    ")
        return out + [f"{ind}}}"]
    if isinstance(s, (SetFlag, WaitFlag)):
        return [f"{ind}{type(s).__name__}<HardEvent::{s.src_pipe}_{s.dst_pipe}>"
                f"({c_expr(s.event)});"]
    if isinstance(s, CopyIn):
        b, r = s.dst.buf, s.src
        rows, cols = _rows_cols(r, b)
        stride = c_expr(r.stride())
        src = f"g{r.tensor.name}[{c_expr(_linear(r))}]"
        if b.level == "L1":
            return [f"{ind}DataCopy({c_slot(s.dst)}, {src}, Nd2NzParams{{(uint32_t){rows}, "
                    f"(uint32_t){cols}, (uint32_t){stride}, (uint32_t){b.rows}, "
                    f"(uint32_t){b.cols}}});"]
        return [f"{ind}DataCopyPad({c_slot(s.dst)}, {src}, DataCopyPadParams{{(uint32_t){rows}, "
                f"(uint32_t){cols}, (uint32_t){stride}, (uint32_t){b.cols}}});"]
    if isinstance(s, CopyIm2Col):
        g, d = s.geom, s.dst.buf
        img = " * ".join(str(x) for x in s.src.dims[1:])
        return [f"{ind}DataCopy({c_slot(s.dst)}, g{s.src.name}[{c_expr(s.n)} * {img}], "
                f"Im2ColParams{{(uint32_t)({c_expr(s.k0)}), (uint32_t){c_expr(s.k_ext)}, "
                f"(uint32_t)({c_expr(s.p0)}), (uint32_t){c_expr(s.p_ext)}, "
                f"(uint32_t){s.src.dims[2]}, (uint32_t){s.src.dims[3]}, "
                f"(uint32_t){c_expr(g.kh)}, (uint32_t){c_expr(g.kw)}, "
                f"(uint32_t){c_expr(g.ow)}, {g.sh}, {g.sw}, {g.ph}, {g.pw}, {g.dh}, {g.dw}, "
                f"(uint32_t){d.rows}, (uint32_t){d.cols}}});"]
    if isinstance(s, Load2D):
        d = s.dst.buf
        rep = (d.rows // 16) * (d.cols // 16)
        return [f"{ind}LoadData({c_slot(s.dst)}, {c_slot(s.src)}, LoadData2DParams{{"
                f"(uint32_t)({c_expr(s.k_offset)}), {rep}, {str(d.level == 'L0B').lower()}}});"]
    if isinstance(s, Mmad):
        return [f"{ind}Mmad({c_slot(s.c)}, {c_slot(s.a)}, {c_slot(s.b)}, "
                f"MmadParams{{{s.a.buf.rows}, {s.b.buf.cols}, {s.a.buf.cols}, "
                f"(bool)({c_expr(s.init)})}});"]
    if isinstance(s, CopyOut):
        r, b = s.dst, s.src.buf
        dst = f"g{r.tensor.name}[{c_expr(_linear(r))}]"
        rows, cols = _rows_cols(r, b)
        args = f"(uint32_t){rows}, (uint32_t){cols}"
        if s.pipe == "FIX":
            return [f"{ind}Fixpipe({dst}, {c_slot(s.src)}, FixpipeParams{{{args}, "
                    f"(uint32_t){b.rows}, (uint32_t){c_expr(r.stride())}}});"]
        return [f"{ind}DataCopyPad({dst}, {c_slot(s.src)}, DataCopyPadParams{{{args}, "
                f"(uint32_t){b.cols}, "
                f"(uint32_t){c_expr(r.stride())}}});"]
    if isinstance(s, CopyLocal) and s.pipe == "MTE3":     # UB -> L1 (nd2nz)
        d = s.dst.buf
        return [f"{ind}DataCopy({c_slot(s.dst)}, {c_slot(s.src)}, Nd2NzParams{{(uint32_t){d.rows}, "
                f"(uint32_t){d.cols}, (uint32_t){s.src.buf.cols}, (uint32_t){d.rows}, "
                f"(uint32_t){d.cols}}});"]
    if isinstance(s, CopyLocal):
        d = s.dst.buf
        return [f"{ind}Fixpipe({c_slot(s.dst)}, {c_slot(s.src)}, FixpipeParams{{"
                f"(uint32_t){d.rows}, (uint32_t){d.cols}, (uint32_t){s.src.buf.rows}, "
                f"(uint32_t){d.cols}}});"]
    if isinstance(s, VecOp):
        srcs = ", ".join(c_slot(x) if isinstance(x, Slot) else c_expr(x) if isinstance(x, Ix)
                         else _scalar(x) for x in s.srcs)
        return [f"{ind}{s.op}({c_slot(s.dst)}, {srcs}, (uint32_t)({c_expr(s.rows)}));"]
    raise TypeError(type(s).__name__)


def _scalar(x) -> str:
    v = float(x)
    if v != v:
        return "NAN"
    if v in (float("inf"), float("-inf")):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(v)


def _buffer(b: LocalBuf, addr: str) -> str:
    t, n = _CT[b.dtype], f"{b.rows} * {b.cols}"
    size = f"{n} * {b.itemsize}"
    allocs = ", ".join(
        f"AllocLocal<{t}>(TPosition::{_POS[b.level]}, {addr}{f' + {k} * {size}' if k else ''}, "
        f"{n})" for k in range(b.copies))
    if b.copies == 1:
        return f"    LocalTensor<{t}> {b.name} = {allocs};  // {b.level}, {b.layout}"
    return (f"    LocalTensor<{t}> {b.name}[{b.copies}] = {{{allocs}}};  "
            f"// {b.level}, {b.layout}, ping-pong")


def _addresses(p: Program, target) -> tuple[dict[str, str], list[str]]:
    """Each buffer's address as C — a number where every size is a constant (the
    simulator's allocation), else a named constant computed from the tiling values —
    and the declarations of those constants."""
    if all(isinstance(v, int) for b in p.buffers for v in (b.rows, b.cols)):
        from .sim import allocate
        return {k: str(a) for k, (_, a) in allocate(p, target).items()}, []
    tops: dict[str, str] = {}
    out, decls = {}, []
    for b in p.buffers:
        align = max(target.memory.level(b.level).alignment, 32)
        name = f"{b.name}_addr"
        decls.append(f"    const uint32_t {name} = AlignUp({tops.get(b.level, '0')}, {align});")
        out[b.name] = name
        tops[b.level] = f"{name} + {b.copies} * {b.rows} * {b.cols} * {b.itemsize}"
    return out, decls


def _tiling_comment(p: Program) -> str:
    t = p.tiling
    if p.kind == "cube":
        return "// host-side tiling data: the sizes; constant tiles " + \
            ", ".join(f"{k}={v}" for k, v in t.tiles) + \
            "".join(f"; {k} = {c_expr(v)}" for k, v in t.derived)
    assert t.rows is not None and t.cols is not None
    return (f"// host-side tiling data: the sizes, TR rows of {c_expr(t.rows)} per UB "
            f"tile, rows of {c_expr(t.cols)} padded to CP elements"
            + (", TRP = TR padded to 16" if any(b.cols == "TRP" for b in p.buffers) else ""))


def _host_sizes(p: Program) -> tuple[str, ...]:
    if p.kind != "vector":
        return ()
    return ("TR", "CP", "TRP") if any(b.cols == "TRP" for b in p.buffers) else ("TR", "CP")


def _globals(tensors) -> list[str]:
    out = []
    for t in tensors:
        ct = _CT[t.dtype]
        out += [f"    GlobalTensor<{ct}> g{t.name};",
                f"    g{t.name}.SetGlobalBuffer((__gm__ {ct}*){t.name}_, {_dims_product(t)});"]
    return out


def _locals_and_body(p: Program, target) -> list[str]:
    addresses, decls = _addresses(p, target)
    out = list(decls)
    out += [_buffer(b, addresses[b.name]) for b in p.buffers]
    for s in p.body:
        out += _instr(s, "    ")
    return out


def _phased(p: Program, target) -> list[str]:
    """The phases in order, each in its own scope with its own buffers and tiling
    values, separated by barriers of every pipe."""
    out: list[str] = []
    for k, ph in enumerate(p.phases):
        inner = [f"    const int64_t {s} = tiling->{s}_{k};" for s in _host_sizes(ph)]
        inner += _locals_and_body(ph, target)
        out += [f"    {{  // phase {k}: {ph.kind}", *("    " + x for x in inner), "    }"]
        if k + 1 < len(p.phases):
            out.append("    PipeBarrier<PIPE_ALL>();")
    return out


def print_module(m: NpuModule, target) -> str:
    """The source of ``m`` (what ``emit`` returns)."""
    return print_program(m.program, target)


def print_program(p: Program, target) -> str:
    phased = p.kind == "phased"
    sizes = p.size_names + (tuple(f"{s}_{k}" for k, ph in enumerate(p.phases)
                                  for s in _host_sizes(ph)) if phased else _host_sizes(p))
    args = (*p.tensors, *p.workspaces)
    comment = ("// host-side tiling data: the sizes; per vector phase k: TR_k rows per UB "
               "tile, CP_k padded row length (TRP_k); workspaces: GM tensors between "
               "phases" if phased else _tiling_comment(p))
    out = ["// Generated by polycomp for an Ascend-style AI core (target npu); see docs/npu.md",
           '#include "polycomp_npu.h"', "using namespace AscendC;", "",
           comment,
           f"struct {p.name}_tiling {{ " + " ".join(f"int64_t {s};" for s in sizes) + " };",
           "",
           f"extern \"C\" __global__ __aicore__ void {p.name}("
           + ", ".join(f"GM_ADDR {t.name}_" for t in args) + ", GM_ADDR tiling_) {",
           f"    const {p.name}_tiling* tiling = "
           f"reinterpret_cast<const {p.name}_tiling*>(tiling_);"]
    out += [f"    const int64_t {s} = tiling->{s};" for s in p.size_names]
    if not phased:
        out += [f"    const int64_t {s} = tiling->{s};" for s in _host_sizes(p)]
    out += _globals(args)
    out += _phased(p, target) if phased else _locals_and_body(p, target)
    out.append("}")
    return "\n".join(out) + "\n"
