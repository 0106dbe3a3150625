"""The NPU-level IR: typed instructions on typed buffers.

The lowering stage ``npu-lower`` (:mod:`.lower`) turns a kernel's lowered function and
the typed plans its schedule passes recorded into one :class:`NpuModule`; the NPU IR
passes (:mod:`.passes`: double buffering, flag placement) rewrite it; it is
``CompiledKernel.final_ir``: the simulator (:mod:`.sim`) executes it and the printer
(:mod:`.printer`) prints it as Ascend C-style source — the same object, not a
re-derivation.  ``str(module)`` is its text form (:mod:`.ir_text`), which
``polycomp explain`` and ``--dump-dir`` show after each step.

* Index expressions (:class:`Ix`) are small integer expressions over loop variables and
  the host-side tiling data (the kernel's sizes), evaluable; the printer prints them
  as C.
* :class:`LocalBuf` is an on-chip buffer at one level, with its element type, its
  logical 2-d tile shape, its layout (``ND``; ``NZ``/``zZ``/``nZ`` fractal), its
  number of copies and whether it may be double-buffered.  :class:`Slot` is one copy,
  chosen by an expression.
* Instructions name their pipe; flags order pipes (``SetFlag``/``WaitFlag``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Union

# --------------------------------------------------------------------------- Ix


@dataclass(frozen=True)
class Ix:
    """An integer expression: ``op`` in const/var/+/-/*/floordiv/ceildiv/mod/min/==/and."""
    op: str
    args: tuple = ()

    def __add__(self, o: IxLike) -> Ix:
        return Ix("+", (self, ix(o)))

    def __sub__(self, o: IxLike) -> Ix:
        return Ix("-", (self, ix(o)))

    def __mul__(self, o: IxLike) -> Ix:
        return Ix("*", (self, ix(o)))

    def __mod__(self, o: IxLike) -> Ix:
        return Ix("mod", (self, ix(o)))

    def eval(self, env: dict) -> int:
        op, a = self.op, self.args
        if op == "const":
            return a[0]
        if op == "var":
            return env[a[0]]
        x, y = a[0].eval(env), a[1].eval(env)
        return _BINOPS[op](x, y)


IxLike = Union[Ix, int, str]

_BINOPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
    "floordiv": lambda x, y: x // y, "ceildiv": lambda x, y: -(-x // y),
    "mod": lambda x, y: x % y, "min": min, "==": lambda x, y: int(x == y),
    "and": lambda x, y: int(bool(x) and bool(y)),
}


def ix(v: IxLike) -> Ix:
    if isinstance(v, Ix):
        return v
    if isinstance(v, int):
        return Ix("const", (v,))
    return Ix("var", (v,))


def product(vals) -> Ix:
    """The product of sizes (names or ints) as an expression (1 when empty)."""
    out: Ix | None = None
    for v in vals:
        out = ix(v) if out is None else out * ix(v)
    return ix(1) if out is None else out


def ceildiv(a: IxLike, b: IxLike) -> Ix:
    return Ix("ceildiv", (ix(a), ix(b)))


def imin(a: IxLike, b: IxLike) -> Ix:
    return Ix("min", (ix(a), ix(b)))


def eq(a: IxLike, b: IxLike) -> Ix:
    return Ix("==", (ix(a), ix(b)))


def land(a: IxLike, b: IxLike) -> Ix:
    return Ix("and", (ix(a), ix(b)))


# --------------------------------------------------------------------------- buffers


@dataclass(frozen=True)
class GlobalTensor:
    """A kernel argument in GM: ``dims`` names the tiling-data sizes of its shape (1 for
    a broadcast dimension; ``view``: the argument's shape when the program sees it
    reshaped)."""
    name: str
    dtype: str
    dims: tuple[str | int, ...]
    is_output: bool = False
    view: tuple[str | int, ...] | None = None   # the argument's own shape, when ``dims``
    #                                              is a contiguous reshape of it


@dataclass(frozen=True)
class LocalBuf:
    """An on-chip buffer: ``rows x cols`` elements of ``dtype`` at ``level`` in
    ``layout``, ``copies`` copies.  ``pingpong``: the builder addresses it with a
    rotation counter (its slots' index) and another pipe fills or drains it, so the
    double-buffering pass (:mod:`.passes`) may give it two copies selected by
    ``counter % 2``."""
    name: str
    level: str
    dtype: str
    rows: int | str        # a str names a host tiling value (vector tiles)
    cols: int | str
    layout: str = "ND"     # ND | NZ | zZ | nZ; UB: ND tile, COL (a value per row), ROW
    copies: int = 1
    pingpong: bool = False

    @property
    def itemsize(self) -> int:
        return {"float16": 2, "float32": 4}[self.dtype]

    def shape(self, env: dict | None = None) -> tuple[int, int]:
        def get(v: int | str) -> int:
            return v if isinstance(v, int) else (env or {})[v]
        return get(self.rows), get(self.cols)

    def size(self, env: dict | None = None) -> int:
        """Bytes of one copy."""
        r, c = self.shape(env)
        return r * c * self.itemsize

    @property
    def nbytes(self) -> int:
        return self.size()


@dataclass(frozen=True)
class Slot:
    """Copy ``index`` of ``buf`` (0 when it has one copy)."""
    buf: LocalBuf
    index: Ix = field(default_factory=lambda: ix(0))


@dataclass(frozen=True)
class GmRegion:
    """The box of ``tensor`` at ``offsets`` (per dim) of ``extents`` (the valid part;
    a local tile beyond it is padded with zeros on the way in and not written back).

    The box is seen as a 2-d matrix: its last ``split`` dimensions flattened are the
    columns, the others flattened the rows (``split`` 0: one value per row); consecutive
    rows are ``row_stride`` elements apart in GM (default: the last dimension's size)."""
    tensor: GlobalTensor
    offsets: tuple[Ix, ...]
    extents: tuple[Ix, ...]
    split: int = 1
    row_stride: Ix | None = None

    def stride(self) -> Ix:
        if self.row_stride is not None:
            return self.row_stride
        return ix(self.tensor.dims[-1]) if self.tensor.dims else ix(1)


# --------------------------------------------------------------------------- instructions


@dataclass(frozen=True)
class ConvGeom:
    """Strides, paddings and dilations of a 2-d convolution window; its sizes ``kh``,
    ``kw`` and the output width ``ow``."""
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    kh: Ix
    kw: Ix
    ow: Ix


@dataclass(frozen=True)
class CopyIm2Col:
    """MTE2: the ``k_ext x p_ext`` tile at ``(k0, p0)`` of the im2col matrix of image
    ``n`` of ``src`` (``(N, C, H, W)``; row ``k = (c, kh, kw)`` over ``KH x KW``
    windows, column ``p = (y, z)`` over ``OW`` output columns) -> an L1 tile (fractal
    NZ), zeros outside the image and beyond the extents."""
    src: GlobalTensor
    n: Ix
    k0: Ix
    k_ext: Ix
    p0: Ix
    p_ext: Ix
    geom: ConvGeom
    dst: Slot
    pipe: str = "MTE2"


@dataclass(frozen=True)
class CopyIn:
    """MTE2: GM box -> L1 (``nd2nz``: fractal NZ) or UB (ND rows padded to 32 B)."""
    src: GmRegion
    dst: Slot
    pipe: str = "MTE2"


@dataclass(frozen=True)
class Load2D:
    """MTE1: the ``k0``-column (A) or ``k0``-row (B) slice starting at fractal column
    / row ``k_offset`` of an L1 tile -> L0A (zZ) or L0B (nZ, transposed fractals)."""
    src: Slot
    dst: Slot
    k_offset: Ix
    pipe: str = "MTE1"


@dataclass(frozen=True)
class Mmad:
    """M: ``c (+)= a @ b`` on fractal tiles (``init``: overwrite instead of add)."""
    c: Slot
    a: Slot
    b: Slot
    init: Ix
    pipe: str = "M"


@dataclass(frozen=True)
class CopyOut:
    """FIX (from L0C, nz2nd with cast) or MTE3 (from UB): local tile -> GM box."""
    src: Slot
    dst: GmRegion
    pipe: str = "FIX"


@dataclass(frozen=True)
class CopyLocal:
    """FIX: an L0C tile (fractal NZ, fp32) -> a UB tile (ND, fp32) for a vector
    epilogue; or, with ``pipe`` MTE3, a UB tile (ND) -> an L1 tile (fractal NZ) of the
    same type (a fused chain's ``P`` on its way to the cube)."""
    src: Slot
    dst: Slot
    pipe: str = "FIX"


@dataclass(frozen=True)
class VecOp:
    """V: one vector instruction over ``rows`` rows of a UB tile (repeat = rows x
    ceil(row bytes / 256)); ``op`` in the table of :mod:`.vector_ops`; ``srcs`` are
    slots or a float scalar; reductions write one value per row."""
    op: str
    dst: Slot
    srcs: tuple
    rows: Ix
    pipe: str = "V"


@dataclass(frozen=True)
class SetFlag:
    src_pipe: str
    dst_pipe: str
    event: Ix

    @property
    def pipe(self) -> str:
        return self.src_pipe


@dataclass(frozen=True)
class WaitFlag:
    src_pipe: str
    dst_pipe: str
    event: Ix

    @property
    def pipe(self) -> str:
        return self.dst_pipe


@dataclass(frozen=True)
class Loop:
    var: str
    extent: Ix
    body: tuple


Instr = Union[CopyIn, CopyIm2Col, Load2D, Mmad, CopyOut, CopyLocal, VecOp, SetFlag, WaitFlag, Loop]


@dataclass(frozen=True)
class Tiling:
    """The host-side tiling data of a program besides the kernel's sizes: its constant
    tile sizes (in print order), the sizes the host derives from the arguments'
    (``name``, expression) and, for a vector program, the row count and row length the
    host tiles UB by (``TR`` rows of ``CP`` padded elements, chosen at run time)."""
    tiles: tuple[tuple[str, int], ...] = ()
    derived: tuple[tuple[str, Ix], ...] = ()
    rows: Ix | None = None
    cols: Ix | None = None


@dataclass(frozen=True)
class Program:
    """A kernel for one AI core: GM arguments, on-chip buffers, the body, the tiling
    data (sizes read from the arguments' shapes by the host) and what it computes."""
    name: str
    kind: str                          # "cube" | "vector" | "phased"
    tensors: tuple[GlobalTensor, ...]
    buffers: tuple[LocalBuf, ...]
    body: tuple
    tiling: Tiling = field(default_factory=Tiling)
    phases: tuple[Program, ...] = ()   # "phased": programs run one after the other
    workspaces: tuple[GlobalTensor, ...] = ()   # "phased": GM tensors between phases

    @property
    def inputs(self) -> tuple[GlobalTensor, ...]:
        return tuple(t for t in self.tensors if not t.is_output)

    @property
    def outputs(self) -> tuple[GlobalTensor, ...]:
        return tuple(t for t in self.tensors if t.is_output)

    @property
    def size_names(self) -> tuple[str, ...]:
        names: list[str] = []
        for t in self.tensors:
            for d in (t.view or t.dims):
                if isinstance(d, str) and d not in names and d not in self.derived:
                    names.append(d)
        return tuple(names) + tuple(self.derived)

    @property
    def derived(self) -> dict[str, Ix]:
        """Sizes the host computes from the arguments' (``name: Ix``)."""
        return dict(self.tiling.derived)


@dataclass(frozen=True)
class NpuModule:
    """The NPU IR of one compiled kernel (``CompiledKernel.final_ir``): the signature the
    host sees — the lowered function's name, size parameters and argument buffers (as
    :class:`polycomp.ir.LoweredFunc` has them, so callers bind arrays the same way on
    every target) — and the device program for the AI core."""
    name: str
    params: tuple
    inputs: tuple
    outputs: tuple
    inout: tuple[str, ...]
    program: Program

    @property
    def args(self) -> tuple:
        return self.inputs + self.outputs

    def with_program(self, program: Program) -> NpuModule:
        return replace(self, program=program)

    def __str__(self) -> str:
        from .ir_text import module_text
        return module_text(self)


def walk(body: tuple):
    """Every instruction of ``body`` (loops included), in program order."""
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from walk(s.body)


def map_slots(body: tuple, fn: Callable[[Slot], Slot]) -> tuple:
    """``body`` with every on-chip operand (a :class:`Slot`) replaced by ``fn(slot)``."""
    out: list = []
    for s in body:
        if isinstance(s, Loop):
            out.append(replace(s, body=map_slots(s.body, fn)))
            continue
        changes: dict[str, object] = {}
        for f in fields(s):
            v = getattr(s, f.name)
            if isinstance(v, Slot):
                changes[f.name] = fn(v)
            elif f.name == "srcs":
                changes[f.name] = tuple(fn(x) if isinstance(x, Slot) else x for x in v)
        out.append(replace(s, **changes) if changes else s)
    return tuple(out)
