"""The data-movement and time model of a fused conv chain (after Chimera, thesis ch. 3).

The fused program (:mod:`.conv_program`) runs, per image ``n``, the block nest

    for spatial tile (ty, tx) of TH x TW output pixels        loop "s"
      for f-block of TF intermediate channels                 loop "f" (shared)
        conv1 block: all input channels c, window (kh1, kw1)  loop "c" (one trip)
        conv2 block: all output channels g, window (kh2, kw2) loop "g" (one trip)

with the intermediate tile ``TF x IH x IW`` (``IH = TH + KH2 - 1``, ``IW = TW + KW2 - 1``:
the halo of the second window, recomputed by neighbouring tiles) produced and consumed
inside the block.  Tensors and the loops indexing them: ``X (s, c)``, ``W1 (f, c)``,
``T (s, f)``, ``W2 (g, f)``, ``O (s, g)``; operator 1 runs ``(s, f, c)``, operator 2
``(s, f, g)``.

* **Data volume** (elements, Chimera's rule): a tensor's tile is reloaded once per
  iteration of each block loop of its operator from the outermost down to the innermost
  loop that indexes it *and has more than one trip* (a one-trip loop leaves the tile in
  place).  So ``X`` moves once per spatial tile (its whole-channel patch with both halos,
  clipped to the image), ``W1`` and ``W2`` once in all when ``TF = F1`` (one f-block) and
  once per spatial tile otherwise, ``O`` once; fused, ``T`` moves nothing.
  :func:`fused_volume` is the closed form (per-axis sums of the clipped tile extents);
  :func:`simulate_volume` walks the block nest and counts tile changes (the tests check
  one against the other).
* **Memory usage** of a block (elements), what the kernel keeps per thread: the packed
  input patch ``C KH1 KW1 x IH IW``, the intermediate tile ``TF x IH IW``, its packed
  window ``TF KH2 KW2 x TH TW`` (none for a 1x1 second window), the accumulator
  ``F2 x TH TW`` and the weight blocks ``TF C KH1 KW1 + F2 TF KH2 KW2``.
* **FLOPs**: the fused kernel computes the first convolution on ``IH x IW`` pixels per
  tile (padded to whole vectors): ``2 C KH1 KW1 F1`` per pixel, the recomputation of the
  halo included; the second on ``TH x TW`` (padded).
* **Unfused** (each convolution alone, the normal pipeline): the same rule for one
  convolution with its own best tiles per level, ``T`` written by the first and read
  (with the second's halo) by the second, except at a level holding all of ``T`` in half
  its capacity (then it stays there between the two).

**Cost rule** (:func:`predicted_time`): with ``D_l`` the elements moved into level ``l``
(L1, L2, L3) and the machine's rates (:class:`MachineRates`: FLOP per cycle of the vector
unit, bytes per cycle into each level), the time of a variant is the roofline bound
``t = max(FLOPs / P, max_l 4 D_l / B_l)`` (computation overlaps every level's transfers);
ties are broken by ``sum_l 4 D_l / B_l`` (less movement wins when both are compute
bound).  The chain is fused only when ``(t, sum)`` of the fused kernel is smaller than the
unfused one's.  Only the levels that hold the kernel's block (``MU`` fits: L2 and L3 with
the planner's tiles) enter the rule: inside a smaller level (L1) both variants run the
same register-block micro-kernels, which the model counts as equal; ``explain`` still
prints such a level's volumes under the best tiles that would fit it, for information.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

__all__ = ["ConvChainDims", "ConvTiles", "MachineRates", "ConvLevel", "ConvDecision",
           "fused_volume", "simulate_volume", "fused_usage", "fused_flops", "single_volume",
           "single_usage", "unfused_level_volume", "predicted_time", "best_fused_tiles",
           "candidate_tiles", "decide", "brute_force_tiles"]


@dataclass(frozen=True)
class ConvChainDims:
    """Extents: batch ``n``, input ``c x h x w``, intermediate ``f1 x h1 x w1``, output
    ``f2 x h2 x w2``; windows ``k1h x k1w``, ``k2h x k2w``; the second's padding."""
    n: int
    c: int
    h: int
    w: int
    f1: int
    h1: int
    w1: int
    f2: int
    h2: int
    w2: int
    k1h: int
    k1w: int
    k2h: int
    k2w: int
    p1h: int = 0
    p1w: int = 0
    p2h: int = 0
    p2w: int = 0

    @property
    def k1(self) -> int:
        return self.k1h * self.k1w

    @property
    def k2(self) -> int:
        return self.k2h * self.k2w

    @property
    def t_size(self) -> int:
        return self.n * self.f1 * self.h1 * self.w1


