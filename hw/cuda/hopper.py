"""IR pass ``wgmma-warp-specialize``: the sm_90a GEMM kernel of a ``wgmma`` plan — TMA
producer, ``wgmma`` consumers, an mbarrier ring of stages, a persistent tile loop.

Assumes: IR lowered from the tree of
:class:`~polycomp.scheduler.tensorcore.tile.TensorCoreTilingPass` /
:class:`~polycomp.scheduler.tensorcore.map.TensorCoreMappingPass` for a plan whose config
is a :class:`~polycomp.scheduler.tensorcore.hopper.WgmmaConfig` (before
:func:`~polycomp.hw.cuda.mapping.wrap_kernels`): ``AttrStmt("tc:block", g)`` ->
``AttrStmt("tc:persistent", g)`` -> the block band's loops (one per output dimension
of the GEMM view; a loop isl found to have one iteration is a ``LetStmt``), their
extents functions of the size parameters only (the GEMM domain is a box) -> the tile
body: ``tc:frag`` regions (the init and the epilogue statements) and the
``pipeline`` region (the K-tile loop ``kt`` of extent ``nk``, or no loop for one K
tile) holding the ``tc:mma`` region, as for :mod:`.tensorize`.

Rewrites the ``tc:block`` region into (``S`` stages, ``C`` consumer warpgroups; thread
``tx`` of warpgroup ``ty``; ``T`` tiles, ``G = min(T, SMs)`` blocks when persistent, else
``T``)::

    pb = blockIdx.x (a gpu_block loop over G)
    if (tx + 128 ty == 0) { mbarrier.init(full[s], 32), mbarrier.init(empty[s], 128 C)
                            for s < S; fence.mbarrier_init }
    __syncthreads()
    warp_roles {
      if (ty == 0) {                       // producer warpgroup
        setmaxnreg.dec(40)
        if (tx < 32) for j < ceil((T - pb) / G): tile = pb + j G (its band coordinates)
          for kt: r = j nk + kt, s = r mod S, ph = (r / S) mod 2
            mbarrier.wait(empty[s], 1 - ph)
            if (TMA strides of A and B are 16-byte multiples)       // uniform
              lane 0: arrive.expect_tx(full[s], stage bytes); TMA A and B boxes -> stage s
              other lanes: arrive(full[s])
            else: every lane copies its share of the two tiles with ordinary
              loads/stores (the same swizzled layout, zeros outside the extents),
              fence.proxy.async, arrive(full[s])
      }
      if (ty >= 1) {                       // consumer warpgroups
        setmaxnreg.inc(R)
        for j (as above): init regions on the accumulators
          for kt: mbarrier.wait(full[s], ph); wgmma.fence
                  wgmma.m64n<WN>k16 per 16-wide K step and 64-row block (descriptors on
                  stage s); commit; wgmma.wait_group(1); if kt > 0: arrive(empty[s - 1])
          wgmma.wait_group(0); arrive(empty[last s]); epilogue regions and stores
      }
    }

The stage layouts are the staging decisions' ``tma-swizzled`` layouts (panels of one
swizzle span): a TMA box per panel, written by the copy engine in exactly that
layout; the ``wgmma`` descriptors (start at the panel row of the 64-row block and 16
K step, unswizzled; LBO the panel stride, SBO 8 rows of the span) read it in the PTX
canonical layouts (K-major, or MN-major with ``trans``).  Accumulator ``i`` of thread
``tx`` of consumer ``c`` holds the element ``(row, col)`` of the block tile with
``row = 64 (c / cn) ... + 16 (tx / 32) + (tx mod 32) / 4 + 8 ((i / 2) mod 2)`` (one
``m64`` block per 64 rows of the warpgroup tile), ``col = WN (c mod cn) + 8 (i / 4) + 2
(tx mod 4) + i mod 2``: the mma.sync fragment layout per warp, so the init and epilogue
regions and the 16-byte result stores are those of :mod:`.tensorize`.

Guarantees: every statement instance of the group runs exactly once — each tile by
exactly one block (``t = pb + j G`` enumerates ``0 .. T-1`` once over the blocks), the
init and epilogue instances by the thread owning their accumulator (guarded by the
extents), the update inside ``wgmma`` on zero-filled tiles (TMA fills out-of-bounds
elements with zeros, the fallback copies write zeros), so the results equal the
statement semantics up to the summation order.  Ordering: a stage is read only after
its ``full`` phase completed (the TMA bytes landed, or the fallback's stores were
released by every copying lane's arrive after ``fence.proxy.async``) and is written
again only after its ``empty`` phase completed (every consumer thread arrived after
``wgmma.wait_group`` retired the reads): ring slot ``r`` uses phase ``r / S`` of both
barriers of stage ``r mod S``.  The new buffers are recorded in
``promotion_state(state).promotions``: the stages (from the staging decisions) and the
barriers per block, the accumulators per thread.
"""
from __future__ import annotations

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.lowering.simplify import simplify
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.record import Promotion, promotion_state
from polycomp.scheduler.tensorcore.hopper import is_wgmma

