"""Pass ``chain-fuse`` for the CUDA targets: the fused chain as a CUDA program tree.

The chain (:mod:`.detect`, :func:`~.tree.plan_for`) is scheduled as the CUDA kernel that
runs it: a tree with the GPU mapping and the micro-kernels as marks, which AST generation
lowers like any other tree and the CUDA IR passes of :mod:`polycomp.hw.cuda.chain_passes`
expand (``chain-ring``, ``chain-steps``, ``chain-kernels``), then the CUDA printer prints.

Assumes: ``ctx.model`` is exactly one chain (``T = X . Y``, optional elementwise stages
and a softmax over ``l``, ``O = S . Z`` over ``nb`` batch dimensions; the optional cast of
``O`` after it), :func:`cuda_plan` gives its plan and tiles.  Guarantees: the output tree
executes every statement instance of the model, once per block that needs it (below), in
an order that satisfies every dependence of the model except those the online softmax
reassociates (checked with isl, :func:`checked_dependences`; otherwise the input tree is
returned with a note).  Its shape (``TM, TL, TN`` the tiles; ``[..]`` band members)::

    domain
      mark "kernel:0"                                         (CudaChainProgram.kernels[0])
        filter  block (bx0, by0, bz0..): b = bz0.., floor(m/TM) = by0, and for the
                statements over n (O_init, O_update, the write-out): floor(n/TN) = bx0;
                with the l loop split (S > 1): bl0 <= floor(l/TL) < bh0
          [extension  { [] -> O_out[b.., m, n] }]           (no cast: the write-out copy)
          sequence
            filter {O_init, S_max_init, S_sum_init}
              mark "chain_step:0"      ACC_INIT: accumulators of O in registers, running
                                       max -inf and sum 0
            filter {T_*, E.., S_max_update, S_exp, S_sum_update, S, O_update}
              mark "chain_ring:0"      the l loop streams its Y / Z (and X) tiles through
                                       a ring of shared buffers (CudaChainProgram.rings[0])
                band [floor(l/TL)]
                  sequence
                    filter {T_init, T_update}   mark "chain_step:1"  FIRST  (S = X . Y)
                    filter {E..}                mark "chain_step:2"  MIDDLE (elementwise)
                    filter {S_max_update, S_exp, S_sum_update, S}
                                                mark "chain_step:3"  SOFTMAX (online)
                    filter {O_update}           mark "chain_step:4"  SECOND (O += P . Z)
            filter {O_out or O_cast}
              mark "chain_step:5"      WRITE_OUT: O (/ row sum) from the registers

with each step's statements below their mark in a sequence of ``filter -> band`` over
their own dimensions (a step of one statement: its band alone; ``T_update`` below a band
``[floor(k/KC)]``: the ``k`` chunks, ``KC`` of the Tensor Core ring, ``KR = 64`` columns
of ``X`` staged at a time by the float32 kernel; ``O_update`` as ``[m, l, n]``).  Steps
without statements (no elementwise stage, no softmax) are left out.  With ``S > 1``
splits of ``l`` (float32 kernel, :func:`~.cuda_kernel.split_count`), the write-out
stores the split's partial tile (``O_part``) and a second kernel combines them::

    domain
      extension { [] -> O_combine[b.., m, n] }
        sequence
          filter {the chain}      mark "kernel:0" -> (as above, O_part for O_out)
          filter {O_combine}      mark "kernel:1" -> mark "chain_step:6" (COMBINE) -> band

The block parameters are the kernel's: ``bx0`` the n-block, ``by0`` the m-block,
``bz0`` (``bz0_<d>`` for several batch dimensions) the batch index, ``bs0`` the split
and ``[bl0, bh0)`` its ``l`` tiles; the AST context bounds them (``ctx.ast_context``).
Statements without ``n`` (the first product, the middle, the softmax) are executed by
every n-block of their ``(batch, m-block)`` (the scores are recomputed per n-block, as the
kernel does), into block-private storage.  Every step is a block-level micro-kernel: the
whole thread block executes it cooperatively (its payload says which statements;
:mod:`polycomp.hw.cuda.chain_passes` expands it for the kernel's threads or warps).

Why the softmax needs a reassociation: with a softmax between the products the row max
and sum need the whole row, so the statements ``S_exp`` and ``S`` (quotient) read a
reduction the ``l`` loop has not finished.  ``SOFTMAX`` is realised as FlashAttention's
online softmax (running max ``m``, ``p = exp(s - m')``, running sum and ``O`` rescaled
by ``exp(m - m')``, ``O / sum`` at the write-out), which computes the same ``O`` up to
rounding; the dependences from the row max to ``S_exp`` and from the row sum to ``S``
are the ones it reassociates (:func:`checked_dependences`).
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import islpy as isl

from polycomp.scheduler.chain.cuda_gate import why_not_fuse
from polycomp.scheduler.chain.cuda_kernel import ALPHA, KR, CudaChainTiles, cuda_tiles
from polycomp.scheduler.chain.detect import ChainMatch
from polycomp.scheduler.chain.movement_model import plan_levels
from polycomp.scheduler.chain.plan import ChainPlan
from polycomp.scheduler.chain.tc_kernel import TcChainTiles, tc_tiles
from polycomp.scheduler.chain.tree import plan_for
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import schedule_from_str, violated_dependences

if TYPE_CHECKING:  # pragma: no cover
    from polycomp.state import CompileState

__all__ = ["ChainKernel", "ChainRing", "ChainStep", "CudaChainFusePass", "CudaChainProgram",
           "StepRole", "Tiles", "checked_dependences", "chain_program", "cuda_plan",
           "program_tree"]

Tiles: TypeAlias = CudaChainTiles | TcChainTiles


class StepRole(enum.Enum):
    """What a ``chain_step`` micro-kernel computes (see the module docstring)."""
    ACC_INIT = "acc_init"
    FIRST = "first"
    MIDDLE = "middle"
    SOFTMAX = "softmax"
    SECOND = "second"
    WRITE_OUT = "write_out"
    COMBINE = "combine"


@dataclass(frozen=True)
class ChainStep:
    """The payload of ``chain_step:<n>``: a block-level micro-kernel of kernel
    ``kernel`` executing the instances of ``statements`` below the mark."""
    role: StepRole
    kernel: int
    statements: tuple[str, ...]


@dataclass(frozen=True)
class ChainRing:
    """The payload of ``chain_ring:<n>``: the ``l`` loop below streams ``streamed``
    (array names: Y's and Z's tiles, X's chunks where they are not resident) through
    ``stages`` shared buffers with ``cp.async`` (1: the Z tile of the next product is
    issued at the top of the iteration and waited for before the second product)."""
    kernel: int
    stages: int
    streamed: tuple[str, ...]
    k_chunk: int                 # the k chunk of one streamed item (KC, or KR for float32)


@dataclass(frozen=True)
class ChainKernel:
    """The payload of a chain's ``kernel:<n>``: ``chain`` (the fused kernel) or
    ``combine`` (the split's second kernel); its threads per block, how the steps use
    them (``warp_rows``: each warp owns that many rows of the ``m`` tile, the Tensor Core
    kernel's 16; 0: the threads deal the elements of each tile among them) and the names
    of the block parameters its tree uses (``batch`` one per batch dimension, ``split``
    and ``l_range`` only with ``S > 1``)."""
    role: str
    threads: int
    warp_rows: int = 0
    n_block: str = ""
    m_block: str = ""
    batch: tuple[str, ...] = ()
    split: str = ""
    l_range: tuple[str, str] | None = None


@dataclass(eq=False)
class CudaChainProgram:
    """Typed compile state of the CUDA chain program (``state.slot(CudaChainProgram)``):
    the plan and tiles, and the payloads the marks index (``kernel:<n>`` ->
    ``kernels[n]``, ``chain_step:<n>`` -> ``steps[n]``, ``chain_ring:<n>`` ->
    ``rings[n]``).  Filled by :class:`CudaChainFusePass`; read by the CUDA IR passes."""
    plan: ChainPlan | None = None
    tiles: Any = None                       # CudaChainTiles | TcChainTiles
    kernels: dict[int, ChainKernel] = field(default_factory=dict)
    steps: list[ChainStep] = field(default_factory=list)
    rings: list[ChainRing] = field(default_factory=list)
    decided: tuple[Any, Any] | None = None  # cuda_plan's answer, computed once


def chain_program(state: CompileState) -> CudaChainProgram:
    """The CUDA chain program of ``state``'s compile."""
    return state.slot(CudaChainProgram)


def cuda_plan(state: CompileState) -> tuple[ChainPlan, Tiles] | tuple[None, str]:
    """The model's chain plan with the CUDA kernel's tiles (``TM, TL``) and the shared
    level's optimum (``alpha = 16``; in 16-bit elements for the Tensor Core kernel) in
    place of the CPU levels, or None and why not (computed once per compile).  The shared
    level's capacity is the target's (``Target.capacity("shared")``: the static shared
    memory of a block)."""
    prog = chain_program(state)
    if prog.decided is None:
        prog.decided = _cuda_plan(state)
    return prog.decided  # type: ignore[return-value]


def _cuda_plan(state: CompileState) -> tuple[ChainPlan, Tiles] | tuple[None, str]:
    plan, why = plan_for(state)
    if plan is None:
        return None, why
    shared = state.target.capacity("shared")
    assert state.target.cuda is not None
    half = plan.match.dtype != "float32"
    tiles: Tiles
    if half:
        tiles = tc_tiles(plan, shared, state.cuda_options.chain_tiles)
    else:
        tiles = cuda_tiles(plan, shared, state.cuda_options.chain_tiles,
                           state.target.cuda.sms)
        if state.cuda_options.chain != "force":      # the float32 kernel's rule
            no = why_not_fuse(plan, tiles, state.target.cuda.sms)
            if no is not None:
                return None, no
    levels = tuple(plan_levels(plan.dims, [("shared", shared * (2 if half else 1))],
                               ALPHA, plan.match.has_softmax))
    return dataclasses.replace(plan, levels=levels, level="shared", tm=tiles.tm,
                               tl=tiles.tl, mr=1, nv=1, vw=1), tiles


# --------------------------------------------------------------------------- the tree

#: the kernel's block parameters (one kernel per chain: kernel 0)
N_BLOCK, M_BLOCK, SPLIT, L_LO, L_HI = "bx0", "by0", "bs0", "bl0", "bh0"


def _batch_params(nb: int) -> tuple[str, ...]:
    return ("bz0",) if nb == 1 else tuple(f"bz0_{d}" for d in range(nb))


@dataclass
class _Stmt:
    """A statement of the program tree: its name, dimension names, and which of its
    dimensions are ``m``, ``l``, ``n`` (None when it has none)."""
    name: str
    dims: list[str]
    m: int | None
    l: int | None      # noqa: E741
    n: int | None
    order: list[int] | None = None     # the leaf band's dimensions (after the batch)


class _Text:
    """The tree's YAML text, built from its statements and the model's parameters."""

    def __init__(self, params: list[str]):
        self.params = params

    def space(self, extra: tuple[str, ...] = ()) -> str:
        names = self.params + [p for p in extra if p not in self.params]
        return f"[{', '.join(names)}] -> " if names else ""

    def inst(self, s: _Stmt) -> str:
        return f"{s.name}[{', '.join(s.dims)}]"

    def union_set(self, pieces: list[tuple[_Stmt, str]], extra: tuple[str, ...] = ()) -> str:
        body = "; ".join(f"{self.inst(s)}{' : ' + c if c else ''}" for s, c in pieces)
        return f"{self.space(extra)}{{ {body} }}"

    def band(self, pieces: list[tuple[_Stmt, list[str]]], coincident: bool = False) -> str:
        n = len(pieces[0][1])
        members = []
        for k in range(n):
            body = "; ".join(f"{self.inst(s)} -> [({e[k]})]" for s, e in pieces)
            members.append(f"{{ {body} }}")
        co = ", ".join("1" if coincident else "0" for _ in range(n))
        return (f'schedule: "{self.space()}[{", ".join(members)}]"\n'
                f"permutable: 1\ncoincident: [ {co} ]\n")


def _indent(text: str, n: int) -> str:
    return "".join(" " * n + line + "\n" for line in text.splitlines())


def _node(head: str, child: str) -> str:
    return head + ("child:\n" + _indent(child, 2) if child else "")


def _seq(children: list[str]) -> str:
    out = "sequence:\n"
    for c in children:
        lines = c.splitlines()
        out += "- " + lines[0] + "\n" + "".join("  " + ln + "\n" for ln in lines[1:])
    return out


def _leaf(t: _Text, s: _Stmt, nb: int) -> str:
    dims = s.dims[nb:]
    if s.order is not None:
        dims = [dims[k] for k in s.order]
    return t.band([(s, dims)]) if dims else ""


def program_tree(plan: ChainPlan, tiles: Tiles, model, prog: CudaChainProgram
                 ) -> tuple[isl.Schedule, isl.Set, isl.Schedule]:
    """The program tree of the module docstring, the AST context of its block parameters,
    and the same tree without extension nodes (what :func:`checked_dependences` is
    checked on: isl cannot flatten extension nodes).  Records the payloads in ``prog``."""
    return _Program(plan, tiles, model, prog).build()


class _Program:
    """The text of the program tree (:func:`program_tree`), built node by node."""

    def __init__(self, plan: ChainPlan, tiles: Tiles, model, prog: CudaChainProgram):
        self.plan, self.tiles, self.model, self.prog = plan, tiles, model, prog
        m = self.m = plan.match
        self.nb = m.batch_dims
        self.tc = isinstance(tiles, TcChainTiles)
        self.splits = 1 if isinstance(tiles, TcChainTiles) else tiles.splits
        params = [model.context.get_dim_name(isl.dim_type.param, k)
                  for k in range(model.context.dim(isl.dim_type.param))]
        self.t = _Text(params)
        self.bparams = _batch_params(self.nb)
        self.block = (N_BLOCK, M_BLOCK, *self.bparams) + \
            ((SPLIT, L_LO, L_HI) if self.splits > 1 else ())
        self.mine = [s for s in model.statements if s.name in set(m.statements)]
        self.S = {s.name: self._stmt(s) for s in self.mine}
        self.first_update = next(s.name for s in self.mine
                                 if s.stage is m.first and s.kind == "update")

    def _stmt(self, s) -> _Stmt:
        m, nb = self.m, self.nb
        d = [f"i{k}" for k in range(s.domain.dim(isl.dim_type.set))]
        if s.stage is m.second and s.kind == "update":
            return _Stmt(s.name, d, nb, nb + 2, nb + 1, [0, 2, 1])
        if s.stage is m.second or (m.out_cast and s.stage is m.stages[-1]):
            return _Stmt(s.name, d, nb, None, nb + 1)
        return _Stmt(s.name, d, nb, nb + 1 if len(d) > nb + 1 else None, None)

    def block_cond(self, s: _Stmt, ring: bool) -> str:
        """``s``'s instances of the block ``(bx0, by0, bz0..)`` (and, in the ring with
        splits, of the split's ``l`` tiles)."""
        tm, tl, tn = self.tiles.tm, self.tiles.tl, self.tiles.tn
        c = [f"{s.dims[k]} = {self.bparams[k]}" for k in range(self.nb)]
        if s.m is not None:
            c.append(f"{tm}{M_BLOCK} <= {s.dims[s.m]} < {tm}{M_BLOCK} + {tm}")
        if s.n is not None:
            c.append(f"{tn}{N_BLOCK} <= {s.dims[s.n]} < {tn}{N_BLOCK} + {tn}")
        if ring and self.splits > 1 and s.l is not None:
            c.append(f"{tl}{L_LO} <= {s.dims[s.l]} < {tl}{L_HI}")
        return " and ".join(c)

    def step(self, role: StepRole, xs: list[_Stmt], child: str, kernel: int = 0) -> str:
        self.prog.steps.append(ChainStep(role, kernel, tuple(x.name for x in xs)))
        name = marks.make(marks.CHAIN_STEP, len(self.prog.steps) - 1).name
        return _node(f'mark: "{name}"\n', child)

    def filt(self, xs: list[_Stmt], extra: tuple[str, ...] = ()) -> str:
        return f'filter: "{self.t.union_set([(x, "") for x in xs], extra)}"\n'

    def leaf(self, x: _Stmt, chunk: int | None) -> str:
        """``x``'s band over its own dimensions; the first product's update below the
        ring's ``k``-chunk band."""
        leaf = _leaf(self.t, x, self.nb)
        if chunk is not None and x.name == self.first_update:
            k = x.dims[self.nb + 2]
            leaf = _node(self.t.band([(x, [f"floor(({k})/{chunk})"])]), leaf)
        return leaf

    def leaves(self, xs: list[_Stmt], chunk: int | None = None) -> str:
        if len(xs) == 1:            # the step's filter selects the statement already
            return self.leaf(xs[0], chunk)
        return _seq([_node(self.filt([x]), self.leaf(x, chunk)) for x in xs])

    def stepped(self, role: StepRole, xs: list[_Stmt], chunk: int | None = None,
                extra: tuple[str, ...] = ()) -> str:
        return _node(self.filt(xs, extra), self.step(role, xs, self.leaves(xs, chunk)))

    def groups(self) -> list[tuple[StepRole, list[_Stmt]]]:
        m, S = self.m, self.S
        soft = [s for s in self.mine if s.stage in m.softmax and s.kind != "init"]
        return [(StepRole.FIRST, [S[s.name] for s in self.mine if s.stage is m.first]),
                (StepRole.MIDDLE, [S[s.name] for s in self.mine
                                   if any(s.stage is e.stage for e in m.elementwise)]),
                (StepRole.SOFTMAX, [S[s.name] for s in soft]),
                (StepRole.SECOND, [S[s.name] for s in self.mine
                                   if s.stage is m.second and s.kind == "update"])]

    def ring(self) -> tuple[str, list[_Stmt]]:
        """The ring: its mark over the ``l``-tile band over the steps in it."""
        m, tiles = self.m, self.tiles
        chunk = tiles.kc if isinstance(tiles, TcChainTiles) else KR
        kids, xs = [], []
        for role, g in self.groups():
            if g:
                kids.append(self.stepped(role, g, chunk if role is StepRole.FIRST else None))
                xs += g
        lband = self.t.band([(x, [f"floor(({x.dims[x.l]})/{tiles.tl})"]) for x in xs
                             if x.l is not None])
        x_streamed = isinstance(tiles, TcChainTiles) and not tiles.x_resident
        streamed = ((m.x.name,) if x_streamed else ()) + (m.y.name, m.z.name)
        self.prog.rings.append(ChainRing(0, tiles.stages if isinstance(tiles, TcChainTiles)
                                         else 1, streamed, chunk))
        ring = _node(f'mark: "{marks.make(marks.CHAIN_RING, 0).name}"\n',
                     _node(lband, _seq(kids)))
        return _node(self.filt(xs), ring), xs

    def extension(self, name: str, cond: str) -> str:
        """``extension { [] -> name[b.., m, n] }`` over ``O``'s box (and ``cond``)."""
        o_init = next(s for s in self.mine if s.stage is self.m.second and s.kind == "init")
        rng = o_init.domain.set_tuple_name(name)
        if cond:
            x = _Stmt(name, self.S[o_init.name].dims, self.nb, None, self.nb + 1)
            c = isl.Set.read_from_str(self.model.ctx, self.t.union_set([(x, cond)], self.block))
            rng = rng.align_params(c.get_space()).intersect(c.align_params(rng.get_space()))
        return f'extension: "{isl.Map.from_range(rng)}"\n'

    def build(self) -> tuple[isl.Schedule, isl.Set, isl.Schedule]:
        m, nb, S, prog = self.m, self.nb, self.S, self.prog
        split = self.splits > 1
        prog.kernels[0] = ChainKernel("chain", self.tiles.threads, 16 if self.tc else 0,
                                      N_BLOCK, M_BLOCK, self.bparams, SPLIT if split else "",
                                      (L_LO, L_HI) if split else None)
        o_init = next(s for s in self.mine if s.stage is m.second and s.kind == "init")
        init = [S[o_init.name]] + [S[s.name] for s in self.mine
                                   if s.stage in m.softmax and s.kind == "init"]
        body = [self.stepped(StepRole.ACC_INIT, init)]
        ring, ring_xs = self.ring()
        body.append(ring)
        cast = [S[s.name] for s in self.mine if m.out_cast and s.stage is m.stages[-1]]
        out = _Stmt("O_part" if split else "O_out", S[o_init.name].dims, nb, None, nb + 1)
        write = self.stepped(StepRole.WRITE_OUT, cast or [out], extra=self.block)
        core_body = body + ([write] if cast else [])
        body.append(write)
        ring_names = {x.name for x in ring_xs}
        bfilter = self.t.union_set([(x, self.block_cond(x, x.name in ring_names))
                                    for x in S.values()], self.block)
        out_ext = "" if cast else self.extension(out.name, self.block_cond(out, False))

        def kernel0(kbody: list[str], ext: str) -> str:
            inner = _node(ext, _seq(kbody)) if ext else _seq(kbody)
            return _node(f'mark: "{marks.make(marks.KERNEL, 0).name}"\n',
                         _node(f'filter: "{bfilter}"\n', inner))
        full = kernel0(body, out_ext)
        if split:
            prog.kernels[1] = ChainKernel("combine", self.tiles.threads)
            comb = _Stmt("O_combine", out.dims, nb, None, nb + 1)
            k1 = _node(f'mark: "{marks.make(marks.KERNEL, 1).name}"\n',
                       self.step(StepRole.COMBINE, [comb], self.t.band([(comb, comb.dims)]), 1))
            full = _node(self.extension(comb.name, ""), _seq([
                _node(self.filt(list(S.values())), full), _node(self.filt([comb]), k1)]))
        domain = f'domain: "{self.model.domain}"\nchild:\n'
        tree = schedule_from_str(domain + _indent(full, 2), self.model.ctx)
        core = schedule_from_str(domain + _indent(kernel0(core_body, ""), 2), self.model.ctx)
        ctx = _block_context(self.tiles, self.bparams, self.splits, S, o_init, self.mine, m,
                             self.model)
        return tree, ctx, core


def _image(dom: isl.Set, expr: str, name: str, at_most: bool = False) -> isl.Set:
    """``{ : name in { expr(x) : x in dom } }`` as a parameter set (``at_most``: ``name``
    at most one of those values)."""
    from polycomp.scheduler.gpu.map import as_param
    dims = [str(dom.get_dim_name(isl.dim_type.set, k)) for k in range(dom.dim(isl.dim_type.set))]
    pnames = [str(dom.get_dim_name(isl.dim_type.param, k))
              for k in range(dom.dim(isl.dim_type.param))]
    sp = f"[{', '.join(pnames)}] -> " if pnames else ""
    f = isl.Map.read_from_str(dom.get_ctx(), f"{sp}{{ {dom.get_tuple_name()}"
                                             f"[{', '.join(dims)}] -> [{expr}] }}")
    img = dom.apply(f.align_params(dom.get_space()))
    if at_most:
        img = img.apply(isl.Map.read_from_str(dom.get_ctx(), "{ [v] -> [h] : h <= v }"))
    return as_param(img, name)


def _named(s, x: _Stmt) -> isl.Set:
    """``s``'s domain with the dimension names of ``x``."""
    dom = s.domain
    for k, nm in enumerate(x.dims):
        dom = dom.set_dim_name(isl.dim_type.set, k, nm)
    return dom


def _block_context(tiles: Tiles, bparams: tuple[str, ...], splits: int, S: dict,
                   o_init, mine: list, m: ChainMatch, model) -> isl.Set:
    """The ranges of the block parameters over the statements' domains: ``0 <= bx0 <
    ceil(N/TN)``, ``0 <= by0 < ceil(M/TM)``, ``0 <= bz0_d < B_d``, and with splits
    ``0 <= bs0 < S``, ``0 <= bl0 <= bh0 <= ceil(L/TL)``."""
    from polycomp.islutil import intersect_params
    o = S[o_init.name]
    dom = _named(o_init, o)
    assert o.n is not None and o.m is not None
    out = _image(dom, f"floor(({o.dims[o.n]})/{tiles.tn})", N_BLOCK)
    out = intersect_params(out, _image(dom, f"floor(({o.dims[o.m]})/{tiles.tm})", M_BLOCK))
    for d, p in enumerate(bparams):
        out = intersect_params(out, _image(dom, o.dims[d], p))
    if splits > 1:
        t_init = next(s for s in mine if s.stage is m.first and s.kind == "init")
        x = S[t_init.name]
        out = intersect_params(out, _image(_named(t_init, x),
                                           f"floor(({x.dims[x.l]})/{tiles.tl}) + 1", L_HI,
                                           at_most=True))
        out = intersect_params(out, isl.Set.read_from_str(
            model.ctx, f"[{SPLIT}, {L_LO}, {L_HI}] -> {{ : 0 <= {SPLIT} < {splits} and "
                       f"0 <= {L_LO} <= {L_HI} }}"))
    return out


def checked_dependences(plan: ChainPlan, model) -> isl.UnionMap:
    """The model's dependences the program tree must satisfy: all of them but those
    between two instances of one reduction update (the products' and the softmax's sums
    and maxima are accumulated tile by tile: associativity), and the flow from the
    softmax's row max to ``S_exp`` and from its row sum to the quotient ``S`` (the
    online softmax's reassociation, module docstring)."""
    deps = model.dependences
    for s in model.statements:
        if s.kind == "update":
            sp = isl.Set.universe(s.domain.get_space())
            deps = deps.subtract(isl.UnionMap.from_map(isl.Map.from_domain_and_range(sp, sp)))
    m: ChainMatch = plan.match
    if m.has_softmax:
        by_stage: dict[int, list] = {}
        for s in model.statements:
            by_stage.setdefault(id(s.stage), []).append(s)
        mx, ex, sm, dv = m.softmax
        for red, reader in ((mx, ex), (sm, dv)):
            for w in by_stage[id(red)]:
                for r in by_stage[id(reader)]:
                    a = isl.Set.universe(w.domain.get_space())
                    b = isl.Set.universe(r.domain.get_space())
                    deps = deps.subtract(isl.UnionMap.from_map(
                        isl.Map.from_domain_and_range(a, b)))
    return deps


class CudaChainFusePass(Pass):
    """``chain-fuse`` for the CUDA targets: the program tree of the module docstring,
    checked with isl against :func:`checked_dependences` (else the input schedule is
    kept, with a note); the block parameters' ranges join the AST context."""
    name = "chain-fuse"

    def run(self, schedule, ctx):
        plan, tiles = cuda_plan(ctx)
        if plan is None:
            ctx.note(self.name, f"no chain fused: {tiles}")
            return schedule
        assert isinstance(tiles, (CudaChainTiles, TcChainTiles))
        prog = chain_program(ctx)
        prog.kernels.clear()
        prog.steps.clear()
        prog.rings.clear()
        prog.plan, prog.tiles = plan, tiles
        tree, bctx, core = program_tree(plan, tiles, ctx.model, prog)
        bad = violated_dependences(core, checked_dependences(plan, ctx.model))
        if not bad.is_empty():
            prog.plan = prog.tiles = None
            ctx.note(self.name, f"no chain fused: the program tree would violate {bad}")
            return schedule
        ctx.restrict_ast_context(bctx)
        half = isinstance(tiles, TcChainTiles)
        for line in plan.describe()[:1] + plan.describe()[2:]:
            ctx.note(self.name, line.replace(" floats)", " 16-bit elements)") if half else line)
        where = ("mma accumulator fragments (Tensor Cores, " + plan.match.dtype + ")"
                 if half else "registers and shared memory")
        ctx.note(self.name, f"block order (b, m, l, k | n): intermediate {plan.match.t.name} "
                            f"tile {tiles.tm} x {tiles.tl} in {where} "
                            f"(CUDA kernel, {tiles.threads} threads per block)")
        return tree