@dataclass(frozen=True)
class ConvTiles:
    """Output pixels per tile ``th x tw`` and intermediate channels per block ``tf``."""
    th: int
    tw: int
    tf: int


@dataclass(frozen=True)
class MachineRates:
    """Nominal per-core rates of the cost rule: FLOP per cycle of the vector unit (2 FMA
    pipes x 2 x lanes) and bytes per cycle into each level (from the next outer one)."""
    flops: float
    into: tuple[tuple[str, float], ...] = (("L1", 64.0), ("L2", 32.0), ("L3", 8.0))

    @staticmethod
    def for_target(target) -> MachineRates:
        """Nominal rates of ``target``: two FMA pipes of its float32 vector width (4
        lanes for scalar C: what gcc's SSE code reaches)."""
        lanes = target.vector_lanes("float32")
        return MachineRates(flops=4.0 * (lanes if lanes > 1 else 4))

    def bandwidth(self, level: str) -> float | None:
        return dict(self.into).get(level)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _pad(v: int, vw: int) -> int:
    return _ceil(v, vw) * vw


def _axis_extents(out: int, t: int, halo: int, lim: int, shift: int) -> list[int]:
    """Per tile along one axis: the extent of ``[o0 - shift, o0 + t - 1 + halo - shift]``
    clipped to ``[0, lim)`` (a tile starts at ``o0``)."""
    out_ = []
    for o0 in range(0, out, t):
        lo, hi = o0 - shift, o0 + t - 1 + halo - shift
        out_.append(max(0, min(hi, lim - 1) - max(lo, 0) + 1))
    return out_


def _xpatch(d: ConvChainDims, t: ConvTiles) -> tuple[list[int], list[int]]:
    """Rows and columns of the input patch of each tile row / column (both halos)."""
    rows = _axis_extents(d.h2, t.th, d.k2h - 1 + d.k1h - 1, d.h, d.p2h + d.p1h)
    cols = _axis_extents(d.w2, t.tw, d.k2w - 1 + d.k1w - 1, d.w, d.p2w + d.p1w)
    return rows, cols


def fused_volume(d: ConvChainDims, t: ConvTiles) -> dict[str, float]:
    """``DV`` per tensor (elements, all images) of the fused block nest (closed form)."""
    rows, cols = _xpatch(d, t)
    tiles = d.n * _ceil(d.h2, t.th) * _ceil(d.w2, t.tw)
    nf = _ceil(d.f1, t.tf)
    reload_w = tiles if nf > 1 else 1
    return {"x": float(d.n * d.c * sum(rows) * sum(cols)),
            "w1": float(reload_w * d.f1 * d.c * d.k1),
            "w2": float(reload_w * d.f2 * d.f1 * d.k2),
            "o": float(d.n * d.f2 * d.h2 * d.w2)}


def simulate_volume(d: ConvChainDims, t: ConvTiles) -> dict[str, float]:
    """The same volume by walking the block nest ``(n, ty, tx, f-block | c, g)`` and
    adding a tensor's (clipped) tile whenever the tile the block needs differs from the
    resident one (for the tests: an independent count of the closed form)."""
    res: dict[str, object] = {}
    out = {"x": 0.0, "w1": 0.0, "w2": 0.0, "o": 0.0}

    def need(name: str, key: object, size: int) -> None:
        if res.get(name) != key:
            res[name] = key
            out[name] += size
    for n in range(d.n):
        for y0 in range(0, d.h2, t.th):
            for x0 in range(0, d.w2, t.tw):
                ylo = max(0, y0 - d.p2h - d.p1h)
                yhi = min(d.h - 1, y0 + t.th - 1 + d.k2h - 1 + d.k1h - 1 - d.p2h - d.p1h)
                xlo = max(0, x0 - d.p2w - d.p1w)
                xhi = min(d.w - 1, x0 + t.tw - 1 + d.k2w - 1 + d.k1w - 1 - d.p2w - d.p1w)
                th, tw = min(t.th, d.h2 - y0), min(t.tw, d.w2 - x0)
                for f0 in range(0, d.f1, t.tf):
                    tf = min(t.tf, d.f1 - f0)
                    need("x", (n, y0, x0), d.c * max(0, yhi - ylo + 1) * max(0, xhi - xlo + 1))
                    need("w1", f0, tf * d.c * d.k1)
                    need("w2", f0, d.f2 * tf * d.k2)
                    need("o", (n, y0, x0), d.f2 * th * tw)
    return out


