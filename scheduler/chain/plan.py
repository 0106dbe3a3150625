"""The plan of one fused chain: the match, its extents, the model's per-level optimum
and the kernel's tiles (typed; shared by the schedule pass, code generation and
``explain``)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from polycomp.scheduler.chain.detect import ChainMatch
from polycomp.scheduler.chain.movement_model import ChainDims, LevelPlan, plan_levels

__all__ = ["ChainPlan", "ChainPlans", "chain_plans", "make_plan", "register_block", "BIG"]

#: extent assumed for a symbolic dimension when sizing tiles
BIG = 4096


@dataclass(frozen=True, eq=False)
class ChainPlan:
    match: ChainMatch
    dims: ChainDims                 # constant extents (symbolic ones as BIG)
    symbolic: tuple[str, ...]       # the loops whose extent is symbolic
    levels: tuple[LevelPlan, ...]
    level: str                      # where the intermediate tile lives
    tm: int
    tl: int
    mr: int
    nv: int
    vw: int
    nr2: int = 0                    # columns of the second product's register block (CPU)

    @property
    def nr(self) -> int:
        """Columns of the first product's register block (``nv`` vectors of ``vw``)."""
        return self.nv * self.vw

    def describe(self) -> list[str]:
        d, m = self.dims, self.match
        sym = f" (symbolic {', '.join(self.symbolic)} sized as {BIG})" if self.symbolic else ""
        mid = " + ".join([*(e.stage.name for e in m.elementwise),
                          *(["online softmax"] if m.has_softmax else [])]) or "nothing"
        out = [f"chain {m.name}: batch {d.batch} x (M={d.m}, K={d.k}, L={d.l}, N={d.n}){sym}, "
               f"between the products: {mid}",
               f"block order (b, m, l, k | n): intermediate {m.t.name} tile {self.tm} x {self.tl} "
               f"in {self.level} (register block {self.mr} x {self.nv} vectors of {self.vw})"]
        for lp in self.levels:
            t = lp.tiles
            ratio = lp.unfused / lp.fused if lp.fused else float("inf")
            out.append(f"  {lp.level} ({lp.capacity} floats): T_M={t.m} T_L={t.l} T_K={t.k} "
                       f"T_N={t.n}, MU={lp.usage}; predicted traffic fused "
                       f"{lp.fused * 4 / 2**20:.2f} MiB vs unfused "
                       f"{lp.unfused * 4 / 2**20:.2f} MiB (unfused / fused = {ratio:.2f})")
        return out


@dataclass(eq=False)
class ChainPlans:
    """The chain plans of a compile (typed compile state, ``state.slot(ChainPlans)``),
    computed once: the backend's choice of passes, the fusion pass and code generation
    all ask for them, and each computation detects the chain on the model and checks the
    fused tree's legality with isl.  ``(plan or None, why not)``, None until first asked.
    ``programs``: the fused CPU programs (:class:`~.program.ChainProgram`,
    :class:`~.conv_program.ConvChainProgram`) whose mark ``chain_fused:<n>`` /
    ``conv_chain_fused:<n>`` is their index here; lowering builds their new statements
    (:meth:`statement_builders`)."""
    contraction: tuple[Any, str] | None = None    # tree.plan_for
    conv: tuple[Any, str] | None = None           # conv_tree.conv_plan_for
    programs: list[Any] = field(default_factory=list)

    def statement_builders(self) -> dict[str, Any]:
        """Lowering's builders of the programs' new statements: ``name -> fn(args)``
        instantiating the statement's store at the AST's coordinates."""
        from polycomp import ir
        out: dict[str, Any] = {}
        for p in self.programs:
            for name, s in p.new.items():
                def make(args, s=s):
                    return ir.substitute(s.store(), dict(zip(s.iters, args)))
                out[name] = make
        return out


def chain_plans(state) -> ChainPlans:
    """The chain plans of ``state``'s compile."""
    return state.slot(ChainPlans)


def register_block(target) -> tuple[int, int, int]:
    """``(MR, NV, lanes)`` of ``target``: rows x vectors of float32 accumulators of the
    CPU micro-kernel for its vector register file
    (:func:`polycomp.scheduler.cpu.backbone_tile.register_block`: 6 x 4 zmm of 32, 6 x 2
    ymm of 16) and the vector width in floats (1: scalar C)."""
    from polycomp.scheduler.cpu.backbone_tile import register_block as block
    mr, nv = block(target.cpu.vector_registers if target.cpu is not None else 16)
    return mr, nv, max(1, target.vector_lanes("float32"))


def _extent(stmt, k: int) -> int | None:
    dom = stmt.domain
    mx = dom.dim_max(k)
    if not mx.is_cst():
        return None
    pieces = mx.get_pieces()
    if len(pieces) != 1:
        return None
    aff = pieces[0][1]
    v = aff.get_constant_val()
    return int(v.to_python()) + 1 if v.is_int() else None


def make_plan(match: ChainMatch, model, target) -> ChainPlan:
    """Extents from the statements' domains, the per-level optimum from the target's
    memory hierarchy, and the kernel's tiles: the L1 optimum rounded down to the register
    block (``T_M`` a multiple of ``MR``, ``T_L`` of the vector width), at least one block.
    ``POLYCOMP_CHAIN_TILES=TMxTL`` overrides the tiles (for measurements)."""
    first_upd = next(s for s in model.statements if s.stage is match.first and s.kind == "update")
    second_upd = next(s for s in model.statements if s.stage is match.second
                      and s.kind == "update")
    nb = match.batch_dims
    ext: dict[str, int | None] = {
        "m": _extent(first_upd, nb), "l": _extent(first_upd, nb + 1),
        "k": _extent(first_upd, nb + 2), "n": _extent(second_upd, nb + 1)}
    batch = 1
    sym = [d for d, v in ext.items() if v is None]
    for k in range(nb):
        e = _extent(first_upd, k)
        if e is None:
            sym.append(f"b{k}")
        batch *= e if e is not None else 1
    dims = ChainDims(*(ext[d] if ext[d] is not None else BIG for d in ("m", "n", "k", "l")),
                     batch=batch)
    mr, nv, vw = register_block(target)
    nr = nv * vw
    levels = [(lv.name, lv.capacity) for lv in target.memory.levels
              if lv.name in ("L1", "L2", "L3") and lv.capacity > 0]
    alpha = max(vw, 4)
    plans = plan_levels(dims, levels, alpha, match.has_softmax)
    l1 = next((p for p in plans if p.level == "L1"), plans[0] if plans else None)
    t = l1.tiles if l1 is not None else None
    tm = max(mr, (t.m // mr) * mr) if t else 4 * mr
    tl = max(nr, (t.l // nr) * nr) if t else 8 * vw
    env = os.environ.get("POLYCOMP_CHAIN_TILES", "")
    if env:
        a, b = env.lower().split("x")
        tm, tl = int(a), int(b)
    # the second product's register block: the whole row of O when it is narrower
    nr2 = nr
    if ext["n"] is not None:
        nr2 = max(vw, min(nr, -(-ext["n"] // vw) * vw))
    return ChainPlan(match, dims, tuple(sym), tuple(plans), l1.level if l1 else "L1",
                     tm, tl, mr, nv, vw, nr2)

