"""The NPU-level IR: typed instructions on typed buffers, per core kind, per phase.

The lowering stage ``npu-lower`` (:mod:`.lower`) turns a kernel's lowered function and
the typed plans its schedule passes recorded into one :class:`NpuModule`; the NPU IR
passes (:mod:`.passes`) rewrite it: ``npu-isa`` replaces every *logical* instruction by
the Ascend C API calls of the A2 generation that implement it (with their real
parameter structs), ``npu-double-buffer`` doubles the rotating buffers, ``npu-sync``
places the flags.  The result is ``CompiledKernel.final_ir``: the simulator
(:mod:`.sim`) executes exactly those API calls and the printer (:mod:`.printer`) prints
exactly them.  ``str(module)`` is its text form (:mod:`.ir_text`).

Structure (the A2 generation: cube and vector are separate cores):

* :class:`Kernel` -- the kernel: its GM arguments, GM workspaces, host tiling data, the
  number of blocks it can use, and its phases; ``kind`` is its kernel type
  (``aic``: cube cores only, ``aiv``: vector cores only, ``mix``: one cube core and two
  vector cores per block, ``KERNEL_TYPE_MIX_AIC_1_2``).
* :class:`Phase` -- what the cube cores (``aic``) and the vector cores (``aiv``) run; the
  phases run one after the other (each ends with a cross-core barrier in its bodies).
* :class:`Program` -- the program of one core kind in one phase: its on-chip buffers
  and body.  Every core of that kind runs it with its own ``bid`` (``GetBlockIdx()``)
  among ``bnum`` cores; a vector core of a mixed kernel also has ``sub``
  (``GetSubBlockIdx()``).

Index expressions (:class:`Ix`) are over loop variables, the core index variables and
the host tiling data (the kernel's sizes and sizes derived from them).

Logical instructions (what the lowering builds; ``npu-isa`` expands them):
:class:`CopyIn`, :class:`CopyOut`, :class:`Load2D`, :class:`Mmad`, :class:`VecOp`,
:class:`CopyIm2Col`.  API instructions (what is printed and simulated):
:class:`DataCopyNd2Nz`, :class:`DataCopyPadIn`, :class:`DataCopyPadOut`,
:class:`LoadData2D`, :class:`LoadDataTranspose`, :class:`LoadData3D`,
:class:`MmadCall`, :class:`FixpipeCall`, :class:`VecCall`, :class:`TransData5HD`;
and on both levels :class:`SetFlag`/:class:`WaitFlag`, :class:`CrossSet`/
:class:`CrossWait`, :class:`Loop`, :class:`Let`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Union

# --------------------------------------------------------------------------- Ix


@dataclass(frozen=True)
class Ix:
    """An integer expression: ``op`` in const/var/+/-/*/floordiv/ceildiv/mod/min/max/
    ==/and."""
    op: str
    args: tuple = ()

    def __add__(self, o: IxLike) -> Ix:
        return Ix("+", (self, ix(o)))

    def __radd__(self, o: IxLike) -> Ix:
        return Ix("+", (ix(o), self))

    def __sub__(self, o: IxLike) -> Ix:
        return Ix("-", (self, ix(o)))

    def __rsub__(self, o: IxLike) -> Ix:
        return Ix("-", (ix(o), self))

    def __mul__(self, o: IxLike) -> Ix:
        return Ix("*", (self, ix(o)))

    def __rmul__(self, o: IxLike) -> Ix:
        return Ix("*", (ix(o), self))

    def __mod__(self, o: IxLike) -> Ix:
        return Ix("mod", (self, ix(o)))

    def __floordiv__(self, o: IxLike) -> Ix:
        return Ix("floordiv", (self, ix(o)))

    def eval(self, env: dict) -> int:
        op, a = self.op, self.args
        if op == "const":
            return a[0]
        if op == "var":
            return env[a[0]]
        x, y = a[0].eval(env), a[1].eval(env)
        return _BINOPS[op](x, y)

    def is_const(self, v: int | None = None) -> bool:
        return self.op == "const" and (v is None or self.args[0] == v)


IxLike = Union[Ix, int, str]

_BINOPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
    "floordiv": lambda x, y: x // y, "ceildiv": lambda x, y: -(-x // y),
    "mod": lambda x, y: x % y, "min": min, "max": max, "==": lambda x, y: int(x == y),
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


def align(a: IxLike, b: int) -> Ix:
    """``a`` rounded up to a multiple of ``b``."""
    return ceildiv(a, b) * b


def imin(a: IxLike, b: IxLike) -> Ix:
    return Ix("min", (ix(a), ix(b)))


def imax(a: IxLike, b: IxLike) -> Ix:
    return Ix("max", (ix(a), ix(b)))


def eq(a: IxLike, b: IxLike) -> Ix:
    return Ix("==", (ix(a), ix(b)))


def land(a: IxLike, b: IxLike) -> Ix:
    return Ix("and", (ix(a), ix(b)))


def simplify_ix(e: Ix) -> Ix:
    """Constant folding and the identities ``x + 0``, ``x - x``, ``x * 1``, ``x * 0``."""
    if e.op in ("const", "var"):
        return e
    a, b = (simplify_ix(x) for x in e.args)
    if a.is_const() and b.is_const():
        return ix(_BINOPS[e.op](a.args[0], b.args[0]))
    if e.op == "-" and a == b:
        return ix(0)
    if e.op == "+" and a.is_const(0):
        return b
    if e.op in ("+", "-") and b.is_const(0):
        return a
    if e.op == "*" and (a.is_const(0) or b.is_const(0)):
        return ix(0)
    if e.op == "*" and a.is_const(1):
        return b
    if e.op in ("*", "floordiv", "ceildiv") and b.is_const(1):
        return a
    return Ix(e.op, (a, b))


#: the index variables of a core: its block index and the number of blocks of its kind
#: (``GetBlockIdx()`` / ``GetBlockNum()`` times the vector cores per block), and on a
#: vector core of a mixed kernel its index within its block (``GetSubBlockIdx()``)
BID, BNUM, SUB = "bid", "bnum", "sub"

# --------------------------------------------------------------------------- buffers

ITEMSIZE = {"float16": 2, "float32": 4, "uint8": 1, "int8": 1, "int32": 4, "bfloat16": 2,
            "uint64": 8}


@dataclass(frozen=True)
class GlobalTensor:
    """A kernel argument or workspace in GM: ``dims`` names the tiling-data sizes of its
    shape (1 for a broadcast dimension; ``view``: the argument's shape when the program
    sees it reshaped)."""
    name: str
    dtype: str
    dims: tuple[str | int, ...]
    is_output: bool = False
    view: tuple[str | int, ...] | None = None

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class LocalBuf:
    """An on-chip buffer: ``rows x cols`` elements of ``dtype`` at ``level`` in
    ``layout``, ``copies`` copies.  ``pingpong``: the builder addresses it with a
    rotation counter (its slots' index) and another pipe fills or drains it, so the
    double-buffering pass may give it two copies selected by ``counter % 2``.

    Layouts: ``ND`` a row-major tile; on L1 ``NZ`` (fractal columns of 32 bytes over
    the padded rows) and ``ZZ`` (row groups of 16, each its fractals in a row: the fp32
    right operand on its way through LoadDataWithTranspose); ``zZ`` on L0A, ``nZ`` on
    L0B, ``NZ`` on L0C; on UB ``COL`` one value per row in a 32-byte block of its own,
    ``ROW`` one row, ``MASK`` a bit mask (uint8), ``PACK`` values side by side."""
    name: str
    level: str
    dtype: str
    rows: int | str        # a str names a host tiling value (vector tiles)
    cols: int | str
    layout: str = "ND"
    copies: int = 1
    pingpong: bool = False
    # UB: the address modulo 512 (0 or 256) the bank placement (npu-ub-banks) chose,
    # None: placed after the previous buffer (see ``reserve``, ``quantum``)
    bank_phase: int | None = None

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def reserve(self) -> int:
        """Bytes of padding a placed buffer may need before it: 256 (UB sizes are whole
        256-byte repeats, so the previous end is a multiple of 256)."""
        return 0 if self.bank_phase is None else 256

    @property
    def quantum(self) -> int:
        """The rounding of one copy's size: 512 B for a placed buffer with several
        copies (they share its phase), 256 B on UB, else 32 B."""
        if self.bank_phase is not None and self.copies > 1:
            return 512
        return 256 if self.level == "UB" else 32

    def shape(self, env: dict | None = None) -> tuple[int, int]:
        def get(v: int | str) -> int:
            return v if isinstance(v, int) else (env or {})[v]
        return get(self.rows), get(self.cols)

    def elements(self, env: dict | None = None) -> int:
        r, c = self.shape(env)
        return r * c

    def size(self, env: dict | None = None) -> int:
        """Bytes of one copy (UB buffers are rounded up to whole 256-byte repeats: a
        comparison runs over whole repeats)."""
        n = self.elements(env) * self.itemsize
        q = self.quantum
        return -(-n // q) * q

    @property
    def nbytes(self) -> int:
        return self.size()


@dataclass(frozen=True)
class Slot:
    """Copy ``index`` of ``buf`` (0 when it has one copy), from element ``offset`` on
    (``LocalTensor[offset]``)."""
    buf: LocalBuf
    index: Ix = field(default_factory=lambda: ix(0))
    offset: Ix = field(default_factory=lambda: ix(0))

    def at(self, offset: IxLike) -> Slot:
        return Slot(self.buf, self.index, simplify_ix(self.offset + ix(offset)))


@dataclass(frozen=True)
class GmRegion:
    """The box of ``tensor`` at ``offsets`` (per dim) of ``extents`` (the valid part;
    a local tile beyond it is padded on the way in and not written back).

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

    def linear(self) -> Ix:
        """The element offset of the box's first element."""
        off: Ix = ix(0)
        for d, o in zip(self.tensor.dims, self.offsets):
            off = off * ix(d) + o
        return simplify_ix(off)

    def matrix(self) -> tuple[Ix, Ix]:
        """(rows, columns) of the box seen as a matrix."""
        cut = len(self.extents) - self.split
        return product(self.extents[:cut]), product(self.extents[cut:])


@dataclass(frozen=True)
class GmRef:
    """``tensor[offset]`` (``GlobalTensor`` indexing, in elements)."""
    tensor: GlobalTensor
    offset: Ix


# --------------------------------------------------------------------------- logical


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
    """MTE1 (logical): columns ``p0 +: p_ext`` (output positions ``y * OW + x`` of the
    window over the image band, padded by ``pad`` = left, right, top, bottom) and rows
    ``k0 +: k_ext`` (``(c1, kh, kw, c0)``) of the im2col matrix of the NC1HWC0 image band
    ``src`` in L1 (``h x w`` positions, ``channels`` channels) -> L0B (nZ)."""
    src: Slot
    dst: Slot
    h: Ix
    w: Ix
    channels: Ix
    k0: Ix
    k_ext: Ix
    p0: Ix
    p_ext: Ix
    geom: ConvGeom
    pad: tuple[Ix, Ix, Ix, Ix]
    pipe: str = "MTE1"


@dataclass(frozen=True)
class CopyIn:
    """MTE2 (logical): GM box -> L1 (fractal NZ / ZZ) or UB (rows padded to 32 B; a
    COL buffer gets one value per row, broadcast over its block)."""
    src: GmRegion
    dst: Slot
    pipe: str = "MTE2"


@dataclass(frozen=True)
class Load2D:
    """MTE1 (logical): the ``k_ext``-wide k step at fractal ``k_offset`` of an L1 tile
    -> L0A (zZ; A) or L0B (nZ; B), laid out for a Mmad of ``k_ext``."""
    src: Slot
    dst: Slot
    k_offset: Ix
    k_ext: Ix
    pipe: str = "MTE1"


@dataclass(frozen=True)
class Mmad:
    """M (logical): ``c (+)= a @ b`` over ``m x n`` (valid) outputs and ``k`` (valid)
    products (``init``: overwrite instead of add)."""
    c: Slot
    a: Slot
    b: Slot
    init: Ix
    m: Ix
    n: Ix
    k: Ix
    pipe: str = "M"


@dataclass(frozen=True)
class CopyOut:
    """FIX (from L0C: the ``m x n`` tile of a Mmad of ``m`` rows, nz2nd with the cast)
    or MTE3 (from UB) (logical): local tile -> GM box."""
    src: Slot
    dst: GmRegion
    pipe: str = "FIX"
    #: FIX from int32: fp16 of value x scale (DEQF16), or int8 (REQ8) when the GM
    #: tensor is int8
    scale: float | None = None
    #: FIX from int32: fp16 of value x the column's scale, the tile's quantisation
    #: parameters (uint64, one per column) in this L1 slot (VDEQF16; VREQ8 into int8)
    quant: Slot | None = None
    #: FIX: added to what GM holds (``SetAtomicAdd<T>()`` around the Fixpipe), not
    #: written over it (a split-K part)
    atomic: bool = False


@dataclass(frozen=True)
class VecOp:
    """V (logical): one vector operation over ``rows`` rows of UB tiles; ``op`` in the
    table of :mod:`.vector_ops`; ``srcs`` are slots or a scalar (a float or an index
    expression); reductions take the number of valid columns as their last source and
    write a COL value."""
    op: str
    dst: Slot
    srcs: tuple
    rows: Ix
    pipe: str = "V"


# --------------------------------------------------------------------------- API calls


@dataclass(frozen=True)
class DataCopyNd2Nz:
    """``DataCopy(dst, src, Nd2NzParams{ndNum, nValue, dValue, srcNdMatrixStride,
    srcDValue, dstNzC0Stride, dstNzNStride, dstNzMatrixStride})``: GM (ND) -> L1 (NZ)."""
    dst: Slot
    src: GmRef
    nd_num: Ix
    n_value: Ix
    d_value: Ix
    src_nd_stride: Ix
    src_d_value: Ix
    dst_c0_stride: Ix
    dst_n_stride: Ix
    dst_nd_stride: Ix
    pipe: str = "MTE2"


@dataclass(frozen=True)
class DataCopyGm2L1:
    """``DataCopy(dst, src, DataCopyParams{blockCount, blockLen, srcGap, dstGap})``: GM ->
    L1 without a layout change; ``blockLen`` and the gaps in 32-byte blocks."""
    dst: Slot
    src: GmRef
    block_count: Ix
    block_len: Ix
    src_gap: Ix
    dst_gap: Ix
    pipe: str = "MTE2"


@dataclass(frozen=True)
class DataCopyPadIn:
    """``DataCopyPad(dst, src, DataCopyExtParams{blockCount, blockLen, srcStride,
    dstStride, 0}, DataCopyPadExtParams<T>{false, 0, 0, 0})``: GM -> UB; ``blockLen``
    and ``srcStride`` in bytes, ``dstStride`` in 32-byte blocks."""
    dst: Slot
    src: GmRef
    block_count: Ix
    block_len: Ix
    src_stride: Ix
    dst_stride: Ix
    pipe: str = "MTE2"


@dataclass(frozen=True)
class DataCopyPadOut:
    """``DataCopyPad(dst, src, DataCopyExtParams{blockCount, blockLen, srcStride,
    dstStride, 0})``: UB -> GM; ``srcStride`` in 32-byte blocks, ``dstStride`` in
    bytes."""
    dst: GmRef
    src: Slot
    block_count: Ix
    block_len: Ix
    src_stride: Ix
    dst_stride: Ix
    pipe: str = "MTE3"


@dataclass(frozen=True)
class LoadData2D:
    """``LoadData(dst, src, LoadData2DParams{startIndex, repeatTimes, srcStride, 0,
    dstGap, ifTranspose, 0})``: 512-byte fractals L1 -> L0A/L0B."""
    dst: Slot
    src: Slot
    start: Ix
    repeat: Ix
    src_stride: Ix
    dst_gap: Ix
    transpose: bool
    pipe: str = "MTE1"


@dataclass(frozen=True)
class LoadDataTranspose:
    """``LoadDataWithTranspose(dst, src, LoadData2dTransposeParams{startIndex,
    repeatTimes, srcStride, dstGap, dstFracGap, 0})``: b32 16x16 squares (two 16x8
    fractals) transposed L1 -> L0B."""
    dst: Slot
    src: Slot
    start: Ix
    repeat: Ix
    src_stride: Ix
    dst_gap: Ix
    dst_frac_gap: Ix
    pipe: str = "MTE1"


@dataclass(frozen=True)
class LoadData3D:
    """``LoadData(dst, src, LoadData3DParamsV2<T>{padList, l1H, l1W, channelSize,
    kExtension, mExtension, kStartPt, mStartPt, strideW, strideH, filterW, filterH,
    dilationFilterW, dilationFilterH, false, false, 0})``: im2col of an NC1HWC0 image in
    L1 -> L0A (zZ)."""
    dst: Slot
    src: Slot
    pad: tuple[Ix, Ix, Ix, Ix]              # left, right, top, bottom
    l1h: Ix
    l1w: Ix
    channel: Ix
    k_ext: Ix
    m_ext: Ix
    k_start: Ix
    m_start: Ix
    stride_w: int
    stride_h: int
    filter_w: Ix
    filter_h: Ix
    dil_w: int
    dil_h: int
    pipe: str = "MTE1"


@dataclass(frozen=True)
class MmadCall:
    """``Mmad(c, a, b, MmadParams{m, n, k, 0, false, cmatrixInitVal})``."""
    c: Slot
    a: Slot
    b: Slot
    m: Ix
    n: Ix
    k: Ix
    init: Ix
    pipe: str = "M"


@dataclass(frozen=True)
class FixpipeCall:
    """``Fixpipe<T, float, CFG_ROW_MAJOR>(dst, src[, cbufWorkspace], FixpipeParamsV220{
    nSize, mSize, srcStride, dstStride, false, quantPre, deqScalar, 1, 0, 0, 0})``: L0C
    (NZ) -> GM (ND) with the cast ``quant`` (``NoQuant``: fp32, ``F322F16``: fp16,
    ``DEQF16``: int32 to fp16 times the scale ``deq``, passed as ``deqScalar``: the
    float's bits; ``VDEQF16``: int32 to fp16 times each column's scale, read from the
    uint64 quantisation parameters in L1 at ``cbuf``; ``REQ8`` / ``VREQ8``: the same
    into int8, rounded to nearest and saturated, bit 46 of the parameters set for a
    signed result).  The hardware reads a scale as bits [31:13] of the float (1 sign,
    8 exponent, 10 mantissa bits: the lower 13 mantissa bits are dropped; asc-devkit
    docs, matrix-out key feature "随路量化").  ``nSize`` is the tile's valid columns:
    with NZ2ND (``CFG_ROW_MAJOR``) any value in [0, 4095] (docs/npu.md, "Fixpipe's
    nSize")."""
    dst: GmRef
    src: Slot
    n_size: Ix
    m_size: Ix
    src_stride: Ix
    dst_stride: Ix
    quant: str
    pipe: str = "FIX"
    deq: float | None = None
    #: ``VDEQF16``: the per-column quantisation parameters in L1 (the ``cbufWorkspace``
    #: argument, ``LocalTensor<uint64_t>``, TPosition ``C1``)
    cbuf: Slot | None = None
    #: add into GM (``SetAtomicAdd<T>()`` before, ``SetAtomicNone()`` after; A2:
    #: float, half, int16, int32, int8, bfloat16)
    atomic: bool = False

    @property
    def deq_scalar(self) -> int:
        """``deqScalar`` as the docs build it: ``static_cast<uint64_t>(*reinterpret_cast<
        int32_t*>(&scale))`` (0 without a scale); for ``REQ8`` the float's bits
        zero-extended (a negative scale's sign extension would set the shift, MCB and
        offset fields) with bit 46, the signed-result flag, as the docs' example sets it
        (``data_copy_l0c2gm.asc``)."""
        if self.deq is None:
            return 0
        import struct
        if self.quant == "REQ8":
            return struct.unpack("<I", struct.pack("<f", self.deq))[0] | REQ8_SIGNED
        return struct.unpack("<i", struct.pack("<f", self.deq))[0]


#: bit 46 of Fixpipe's quantisation parameters: a signed (int8) result of (V)REQ8
#: (asc-devkit docs, "随路量化", the QUANT_PRE table of __NPU_ARCH__ 2201)
REQ8_SIGNED = 1 << 46


@dataclass(frozen=True)
class Scalar:
    """A scalar operand of a vector call: ``value`` (a float constant or a host tiling
    value, converted to the operand's type), negated (``neg``) and/or inverted
    (``inv``: ``1 / value``)."""
    value: float | Ix
    neg: bool = False
    inv: bool = False

    def eval(self, env: dict) -> float:
        v = float(self.value.eval(env)) if isinstance(self.value, Ix) else float(self.value)
        if self.inv:
            v = 1.0 / v if v != 0 else float("inf")
        return -v if self.neg else v


@dataclass(frozen=True)
class Rep:
    """The repeat form of a vector call: ``mask`` (continuous mode: the first ``mask``
    elements of each 256-byte repeat), ``repeat`` times, and per operand (the
    destination first) its (data-block stride, repeat stride) in 32-byte blocks."""
    mask: Ix
    repeat: Ix
    strides: tuple[tuple[Ix, Ix], ...]


@dataclass(frozen=True)
class VecCall:
    """One vector API call (pipe V): ``api`` (``Add``, ``Adds``, ``Exp``, ``Cast``,
    ``Duplicate``, ``Brcb``, ``ReduceRepeat``, ``Compare``, ``Compares``, ``Select``...),
    its destination and sources (slots, a float or an index expression), and either
    ``count`` (the first n elements) or ``rep``; ``attr`` the mode template/enum
    argument (a RoundMode, CMPMODE, SELMODE or ReduceType)."""
    api: str
    dst: Slot
    srcs: tuple
    count: Ix | None = None
    rep: Rep | None = None
    attr: str = ""
    pipe: str = "V"


@dataclass(frozen=True)
class TransData5HD:
    """``TransDataTo5HD<T>(dstList, srcList, TransDataTo5HDParams{false, false,
    repeatTimes, dstRepStride, srcRepStride})`` with the 16 addresses
    ``dst[dst_offsets[i]]`` / ``src[src_offsets[i]]``."""
    dst: Slot
    dst_offsets: tuple[Ix, ...]
    src: Slot
    src_offsets: tuple[Ix, ...]
    repeat: Ix
    dst_rep: Ix
    src_rep: Ix
    pipe: str = "V"


# --------------------------------------------------------------------------- control


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
class CrossSet:
    """``CrossCoreSetFlag<mode, PIPE_<pipe>>(flag)``: after the pipe's earlier
    instructions, report to the other cores of the mode (0: every core of this kind,
    2: the cube core and the vector cores of one block)."""
    mode: int
    pipe: str
    flag: Ix


@dataclass(frozen=True)
class CrossWait:
    """``CrossCoreWaitFlag<mode>(flag)``: no later instruction of this core issues before
    the flag's counter is set (and it is decremented)."""
    mode: int
    flag: Ix

    @property
    def pipe(self) -> str:
        return "S"


@dataclass(frozen=True)
class Barrier:
    """``PipeBarrier<PIPE_<pipe>>()``: the pipe's later instructions start after its
    earlier ones are done (within one pipe: a vector instruction reading what the one
    before it wrote; Mmads accumulating into one small L0C tile)."""
    pipe: str


@dataclass(frozen=True)
class Let:
    """A scalar: ``const int64_t var = value;``."""
    var: str
    value: Ix

    @property
    def pipe(self) -> str:
        return "S"


@dataclass(frozen=True)
class Loop:
    var: str
    extent: Ix
    body: tuple
    start: Ix = field(default_factory=lambda: ix(0))


LOGICAL = (CopyIn, CopyOut, Load2D, Mmad, VecOp, CopyIm2Col)
API = (DataCopyNd2Nz, DataCopyGm2L1, DataCopyPadIn, DataCopyPadOut, LoadData2D, LoadDataTranspose,
       LoadData3D, MmadCall, FixpipeCall, VecCall, TransData5HD)
Instr = Union[CopyIn, CopyOut, Load2D, Mmad, VecOp, CopyIm2Col, DataCopyNd2Nz, DataCopyGm2L1,
              DataCopyPadIn, DataCopyPadOut, LoadData2D, LoadDataTranspose, LoadData3D,
              MmadCall, FixpipeCall, VecCall, TransData5HD, SetFlag, WaitFlag, CrossSet,
              CrossWait, Barrier, Let, Loop]


@dataclass(frozen=True)
class Tiling:
    """Host-side tiling data besides the kernel's sizes: constant tile sizes (in print
    order), sizes the host derives from the arguments' (``name``, expression) and, for a
    vector program, the row count and row length the host tiles UB by (``TR`` rows of
    ``CP`` padded elements, chosen at run time).  ``long``: the program also has the
    long-row form (a row split into chunks of ``CW`` elements, chosen by the host with
    ``LR`` = 1 when one row of ``CP`` elements does not fit UB)."""
    tiles: tuple[tuple[str, int], ...] = ()
    derived: tuple[tuple[str, Ix], ...] = ()
    rows: Ix | None = None
    cols: Ix | None = None
    long: bool = False


@dataclass(frozen=True)
class Program:
    """The program of one core kind (``core``: ``AIC`` or ``AIV``) in one phase: its
    on-chip buffers and body, and (a vector program) its UB tiling."""
    name: str
    core: str
    buffers: tuple[LocalBuf, ...]
    body: tuple
    tiling: Tiling = field(default_factory=Tiling)

    @property
    def kind(self) -> str:
        return "cube" if self.core == "AIC" else "vector"


@dataclass(frozen=True)
class Phase:
    """One phase: the cube cores' and the vector cores' programs (None: that kind has
    nothing to do in this phase but the barrier)."""
    aic: Program | None
    aiv: Program | None

    @property
    def programs(self) -> tuple[Program, ...]:
        return tuple(p for p in (self.aic, self.aiv) if p is not None)

    @property
    def label(self) -> str:
        return "+".join(p.kind for p in self.programs)


@dataclass(frozen=True)
class QuantArg:
    """A kernel argument the caller gives as float32 scales (one per output column) and
    the kernel reads as Fixpipe's uint64 quantisation parameters: the host converts it
    (each value's float bits in bits [31:0], no shift, no offset; bit 46 set when
    ``signed``: a signed int8 result of ``VREQ8``; the asc-devkit docs' QUANT_PRE
    table) and pads it to ``padded`` entries (whole 32-byte blocks for the copy to
    L1)."""
    name: str
    padded: str
    signed: bool = False


@dataclass(frozen=True)
class Kernel:
    """A kernel for the chip (see the module docstring): GM arguments, workspaces (GM
    scratch the host allocates; a dimension ``NB`` is the number of blocks), the host
    tiling, the number of blocks it has work for (``numBlocks`` is the least of that and
    the cores of its kind) and its phases."""
    name: str
    kind: str                          # "aic" | "aiv" | "mix"
    tensors: tuple[GlobalTensor, ...]
    phases: tuple[Phase, ...]
    tiling: Tiling = field(default_factory=Tiling)
    workspaces: tuple[GlobalTensor, ...] = ()
    blocks: Ix = field(default_factory=lambda: ix(1))
    #: arguments the host converts from float32 scales to quantisation parameters
    quant_args: tuple[QuantArg, ...] = ()

    @property
    def inputs(self) -> tuple[GlobalTensor, ...]:
        return tuple(t for t in self.tensors if not t.is_output)

    @property
    def outputs(self) -> tuple[GlobalTensor, ...]:
        return tuple(t for t in self.tensors if t.is_output)

    @property
    def programs(self) -> tuple[Program, ...]:
        return tuple(p for ph in self.phases for p in ph.programs)

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

    def map_programs(self, fn: Callable[[Program], Program]) -> Kernel:
        return replace(self, phases=tuple(
            Phase(fn(ph.aic) if ph.aic is not None else None,
                  fn(ph.aiv) if ph.aiv is not None else None) for ph in self.phases))


@dataclass(frozen=True)
class NpuModule:
    """The NPU IR of one compiled kernel (``CompiledKernel.final_ir``): the signature the
    host sees -- the lowered function's name, size parameters and argument buffers (as
    :class:`polycomp.ir.LoweredFunc` has them, so callers bind arrays the same way on
    every target) -- and the kernel."""
    name: str
    params: tuple
    inputs: tuple
    outputs: tuple
    inout: tuple[str, ...]
    program: Kernel

    @property
    def args(self) -> tuple:
        return self.inputs + self.outputs

    def with_program(self, program: Kernel) -> NpuModule:
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


def c0(dtype: str) -> int:
    """Elements of one 32-byte data block (the fractal width on L1/L0A)."""
    return 32 // ITEMSIZE[dtype]