def fused_usage(d: ConvChainDims, t: ConvTiles) -> int:
    """``MU`` of a fused block (elements; module docstring)."""
    ih, iw = t.th + d.k2h - 1, t.tw + d.k2w - 1
    b2 = 0 if d.k2 == 1 else t.tf * d.k2 * t.th * t.tw
    return (d.c * d.k1 * ih * iw + t.tf * ih * iw + b2 + d.f2 * t.th * t.tw
            + t.tf * d.c * d.k1 + d.f2 * t.tf * d.k2)


def fused_flops(d: ConvChainDims, t: ConvTiles, vw: int = 1) -> float:
    """FLOPs the fused kernel executes: the first convolution on each tile's whole
    ``IH x IW`` region (halo recomputed, padded to ``vw``), the second on ``TH x TW``."""
    tiles = d.n * _ceil(d.h2, t.th) * _ceil(d.w2, t.tw)
    ip = _pad((t.th + d.k2h - 1) * (t.tw + d.k2w - 1), vw)
    pp = _pad(t.th * t.tw, vw)
    return float(tiles * (2 * d.c * d.k1 * d.f1 * ip + 2 * d.f1 * d.k2 * d.f2 * pp))


def unfused_flops(d: ConvChainDims) -> float:
    return float(2 * d.n * (d.c * d.k1 * d.f1 * d.h1 * d.w1 + d.f1 * d.k2 * d.f2 * d.h2 * d.w2))


@dataclass(frozen=True)
class _Single:
    """One convolution alone: input ``c x h x w``, output ``f x ho x wo``, window."""
    n: int
    c: int
    h: int
    w: int
    f: int
    ho: int
    wo: int
    kh: int
    kw: int
    ph: int
    pw: int


def _singles(d: ConvChainDims) -> tuple[_Single, _Single]:
    return (_Single(d.n, d.c, d.h, d.w, d.f1, d.h1, d.w1, d.k1h, d.k1w, d.p1h, d.p1w),
            _Single(d.n, d.f1, d.h1, d.w1, d.f2, d.h2, d.w2, d.k2h, d.k2w, d.p2h, d.p2w))


def single_volume(s: _Single, t: ConvTiles) -> dict[str, float]:
    """One convolution tiled ``(s, f | c)``: input patch per spatial tile, weights once
    (one f-block) or per tile, output once."""
    rows = _axis_extents(s.ho, t.th, s.kh - 1, s.h, s.ph)
    cols = _axis_extents(s.wo, t.tw, s.kw - 1, s.w, s.pw)
    tiles = s.n * _ceil(s.ho, t.th) * _ceil(s.wo, t.tw)
    nf = _ceil(s.f, t.tf)
    return {"x": float(s.n * s.c * sum(rows) * sum(cols)),
            "w": float((tiles if nf > 1 else 1) * s.f * s.c * s.kh * s.kw),
            "o": float(s.n * s.f * s.ho * s.wo)}


def single_usage(s: _Single, t: ConvTiles) -> int:
    return s.c * s.kh * s.kw * t.th * t.tw + t.tf * t.th * t.tw + t.tf * s.c * s.kh * s.kw


def _best(cands, usage, volume, cap: int):
    """The candidate of least total volume whose usage fits ``cap`` (None if none)."""
    best, key = None, None
    for t in cands:
        if usage(t) > cap:
            continue
        k = (sum(volume(t).values()), usage(t))
        if key is None or k < key:
            best, key = t, k
    return best


