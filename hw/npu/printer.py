"""Ascend C-style source printed from an NPU :class:`~polycomp.hw.npu.program.Program`
(the object the simulator runs): one ``__aicore__`` kernel with ``GlobalTensor``
arguments, ``LocalTensor`` buffers at the simulator's addresses, the instruction body
with its loops, and the host-side tiling data as a struct."""
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
    Program,
    SetFlag,
    VecOp,
    WaitFlag,
    ix,
)

_CT = {"float16": "half", "float32": "float"}
_POS = {"L1": "A1", "L0A": "A2", "L0B": "B2", "L0C": "CO1", "UB": "VECCALC"}


def _linear(r: GmRegion) -> Ix:
    off: Ix = ix(0)
    for d, o in zip(r.tensor.dims, r.offsets):
        off = off * ix(d) + o if isinstance(d, str) else off * d + o
    return off


def _rows_cols(r: GmRegion, b: LocalBuf) -> tuple[str, str]:
    """Rows and columns of a box as C: its leading extents flattened are the rows, its
    last ``split`` extents the columns (extent-1 dimensions left out)."""
    def prod(exts) -> str:
        parts = [e.c() for e in exts if not (e.op == "const" and e.args[0] == 1)]
        return " * ".join(parts) if parts else "1"
    cut = len(r.extents) - r.split
    return prod(r.extents[:cut]), prod(r.extents[cut:])


def _dims_product(t: GlobalTensor) -> str:
    return " * ".join(map(str, t.dims)) or "1"


def _instr(s, ind: str) -> list[str]:
    if isinstance(s, Loop):
        out = [f"{ind}for (int64_t {s.var} = 0; {s.var} < {s.extent.c()}; ++{s.var}) {{"]
        for x in s.body:
            out += _instr(x, ind + "    ")
        return out + [f"{ind}}}"]
    if isinstance(s, (SetFlag, WaitFlag)):
        return [f"{ind}{type(s).__name__}<HardEvent::{s.src_pipe}_{s.dst_pipe}>"
                f"({s.event.c()});"]
    if isinstance(s, CopyIn):
        b, r = s.dst.buf, s.src
        rows, cols = _rows_cols(r, b)
        stride = r.stride().c()
        src = f"g{r.tensor.name}[{_linear(r).c()}]"
        if b.level == "L1":
            return [f"{ind}DataCopy({s.dst.c()}, {src}, Nd2NzParams{{(uint32_t){rows}, "
                    f"(uint32_t){cols}, (uint32_t){stride}, (uint32_t){b.rows}, "
                    f"(uint32_t){b.cols}}});"]
        return [f"{ind}DataCopyPad({s.dst.c()}, {src}, DataCopyPadParams{{(uint32_t){rows}, "
                f"(uint32_t){cols}, (uint32_t){stride}, (uint32_t){b.cols}}});"]
    if isinstance(s, CopyIm2Col):
        g, d = s.geom, s.dst.buf
        img = " * ".join(str(x) for x in s.src.dims[1:])
        return [f"{ind}DataCopy({s.dst.c()}, g{s.src.name}[{s.n.c()} * {img}], Im2ColParams{{"
                f"(uint32_t)({s.k0.c()}), (uint32_t){s.k_ext.c()}, (uint32_t)({s.p0.c()}), "
                f"(uint32_t){s.p_ext.c()}, (uint32_t){s.src.dims[2]}, "
                f"(uint32_t){s.src.dims[3]}, (uint32_t){g.kh.c()}, (uint32_t){g.kw.c()}, "
                f"(uint32_t){g.ow.c()}, {g.sh}, {g.sw}, {g.ph}, {g.pw}, {g.dh}, {g.dw}, "
                f"(uint32_t){d.rows}, (uint32_t){d.cols}}});"]
    if isinstance(s, Load2D):
        d = s.dst.buf
        rep = (d.rows // 16) * (d.cols // 16)
        return [f"{ind}LoadData({s.dst.c()}, {s.src.c()}, LoadData2DParams{{"
                f"(uint32_t)({s.k_offset.c()}), {rep}, {str(d.level == 'L0B').lower()}}});"]
    if isinstance(s, Mmad):
        return [f"{ind}Mmad({s.c.c()}, {s.a.c()}, {s.b.c()}, MmadParams{{{s.a.buf.rows}, "
                f"{s.b.buf.cols}, {s.a.buf.cols}, (bool)({s.init.c()})}});"]
    if isinstance(s, CopyOut):
        r, b = s.dst, s.src.buf
        dst = f"g{r.tensor.name}[{_linear(r).c()}]"
        rows, cols = _rows_cols(r, b)
        args = f"(uint32_t){rows}, (uint32_t){cols}"
        if s.pipe == "FIX":
            return [f"{ind}Fixpipe({dst}, {s.src.c()}, FixpipeParams{{{args}, (uint32_t){b.rows}, "
                    f"(uint32_t){r.stride().c()}}});"]
        return [f"{ind}DataCopyPad({dst}, {s.src.c()}, DataCopyPadParams{{{args}, "
                f"(uint32_t){b.cols}, "
                f"(uint32_t){r.stride().c()}}});"]
    if isinstance(s, CopyLocal) and s.pipe == "MTE3":     # UB -> L1 (nd2nz)
        d = s.dst.buf
        return [f"{ind}DataCopy({s.dst.c()}, {s.src.c()}, Nd2NzParams{{(uint32_t){d.rows}, "
                f"(uint32_t){d.cols}, (uint32_t){s.src.buf.cols}, (uint32_t){d.rows}, "
                f"(uint32_t){d.cols}}});"]
    if isinstance(s, CopyLocal):
        d = s.dst.buf
        return [f"{ind}Fixpipe({s.dst.c()}, {s.src.c()}, FixpipeParams{{(uint32_t){d.rows}, "
                f"(uint32_t){d.cols}, (uint32_t){s.src.buf.rows}, (uint32_t){d.cols}}});"]
    if isinstance(s, VecOp):
        srcs = ", ".join(x.c() if hasattr(x, "c") else _scalar(x) for x in s.srcs)
        return [f"{ind}{s.op}({s.dst.c()}, {srcs}, (uint32_t)({s.rows.c()}));"]
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
    if p.kind == "cube":
        return "// host-side tiling data: the sizes; constant tiles " + \
            ", ".join(f"{k}={v}" for k, v in p.tiling.items() if k != "derived") + \
            "".join(f"; {k} = {v.c()}" for k, v in p.derived.items())
    return (f"// host-side tiling data: the sizes, TR rows of {p.tiling['rows'].c()} per UB "
            f"tile, rows of {p.tiling['cols'].c()} padded to CP elements"
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
