"""The text form of the NPU IR (``str(module)``): what ``polycomp explain -t npu`` and
``--dump-dir`` show after ``npu-lower`` and each NPU IR pass, and what the golden tests
compare.  One line per instruction, its pipe first; loops indent their bodies; API
calls show their parameters by name.  (The Ascend C source is the printer's,
:mod:`.printer`.)"""
from __future__ import annotations

from dataclasses import fields

from .program import (
    API,
    Barrier,
    CopyIm2Col,
    CopyIn,
    CopyOut,
    CrossSet,
    CrossWait,
    GlobalTensor,
    GmRef,
    GmRegion,
    Ix,
    Kernel,
    Let,
    Load2D,
    LocalBuf,
    Loop,
    Mmad,
    NpuModule,
    Program,
    Rep,
    Scalar,
    SetFlag,
    Slot,
    VecCall,
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
    if op in ("ceildiv", "min", "max"):
        return f"{op}({x}, {y})"
    wrap = [f"({t})" if s.op not in ("const", "var", "ceildiv", "min", "max") else t
            for s, t in ((a[0], x), (a[1], y))]
    return f"{wrap[0]} {_INFIX[op]} {wrap[1]}"


def _slot(s: Slot) -> str:
    out = s.buf.name
    if not (s.buf.copies == 1 and s.index.is_const(0)):
        out += f"[{ix_text(s.index)}]"
    if not s.offset.is_const(0):
        out += f"@{ix_text(s.offset)}"
    return out


def _box(r: GmRegion) -> str:
    dims = ", ".join(f"{ix_text(o)} +: {ix_text(e)}" for o, e in zip(r.offsets, r.extents))
    extra = f"; split {r.split}" if r.split != 1 else ""
    if r.row_stride is not None:
        extra += f"; row stride {ix_text(r.row_stride)}"
    return f"{r.tensor.name}[{dims}{extra}]"


def _operand(x) -> str:
    if isinstance(x, Slot):
        return _slot(x)
    if isinstance(x, GmRef):
        return f"{x.tensor.name}@{ix_text(x.offset)}"
    if isinstance(x, Ix):
        return ix_text(x)
    if isinstance(x, Scalar):
        v = ix_text(x.value) if isinstance(x.value, Ix) else repr(float(x.value))
        v = f"1/{v}" if x.inv else v
        return f"-{v}" if x.neg else v
    return repr(float(x))


def _api(s) -> str:
    """An API call with its parameters by name."""
    name = type(s).__name__
    if isinstance(s, VecCall):
        name = s.api + (f"<{s.attr}>" if s.attr else "")
        args = [_operand(s.dst), *(_operand(x) for x in s.srcs)]
        if s.count is not None:
            args.append(f"count {ix_text(s.count)}")
        if s.rep is not None:
            r: Rep = s.rep
            st = " ".join(f"{ix_text(b)}/{ix_text(p)}" for b, p in r.strides)
            args.append(f"mask {ix_text(r.mask)} x{ix_text(r.repeat)} strides {st}")
        return f"{name} {', '.join(args)}"
    parts = []
    for f in fields(s):
        v = getattr(s, f.name)
        if f.name == "pipe" or (v is None and f.default is None) or \
                (v is False and f.default is False):                  # an unset option
            continue
        if isinstance(v, (Slot, GmRef, Ix, Scalar)):
            parts.append(f"{f.name}={_operand(v)}")
        elif isinstance(v, tuple) and v and isinstance(v[0], Ix):
            parts.append(f"{f.name}=[{', '.join(ix_text(x) for x in v)}]")
        else:
            parts.append(f"{f.name}={v}")
    return f"{name} {' '.join(parts)}"


def _instr(s, ind: str) -> list[str]:
    if isinstance(s, Loop):
        start = "" if s.start.is_const(0) else f"{ix_text(s.start)} +: "
        return [f"{ind}for {s.var} < {start}{ix_text(s.extent)}:",
                *(line for x in s.body for line in _instr(x, ind + "  "))]
    if isinstance(s, Let):
        return [f"{ind}S    {s.var} = {ix_text(s.value)}"]
    if isinstance(s, SetFlag):
        return [f"{ind}{s.pipe:4s} set_flag {s.src_pipe}->{s.dst_pipe} {ix_text(s.event)}"]
    if isinstance(s, WaitFlag):
        return [f"{ind}{s.pipe:4s} wait_flag {s.src_pipe}->{s.dst_pipe} {ix_text(s.event)}"]
    if isinstance(s, Barrier):
        return [f"{ind}{s.pipe:4s} pipe_barrier"]
    if isinstance(s, CrossSet):
        return [f"{ind}{s.pipe:4s} cross_set mode {s.mode} flag {ix_text(s.flag)}"]
    if isinstance(s, CrossWait):
        return [f"{ind}S    cross_wait mode {s.mode} flag {ix_text(s.flag)}"]
    if isinstance(s, CopyIn):
        return [f"{ind}{s.pipe:4s} copy_in {_slot(s.dst)} <- {_box(s.src)}"]
    if isinstance(s, CopyIm2Col):
        g = s.geom
        return [f"{ind}{s.pipe:4s} im2col {_slot(s.dst)} <- {_slot(s.src)} "
                f"image {ix_text(s.h)}x{ix_text(s.w)}x{ix_text(s.channels)} "
                f"k {ix_text(s.k0)} +: {ix_text(s.k_ext)}, p {ix_text(s.p0)} +: "
                f"{ix_text(s.p_ext)}; window {ix_text(g.kh)}x{ix_text(g.kw)} stride "
                f"{g.sh},{g.sw} pad {g.ph},{g.pw} dilation {g.dh},{g.dw}"]
    if isinstance(s, Load2D):
        return [f"{ind}{s.pipe:4s} load2d {_slot(s.dst)} <- {_slot(s.src)} k "
                f"{ix_text(s.k_offset)} +: {ix_text(s.k_ext)}"]
    if isinstance(s, Mmad):
        return [f"{ind}{s.pipe:4s} mmad {_slot(s.c)} += {_slot(s.a)} x {_slot(s.b)} "
                f"(init when {ix_text(s.init)}; k {ix_text(s.k)})"]
    if isinstance(s, CopyOut):
        return [f"{ind}{s.pipe:4s} copy_out {_box(s.dst)} <- {_slot(s.src)}"]
    if isinstance(s, VecOp):
        return [f"{ind}{s.pipe:4s} {s.op} {_slot(s.dst)} <- "
                f"{', '.join(_operand(x) for x in s.srcs)}; rows {ix_text(s.rows)}"]
    if isinstance(s, API):
        return [f"{ind}{s.pipe:4s} {_api(s)}"]
    raise TypeError(type(s).__name__)


def _tensor(t: GlobalTensor) -> str:
    view = f" as ({', '.join(map(str, t.view))})" if t.view is not None else ""
    return f"{t.name}: {t.dtype}({', '.join(map(str, t.dims))}){view}" + \
        (" out" if t.is_output else "")


def _buffer(b: LocalBuf) -> str:
    return (f"{b.name}: {b.level} {b.dtype} {b.rows}x{b.cols} {b.layout}"
            + (f" x{b.copies}" if b.copies > 1 else "") + (" pingpong" if b.pingpong else "")
            + (f" bank+{b.bank_phase}" if b.bank_phase is not None else ""))


def program_text(p: Program, ind: str = "") -> list[str]:
    out = [f"{ind}{p.core} program {p.name}"]
    t = p.tiling
    if t.rows is not None and t.cols is not None:
        out.append(f"{ind}  tiling: rows {ix_text(t.rows)}, row length {ix_text(t.cols)}")
    if p.buffers:
        out.append(f"{ind}  buffers:")
        out += [f"{ind}    {_buffer(b)}" for b in p.buffers]
    if p.body:
        out.append(f"{ind}  body:")
        for s in p.body:
            out += _instr(s, ind + "    ")
    return out


def kernel_text(k: Kernel) -> list[str]:
    out = [f"kernel {k.name} ({k.kind}; blocks {ix_text(k.blocks)})",
           "  tensors: " + ", ".join(_tensor(t) for t in k.tensors)]
    if k.workspaces:
        out.append("  workspaces: " + ", ".join(_tensor(t) for t in k.workspaces))
    t = k.tiling
    tiling = [f"{a}={v}" for a, v in t.tiles] + [f"{a}={ix_text(v)}" for a, v in t.derived]
    if tiling:
        out.append("  tiling: " + ", ".join(tiling))
    for n, ph in enumerate(k.phases):
        out.append(f"  phase {n} ({ph.label}):")
        for p in ph.programs:
            out += program_text(p, "    ")
    return out


def module_text(m: NpuModule) -> str:
    from polycomp.lowering.printer import expr_str

    def buf(b) -> str:
        shape = ", ".join(expr_str(d) for d in b.shape)
        return f"{b.name}: {b.dtype}[{shape}]"
    sig = (f"npu.module {m.name}({', '.join(p.name for p in m.params)}; "
           f"{', '.join(buf(b) for b in m.inputs)} -> {', '.join(buf(b) for b in m.outputs)})")
    return "\n".join([sig, *kernel_text(m.program)]) + "\n"
