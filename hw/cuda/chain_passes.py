"""IR passes of a fused chain on CUDA: the marks of the chain's program tree
(:mod:`polycomp.scheduler.chain.cuda_tree`) expanded into the micro-kernels of
:mod:`.chain_simt` (float32, CUDA cores) and :mod:`.chain_tc` (float16 / bfloat16,
Tensor Cores), then the kernels wrapped in their block and thread loops.

Assumes: the IR was lowered (isl AST) from the tree of
:class:`~polycomp.scheduler.chain.cuda_tree.CudaChainFusePass`, whose payloads are in
``chain_program(state)``: ``AttrStmt("kernel", n)`` regions of kernels
``chain_program(state).kernels[n]`` in terms of the block parameters of the tree
(``bx0``, ``by0``, ``bz0``.., ``bs0``, ``bl0``, ``bh0``: free variables of the body);
inside kernel 0, ``AttrStmt("chain_step", i)`` regions and one ``AttrStmt("chain_ring",
r)`` over the ``l``-tile loop (a ``For``, or a ``LetStmt`` where isl found one tile) whose
body is the sequence of the ring's ``chain_step`` regions.

Passes, in order:

* ``chain-ring`` (:func:`expand_rings`): the ring's loop becomes the streamed ``l`` loop
  with its steps' micro-kernels (``FIRST``, ``MIDDLE``, ``SOFTMAX``, ``SECOND``) at the
  loop's iterations (float32: the loop as isl generated it, the Z tile's ``cp.async``
  at its top; Tensor Cores: the ``S``-stage ``cp.async`` ring over the items ``(l tile,
  k chunk)`` with its prologue and drain);
* ``chain-steps`` (:func:`expand_steps`): the other steps (``ACC_INIT``, ``WRITE_OUT``,
  ``COMBINE``) become their micro-kernels;
* ``chain-kernels`` (:func:`wrap_chain_kernels`): each chain kernel's body is wrapped in
  its per-thread arrays, the ``gpu_thread`` loop, its shared arrays and the ``gpu_block``
  loops (grid ``x``: n-blocks, ``y``: m-blocks, ``z``: batch x splits; the combining
  kernel one thread per element of ``O``), the block parameters substituted by their
  values in ``blockIdx`` (the batch indices and the split of ``z``, the split's ``l``
  tiles); the model's global temporaries nothing reads any more (the intermediate, the
  softmax's arrays) are no longer allocated, and the split's partial tiles are.

Guarantees: the function computes the chain's output as the micro-kernels do (their
modules' docstrings: the same ``O`` up to the reassociation of the sums and the online
softmax), with no statement outside a kernel, as
:func:`polycomp.hw.cuda.codegen.split_kernels` expects; the marks stay as attributes
(printed as comments).  A function without a chain program is returned unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.scheduler.chain.cuda_tree import (
    CudaChainProgram,
    StepRole,
    chain_program,
)
from polycomp.scheduler.chain.tc_kernel import TcChainTiles
from polycomp.scheduler.common import marks

from .chain_simt import BlockVars, SimtChain, batch_indices
from .chain_tc import TcChain

__all__ = ["chain_statement_builders", "expand_rings", "expand_steps", "wrap_chain_kernels"]


@dataclass(eq=False)
class ChainBuild:
    """The CUDA backend's state of a fused chain (``state.slot(ChainBuild)``): the
    micro-kernel builder of the program, the block variables its IR uses and the
    combining kernel's block and thread, made by the first chain pass and shared by the
    others."""
    kernel: SimtChain | TcChain | None = None
    vars: BlockVars | None = None
    combine_block: ir.Var = field(default_factory=lambda: ir.Var("cc_blk"))
    combine_thread: ir.Var = field(default_factory=lambda: ir.Var("cc_t"))


def _build(state) -> tuple[CudaChainProgram, Any] | None:
    prog = chain_program(state)
    if prog.plan is None or 0 not in prog.kernels:
        return None
    b = state.slot(ChainBuild)
    if b.kernel is None:
        k0 = prog.kernels[0]
        tc = isinstance(prog.tiles, TcChainTiles)
        bv = BlockVars(ir.Var(k0.n_block), ir.Var(k0.m_block),
                       tuple(ir.Var(p) for p in k0.batch),
                       ir.Var(k0.split) if k0.split else None, ir.Var("tt" if tc else "ct"))
        b.vars = bv
        b.kernel = TcChain(prog.plan, prog.tiles, bv) if tc \
            else SimtChain(prog.plan, prog.tiles, bv)
    return prog, b.kernel


def chain_statement_builders(state, var) -> dict:
    """Builders of the program tree's extension statements (the write-out copy
    ``O_out`` / ``O_part`` and ``O_combine``) for AST lowering: each instance is a
    no-op whose effect the ``chain_step`` micro-kernel around it realises (``chain-steps``
    replaces the region)."""
    prog = chain_program(state)
    names = {n for st in prog.steps for n in st.statements
             if st.role in (StepRole.WRITE_OUT, StepRole.COMBINE)}
    model_names = {s.name for s in state.model.statements}
    return {n: (lambda args: ir.Evaluate(ir.IntImm(0))) for n in names - model_names}


# --------------------------------------------------------------------------- chain-ring

def _unwrap_loop(s: ir.Stmt, split: bool) -> tuple[list[ir.Expr], ir.Expr, ir.Expr, ir.Stmt]:
    """The ring's ``l``-tile loop below uniform guards: ``(guards, min, extent, body)``.
    A ``LetStmt`` is a loop of one iteration; no loop at all (isl substitutes a band
    member that has one value on the domain: a constant ``L <= TL``) is the single tile
    0 of an unsplit ring (the split's tiles ``[bl0, bh0)`` always leave a loop)."""
    guards: list[ir.Expr] = []
    while isinstance(s, ir.IfThenElse) and s.orelse is None:
        guards.append(s.cond)
        s = s.then
    if isinstance(s, ir.For):
        return guards, s.min, s.extent, s.body
    if isinstance(s, ir.LetStmt):
        return guards, s.value, ir.IntImm(1), s.body
    if isinstance(s, (ir.Block, ir.AttrStmt)) and not split:
        return guards, ir.IntImm(0), ir.IntImm(1), s
    raise PolycompInternalError(f"chain ring: no l-tile loop below the mark ({type(s).__name__})")


def _steps_in(body: ir.Stmt, prog: CudaChainProgram) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``role name -> (mark value, statements)`` of the ``chain_step`` regions of the
    ring's loop body (a sequence of them)."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    stmts = body.stmts if isinstance(body, ir.Block) else (body,)
    for s in stmts:
        i = marks.attr_index(s, marks.CHAIN_STEP)
        if i is None:
            raise PolycompInternalError(f"chain ring: {type(s).__name__} beside the steps")
        st = prog.steps[i]
        found[st.role.value] = (str(i), st.statements)
    return found


def tile_count(extent: ir.Expr) -> ir.Expr:
    """The ring loop's trip count as isl generated it, ``floor((x - 1) / c) + 1``, in the
    form ``floor((x + c - 1) / c)`` (the same integer for every ``x``; one division of a
    value the printer knows to be non-negative when ``x`` is a size)."""
    from polycomp.lowering.simplify import simplify
    e = simplify(extent)
    if (isinstance(e, ir.Binary) and e.op == "+" and ir.is_const(e.b, 1)
            and isinstance(e.a, ir.Binary) and e.a.op == "//" and isinstance(e.a.b, ir.IntImm)
            and e.a.b.value > 0 and isinstance(e.a.a, ir.Binary) and e.a.a.op == "-"
            and ir.is_const(e.a.a.b, 1)):
        c = e.a.b.value
        return (e.a.a.a + (c - 1)) // c
    return e


class _Rings(ir.Mutator):
    def __init__(self, prog: CudaChainProgram, kernel):
        self.prog, self.kernel = prog, kernel

    def visit_AttrStmt(self, s):
        r = marks.attr_index(s, marks.CHAIN_RING)
        if r is None:
            return self.generic(s)
        split = self.prog.kernels[self.prog.rings[r].kernel].l_range is not None
        guards, lo, extent, body = _unwrap_loop(s.body, split)
        extent = tile_count(extent)
        steps = _steps_in(body, self.prog)
        k = self.kernel
        if isinstance(k, TcChain):
            new = k.ring(extent, steps)
        else:
            new = _simt_ring(k, lo, extent, steps)
        for g in reversed(guards):
            new = ir.IfThenElse(g, new)
        return ir.AttrStmt(s.key, s.value, new)


def _simt_ring(k: SimtChain, lo: ir.Expr, extent: ir.Expr,
               steps: dict[str, tuple[str, tuple[str, ...]]]) -> ir.Stmt:
    """The float32 ring: the ``l`` loop of the tree (its bounds; a fresh variable, as
    the steps are rebuilt) with the Z tile's copy issued at the top of each iteration and
    the steps' micro-kernels (the score tile's store, with the ``MIDDLE`` step's stages
    where there is one, ends ``FIRST`` otherwise)."""
    l0 = ir.Var("cl0")
    def mark(role: str, body: ir.Stmt) -> ir.Stmt:
        return ir.AttrStmt(marks.CHAIN_STEP, steps[role][0], body)
    first = k.first(l0, lo)
    scores = k.scores(l0, steps["middle"][1] if "middle" in steps else None)
    parts = [k.prefetch_z(l0)]
    if "middle" in steps:
        parts += [mark("first", first), mark("middle", scores)]
    else:
        parts.append(mark("first", ir.seq(first, scores)))
    if "softmax" in steps:
        parts.append(mark("softmax", k.softmax()))
    parts.append(mark("second", k.second(l0)))
    return ir.For(l0, lo, extent, "serial", ir.seq(*parts))


def expand_rings(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """IR pass ``chain-ring`` (module docstring)."""
    built = _build(state)
    if built is None:
        return func
    prog, kernel = built
    return func.with_body(_Rings(prog, kernel).visit(func.body))


# --------------------------------------------------------------------------- chain-steps

class _Steps(ir.Mutator):
    def __init__(self, prog: CudaChainProgram, kernel, cvars: tuple[ir.Var, ir.Var]):
        self.prog, self.kernel, self.cvars = prog, kernel, cvars

    def visit_AttrStmt(self, s):
        if marks.attr_index(s, marks.CHAIN_RING) is not None:
            return s                              # expanded by chain-ring
        i = marks.attr_index(s, marks.CHAIN_STEP)
        if i is None:
            return self.generic(s)
        role = self.prog.steps[i].role
        k = self.kernel
        if role is StepRole.ACC_INIT:
            return ir.AttrStmt(s.key, s.value, k.acc_init())
        if role is StepRole.WRITE_OUT:
            return ir.AttrStmt(s.key, s.value, k.write_out())
        if role is StepRole.COMBINE:
            return ir.AttrStmt(s.key, s.value, k.combine(*self.cvars))
        raise PolycompInternalError(f"chain step {role.value} outside the chain's ring")


def expand_steps(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """IR pass ``chain-steps`` (module docstring)."""
    built = _build(state)
    if built is None:
        return func
    prog, kernel = built
    b = state.slot(ChainBuild)
    cvars = (b.combine_block, b.combine_thread)
    return func.with_body(_Steps(prog, kernel, cvars).visit(func.body))


# --------------------------------------------------------------------------- chain-kernels

class _ByName(ir.Mutator):
    """Variables replaced by name (the tree's block parameters: the AST's variables and
    the micro-kernels' are distinct objects of the same name)."""

    def __init__(self, table: dict[str, ir.Expr]):
        self.table = table

    def visit_Var(self, v):
        return self.table.get(v.name, v)


def _alloc(bufs, body: ir.Stmt) -> ir.Stmt:
    for b in reversed(bufs):
        body = ir.Allocate(b, body)
    return body


class _Wrap(ir.Mutator):
    def __init__(self, prog: CudaChainProgram, b: ChainBuild):
        self.prog, self.b = prog, b

    def visit_AttrStmt(self, s):
        n = marks.attr_index(s, marks.KERNEL)
        if n is None or n not in self.prog.kernels:
            return self.generic(s)
        k, bv = self.b.kernel, self.b.vars
        assert k is not None and bv is not None
        info = self.prog.kernels[n]
        nt = info.threads
        body: ir.Stmt
        if info.role == "combine":  # split-L combine kernels exist for SIMT chains only
            assert isinstance(k, SimtChain)
            cb, ct = self.b.combine_block, self.b.combine_thread
            body = ir.For(ct, ir.IntImm(0), ir.IntImm(nt), "gpu_thread", s.body,
                          (("axis", "x"), ("threads", nt)))
            body = ir.For(cb, ir.IntImm(0), k.combine_grid(), "gpu_block", body,
                          (("axis", "x"),))
            return ir.AttrStmt(s.key, s.value, body)
        gx, gy, gz = k.grid()
        p = "t" if isinstance(k, TcChain) else "c"
        bx, by, bz = ir.Var(p + "b_n"), ir.Var(p + "b_m"), ir.Var(p + "b_b")
        table: dict[str, ir.Expr] = {info.n_block: bx, info.m_block: by}
        bshape = k.bshape
        if info.split:  # split-L (SIMT chains only)
            assert isinstance(k, SimtChain) and k.sp is not None
            ns = k.sp.ns
            split = bz % ns
            table[info.split] = split
            bidx = batch_indices(bshape, bz // ns)
            if info.l_range is not None:
                lo, hi = k.l_range(split)
                table[info.l_range[0]], table[info.l_range[1]] = lo, hi
        else:
            bidx = batch_indices(bshape, bz)
        for name, e in zip(info.batch, bidx):
            table[name] = e
        body = _ByName(table).visit(s.body)
        body = _alloc(k.local, body)
        body = ir.For(bv.tx, ir.IntImm(0), ir.IntImm(nt), "gpu_thread", body,
                      (("axis", "x"), ("threads", nt)))
        body = _alloc(k.shared, body)
        body = ir.For(bz, ir.IntImm(0), gz, "gpu_block", body, (("axis", "z"),))
        body = ir.For(by, ir.IntImm(0), gy, "gpu_block", body, (("axis", "y"),))
        body = ir.For(bx, ir.IntImm(0), gx, "gpu_block", body, (("axis", "x"),))
        return ir.AttrStmt(s.key, s.value, body)


def _used(s: ir.Stmt) -> set[str]:
    used: set[str] = set()

    def visit(n):
        if isinstance(n, (ir.Load, ir.Store)):
            used.add(n.buffer.name)
    ir.walk(s, visit)
    return used


class _DropUnused(ir.Mutator):
    """Global ``Allocate`` s of buffers nothing loads or stores any more unwrapped."""

    def __init__(self, used: set[str]):
        self.used = used

    def visit_Allocate(self, s):
        inner = self.visit(s.body)
        if s.buffer.scope == "global" and s.buffer.name not in self.used:
            return inner
        return ir.Allocate(s.buffer, inner)


def wrap_chain_kernels(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """IR pass ``chain-kernels`` (module docstring)."""
    built = _build(state)
    if built is None:
        return func
    prog, kernel = built
    body = _Wrap(prog, state.slot(ChainBuild)).visit(func.body)
    body = _DropUnused(_used(body)).visit(body)
    _note(state, prog.tiles)
    return func.with_body(_alloc(kernel.globals, body))


def _note(state, tiles) -> None:
    """What ``explain`` says about the fused kernel (remark ``chain-cuda``)."""
    if isinstance(tiles, TcChainTiles):
        state.note("chain-cuda", f"fused Tensor Core kernel ({tiles.dtype}, mma.sync m16n8k16, "
                                 f"f32 accumulators): TM={tiles.tm} TL={tiles.tl} "
                                 f"KC={tiles.kc} TN={tiles.tn}, {tiles.threads} threads "
                                 f"(one warp per 16 rows), {tiles.stages}-stage cp.async "
                                 f"ring{', X resident' if tiles.x_resident else ''}, "
                                 f"{tiles.shared_bytes} B shared (model's shared-level "
                                 f"T_M={tiles.model_tm} T_L={tiles.model_tl} in 16-bit "
                                 f"elements, alpha=16)")
        return
    split = (f"; l split in {tiles.splits} blocks per O tile, then a kernel combining "
             f"them" if tiles.splits > 1 else "")
    state.note("chain-cuda", f"fused CUDA kernel: TM={tiles.tm} TL={tiles.tl} TK={tiles.tk} "
                             f"TN={tiles.tn}, {tiles.threads} threads, {tiles.es}+{tiles.eo} "
                             f"accumulators per thread, {tiles.shared_floats * 4} B shared "
                             f"(model's shared-level T_M={tiles.model_tm} "
                             f"T_L={tiles.model_tl}, alpha=16){split}")
