"""The plan of one conv chain: the match, its extents, the model's decision (tiles,
per-level volumes, predicted times) and the register block (typed; shared by the tree
pass, code generation and ``explain``)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from polycomp.scheduler.chain.conv_detect import ConvChainMatch
from polycomp.scheduler.chain.conv_model import (
    ConvChainDims,
    ConvDecision,
    ConvTiles,
    MachineRates,
    decide,
)
from polycomp.scheduler.chain.plan import _extent, register_block

__all__ = ["ConvChainPlan", "make_conv_plan", "SYMBOLIC", "FORCE_ENV", "TILES_ENV"]

#: extent assumed for a symbolic dimension when sizing tiles (batch: 1)
SYMBOLIC = 64
#: ``POLYCOMP_CONV_CHAIN=force`` fuses whatever the model says (tests, measurements);
#: ``off`` never fuses
FORCE_ENV = "POLYCOMP_CONV_CHAIN"
#: ``POLYCOMP_CONV_CHAIN_TILES=THxTWxTF`` overrides the planner's tiles
TILES_ENV = "POLYCOMP_CONV_CHAIN_TILES"


@dataclass(frozen=True, eq=False)
class ConvChainPlan:
    match: ConvChainMatch
    dims: ConvChainDims
    symbolic: tuple[str, ...]
    decision: ConvDecision
    forced: str              # "", "force" or "off" (the environment override)
    mr: int
    nv: int
    vw: int

    @property
    def tiles(self) -> ConvTiles:
        return self.decision.tiles

    @property
    def fuse(self) -> bool:
        if self.forced == "force":
            return True
        if self.forced == "off":
            return False
        return self.decision.fuse

    def describe(self) -> list[str]:
        d, m, dec, t = self.dims, self.match, self.decision, self.tiles
        sym = (f" (symbolic {', '.join(self.symbolic)} sized as {SYMBOLIC}, batch 1)"
               if self.symbolic else "")
        mid = " + ".join(e.stage.name for e in m.middle) or "nothing"
        out = [f"conv chain {m.name}: {d.n} x {d.c}x{d.h}x{d.w} -> {d.k1h}x{d.k1w} -> "
               f"{d.f1}x{d.h1}x{d.w1} -> {d.k2h}x{d.k2w} -> {d.f2}x{d.h2}x{d.w2}{sym}, "
               f"between: {mid}",
               f"tiles: output {t.th} x {t.tw} pixels, intermediate {t.tf} channels x "
               f"{t.th + d.k2h - 1} x {t.tw + d.k2w - 1} (halo: +{d.k2h - 1} rows, "
               f"+{d.k2w - 1} columns); "
               f"register block {self.mr} x {self.nv} vectors of {self.vw}"]
        for lv in dec.levels:
            note = "" if lv.counted else " (block does not fit: own tiles " \
                f"{lv.tiles.th}x{lv.tiles.tw}x{lv.tiles.tf}, not in the cost rule)"
            out.append(f"  {lv.level} ({lv.capacity} floats): MU={lv.usage}; predicted "
                       f"traffic fused {lv.fused * 4 / 2**20:.2f} MiB vs unfused "
                       f"{lv.unfused * 4 / 2**20:.2f} MiB{note}")
        rec = dec.fused_flops / dec.unfused_flops - 1 if dec.unfused_flops else 0.0
        out.append(f"FLOPs fused {dec.fused_flops / 1e6:.1f} M (recomputed and padding "
                   f"{100 * rec:+.1f}%) vs unfused {dec.unfused_flops / 1e6:.1f} M; predicted "
                   f"cycles max(compute, levels) / sum(levels): fused {dec.fused_time[0]:.0f}"
                   f" / {dec.fused_time[1]:.0f}, unfused {dec.unfused_time[0]:.0f} / "
                   f"{dec.unfused_time[1]:.0f}")
        verdict = "fuse" if dec.fuse else "keep unfused"
        if self.forced:
            verdict += f" (overridden: {FORCE_ENV}={self.forced})"
        out.append(f"decision: {verdict}")
        return out


def _stmt(model, stage, kind: str):
    return next(s for s in model.statements if s.stage is stage and s.kind == kind)


def make_conv_plan(match: ConvChainMatch, model, target) -> ConvChainPlan:
    """Extents from the statements' domains (symbolic ones as :data:`SYMBOLIC`), the
    model's decision for the target's memory hierarchy and vector ISA."""
    u1 = _stmt(model, match.first.stage, "update")
    u2 = _stmt(model, match.second.stage, "update")
    names = ("n", "f1", "h1", "w1", "c")
    ext1 = [_extent(u1, k) for k in range(5)]
    ext2 = [_extent(u2, k) for k in (1, 2, 3)]
    sym = [nm for nm, v in zip(names, ext1) if v is None]
    sym += [nm for nm, v in zip(("f2", "h2", "w2"), ext2) if v is None]
    n = ext1[0] if ext1[0] is not None else 1
    f1, h1, w1, c = (v if v is not None else SYMBOLIC for v in ext1[1:])
    f2, h2, w2 = (v if v is not None else SYMBOLIC for v in ext2)
    a, b = match.first, match.second
    # the input extents follow from the first convolution's (stride 1)
    h, w = h1 + a.kh - 1 - 2 * a.ph, w1 + a.kw - 1 - 2 * a.pw
    if "h1" in sym or "h2" in sym:     # keep the symbolic sizes consistent
        h2 = h1 + 2 * b.ph - b.kh + 1
    if "w1" in sym or "w2" in sym:
        w2 = w1 + 2 * b.pw - b.kw + 1
    dims = ConvChainDims(n, c, max(1, h), max(1, w), f1, h1, w1, f2, max(1, h2), max(1, w2),
                         a.kh, a.kw, b.kh, b.kw, a.ph, a.pw, b.ph, b.pw)
    mr, nv, vw = register_block(target)
    levels = [(lv.name, lv.capacity) for lv in target.memory.levels
              if lv.name in ("L1", "L2", "L3") and lv.capacity > 0]
    threads = target.cpu.threads if target.cpu is not None else 1
    tiles = None
    env = os.environ.get(TILES_ENV, "")
    if env:
        th, tw, tf = (int(v) for v in env.lower().split("x"))
        tiles = ConvTiles(th, tw, tf)
    dec = decide(dims, levels, MachineRates.for_target(target), mr, vw, tiles,
                 min_tiles=threads)
    forced = os.environ.get(FORCE_ENV, "").strip().lower()
    return ConvChainPlan(match, dims, tuple(sym), dec,
                         forced if forced in ("force", "off") else "", mr, nv, vw)