def candidate_tiles(h2: int, w2: int, f1: int, step: int) -> list[ConvTiles]:
    """The tiles the planner considers: ``TH`` in 1..min(H2, 64), ``TW`` the whole row or
    a power of two below it, ``TF`` the whole of ``F1`` or a multiple of ``step`` (the
    micro-kernel's rows: a block fills at least one register block), at most 16 of them."""
    ths = list(range(1, min(h2, 64) + 1))
    tws = sorted({w2, *[p for p in (4, 8, 16, 32, 64) if p < w2]})
    tfs = sorted({f1, *[k * step for k in range(1, 16) if k * step < f1]})
    return [ConvTiles(a, b, c) for a in ths for b in tws for c in tfs]


@dataclass(frozen=True)
class ConvLevel:
    """One level's prediction: elements moved into it fused and unfused, and the tiles
    the fused figure assumes (the kernel's, or the level's own when ``MU`` exceeds it)."""
    level: str
    capacity: int
    fused: float
    unfused: float
    tiles: ConvTiles
    usage: int
    counted: bool = True     # the kernel's block fits: the level enters the cost rule


def unfused_level_volume(d: ConvChainDims, cap: int, step: int) -> float:
    """Elements moved into a level of ``cap`` elements by the two convolutions alone
    (each with its best tiles for that level; ``T`` kept when it fits half the level)."""
    total = 0.0
    for k, s in enumerate(_singles(d)):
        cands = candidate_tiles(s.ho, s.wo, s.f, step)
        t = _best(cands, lambda t, s=s: single_usage(s, t),
                  lambda t, s=s: single_volume(s, t), cap)
        if t is None:       # nothing fits: one pixel, one channel at a time
            t = ConvTiles(1, 1, 1)
        v = single_volume(s, t)
        if d.t_size <= cap // 2:        # T stays in the level between the two
            v["o" if k == 0 else "x"] = 0.0
        total += sum(v.values())
    return total


@dataclass(frozen=True)
class _LevelFacts:
    """What a level's figures need independently of the kernel's tiles: its capacity
    (elements), the best fused tiles that fit it and the unfused volume."""
    name: str
    cap: int
    own: ConvTiles
    unfused: float


def _level_facts(d: ConvChainDims, levels: list[tuple[str, int]],
                 step: int) -> list[_LevelFacts]:
    cands = candidate_tiles(d.h2, d.w2, d.f1, step)
    out = []
    for name, cap_b in levels:
        cap = cap_b // 4
        own = _best(cands, lambda x: fused_usage(d, x), lambda x: fused_volume(d, x),
                    cap) or ConvTiles(1, 1, 1)
        out.append(_LevelFacts(name, cap, own, unfused_level_volume(d, cap, step)))
    return out


def _levels_for(d: ConvChainDims, tiles: ConvTiles, facts: list[_LevelFacts]) -> list[ConvLevel]:
    out = []
    mu = fused_usage(d, tiles)
    for f in facts:
        t = tiles if mu <= f.cap else f.own
        out.append(ConvLevel(f.name, f.cap, sum(fused_volume(d, t).values()), f.unfused, t,
                             fused_usage(d, t), mu <= f.cap))
    return out


def level_volumes(d: ConvChainDims, tiles: ConvTiles, levels: list[tuple[str, int]],
                  step: int) -> list[ConvLevel]:
    """Per ``(level, capacity in bytes)``: the fused and unfused volumes (cost rule)."""
    return _levels_for(d, tiles, _level_facts(d, levels, step))


def predicted_time(flops: float, volumes: list[tuple[str, float]],
                   rates: MachineRates) -> tuple[float, float]:
    """``(max(FLOPs / P, max_l 4 D_l / B_l), sum_l 4 D_l / B_l)`` in cycles (cost rule)."""
    moves = [4.0 * v / bw for lv, v in volumes if (bw := rates.bandwidth(lv))]
    return max([flops / rates.flops, *moves]), sum(moves)


@dataclass(frozen=True)
class ConvDecision:
    """The model's verdict: the kernel's tiles, per-level volumes, FLOPs and predicted
    cycles fused and unfused, and whether to fuse."""
    tiles: ConvTiles
    levels: tuple[ConvLevel, ...]
    fused_flops: float
    unfused_flops: float
    fused_time: tuple[float, float]
    unfused_time: tuple[float, float]

    @property
    def fuse(self) -> bool:
        return self.fused_time < self.unfused_time