from . import ptx_hopper as hp
from .tensorize import _and, _imm, _Kernel, _origin_store, _Tensorizer, epilogue_registers

#: the consumer's main loop (an IR attribute of this pass: where the store of the
#: accumulators goes after)
MAINLOOP = "wgmma_mainloop"
#: threads of the producer warp that issue the copies (one warp)
PRODUCER_THREADS = 32


def warp_specialize(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """See the module docstring (``state``: the compile's
    :class:`~polycomp.state.CompileState`)."""
    plans = {g: p for g, p in gpu_kernels(state).tc_plans.items() if is_wgmma(p.config)}
    if not plans:
        return func
    t = _Hopper(plans, state.model, state.target)
    body = t.visit(func.body)
    promotion_state(state).promotions.extend(t.records)
    return func.with_body(body)


def _i(v) -> ir.Expr:
    return _imm(v) if isinstance(v, int) else v


class _HopperKernel(_Kernel):
    """The buffers and thread coordinates of one wgmma kernel (see the module
    docstring); the accumulator layout methods serve :class:`_Tensorizer`'s fragment
    regions and result stores."""

    def __init__(self, plan, model):             # noqa: D107  (no super().__init__)
        self.plan, self.view, self.cfg = plan, plan.view, plan.config
        v, c = self.view, self.cfg
        n = plan.kernel
        self.tx, self.ty, self.tz = ir.Var(f"tx{n}"), ir.Var(f"ty{n}"), ir.Var(f"tz{n}")
        self.wm, self.wn = c.warp
        self.mi, self.ni = self.wm // 64, self.wn // 8
        self.nthreads = c.threads
        self.lin = self.tx + self.ty * 128
        cm, cn = c.warps
        cons = self.ty - 1
        self.crow = (cons // cn) * self.wm
        self.ccol = (cons % cn) * self.wn
        self.regs_count = self.mi * self.ni * 4
        self.acc = ir.Buffer(f"acc{n}", "float32", (_imm(self.regs_count),), "local")
        staging = plan.staging
        if staging is None or staging.refused or plan.tma is None:
            raise PolycompInternalError(f"wgmma kernel {n} without its staging decisions")
        self.staging = staging
        self.a_op, self.b_op = plan.tma
        fa, fb = staging.footprint(staging.a), staging.footprint(staging.b)
        self.a_layout, self.b_layout = fa.layout, fb.layout
        self.a_box, self.b_box = tuple(fa.box.sizes), tuple(fb.box.sizes)
        self.As = ir.Buffer(f"As{n}", v.in_dtype, tuple(_imm(e) for e in fa.shape), "shared")
        self.Bs = ir.Buffer(f"Bs{n}", v.in_dtype, tuple(_imm(e) for e in fb.shape), "shared")
        self.bars = ir.Buffer(f"bar{n}", "int64", (_imm(2 * c.stages),), "shared")
        self.c_buf, self.c_outside, self.regs = epilogue_registers(v, model, self.acc, n,
                                                                   self.regs_count)
        self.res = ir.Buffer(f"res{n}", "float32", (_imm(4),), "local")
        self.xch = ir.Buffer(f"xch{n}", "float32", (_imm(2),), "local")
        self.buffers = [self.acc, self.As, self.Bs, self.bars, self.res, self.xch] + \
            [b for k, b in self.regs.items() if k != self.c_buf.name]
        item = dt.itemsize(v.in_dtype)
        self.stage_bytes = (fa.box.elements() + fb.box.elements()) * item

    # ------------------------------------------------------------------ layouts
    def _row_col(self, im, jn, r):
        g, t = (self.tx % 32) // 4, self.tx % 4
        row = self.crow + im * 64 + (self.tx // 32) * 16 + (r // 2) * 8 + g
        col = self.ccol + jn * 8 + r % 2 + t * 2
        return row, col

    def element(self, im, jn, r):
        """(accumulator index, row, col) of element ``r`` of the 16x8 tile ``(im, jn)``:
        ``im`` the 64-row block of the warpgroup tile, ``jn`` the 8-column group."""
        row, col = self._row_col(im, jn, r)
        return (im * self.ni + jn) * 4 + r, row, col

    def frag_loop(self, make):
        n = self.plan.kernel
        im, jn, r = ir.Var(f"fim{n}"), ir.Var(f"fjn{n}"), ir.Var(f"fr{n}")
        row, col = self._row_col(im, jn, r)
        body = make((im * self.ni + jn) * 4 + r, row, col)
        ann = (("unroll", True),)
        return ir.For(im, _imm(0), _imm(self.mi), "unrolled",
                      ir.For(jn, _imm(0), _imm(self.ni), "unrolled",
                             ir.For(r, _imm(0), _imm(4), "unrolled", body, ann), ann), ann)

    def full(self, s) -> ir.Load:
        return ir.Load(self.bars, (s,), "int64")

    def empty(self, s) -> ir.Load:
        return ir.Load(self.bars, (s + self.cfg.stages,), "int64")

    def records(self) -> list[Promotion]:
        staged = {self.As.name: self.staging.a, self.Bs.name: self.staging.b}
        out = []
        for b in self.buffers:
            d = staged.get(b.name)
            if d is not None:
                level, reason = d.level, d.motive
            elif b is self.bars:
                level, reason = "shared", "mbarrier ring"
            else:
                level, reason = self.staging.fragments, "wgmma accumulators"
            out.append(Promotion(b, b, self.plan.kernel, None, reason=reason, level=level))
        return out


def _linear_offset(layout, row, col):
    """The unswizzled element offset of (row, contiguous col) in a tma-swizzled stage (a
    wgmma descriptor's start: the hardware swizzles the addresses it forms)."""
    w = layout.width
    return (col // w) * layout.panel_elements() + row * w + col % w


class _Hopper(_Tensorizer):
    def __init__(self, plans, model, target):
        super().__init__(plans, model)
        self.target = target
        self.mode = ""           # "producer" | "consumer" while a tile body is visited
        self.j: ir.Var | None = None
        self.nk: ir.Expr | None = None
        self.kmin: ir.Expr = _imm(0)
        self._kernel: _HopperKernel | None = None
        self.path = ""           # the producer's copies: "tma" or "copy" (no TMA)

    def kernel(self, g):
        k = self.kernels.get(g)
        if k is None:
            k = self.kernels[g] = _HopperKernel(self.plans[g], self.model)
            self.records.extend(k.records())
        return k

    # ------------------------------------------------------------------ traversal
    def visit_AttrStmt(self, s):
        g = marks.attr_index(s, marks.TC_BLOCK)
        if g is not None:
            return self.block(self.kernel(g), s)
        if s.key == marks.PIPELINE:
            return self.pipeline(s)
        g = marks.attr_index(s, marks.TC_FRAG)
        if g is not None:
            if self.mode == "producer":
                return ir.Block(())
            return self.frag(self.kernel(g), s.body)
        g = marks.attr_index(s, marks.TC_MMA)
        if g is not None:
            k = self.kernel(g)
            return self.produce(k, s.body) if self.mode == "producer" else \
                self.consume(k, s.body)
        return self.generic(s)

    # ------------------------------------------------------------------ the kernel
    def block(self, k, s):
        self._kernel = k
        p = s.body
        if marks.attr_index(p, marks.TC_PERSISTENT) is None:
            raise PolycompInternalError("a wgmma tc:block without its tc:persistent region")
        nb = len(k.view.stage.iters)
        loops, guards, tile = _tile_loops(p.body, nb)
        cfg = k.cfg
        n = k.plan.kernel
        total: ir.Expr = _imm(1)
        for _var, _lo, ext in loops:
            total = ext if ir.is_const(total, 1) else total * ext
        total = simplify(total)
        grid = simplify(ir.Binary("min", total, _imm(self.target.cuda.sms), "int64")) \
            if cfg.persistent else total
        pb, j = ir.Var(f"pb{n}"), ir.Var(f"tj{n}")
        count = simplify((total - pb + grid - 1) // grid)
        t = pb + j * grid

        def tile_loop(body):
            rest: ir.Expr = t
            lets = []
            for d, (var, lo, ext) in reversed(list(enumerate(loops))):
                if d == 0:
                    lets.append((var, simplify(lo + rest)))
                else:
                    lets.append((var, simplify(lo + rest % ext)))
                    rest = rest // ext
            for c in reversed(guards):
                body = ir.IfThenElse(c, body)
            for var, val in lets:
                body = ir.LetStmt(var, val, body)
            return ir.For(j, _imm(0), count, "serial", body)

        self.j = j
        try:
            self.mode, saved = "consumer", self.block_origin
            self.block_origin = None
            consumer = self.visit(tile)
            if k.c_outside:
                if self.block_origin is None:
                    raise PolycompInternalError("a wgmma block without an init region")
                consumer = _insert_after(consumer, MAINLOOP,
                                         self.writeback(k, self.block_origin))
            self.block_origin = saved
            self.mode = "producer"
            self.path = "tma"
            producer = tile_loop(self.visit(tile))
            aligned = simplify(_and(hp.strides_aligned(k.a_op.buffer),
                                    hp.strides_aligned(k.b_op.buffer)))
            if not ir.is_const(aligned, 1):     # loop-invariant: unswitched
                self.path = "copy"
                copying = tile_loop(self.visit(tile))
                producer = copying if ir.is_const(aligned, 0) else \
                    ir.IfThenElse(aligned, producer, copying)
        finally:
            self.mode, self.j, self.path = "", None, ""
        prod = ir.seq(hp.setmaxnreg(False, cfg.producer_registers),
                      ir.IfThenElse(k.tx < PRODUCER_THREADS, producer))
        cons = ir.seq(hp.setmaxnreg(True, cfg.consumer_registers), tile_loop(consumer))
        roles = ir.AttrStmt(marks.WARP_ROLES, str(n), ir.seq(
            ir.IfThenElse(ir.Binary("==", k.ty, _imm(0), "bool"), prod),
            ir.IfThenElse(k.ty >= 1, cons)))
        init = [hp.mbarrier_init(k.full(_imm(s_)), PRODUCER_THREADS)
                for s_ in range(cfg.stages)]
        init += [hp.mbarrier_init(k.empty(_imm(s_)), 128 * cfg.consumers)
                 for s_ in range(cfg.stages)]
        init.append(hp.fence_mbarrier_init())
        body = ir.seq(ir.IfThenElse(ir.Binary("==", k.lin, _imm(0), "bool"), ir.seq(*init)),
                      ir.barrier(), roles)
        body = ir.For(pb, _imm(0), grid, "gpu_block", body, (("axis", "x"),))
        return ir.AttrStmt(s.key, s.value, body)

    def pipeline(self, s):
        saved = (self.pipeline_depth, self.nk, self.kmin)
        self.pipeline_depth = len(self.scope)
        try:
            body = s.body
            if isinstance(body, ir.For):
                if any(not v.is_param for v in ir.free_vars(body.extent)):
                    raise PolycompInternalError("the K-tile loop's extent depends on a loop")
                self.nk, self.kmin = body.extent, body.min
            else:
                self.nk, self.kmin = _imm(1), _imm(0)
            out = self.visit(body)
            if self.mode == "producer":
                return out
            k = self._kernel
            assert k is not None and self.nk is not None
            last = self._slot(k, self.nk - 1)[0]
            return ir.AttrStmt(MAINLOOP, str(k.plan.kernel), ir.seq(
                hp.wgmma_fence_operand(ir.Load(k.acc, (_imm(0),), "float32"), k.regs_count),
                out, hp.wgmma_wait(0), hp.mbarrier_arrive(k.empty(last)),
                hp.wgmma_fence_operand(ir.Load(k.acc, (_imm(0),), "float32"), k.regs_count)))
        finally:
            self.pipeline_depth, self.nk, self.kmin = saved

    def _slot(self, k, kt_rel):
        """(stage, parity) of K tile ``kt_rel`` (0-based) of the current tile."""
        assert self.nk is not None
        r = self.j * self.nk + kt_rel
        return simplify(r % k.cfg.stages), simplify((r // k.cfg.stages) % 2)

    def _kt(self, k):
        kt, red = self._reduce_origin(k)
        rel = _imm(0) if kt is None else simplify(kt - self.kmin)
        return kt, rel, red

    # ------------------------------------------------------------------ consumer
    def consume(self, k, region):
        cfg = k.cfg
        _, rel, _red = self._kt(k)
        s, ph = self._slot(k, rel)
        item = dt.itemsize(k.view.in_dtype)
        span = cfg.swizzle
        out = [hp.mbarrier_wait(k.full(s), ph), hp.wgmma_fence()]
        for ks in range(cfg.k // 16):
            db = self._desc_b(k, s, ks * 16, item, span)
            for im in range(k.mi):
                da = self._desc_a(k, s, k.crow + im * 64, ks * 16, item, span)
                acc = ir.Load(k.acc, (_imm(im * k.ni * 4),), "float32")
                out.append(hp.wgmma(acc, da, db, k.wn, k.view.in_dtype,
                                    int(k.a_op.mn_major), int(k.b_op.mn_major), _imm(1)))
        out += [hp.wgmma_commit(), hp.wgmma_wait(1)]
        prev = self._slot(k, rel - 1)[0]
        out.append(ir.IfThenElse(rel > 0, hp.mbarrier_arrive(k.empty(prev))))
        return ir.seq(*out)

    def _desc(self, buf, layout, stage, row, col, item, span, mn_major):
        off = simplify(_linear_offset(layout, row, col))
        lbo = layout.panel_elements() * item if mn_major else 16
        sbo = 8 * layout.width * item
        return hp.wgmma_desc(ir.Load(buf, (stage, off), buf.dtype), lbo, sbo, span)

    def _desc_a(self, k, s, m0, k0, item, span):
        # A box (m, k): K-major -> rows m, contiguous k; M-major -> rows k, contiguous m
        if k.a_op.mn_major:
            return self._desc(k.As, k.a_layout, s, _i(k0), m0, item, span, True)
        return self._desc(k.As, k.a_layout, s, m0, _i(k0), item, span, False)

    def _desc_b(self, k, s, k0, item, span):
        # B box (k, n): N-major -> rows k, contiguous n; K-major -> rows n, contiguous k
        if k.b_op.mn_major:
            return self._desc(k.Bs, k.b_layout, s, _i(k0), k.ccol, item, span, True)
        return self._desc(k.Bs, k.b_layout, s, k.ccol, _i(k0), item, span, False)

    # ------------------------------------------------------------------ producer
    def produce(self, k, region):
        v = k.view
        _, origin = _origin_store(region)
        _, rel, red = self._kt(k)
        s, ph = self._slot(k, rel)
        lane = k.tx % 32
        tma = [hp.mbarrier_arrive_tx(k.full(s), k.stage_bytes)]
        tma += self._tma(k, v.a, k.a_op, k.As, k.a_layout, k.a_box, origin, red, s)
        tma += self._tma(k, v.b, k.b_op, k.Bs, k.b_layout, k.b_box, origin, red, s)
        tma_path = ir.IfThenElse(ir.Binary("==", lane, _imm(0), "bool"), ir.seq(*tma),
                                 hp.mbarrier_arrive(k.full(s)))
        out = [hp.mbarrier_wait(k.empty(s), simplify(1 - ph))]
        if self.path == "tma":
            out.append(tma_path)
        else:
            out += [self._copy(k, v.a, (v.m_dim, None), k.As, k.a_layout, k.a_box,
                               0 if k.a_op.mn_major else 1, origin, red, s, lane),
                    self._copy(k, v.b, (None, v.n_dim), k.Bs, k.b_layout, k.b_box,
                               1 if k.b_op.mn_major else 0, origin, red, s, lane),
                    hp.fence_proxy_async(), hp.mbarrier_arrive(k.full(s))]
        return ir.seq(*out)

    def _tma(self, k, factor, op, buf, layout, box, origin, red, s):
        """One TMA box per panel of the stage (see the module docstring)."""
        st = k.view.update
        src = ir.substitute(factor.load, dict(zip(st.iters, list(origin) + list(red))))
        rank = len(src.indices)
        rows = layout.rows
        w = layout.width
        dims = [1] * rank
        dims[op.col_dim] = w
        dims[op.row_dim] = rows
        panels = box[layout.dim] // w
        out = []
        for p in range(panels):
            idx = list(src.indices)
            idx[op.col_dim] = simplify(idx[op.col_dim] + p * w)
            dst = ir.Load(buf, (s, _imm(p * layout.panel_elements())), buf.dtype)
            out.append(hp.tma_load(dst, k.full(s), src.buffer, idx, tuple(dims),
                                   k.cfg.swizzle))
        return out

    def _copy(self, k, factor, dims, buf, layout, box, cdim, origin, red, s, lane):
        """The fallback copy of one operand's stage by the producer warp: element ``e =
        lane + 32 q`` of the box (GEMM coordinates ``(e / box_1, e mod box_1)``), zero
        outside the extents, stored at its swizzled place in the stage."""
        v = k.view
        n = k.plan.kernel
        q = ir.Var(f"cq{n}")
        total = box[0] * box[1]
        e = lane + q * PRODUCER_THREADS
        g0, g1 = e // box[1], e % box[1]
        o, r = list(origin), list(red)
        ext_o, ext_r = v.out_extents, v.red_extents
        conds = []
        # GEMM coordinate 0/1 -> (output dim or the reduce axis)
        for gv, d in zip((g0, g1), dims):
            if d is None:
                r[v.k_dim] = r[v.k_dim] + gv
                conds.append(r[v.k_dim] < ext_r[v.k_dim])
            else:
                o[d] = o[d] + gv
                conds.append(o[d] < ext_o[d])
        val = ir.substitute(factor.expr, dict(zip(v.update.iters, o + r)))
        val = ir.Select(_and(*conds), val, ir.FloatImm(0.0), "float32")
        col, row = (g0, g1) if cdim == 0 else (g1, g0)
        off = layout.tma_offset(row, col, lambda a, b: (a // b, a % b), hp_xor)
        body = ir.IfThenElse(e < total, ir.Store(buf, (s, off), val))
        return ir.For(q, _imm(0), _imm(-(-total // PRODUCER_THREADS)), "serial", body)


def hp_xor(a, b):
    from . import ptx
    return ptx.xor(a, b)


def _tile_loops(s, nb):
    """([(var, min, extent)], guards, body): the block band's ``nb`` loops from ``s``
    (a LetStmt is a one-iteration loop; guards met between them are moved inside)."""
    loops: list = []
    guards: list = []
    cur = s
    while len(loops) < nb:
        if isinstance(cur, ir.For):
            if any(not v.is_param for v in ir.free_vars(cur.extent)):
                raise PolycompInternalError("a wgmma tile loop's extent depends on a loop")
            loops.append((cur.var, cur.min, cur.extent))
            cur = cur.body
        elif isinstance(cur, ir.LetStmt):
            loops.append((cur.var, cur.value, _imm(1)))
            cur = cur.body
        elif isinstance(cur, ir.IfThenElse) and cur.orelse is None:
            guards.append(cur.cond)
            cur = cur.then
        else:
            break
    return loops, guards, cur


def _insert_after(body, key, extra):
    """Insert ``extra`` right after the statement of ``body`` holding ``AttrStmt(key)``."""
    if isinstance(body, ir.AttrStmt) and body.key == key:
        return ir.seq(body, extra)
    if isinstance(body, ir.Block):
        stmts = list(body.stmts)
        for i, x in enumerate(stmts):
            if _contains(x, key):
                stmts[i] = _insert_after(x, key, extra)
                return ir.Block(tuple(stmts))
    if isinstance(body, ir.LetStmt):
        return ir.LetStmt(body.var, body.value, _insert_after(body.body, key, extra))
    if isinstance(body, ir.IfThenElse) and body.orelse is None:
        return ir.IfThenElse(body.cond, _insert_after(body.then, key, extra))
    if isinstance(body, ir.AttrStmt):
        return ir.AttrStmt(body.key, body.value, _insert_after(body.body, key, extra))
    raise PolycompInternalError("cannot place the wgmma accumulator store-back")


def _contains(s, key) -> bool:
    found = []
    ir.walk(s, lambda n: found.append(1) if isinstance(n, ir.AttrStmt) and n.key == key
            else None)
    return bool(found)
