"""The text form of the NPU IR (``str(module)``): what ``polycomp explain -t npu`` and
``--dump-dir`` show after ``npu-lower`` and each NPU IR pass, and what the golden tests
compare.  One line per instruction, its pipe first; loops indent their bodies.  (The
Ascend C-style source is the printer's, :mod:`.printer`.)"""
from __future__ import annotations

from .program import (
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
)

_INFIX = {"+": "+", "-": "-", "*": "*", "floordiv": "//", "mod": "%", "==": "==",
          "and": "and"}


def ix_text(e: Ix) -> str:
    op, a = e.op, e.args
    if op == "const":
        return str(a[0])
    if op == "var":
        return str(a[0])
    x, y = ix_text(a[0]), ix_text(a[1])
    if op in ("ceildiv", "min"):
        return f"{op}({x}, {y})"
    wrap = [f"({t})" if s.op not in ("const", "var", "ceildiv", "min") else t
            for s, t in ((a[0], x), (a[1], y))]
    return f"{wrap[0]} {_INFIX[op]} {wrap[1]}"


def _slot(s: Slot) -> str:
    if s.buf.copies == 1 and s.index.op == "const" and s.index.args[0] == 0:
        return s.buf.name
    return f"{s.buf.name}[{ix_text(s.index)}]"


def _box(r: GmRegion) -> str:
    dims = ", ".join(f"{ix_text(o)} +: {ix_text(e)}" for o, e in zip(r.offsets, r.extents))
    extra = f"; split {r.split}" if r.split != 1 else ""
    if r.row_stride is not None:
        extra += f"; row stride {ix_text(r.row_stride)}"
    return f"{r.tensor.name}[{dims}{extra}]"


def _operand(x) -> str:
    if isinstance(x, Slot):
        return _slot(x)
    if isinstance(x, Ix):
        return ix_text(x)
    return repr(float(x))


def _instr(s, ind: str) -> list[str]:
    if isinstance(s, Loop):
        return [f"{ind}for {s.var} < {ix_text(s.extent)}:",
                *(line for x in s.body for line in _instr(x, ind + "  "))]
    if isinstance(s, SetFlag):
        return [f"{ind}{s.pipe:4s} set_flag {s.src_pipe}->{s.dst_pipe} {ix_text(s.event)}"]
    if isinstance(s, WaitFlag):
        return [f"{ind}{s.pipe:4s} wait_flag {s.src_pipe}->{s.dst_pipe} {ix_text(s.event)}"]
    if isinstance(s, CopyIn):
        return [f"{ind}{s.pipe:4s} copy_in {_slot(s.dst)} <- {_box(s.src)}"]
    if isinstance(s, CopyIm2Col):
        g = s.geom
        return [f"{ind}{s.pipe:4s} im2col {_slot(s.dst)} <- {s.src.name}[{ix_text(s.n)}] "
                f"k {ix_text(s.k0)} +: {ix_text(s.k_ext)}, p {ix_text(s.p0)} +: "
                f"{ix_text(s.p_ext)}; window {ix_text(g.kh)}x{ix_text(g.kw)} stride "
                f"{g.sh},{g.sw} pad {g.ph},{g.pw} dilation {g.dh},{g.dw} ow {ix_text(g.ow)}"]
    if isinstance(s, Load2D):
        return [f"{ind}{s.pipe:4s} load2d {_slot(s.dst)} <- {_slot(s.src)} at fractal "
                f"{ix_text(s.k_offset)}"]
    if isinstance(s, Mmad):
        return [f"{ind}{s.pipe:4s} mmad {_slot(s.c)} += {_slot(s.a)} x {_slot(s.b)} "
                f"(init when {ix_text(s.init)})"]
    if isinstance(s, CopyOut):
        return [f"{ind}{s.pipe:4s} copy_out {_box(s.dst)} <- {_slot(s.src)}"]
    if isinstance(s, CopyLocal):
        return [f"{ind}{s.pipe:4s} copy {_slot(s.dst)} <- {_slot(s.src)}"]
    if isinstance(s, VecOp):
        return [f"{ind}{s.pipe:4s} {s.op} {_slot(s.dst)} <- "
                f"{', '.join(_operand(x) for x in s.srcs)}; rows {ix_text(s.rows)}"]
    raise TypeError(type(s).__name__)


def _tensor(t: GlobalTensor) -> str:
    view = f" as ({', '.join(map(str, t.view))})" if t.view is not None else ""
    return f"{t.name}: {t.dtype}({', '.join(map(str, t.dims))}){view}" + \
        (" out" if t.is_output else "")


def _buffer(b: LocalBuf) -> str:
    return (f"{b.name}: {b.level} {b.dtype} {b.rows}x{b.cols} {b.layout}"
            + (f" x{b.copies}" if b.copies > 1 else "") + (" pingpong" if b.pingpong else ""))


def program_text(p: Program, ind: str = "") -> list[str]:
    out = [f"{ind}program {p.name} ({p.kind})",
           f"{ind}  tensors: " + ", ".join(_tensor(t) for t in p.tensors)]
    if p.workspaces:
        out.append(f"{ind}  workspaces: " + ", ".join(_tensor(t) for t in p.workspaces))
    t = p.tiling
    tiling = [f"{k}={v}" for k, v in t.tiles] + [f"{k}={ix_text(v)}" for k, v in t.derived]
    if t.rows is not None and t.cols is not None:
        tiling += [f"rows {ix_text(t.rows)}", f"row length {ix_text(t.cols)}"]
    if tiling:
        out.append(f"{ind}  tiling: " + ", ".join(tiling))
    if p.buffers:
        out.append(f"{ind}  buffers:")
        out += [f"{ind}    {_buffer(b)}" for b in p.buffers]
    for k, ph in enumerate(p.phases):
        out.append(f"{ind}  phase {k}:")
        out += program_text(ph, ind + "    ")
    if p.body:
        out.append(f"{ind}  body:")
        for s in p.body:
            out += _instr(s, ind + "    ")
    return out


def module_text(m: NpuModule) -> str:
    from polycomp.lowering.printer import expr_str

    def buf(b) -> str:
        shape = ", ".join(expr_str(d) for d in b.shape)
        return f"{b.name}: {b.dtype}[{shape}]"
    sig = (f"npu.module {m.name}({', '.join(p.name for p in m.params)}; "
           f"{', '.join(buf(b) for b in m.inputs)} -> {', '.join(buf(b) for b in m.outputs)})")
    return "\n".join([sig, *program_text(m.program)]) + "\n"
