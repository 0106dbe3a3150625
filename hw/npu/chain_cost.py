"""The A2 cycle model of a fused chain against its phased (unfused) program: the
decision ``npu-chain-fuse`` asks the lowering for (:meth:`.lower.LoweringModel.
chain_cycles`).

Assumes: the fused program of :mod:`.lower_chain` (blocks ``(b, m, n)`` over the cube
cores, ``ceildiv(L, TL)`` steps per block; per step the cube's two products, the score
and ``P`` tiles handed over through GM between the cube core and its two vector cores)
and the phased program of :mod:`.lower_phases` (each product tiled alone with 128 x 128
output tiles over every cube core, the middle stages on every vector core, a barrier
of every core between phases); the chip's figures of :class:`.target.NpuParams`.

Guarantees nothing about the simulator's count: it is a model, calibrated on the
simulator's figures of the twenty chain cases of ``polycomp bench chains_npu
--full-batch`` (docs/fusion.md): it orders fused against unfused as the simulator does
in 18 of them (the two it gets wrong are within 10 % of break-even).  A step of the
fused program is serial across the pipes (cube, MTE, vector, two hand-overs); blocks
after a core's first overlap with the one before (the two buffer sets), a step then
costing its slowest pipe plus two hand-overs.
"""
from __future__ import annotations

from polycomp.scheduler.chain.movement_model import ChainDims
from polycomp.scheduler.chain.npu_detect import NpuChain
from polycomp.scheduler.chain.npu_plan import NpuChainTiles

from .target import NpuParams

#: vector instructions per element of the middle: a softmax's passes (max, subtract,
#: exp, sum, divide, their folds and casts) and one per other stage, plus the casts
SOFTMAX_OPS = 11
BASE_OPS = 3
#: output tile of each product in the phased program
GEMM_TILE = 128


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _ops(chain: NpuChain) -> int:
    return BASE_OPS + len(chain.match.elementwise) + \
        (SOFTMAX_OPS if chain.match.has_softmax else 0)


def fused_cycles(chain: NpuChain, d: ChainDims, t: NpuChainTiles, p: NpuParams) -> int:
    """Predicted cycles of the fused program (module docstring)."""
    e = 2 if chain.dtype in ("float16", "bfloat16") else 4
    f = 1 if e == 2 else p.cube_fp32_factor
    blocks = d.batch * _cdiv(d.m, t.tm) * _cdiv(d.n, t.tn)
    steps = _cdiv(d.l, t.tl)
    cube = _cdiv(t.tm, 16) * _cdiv(t.tl, 16) * (_cdiv(d.k, 16) + _cdiv(t.tn, 16)) * f
    vec = _ops(chain) * (_cdiv(t.tm, 2) * t.tl * 4 // p.vector_bytes_per_cycle
                         + p.vector_latency)
    mte = (t.tl * d.k + t.tl * t.tn + t.tm * t.tl) * e // p.gm_bytes_per_cycle \
        + 3 * p.transfer_latency
    x = p.cross_latency
    serial = cube + vec + mte + 2 * x
    overlap = max(cube, vec, mte) + 2 * x
    rounds = _cdiv(blocks, p.aic_cores)
    return steps * serial + (rounds - 1) * steps * overlap + 3 * x


def _gemm(batch: int, m: int, k: int, n: int, e: int, f: int, p: NpuParams) -> int:
    tiles = batch * _cdiv(m, GEMM_TILE) * _cdiv(n, GEMM_TILE)
    tm, tn = min(GEMM_TILE, m), min(GEMM_TILE, n)
    cube = _cdiv(tm, 16) * _cdiv(tn, 16) * _cdiv(k, 16) * f
    mte = (tm * k + k * tn) * e // p.gm_bytes_per_cycle + 2 * p.transfer_latency
    fix = tm * tn * 4 // p.out_bytes_per_cycle
    return _cdiv(tiles, p.aic_cores) * max(cube, mte, fix) + cube + mte + fix


def unfused_cycles(chain: NpuChain, d: ChainDims, p: NpuParams) -> int:
    """Predicted cycles of the phased program (module docstring)."""
    e = 2 if chain.dtype in ("float16", "bfloat16") else 4
    f = 1 if e == 2 else p.cube_fp32_factor
    out = _gemm(d.batch, d.m, d.k, d.l, e, f, p) + _gemm(d.batch, d.m, d.l, d.n, e, f, p)
    if chain.match.has_softmax or chain.match.elementwise:
        per_core = d.batch * d.m * d.l // p.aiv_cores
        out += per_core * (4 + e) // p.gm_bytes_per_cycle \
            + per_core * _ops(chain) * 4 // p.vector_bytes_per_cycle \
            + 6 * p.cross_latency + 4 * p.transfer_latency
    else:
        out += p.cross_latency
    return out
