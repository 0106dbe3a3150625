"""sm_90a GEMM backbones: the ``wgmma`` plan of a Tensor Core group.

A target whose matrix units include a warpgroup instruction (a
:class:`~polycomp.hw.memory.ComputeUnit` with ``threads`` = 128, ``wgmma`` on
``cuda-sm90a``) and whose hierarchy has a tensor copy rule global -> shared (variant
``tma``, :class:`~polycomp.hw.memory.TensorCopy`) runs an eligible GEMM view
(:func:`tma_operands`) as a warp-specialised kernel: one producer warpgroup whose first
warp issues the TMA box copies of the ``A`` and ``B`` tiles into a ring of ``stages``
shared-memory stages (an ``mbarrier`` pair per stage), and consumer warpgroups that
issue ``wgmma.m64nNk16`` on the stages through shared-memory descriptors and keep the
accumulators in registers; the block tiles are dealt over a persistent grid.  The
plan's numbers come from the target's data and the promotion engine's footprints
(:func:`wgmma_config`):

* ``K tile = span / itemsize`` for the widest swizzle span of the tensor copy rule
  (128 B: 64 f16/bf16 elements, one swizzle row per tile row);
* the consumer warpgroup tile ``WM x WN``: ``WM = 64`` (one ``m64`` row block), ``WN``
  the block tile's N, at most the unit's largest N (256), with the accumulators
  ``WM * WN / 128`` per thread within the registers ``setmaxnreg`` gives a consumer
  (``register_realloc``, ``registers_per_sm``);
* the block tile ``BM x BN``: ``BN`` the smallest N of the unit covering a constant N
  extent (a multiple of the panel width when ``B`` is N-major), else 256; ``BM`` 64 for
  a constant M of at most 64, else 128 (two consumer warpgroups);
* ``stages``: as many copies of the per-stage footprint (the staging decisions'
  bytes) as fit the shared-memory opt-in limit with the barriers and 1 KiB of
  alignment, at most :data:`MAX_STAGES`, at least 2;
* ``persistent``: the grid is ``min(tiles, SMs)`` blocks (one resident block per SM:
  the stages fill its shared memory), each looping over the tiles ``b, b + G, ...``.

``options["tc_tile"]`` overrides any of ``block``, ``warp`` (the consumer warpgroup
tile), ``k``, ``stages``, ``persistent``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import ResourceLimitError, ScheduleError
from polycomp.hw.target import CUDA_WARPGROUP_SIZE
from polycomp.lowering.simplify import linear

#: stages beyond this gain nothing on sm_90 (the copy latency is hidden)
MAX_STAGES = 8
#: registers a producer warpgroup keeps after ``setmaxnreg.dec`` (it only issues copies;
#: with the printer's 64-bit index arithmetic ptxas spills the tile loop of a batched
#: GEMM below 80); 80 + 2 x 216 fills the 64K register file with two consumers
PRODUCER_REGISTERS = 80
#: registers per consumer thread besides its accumulators (addresses, descriptors,
#: loop state, epilogue temporaries)
CONSUMER_OVERHEAD = 64
#: more of them when an epilogue statement calls a math function (erf, exp, tanh: their
#: evaluation keeps temporaries live beside the accumulators; a GELU epilogue spilled
#: 368 bytes with 128 accumulators in 216 registers)
MATH_OVERHEAD = 64
#: shared bytes per block besides the stages: the barriers (8 B each, their buffer
#: rounded to the 1 KiB alignment of the stages) and the 1 KiB the printed kernel may skip
#: to align the stages to the 128-byte swizzle pattern
RESERVED_SHARED = 1024 + 1024


@dataclass(frozen=True)
class WgmmaConfig:
    """The tiles of a ``wgmma`` plan: block ``BM x BN``, consumer warpgroup tile
    ``WM x WN`` (``warp``), K tile, pipeline stages, persistent grid, swizzle span (bytes),
    and the per-thread registers ``setmaxnreg`` gives producer and consumer warpgroups."""
    block: tuple = (128, 256)
    warp: tuple = (64, 256)
    k: int = 64
    stages: int = 4
    persistent: bool = True
    swizzle: int = 128
    producer_registers: int = PRODUCER_REGISTERS
    consumer_registers: int = 216
    instruction: ClassVar[str] = "wgmma"

    @property
    def warps(self) -> tuple:
        """(consumer warpgroups along M, along N)."""
        return self.block[0] // self.warp[0], self.block[1] // self.warp[1]

    @property
    def consumers(self) -> int:
        wm, wn = self.warps
        return wm * wn

    @property
    def threads(self) -> int:
        return CUDA_WARPGROUP_SIZE * (1 + self.consumers)

    def stage_bytes(self, itemsize: int = 2) -> int:
        bm, bn = self.block
        return (bm * self.k + self.k * bn) * itemsize

    def shared_bytes(self, itemsize: int = 2) -> int:
        return self.stages * self.stage_bytes(itemsize)

    def accumulators(self) -> int:
        """float32 accumulators per consumer thread."""
        return self.warp[0] * self.warp[1] // CUDA_WARPGROUP_SIZE

    def check(self, unit) -> WgmmaConfig:
        (bm, bn), (wm, wn) = self.block, self.warp
        if wm <= 0 or wm % 64 or bm % wm or wn <= 0 or bn % wn:
            raise ScheduleError(f"wgmma tile {self.block} / warpgroup tile {self.warp}: the "
                                f"warpgroup tile must have M a multiple of 64 and divide "
                                f"the block tile")
        if unit.n_values and wn not in unit.n_values:
            raise ScheduleError(f"wgmma warpgroup tile N = {wn}: the instruction takes N in "
                                f"{unit.n_values[0]}..{unit.n_values[-1]} (steps of "
                                f"{unit.n_values[1] - unit.n_values[0]})")
        if self.k % 16 or self.k <= 0:
            raise ScheduleError(f"wgmma K tile must be a multiple of 16, got {self.k}")
        if not 2 <= self.stages <= MAX_STAGES:
            raise ScheduleError(f"wgmma pipeline stages must be 2..{MAX_STAGES}, got "
                                f"{self.stages}")
        return self


def is_wgmma(config) -> bool:
    return getattr(config, "instruction", "mma") == "wgmma"


def wgmma_unit(target):
    """The warpgroup matrix unit of ``target`` (None when it has none)."""
    for u in target.units:
        if u.kind == "matrix" and u.threads == CUDA_WARPGROUP_SIZE:
            return u
    return None


def tma_rule(target):
    """The tensor copy rule global -> shared of ``target`` (None when it has none)."""
    for c in target.memory.copies:
        if c.src == "global" and c.dst == "shared" and c.tensor is not None:
            return c
    return None


@dataclass(frozen=True)
class TmaOperand:
    """An operand of the GEMM view copied by TMA: the factor's ``load``, the array
    dimension indexed by the contiguous GEMM dimension (its last: ``col_dim``) and by
    the other one (``row_dim``); ``mn_major``: the contiguous GEMM dimension is M (for
    A) or N (for B) rather than K."""
    load: ir.Load
    row_dim: int
    col_dim: int
    mn_major: bool

    @property
    def buffer(self) -> ir.Buffer:
        return self.load.buffer


def _dims_of(load: ir.Load, var) -> list[int]:
    """The array dimensions whose index uses ``var``, each with coefficient 1 (else
    ``[-1]``: not a unit-stride use)."""
    out = []
    for d, idx in enumerate(load.indices):
        lin = linear(idx)
        if lin is None:
            if var in ir.free_vars(idx):
                return [-1]
            continue
        c = lin[0].get(var, 0)
        if c == 0:
            continue
        if c != 1:
            return [-1]
        out.append(d)
    return out


def _tma_operand(factor, mn_var, k_var, inputs: set) -> TmaOperand | str:
    load = factor.load
    if factor.guard is not None:
        return f"{load.buffer.name} is read under a condition (a gather)"
    if load.buffer.name not in inputs:
        return f"{load.buffer.name} is not a kernel input"
    if not dt.itemsize(load.buffer.dtype) == 2:
        return f"{load.buffer.name} is not a 16-bit array"
    dm, dk = _dims_of(load, mn_var), _dims_of(load, k_var)
    if len(dm) != 1 or len(dk) != 1 or dm[0] < 0 or dk[0] < 0 or dm[0] == dk[0]:
        return (f"{load.buffer.name} does not index one dimension by {mn_var.name} and "
                f"another by {k_var.name}, each with stride 1")
    last = len(load.indices) - 1
    if last not in (dm[0], dk[0]):
        return (f"the contiguous dimension of {load.buffer.name} is neither "
                f"{mn_var.name} nor {k_var.name}")
    mn_major = dm[0] == last
    return TmaOperand(load, dk[0] if mn_major else dm[0], last, mn_major)


def tma_operands(view, model) -> tuple[TmaOperand, TmaOperand] | str:
    """The TMA forms of the GEMM view's ``A`` and ``B``, or why there are none: each a
    plain load of a 16-bit kernel input whose indices use the view's M (N) and K each in
    one dimension with stride 1, one of them the array's last (contiguous) dimension;
    one reduce axis only (no convolution window)."""
    if len(view.red_extents) != 1:
        return "more than one reduce axis (the convolution's window loops)"
    st = view.stage
    m, n = st.iters[view.m_dim], st.iters[view.n_dim]
    k = st.reduce_axes[view.k_dim].var
    inputs = {b.name for b in model.live_in}
    a = _tma_operand(view.a, m, k, inputs)
    if isinstance(a, str):
        return a
    b = _tma_operand(view.b, n, k, inputs)
    if isinstance(b, str):
        return b
    return a, b


def _const(e) -> int | None:
    return e.value if isinstance(e, ir.IntImm) else None


def consumer_registers(target, consumers: int) -> int:
    """Registers per consumer thread after ``setmaxnreg.inc``: the SM's register file
    shared by one block of one producer warpgroup (:data:`PRODUCER_REGISTERS`) and
    ``consumers`` consumer warpgroups, rounded down to the instruction's step, at most
    the per-thread limit."""
    cu = target.cuda
    lo, hi, step = cu.register_realloc or (24, 256, 8)
    per = (cu.registers_per_sm // CUDA_WARPGROUP_SIZE - PRODUCER_REGISTERS) // max(1, consumers)
    return max(lo, min(hi, cu.registers_per_thread // step * step, per // step * step))


def consumer_overhead(view) -> int:
    """Registers per consumer thread besides the accumulators: :data:`CONSUMER_OVERHEAD`,
    plus :data:`MATH_OVERHEAD` when an epilogue statement calls a math function."""
    math: list = []
    for s in view.epilogue:
        ir.walk(s.value, lambda n: math.append(n) if isinstance(n, ir.Call)
                and n.name in ir.MATH_FUNCS else None)
    return CONSUMER_OVERHEAD + (MATH_OVERHEAD if math else 0)


def default_tiles(view, ops: tuple[TmaOperand, TmaOperand], unit, regs: int = 256,
                  panel: int = 64) -> tuple:
    """(BM, BN): see the module docstring; ``BN`` at most what leaves the consumer
    its :func:`consumer_overhead` of ``regs`` registers with ``64 x BN / 128``
    accumulators."""
    ext = view.out_extents
    m_ext, n_ext = _const(ext[view.m_dim]), _const(ext[view.n_dim])
    values = unit.n_values or (unit.shape[1],)
    if ops[1].mn_major:
        values = tuple(v for v in values if v % panel == 0) or values
    fits = [v for v in values if 64 * v // CUDA_WARPGROUP_SIZE + consumer_overhead(view) <= regs]
    n_max = fits[-1] if fits else values[0]
    bn = n_max if n_ext is None else next((v for v in fits if v >= n_ext), n_max)
    bm = 64 if m_ext is not None and m_ext <= 64 else 128
    return bm, bn


def wgmma_config(option, view, ops, target, stage_bytes) -> WgmmaConfig:
    """The plan's configuration (module docstring): ``option`` the ``tc_tile`` option
    (or None), ``stage_bytes(cfg)`` the staged footprint of one stage for a candidate
    configuration (from the promotion engine's decisions)."""
    unit = wgmma_unit(target)
    rule = tma_rule(target)
    item = dt.itemsize(view.in_dtype)
    span = max(rule.tensor.swizzles)
    k = span // item
    bm, bn = default_tiles(view, ops, unit, consumer_registers(target, 2), span // item)
    if option is not None and getattr(option, "block", None):
        bm, bn = option.block
    if option is not None and getattr(option, "k", None):
        k = int(option.k)
        span = k * item
        if span not in rule.tensor.swizzles:
            raise ScheduleError(f"wgmma K tile {k}: {span} bytes is no swizzle span of the "
                                f"tensor copy ({rule.tensor.swizzles})")
    if option is not None and getattr(option, "warp", None):
        wm, wn = option.warp
    else:
        wm, wn = 64, bn
    persistent = True
    if option is not None and getattr(option, "persistent", None) is not None:
        persistent = bool(option.persistent)
    consumers = (bm // wm) * (bn // wn) if wm and wn and bm % wm == 0 and bn % wn == 0 else 1
    regs = consumer_registers(target, consumers)
    cfg = WgmmaConfig((bm, bn), (wm, wn), k, 2, persistent, span, PRODUCER_REGISTERS, regs)
    cfg.check(unit)
    for op, size, what in ((ops[0], wm, "M"), (ops[1], wn, "N")):
        if op.mn_major and size % (span // item):
            raise ScheduleError(f"wgmma warpgroup tile {what} = {size}: an {what}-major operand is "
                                f"staged in panels of {span // item}, the tile must be a "
                                f"multiple")
    over = consumer_overhead(view)
    if cfg.accumulators() + over > regs:
        raise ResourceLimitError(f"wgmma warpgroup tile {cfg.warp}: {cfg.accumulators()} "
                                 f"accumulators per thread (+{over}) exceed the {regs} "
                                 f"registers a consumer warpgroup gets")
    limit = max(target.capacity("shared"), target.cuda.shared_memory_optin)
    per = stage_bytes(cfg)
    fit = (limit - RESERVED_SHARED) // per
    if option is not None and getattr(option, "stages", None):
        stages = int(option.stages)
        if not 2 <= stages <= MAX_STAGES:
            raise ScheduleError(f"wgmma pipeline stages must be 2..{MAX_STAGES}, got {stages}")
    else:
        stages = min(MAX_STAGES, fit)
    if stages > fit or stages < 2:
        raise ResourceLimitError(f"wgmma tiles {cfg.block} x K {k}: {stages} stage(s) of "
                                 f"{per} bytes (+{RESERVED_SHARED}) need more than the "
                                 f"{limit} bytes of shared memory {target.name} allows per "
                                 f"block (smaller tiles or fewer stages fit)")
    return WgmmaConfig((bm, bn), (wm, wn), k, stages, persistent, span, PRODUCER_REGISTERS,
                       regs).check(unit)