def _fused_cost(d, t, facts, rates, vw, cap) -> tuple[float, float]:
    """Predicted fused cycles with the kernel's tiles ``t``; the kernel's home level
    (``cap`` elements) must hold its block."""
    if fused_usage(d, t) > cap:
        return (math.inf, math.inf)
    vols = [(lv.level, lv.fused) for lv in _levels_for(d, t, facts) if lv.counted]
    return predicted_time(fused_flops(d, t, vw), vols, rates)


def _home(levels: list[tuple[str, int]]) -> str:
    return "L2" if any(n == "L2" for n, _ in levels) else levels[-1][0]


def best_fused_tiles(d: ConvChainDims, levels: list[tuple[str, int]], rates: MachineRates,
                     step: int, vw: int, min_tiles: int = 1,
                     facts: list[_LevelFacts] | None = None) -> ConvTiles:
    """The planner: among :func:`candidate_tiles` whose block fits the kernel's home
    level (L2: the per-thread buffers), the least predicted fused time; among equal times
    the larger tile.  Candidates with fewer spatial tiles than ``min_tiles`` (threads) are
    taken only when none has enough."""
    cap = dict(levels)[_home(levels)] // 4
    facts = facts if facts is not None else _level_facts(d, levels, step)
    best = None
    for enough in (True, False):
        for t in candidate_tiles(d.h2, d.w2, d.f1, step):
            if fused_usage(d, t) > cap:
                continue
            if enough and d.n * _ceil(d.h2, t.th) * _ceil(d.w2, t.tw) < min_tiles:
                continue
            cost = _fused_cost(d, t, facts, rates, vw, cap)
            key = (cost, -t.th * t.tw, -t.tf)
            if best is None or key < best[0]:
                best = (key, t)
        if best is not None:
            break
    return best[1] if best else ConvTiles(1, min(d.w2, vw), min(d.f1, step))


def brute_force_tiles(d: ConvChainDims, levels: list[tuple[str, int]], rates: MachineRates,
                      step: int, vw: int) -> tuple[ConvTiles, tuple[float, float]]:
    """Every integer ``TH in 1..H2, TW in 1..W2, TF in min(F1, step)..F1`` (at least a
    register block's rows) whose block fits the home level: the least predicted fused
    time (for the tests, on small spaces)."""
    cap = dict(levels)[_home(levels)] // 4
    facts = _level_facts(d, levels, step)
    best: tuple[ConvTiles, tuple[float, float]] | None = None
    for th, tw, tf in itertools.product(range(1, d.h2 + 1), range(1, d.w2 + 1),
                                        range(min(d.f1, step), d.f1 + 1)):
        t = ConvTiles(th, tw, tf)
        cost = _fused_cost(d, t, facts, rates, vw, cap)
        if best is None or cost < best[1]:
            best = (t, cost)
    assert best is not None
    return best


def decide(d: ConvChainDims, levels: list[tuple[str, int]], rates: MachineRates,
           step: int, vw: int, tiles: ConvTiles | None = None,
           min_tiles: int = 1) -> ConvDecision:
    """Tiles (the planner's unless given), per-level volumes and the cost rule's verdict
    (a pure function of its arguments: memoised, as a compile asks for it up to three
    times — backend, tree pass, code generation)."""
    return _decide(d, tuple(levels), rates, step, vw, tiles, min_tiles)


@functools.lru_cache(maxsize=64)
def _decide(d: ConvChainDims, levels_t: tuple[tuple[str, int], ...], rates: MachineRates,
            step: int, vw: int, tiles: ConvTiles | None, min_tiles: int) -> ConvDecision:
    levels = list(levels_t)
    facts = _level_facts(d, levels, step)
    if tiles is None:
        tiles = best_fused_tiles(d, levels, rates, step, vw, min_tiles, facts)
    lv = _levels_for(d, tiles, facts)
    ff, uf = fused_flops(d, tiles, vw), unfused_flops(d)
    ft = predicted_time(ff, [(x.level, x.fused) for x in lv if x.counted], rates)
    ut = predicted_time(uf, [(x.level, x.unfused) for x in lv if x.counted], rates)
    return ConvDecision(tiles, tuple(lv), ff, uf, ft, ut)
