"""Tiles of a fused NPU chain from the data-movement model on the NPU's memory levels.

The fused program (built by the NPU lowering, :mod:`polycomp.hw.npu.lower_chain`)
runs the block order ``(b, m, n | l, k)``:
``TM x TL`` score tiles, ``TN`` columns of ``O`` per block (one block when ``N <=
TN``: no recomputation), ``KL1`` columns of ``X`` per L1 stage, ``k0`` per cube step.
With the model of :mod:`.movement_model` (a tile is reloaded once per iteration of
each block loop from the outermost to the innermost one that indexes it; the
intermediate moves nothing), the GM traffic in bytes is, per batch element, with
``e`` the cube dtype's size and ``nX = ceil(X / T_X)``::

    X: e M K nL nN      Y: e K L nM nN      Z: e L N nM      O: 4 M N
    (X: e M K when K is a constant that one L1 stage holds: X's row block stays in L1)
    inputs between the products: 4 x (their tile) x the blocks that load them

(``O`` stays in UB or L0C across the ``l`` blocks, so it is written once.  On the A2
generation the score, ``P`` and ``P Z`` tiles pass between the cube and vector cores
through a small per-block GM workspace of two slots, which stays in L2: the model
counts the HBM traffic and leaves those transfers out.)  The
memory usage ``MU`` is not one number on the NPU: each buffer lives at its own level,
so a candidate fits when the program's buffers — with their ping-pong copies, aligned
as the simulator allocates them — fit L1, L0A, L0B, L0C and UB (the NPU lowering
decides: ``NpuLoweringModel.chain_usage``, :mod:`polycomp.scheduler.npu.plan`).  The
choice is the fitting candidate
of least predicted traffic among those with one ``n`` block (several recompute ``S``:
the model's non-fusible orders, taken only when nothing else fits; ties: the larger
``TM x TL``, then fewer cube steps);
``TM`` ranges over multiples of 16 up to 256 and ``TL`` over multiples of 64 (a
vector repeat is 256 B, 64 fp32 values per row of the score tile: a ``TL`` of 96
would pay 2 repeats for 1.5) up to 256 (or the extents padded to 16),
``TN`` is ``N`` padded to 16 when that fits (else the largest fitting multiple of
16), ``KL1`` is ``K`` padded to ``k0``, at most ``8 k0``, halved until it fits.

The unfused figure is the phased program's traffic by the same rules: each product
tiled alone with the cube's tiles (:func:`~polycomp.scheduler.npu.cube.fit_cube_tiles`),
``T`` written in float32, the vector phase reading it (and the inputs between the
products) and writing ``P``, the second product reading ``P``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polycomp.errors import ResourceLimitError, TargetError
from polycomp.hw.target import Target
from polycomp.scheduler.chain.movement_model import ChainDims
from polycomp.scheduler.chain.npu_detect import NpuChain
from polycomp.scheduler.chain.plan import BIG, _extent

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.scheduler.npu.plan import NpuLoweringModel

__all__ = ["NpuChainPlan", "NpuChainTiles", "npu_chain_plan", "fused_bytes",
           "unfused_bytes", "x_resident"]

_SIDES = (256, 192, 128, 96, 64, 48, 32, 16)
LEVELS = ("L1", "L0A", "L0B", "L0C", "UB")


@dataclass(frozen=True)
class NpuChainTiles:
    """``TM x TL`` score tile (L0C, UB), ``TN`` columns of ``O`` per block, ``k0`` per
    cube step, ``KL1`` columns of ``X`` per L1 stage."""
    tm: int
    tl: int
    tn: int
    k0: int
    kl1: int


def x_resident(k: int | None, t: NpuChainTiles) -> bool:
    """Does X's ``TM x K`` row block stay in L1 across the ``l`` blocks?  (``K`` a
    constant that one L1 stage holds.)"""
    return k is not None and k <= t.kl1


@dataclass(frozen=True, eq=False)
class NpuChainPlan:
    """The plan of a fused chain (the payload of ``npu_chain:<n>``): the chain, its
    extents, the tiles and what they use and move, the double buffering asked for."""
    chain: NpuChain
    dims: ChainDims
    symbolic: tuple[str, ...]
    tiles: NpuChainTiles
    usage: tuple[tuple[str, int, int], ...]     # (level, bytes used, capacity)
    fused: float                                # predicted GM bytes
    unfused: float
    candidates: int
    double_buffer: bool = True
    cycles: tuple[int, int] | None = None       # the A2 cycle model: (fused, unfused)

    def describe(self) -> list[str]:
        d, m, t = self.dims, self.chain.match, self.tiles
        sym = f" (symbolic {', '.join(self.symbolic)} sized as {BIG})" if self.symbolic else ""
        mid = " + ".join([*(e.stage.name for e in m.elementwise),
                          *(["online softmax"] if m.has_softmax else []),
                          *([f"cast to {self.chain.dtype}"] if self.chain.cast_stage else [])])
        ratio = self.unfused / self.fused if self.fused else float("inf")
        use = ", ".join(f"{lv} {u}/{c} B" for lv, u, c in self.usage)
        return [f"chain {m.name} ({self.chain.dtype} cube operands, fp32 accumulation): "
                f"batch {d.batch} x (M={d.m}, K={d.k}, L={d.l}, N={d.n}){sym}, between the "
                f"products: {mid or 'nothing'}",
                f"block order (b, m, n | l, k): S tile TM x TL = {t.tm} x {t.tl} via a GM "
                f"workspace, TN={t.tn}, k0={t.k0}, KL1={t.kl1} ({self.candidates} candidates fit)",
                f"  buffers (two block sets with double buffering): {use}",
                f"  predicted GM traffic fused {self.fused / 2**20:.2f} MiB vs unfused "
                f"{self.unfused / 2**20:.2f} MiB (unfused / fused = {ratio:.2f})",
                *([f"  A2 cycle model: fused {self.cycles[0]} vs unfused {self.cycles[1]} "
                   f"cycles"] if self.cycles else [])]


def _pad(v: int, q: int) -> int:
    return -(-v // q) * q


def _input_bytes(chain: NpuChain, d: ChainDims, nm: float, nl: float, nn: float,
                 fused: bool) -> float:
    """GM bytes of the inputs read between the products."""
    total = 0.0
    seen = set()
    for e in chain.match.elementwise:
        from polycomp.scheduler.chain.detect import _loads
        for ld in _loads(e.stage.body):
            if ld.buffer is e.prev or ld.buffer.name in seen:
                continue
            seen.add(ld.buffer.name)
            it = {v.name: k for k, v in enumerate(e.iters)}
            pos = {it.get(getattr(i, "name", ""), -1) for i in ld.indices}
            has_m, has_l = (len(e.iters) - 2) in pos, (len(e.iters) - 1) in pos
            size = (d.m if has_m else 1) * (d.l if has_l else 1) * 4 * d.batch
            if fused:
                size *= nn * (1 if has_l else nl) * (1 if has_m else nm)
            total += size
    return total


def fused_bytes(chain: NpuChain, d: ChainDims, t: NpuChainTiles, k_const: bool) -> float:
    e = 2 if chain.dtype == "float16" else 4
    nm, nl, nn = (math.ceil(d.m / t.tm), math.ceil(d.l / t.tl), math.ceil(d.n / t.tn))
    x = d.m * d.k if x_resident(d.k if k_const else None, t) else d.m * d.k * nl * nn
    per = e * (x + d.k * d.l * nm * nn + d.l * d.n * nm) + 4 * d.m * d.n
    return d.batch * per + _input_bytes(chain, d, nm, nl, nn, True)


def unfused_bytes(chain: NpuChain, d: ChainDims, target: Target, double_buffer: bool) -> float:
    from polycomp.scheduler.npu.cube import fit_cube_tiles
    e = 2 if chain.dtype == "float16" else 4
    ct = fit_cube_tiles(target, e, 2 if double_buffer else 1)

    def gemm(m: int, k: int, n: int) -> float:     # operands of e bytes, fp32 out
        return e * (m * k * math.ceil(n / ct.n0) + k * n * math.ceil(m / ct.m0)) + 4 * m * n
    mid = 4 * d.m * d.l + e * d.m * d.l if (chain.match.elementwise or chain.match.softmax
                                            or chain.cast_stage) else 0
    return d.batch * (gemm(d.m, d.k, d.l) + mid + gemm(d.m, d.l, d.n)) + \
        _input_bytes(chain, d, 1, 1, 1, False)


def _dims(chain: NpuChain, model) -> tuple[ChainDims, tuple[str, ...]]:
    m = chain.match
    first = next(s for s in model.statements if s.stage is m.first and s.kind == "update")
    second = next(s for s in model.statements if s.stage is m.second and s.kind == "update")
    nb = m.batch_dims
    ext = {"m": _extent(first, nb), "l": _extent(first, nb + 1), "k": _extent(first, nb + 2),
           "n": _extent(second, nb + 1)}
    sym = [k for k, v in ext.items() if v is None]
    batch = 1
    for k in range(nb):
        v = _extent(first, k)
        if v is None:
            sym.append(f"b{k}")
        batch *= v if v is not None else 1
    return ChainDims(*(ext[k] or BIG for k in ("m", "n", "k", "l")), batch=batch), tuple(sym)


def _search(chain: NpuChain, model, target: Target, double_buffer: bool,
            override: tuple[int, ...] | None, d: ChainDims, sym: tuple[str, ...],
            sides_m: list[int], sides_l: list[int],
            lowering: NpuLoweringModel) -> tuple[tuple | None, int]:
    """The best fitting candidate over ``sides_m x sides_l`` and how many fit."""
    np_, kp = _pad(d.n, 16), _pad(d.k, 16)
    best: tuple | None = None
    count = 0
    for tm in sides_m:
        for tl in sides_l:
            k0 = next(k for k in (64, 32, 16) if tl % k == 0)
            tns = [override[2]] if override is not None and len(override) == 3 else \
                sorted({min(np_, s) for s in (256, 128, 64, 32, 16)}, reverse=True)
            options = [NpuChainTiles(tm, tl, tn, k, kl1)
                       for tn in tns
                       for k in sorted({k0, 16}, reverse=True)
                       for kl1 in sorted({min(_pad(kp, k), f * k) for f in (8, 4, 2, 1)},
                                         reverse=True)]
            for t in options:
                use = lowering.chain_usage(model.graph, chain, t, double_buffer, target)
                if use is None:
                    continue
                count += 1
                # several n blocks recompute S (a private loop outside a shared one):
                # only when no candidate without fits, as the model says
                key = (t.tn < d.n, fused_bytes(chain, d, t, "k" not in sym), -t.tm * t.tl,
                       -t.tn, -t.k0)
                if best is None or key < best[0]:
                    best = (key, t, use)
                break          # the first fitting TN / k0 / KL1 for this (TM, TL)
    return best, count


def npu_chain_plan(chain: NpuChain, model, target: Target, double_buffer: bool,
                   override: tuple[int, ...] | None,
                   lowering: NpuLoweringModel) -> NpuChainPlan:
    """The tiles of the module docstring (``override``: ``(TM, TL)`` or ``(TM, TL,
    TN)``; ``lowering`` says which candidates fit); raises :class:`TargetError` when
    no candidate fits (:class:`ResourceLimitError` when the overriding tiles do not)."""
    d, sym = _dims(chain, model)
    mp, lp = _pad(d.m, 16), _pad(d.l, 16)
    sides_m = sorted({min(s, mp) for s in _SIDES}, reverse=True)
    # TL: whole vector repeats (256 B = 64 fp32 per row of the S tile), so that no
    # vector instruction on the S tile pays for a partly used repeat; any multiple of
    # 16 when none of those fits (small UBs)
    aligned = sorted({min(s, lp) for s in _SIDES if s % 64 == 0}, reverse=True)
    rest = sorted({min(s, lp) for s in _SIDES} - set(aligned), reverse=True)
    if override is not None:
        sides_m, aligned, rest = [override[0]], [override[1]], []
    best, count = _search(chain, model, target, double_buffer, override, d, sym, sides_m,
                          aligned, lowering)
    if best is None and rest:
        best, count = _search(chain, model, target, double_buffer, override, d, sym, sides_m,
                              rest, lowering)
    if best is None and override is not None:
        raise ResourceLimitError(f"option chain_tiles {override}: the fused chain "
                                 f"program's buffers do not fit target {target.name}")
    if best is None:
        raise TargetError(f"npu chain {chain.match.name}: no tiles fit the buffers of "
                          f"target {target.name}")
    _, t, use = best
    return NpuChainPlan(chain, d, sym, t, use, fused_bytes(chain, d, t, "k" not in sym),
                        unfused_bytes(chain, d, target, double_buffer), count, double_buffer)
