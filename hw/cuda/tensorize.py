"""IR pass: expand the tensor-core marks into warp-level code (ldmatrix, mma, cp.async).

Assumes: IR lowered from the tree of
:class:`~polycomp.scheduler.tensorcore.tile.TensorCoreTilingPass`
and :class:`~polycomp.scheduler.tensorcore.map.TensorCoreMappingPass`, before
:func:`~polycomp.hw.cuda.mapping.wrap_kernels`: inside ``AttrStmt("tc:block", "<g>")``
the isl AST executes, per block tile, ``tc:frag`` regions (the point loops
``o_m mod BM``, ``o_n mod BN`` of the init / an epilogue statement) and, inside the
K-tile loop ``kt`` (below ``AttrStmt("pipeline", S)`` and the loops of the other reduce
axes), one ``tc:mma`` region (the point loops of the update over a BM x BN x KT tile).
Each region holds one statement; its instances are ``origin + point`` where the origin
is the instance at the first point (the region's loop variables at their minima).  A
band member with a single value on the domain has no loop (isl substitutes the value):
a constant ``K <= KT`` leaves no K-tile loop (one K tile, index 0, under a ``pipeline``
mark that then stays unpipelined) and a reduce axis of constant extent 1 no loop
(coordinate 0); see :meth:`_Tensorizer._reduce_origin`.

Rewrites, with ``lane = tx<n>``, warp ``(tz<n>, ty<n>)`` owning rows ``WM*tz ..`` and
columns ``WN*ty ..`` of the block tile, ``g = lane / 4``, ``t = lane % 4``:

* accumulators: the backbone output ``C`` (and every epilogue output that nothing outside
  the group reads) live in per-thread fragments ``acc[im, jn, r]`` — element ``r`` of the
  ``16x8`` tile ``(im, jn)`` of the warp is ``C[row, col]`` with ``row = 16 im + g +
  8 (r / 2)``, ``col = 8 jn + 2 t + r % 2`` (the PTX m16n8k16 accumulator layout);
* a ``tc:frag`` region becomes, per thread, the statement at each of its fragment
  elements, guarded by ``o_m < extent_m and o_n < extent_n`` (the statement's box
  domain), with ``C`` (and register epilogue outputs) read and written in the fragment;
* a ``tc:mma`` region becomes: ``AttrStmt("tc_load")`` with the copies of the A tile
  ``As[stage][m][k]`` (BM x KT) and the B tile ``Bs[stage][k][n]`` (KT x BN), ``stage =
  kt mod S``, each thread copying 16-byte chunks ``q = lin + NT j``; a chunk is one
  ``cp.async`` (zero-filled beyond the extents: ``src_bytes`` clamps) when the operand
  is a plain load contiguous along the chunk and the row length is a multiple of 8
  elements (a run-time, block-uniform condition), else 8 element copies with
  ``select(in domain, factor, 0)`` (gathers: implicit GEMM, padding, ragged rows);
  then ``commit``, ``wait_group 0``, a barrier, per 16-wide K step ``ldmatrix.x4`` A
  fragments, ``ldmatrix.x4.trans`` B fragments and ``(WM/16)(WN/8)`` ``mma``, and a
  barrier.  Shared tiles are XOR-swizzled by 16-byte chunk (``chunk ^ f(row)``) so that
  the 8 rows an ``ldmatrix`` phase reads and the 8 chunks a quarter warp stores fall in
  distinct bank groups (``options["tc_tile"]["swizzle"]=False`` keeps them linear);
  the tiles' shapes and the swizzle are the ``swizzled`` layouts of the plan's staging
  decisions (:mod:`polycomp.scheduler.tensorcore.staging`), not recomputed here;
* after the update's loops, if ``C`` is needed outside the group, the fragments are
  stored to ``C`` (guarded).

Guarantees: every statement instance of the group is executed exactly once (by the
thread owning its fragment element, or, for the update, inside the warp's ``mma`` on
the zero-filled tiles: padding contributes 0), so the results equal the statement
semantics up to the summation order of the reduction.  Loops above the regions are
unchanged (uniform in the block), so the barriers are reached by every thread.  The
new buffers are recorded in ``promotion_state(state).promotions`` for ``wrap_kernels`` to
allocate (shared per block, fragments per thread): ``As``/``Bs`` from the staging
decisions (level ``shared``), the fragments at the staging's ``registers`` level.
"""
from __future__ import annotations

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.lowering.simplify import linear, simplify
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.record import Promotion, promotion_state

from . import ptx


def tensorize(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """See the module docstring; ``state`` is the compile's
    :class:`~polycomp.state.CompileState` (Tensor Core plans in ``gpu_kernels(state).tc_plans``;
    the new buffers are appended to ``promotion_state(state).promotions``)."""
    from polycomp.scheduler.tensorcore.hopper import is_wgmma
    plans = {g: p for g, p in gpu_kernels(state).tc_plans.items() if not is_wgmma(p.config)}
    if not plans:     # (sm_90a wgmma plans: hw/cuda/hopper.py)
        return func
    t = _Tensorizer(plans, state.model)
    body = t.visit(func.body)
    promotion_state(state).promotions.extend(t.records)
    return func.with_body(body)


def _imm(v):
    return ir.IntImm(int(v))


def _clamp(e, lo, hi):
    return ir.Binary("max", ir.Binary("min", e, _imm(hi), "int64"), _imm(lo), "int64")


def _and(*cs):
    out = None
    for c in cs:
        if c is None:
            continue
        out = c if out is None else ir.Binary("&&", out, c, "bool")
    return out if out is not None else ir.IntImm(1, "bool")


def epilogue_registers(v, model, acc: ir.Buffer, n: int, count: int
                       ) -> tuple[ir.Buffer, bool, dict[str, ir.Buffer]]:
    """Where the product and its epilogue live in a tensor-core kernel ``n`` (view ``v``):
    ``(C, C is read outside, registers)``: the accumulator ``acc`` holds C, and each
    epilogue result that no statement outside the group reads (and the program does not
    return) gets ``count`` registers per thread (``<name>_frag<n>``)."""
    group = [v.init, v.update] + v.epilogue
    outside = {b.name for b in model.live_out}
    for s in model.statements:
        if s not in group:
            outside |= {a.buffer.name for a in s.reads}
    c_buf = v.stage.output.buffer
    regs = {c_buf.name: acc}
    for s in v.epilogue:
        b = s.write
        if b.name not in outside and b.name not in regs:
            regs[b.name] = ir.Buffer(f"{b.name}_frag{n}", b.dtype, (_imm(count),), "local")
    return c_buf, c_buf.name in outside, regs


class _Kernel:
    """The buffers and thread coordinates of one tensor-core kernel."""

    def __init__(self, plan, model):
        self.plan, self.view, self.cfg = plan, plan.view, plan.config
        v, c = self.view, self.cfg
        n = plan.kernel
        self.tx, self.ty, self.tz = ir.Var(f"tx{n}"), ir.Var(f"ty{n}"), ir.Var(f"tz{n}")
        self.wm, self.wn = c.warp
        self.mi, self.ni = self.wm // 16, self.wn // 8
        self.nthreads = c.threads
        self.lin = self.tx + self.ty * 32 + self.tz * (32 * c.warps[1])
        nfrag = self.mi * self.ni * 4
        self.acc = ir.Buffer(f"acc{n}", "float32", (_imm(nfrag),), "local")
        self.afrag = ir.Buffer(f"afrag{n}", "int32", (_imm(self.mi * 4),), "local")
        self.bfrag = ir.Buffer(f"bfrag{n}", "int32", (_imm(self.ni * 2),), "local")
        staging = plan.staging
        if staging is None or staging.refused:
            raise PolycompInternalError(f"tensor-core kernel {n} without its staging decisions")
        self.staging = staging
        self.a_layout = staging.footprint(staging.a).layout
        self.b_layout = staging.footprint(staging.b).layout
        self.As = ir.Buffer(f"As{n}", v.in_dtype,
                            tuple(_imm(e) for e in staging.footprint(staging.a).shape), "shared")
        self.Bs = ir.Buffer(f"Bs{n}", v.in_dtype,
                            tuple(_imm(e) for e in staging.footprint(staging.b).shape), "shared")
        self.c_buf, self.c_outside, self.regs = epilogue_registers(v, model, self.acc, n,
                                                                   nfrag)
        self.res = ir.Buffer(f"res{n}", "float32", (_imm(4),), "local")
        self.xch = ir.Buffer(f"xch{n}", "float32", (_imm(2),), "local")
        self.buffers = [self.acc, self.afrag, self.bfrag, self.As, self.Bs, self.res,
                        self.xch] + [b for k, b in self.regs.items() if k != self.c_buf.name]

    # ------------------------------------------------------------------ layouts
    def tile_loop(self, make):
        """``for im, jn`` (unrolled) over this warp's 16x8 tiles; ``make(im, jn)``."""
        n = self.plan.kernel
        im, jn = ir.Var(f"qim{n}"), ir.Var(f"qjn{n}")
        ann = (("unroll", True),)
        return ir.For(im, _imm(0), _imm(self.mi), "unrolled",
                      ir.For(jn, _imm(0), _imm(self.ni), "unrolled", make(im, jn), ann), ann)

    def element(self, im, jn, r):
        """(fragment index, row, col) of element ``r`` (0..3, an int) of tile (im, jn)."""
        g, t = self.tx // 4, self.tx % 4
        row = self.tz * self.wm + im * 16 + (r // 2) * 8 + g
        col = self.ty * self.wn + jn * 8 + r % 2 + t * 2
        return (im * self.ni + jn) * 4 + r, row, col

    def frag_loop(self, make):
        """``for im, jn, r`` (unrolled loops) over this thread's accumulator elements,
        ``make(index, row, col)`` building the body for fragment element ``index`` at
        (row, col) of the block tile."""
        n = self.plan.kernel
        im, jn, r = ir.Var(f"fim{n}"), ir.Var(f"fjn{n}"), ir.Var(f"fr{n}")
        g, t = self.tx // 4, self.tx % 4
        row = self.tz * self.wm + im * 16 + (r // 2) * 8 + g
        col = self.ty * self.wn + jn * 8 + r % 2 + t * 2
        body = make((im * self.ni + jn) * 4 + r, row, col)
        ann = (("unroll", True),)
        return ir.For(im, _imm(0), _imm(self.mi), "unrolled",
                      ir.For(jn, _imm(0), _imm(self.ni), "unrolled",
                             ir.For(r, _imm(0), _imm(4), "unrolled", body, ann), ann), ann)

    def layout_of(self, buf: ir.Buffer):
        """The swizzled layout the staging decision chose for ``As`` or ``Bs``."""
        if buf is self.As:
            return self.a_layout
        if buf is self.Bs:
            return self.b_layout
        raise PolycompInternalError(f"{buf.name} is no staged tile")

    def swizzle(self, row, chunk, elem, buf: ir.Buffer):
        """Element offset of (row, 16-byte chunk, element) in a stage of the staged
        tile ``buf`` (the decision's swizzled layout; see the module docstring)."""
        return self.layout_of(buf).swizzled_offset(row, chunk, elem, ptx.xor)

    def records(self) -> list[Promotion]:
        """The new buffers as promotion records, in allocation order: the staged tiles
        from the staging decisions (level ``shared``), the fragments at the staging's
        fragment level (``registers``)."""
        staged = {self.As.name: self.staging.a, self.Bs.name: self.staging.b}
        out = []
        for b in self.buffers:
            d = staged.get(b.name)
            level = d.level if d is not None else self.staging.fragments
            reason = d.motive if d is not None else "tensor cores"
            out.append(Promotion(b, b, self.plan.kernel, None, reason=reason, level=level))
        return out


class _Tensorizer(ir.Mutator):
    def __init__(self, plans, model):
        self.model = model
        self.plans = {p.group: p for p in plans.values()}
        self.kernels: dict = {}
        self.records: list = []
        self.scope: list = []          # enclosing loop/let variables, outermost first
        self.pipeline_depth = None
        self.block_origin = None

    def kernel(self, g) -> _Kernel:
        k = self.kernels.get(g)
        if k is None:
            plan = self.plans[g]
            k = self.kernels[g] = _Kernel(plan, self.model)
            self.records.extend(k.records())
        return k

    # ------------------------------------------------------------------ traversal
    def visit_For(self, s):          # loops and lets bind a variable of the scope
        self.scope.append(s.var)
        try:
            return self.generic(s)
        finally:
            self.scope.pop()

    visit_LetStmt = visit_For

    def visit_AttrStmt(self, s):
        if s.key == marks.PIPELINE:
            saved = self.pipeline_depth
            self.pipeline_depth = len(self.scope)
            try:
                return self.generic(s)
            finally:
                self.pipeline_depth = saved
        g = marks.attr_index(s, marks.TC_BLOCK)
        if g is not None:
            k = self.kernel(g)
            saved = self.block_origin
            self.block_origin = None
            try:
                body = self.visit(s.body)
                if k.c_outside:
                    if self.block_origin is None:
                        raise PolycompInternalError("tensor-core block without an init region")
                    body = _insert_after_update(body, self.writeback(k, self.block_origin))
            finally:
                self.block_origin = saved
            return ir.AttrStmt(s.key, s.value, body)
        g = marks.attr_index(s, marks.TC_FRAG)
        if g is not None:
            return self.frag(self.kernel(g), s.body)
        g = marks.attr_index(s, marks.TC_MMA)
        if g is not None:
            return self.mma(self.kernel(g), s.body)
        return self.generic(s)

    # ------------------------------------------------------------------ regions
    def frag(self, k, region):
        store, origin = _origin_store(region)
        v = k.view
        stmt = next((x for x in [v.init] + v.epilogue if x.write.name == store.buffer.name),
                    None)
        if stmt is None:
            raise PolycompInternalError(f"tc:frag region stores to {store.buffer.name}")
        if stmt is v.init:
            self.block_origin = origin
        ext = v.out_extents

        def instance(idx, coords):
            inst = ir.substitute(stmt.store(), dict(zip(stmt.iters, coords)))
            return _Redirect(k.regs, idx).visit(inst)
        if stmt.write.name not in k.regs and _vector_store_ok(stmt, v):
            body = self.quad_stores(k, origin, stmt.write,
                                    lambda idx, coords: instance(idx, coords).value)
            return ir.AttrStmt("tc_frag", stmt.name, body)

        def make(idx, row, col):
            coords = self._at(k, origin, row, col)
            guard = _and(coords[v.m_dim] < ext[v.m_dim], coords[v.n_dim] < ext[v.n_dim])
            return ir.IfThenElse(guard, instance(idx, coords))
        return ir.AttrStmt("tc_frag", stmt.name, k.frag_loop(make))

    def _at(self, k, origin, row, col):
        v = k.view
        coords = list(origin)
        coords[v.m_dim] = coords[v.m_dim] + row
        coords[v.n_dim] = coords[v.n_dim] + col
        return coords

    def writeback(self, k, origin):
        body = self.quad_stores(k, origin, k.c_buf,
                                lambda idx, coords: ir.Load(k.acc, (idx,), "float32"))
        return ir.AttrStmt("tc_frag", f"store_{k.c_buf.name}", body)

    def quad_stores(self, k, origin, out, value_of):
        """Store this warp's results to ``out`` (indexed by the output coordinates, the
        N dimension innermost): per 16x8 tile, each thread computes its 4 elements into
        ``res``, exchanges two with its neighbour lane (``__shfl_xor_sync(.., 1)``) so
        that an even lane holds 4 consecutive columns of row ``g`` and an odd lane 4 of
        row ``g + 8``, and stores them with one 16-byte (8 for 16-bit outputs) store when
        the row length is a multiple of 4 and the 4 columns are inside the extent, else
        element by element."""
        v = k.view
        ext = v.out_extents
        ext_m, ext_n = ext[v.m_dim], ext[v.n_dim]
        aligned = simplify(ir.Binary("==", ir.Binary("%", out.shape[-1], _imm(4), "int64"),
                                     _imm(0), "bool"))
        if out.dtype not in ("float32", "float16", "bfloat16"):
            aligned = ir.IntImm(0, "bool")
        even = ir.Binary("==", k.tx % 2, _imm(0), "bool")
        R = lambda i: ir.Load(k.res, (_imm(i),), "float32")  # noqa: E731
        X = lambda i: ir.Load(k.xch, (_imm(i),), "float32")  # noqa: E731

        def make(im, jn):
            body: list[ir.Stmt] = []
            for r in range(4):
                idx, row, col = k.element(im, jn, r)
                coords = self._at(k, origin, row, col)
                ok = _and(coords[v.m_dim] < ext_m, coords[v.n_dim] < ext_n)
                val = value_of(idx, coords)
                body.append(ir.Store(k.res, (_imm(r),),
                                     ir.Select(ok, val, ir.FloatImm(0.0, val.dtype), val.dtype)))
            for i in range(2):
                sent = ir.Select(even, R(2 + i), R(i), "float32")
                body.append(ir.Store(k.xch, (_imm(i),), ptx.shfl_xor(sent, 1)))
            _, row0, col0 = k.element(im, jn, 0)
            _, row2, _ = k.element(im, jn, 2)
            row = ir.Select(even, row0, row2, "int64")
            col = ir.Select(even, col0, col0 - 2, "int64")
            quad = [ir.Select(even, a, b, "float32")
                    for a, b in ((R(0), X(0)), (R(1), X(1)), (X(0), R(2)), (X(1), R(3)))]
            coords = self._at(k, origin, row, col)
            row_ok = coords[v.m_dim] < ext_m
            vec = ptx.store4(ir.Load(out, tuple(coords), out.dtype), quad)
            scal = []
            for e in range(4):
                ce = self._at(k, origin, row, col + e)
                scal.append(ir.IfThenElse(ce[v.n_dim] < ext_n,
                                          ir.Store(out, tuple(ce), quad[e])))
            full = _and(aligned, coords[v.n_dim] + 3 < ext_n)
            body.append(ir.IfThenElse(row_ok, ir.IfThenElse(full, vec, ir.seq(*scal))))
            return ir.seq(*body)
        return k.tile_loop(make)

    def mma(self, k, region):
        c = k.cfg
        _, origin = _origin_store(region)
        kt, red = self._reduce_origin(k)
        stage = ir.IntImm(0) if c.stages == 1 or kt is None else kt % c.stages
        loads = self.copies(k, origin, red, stage)
        body = [ir.AttrStmt(marks.TC_LOAD, str(k.plan.kernel), loads), ptx.cp_async_commit(),
                ptx.cp_async_wait(0), ir.barrier()]
        body += self.compute(k, stage)
        body.append(ir.barrier())
        return ir.seq(*body)

    def _reduce_origin(self, k):
        """(K-tile loop variable or None, reduce coordinates of the region's origin).

        The isl AST has no loop for a band member that takes a single value on the
        domain (a *degenerate* loop) and substitutes that value.  The reduce domain is
        the box ``0 <= r_d < extent_d``, so the K-tile member ``floor(r_k/KT)`` is
        degenerate exactly when ``extent_k`` is a constant ``<= KT`` (one K tile, index
        0), and the member ``r_d`` of another reduce axis exactly when ``extent_d`` is
        the constant 1 (value 0).  The remaining members are the loops right above the
        ``pipeline`` mark (other axes, in order) and the one loop between the mark and
        the ``tc:mma`` region (the K tile)."""
        v, c = k.view, k.cfg
        if self.pipeline_depth is None:
            raise PolycompInternalError("tc:mma region outside a pipeline mark")
        ext = v.red_extents
        below = self.scope[self.pipeline_depth:]
        single = isinstance(ext[v.k_dim], ir.IntImm) and ext[v.k_dim].value <= c.k
        if len(below) != (0 if single else 1):
            raise PolycompInternalError(
                f"tc:mma region below {len(below)} loop(s) of the pipeline mark; the K "
                f"tile of extent {ext[v.k_dim]} needs {0 if single else 1}")
        kt = None if single else below[0]
        others = [r for r in range(len(ext)) if r != v.k_dim]
        looped = [r for r in others if not ir.is_const(ext[r], 1)]
        above = self.scope[self.pipeline_depth - len(looped):self.pipeline_depth]
        if len(above) != len(looped):
            raise PolycompInternalError("tc:mma region: missing reduce-axis loops")
        var = dict(zip(looped, above))
        red = []
        for r in range(len(ext)):
            if r == v.k_dim:
                red.append(_imm(0) if kt is None else kt * c.k)
            else:
                red.append(var.get(r, _imm(0)))
        return kt, red

    # ------------------------------------------------------------------ copies
    def _coords(self, k, origin, red, m=None, n=None, kk=None):
        v = k.view
        o = list(origin)
        if m is not None:
            o[v.m_dim] = o[v.m_dim] + m
        if n is not None:
            o[v.n_dim] = o[v.n_dim] + n
        r = list(red)
        if kk is not None:
            r[v.k_dim] = r[v.k_dim] + kk
        return o, r

    def _value(self, k, factor, o, r):
        st = k.view.update
        return ir.substitute(factor, dict(zip(st.iters, list(o) + list(r))))

    def copies(self, k, origin, red, stage):
        """The copies of one K tile of ``A`` and ``B`` into stage ``stage`` of ``As`` /
        ``Bs``: the boxes (rows x row length) and chunks of the staging decisions."""
        v = k.view
        ext_o, ext_r = v.out_extents, v.red_extents
        ext_m, ext_n, ext_k = ext_o[v.m_dim], ext_o[v.n_dim], ext_r[v.k_dim]
        out = []
        # A tile [m][k]: chunks along k
        bm, kt = k.staging.footprint(k.staging.a).box.sizes
        ch = k.a_layout.chunk
        kc_n = kt // ch
        for q, guard in self._chunks(k, bm * kc_n):
            mm, kc = q // kc_n, q % kc_n
            o, r = self._coords(k, origin, red, m=mm, kk=kc * ch)
            row_ok = o[v.m_dim] < ext_m
            kstart = r[v.k_dim]
            dst = lambda e, mm=mm, kc=kc: (stage, k.swizzle(mm, kc, e, k.As))  # noqa: E731
            vec = self._vector_copy(k, v.a, "k", o, r, row_ok, kstart < ext_k, ext_k - kstart,
                                    k.As, dst(0), m_clamp=True)
            e = ir.Var(f"ea{k.plan.kernel}")
            oe, re_ = self._coords(k, origin, red, m=mm, kk=kc * ch + e)
            ok = _and(row_ok, re_[v.k_dim] < ext_k)
            val = ir.Select(ok, self._value(k, v.a.expr, oe, re_), ir.FloatImm(0.0), "float32")
            scal = [_unrolled(e, ch, ir.Store(k.As, dst(e), val))]
            out.append(self._choose(guard, vec, scal))
        # B tile [k][n]: chunks along n
        kt, bn = k.staging.footprint(k.staging.b).box.sizes
        ch = k.b_layout.chunk
        nc_n = bn // ch
        for q, guard in self._chunks(k, kt * nc_n):
            kk, nc = q // nc_n, q % nc_n
            o, r = self._coords(k, origin, red, n=nc * ch, kk=kk)
            row_ok = r[v.k_dim] < ext_k
            nstart = o[v.n_dim]
            dst = lambda e, kk=kk, nc=nc: (stage, k.swizzle(kk, nc, e, k.Bs))  # noqa: E731
            vec = self._vector_copy(k, v.b, "n", o, r, row_ok, nstart < ext_n, ext_n - nstart,
                                    k.Bs, dst(0), m_clamp=False)
            e = ir.Var(f"eb{k.plan.kernel}")
            oe, re_ = self._coords(k, origin, red, n=nc * ch + e, kk=kk)
            ok = _and(row_ok, oe[v.n_dim] < ext_n)
            val = ir.Select(ok, self._value(k, v.b.expr, oe, re_), ir.FloatImm(0.0), "float32")
            scal = [_unrolled(e, ch, ir.Store(k.Bs, dst(e), val))]
            out.append(self._choose(guard, vec, scal))
        return ir.seq(*out)

    def _chunks(self, k, total):
        nt = k.nthreads
        for j in range(-(-total // nt)):
            q = k.lin + nt * j
            guard = None if (j + 1) * nt <= total else q < total
            yield q, guard

    def _choose(self, guard, vec, scal):
        s = ir.seq(*scal)
        if vec is not None:
            cond, stmt = vec
            s = ir.IfThenElse(cond, stmt, s)
        return s if guard is None else ir.IfThenElse(guard, s)

    def _vector_copy(self, k, factor, along, o, r, row_ok, chunk_ok, remaining, dst_buf,
                     dst_idx, m_clamp):
        """(uniform alignment condition, cp.async statement) or None when the factor is
        not a plain load contiguous along the chunk dimension."""
        v = k.view
        if factor.guard is not None:
            return None
        var = v.stage.iters[v.n_dim] if along == "n" else v.stage.reduce_axes[v.k_dim].var
        load = factor.load
        lin = linear(load.indices[-1])
        if lin is None or lin[0] != {var: 1} or lin[1] != 0:
            return None
        for idx in load.indices[:-1]:
            if var in ir.free_vars(idx):
                return None
        row_len = load.buffer.shape[-1]
        aligned = simplify(ir.Binary("==", ir.Binary("%", row_len, _imm(8), "int64"), _imm(0),
                                     "bool"))
        if ir.is_const(aligned, 0):
            return None
        ok = _and(row_ok, chunk_ok)
        o2, r2 = list(o), list(r)
        if along == "k":   # clamp the address of an empty chunk into the array
            o2[v.m_dim] = ir.Select(row_ok, o[v.m_dim], _imm(0), "int64")
            r2[v.k_dim] = ir.Select(ok, r[v.k_dim], _imm(0), "int64")
        else:
            r2[v.k_dim] = ir.Select(row_ok, r[v.k_dim], _imm(0), "int64")
            o2[v.n_dim] = ir.Select(ok, o[v.n_dim], _imm(0), "int64")
        st = v.update
        src = ir.substitute(load, dict(zip(st.iters, o2 + r2)))
        item = dt.itemsize(v.in_dtype)
        nbytes = ir.Select(ok, _clamp(remaining * item, 0, 16), _imm(0), "int64")
        return aligned, ptx.cp_async(ir.Load(dst_buf, dst_idx, dst_buf.dtype), src, nbytes)

    # ------------------------------------------------------------------ compute
    def compute(self, k, stage):
        c, lane = k.cfg, k.tx
        wm0, wn0 = k.tz * k.wm, k.ty * k.wn
        out = []
        L = lambda b, i: ir.Load(b, i if isinstance(i, tuple) else (_imm(i),), b.dtype)  # noqa
        for ks in range(c.k // 16):
            for im in range(k.mi):
                row = wm0 + 16 * im + lane % 16
                src = (stage, k.swizzle(row, 2 * ks + lane // 16, 0, k.As))
                out.append(ptx.ldmatrix(L(k.afrag, 4 * im), L(k.As, src), 4, False))
            for jp in range(k.ni // 2):
                krow = 16 * ks + lane % 8 + ((lane // 8) % 2) * 8
                chunk = (wn0 + 16 * jp) // 8 + lane // 16
                src = (stage, k.swizzle(krow, chunk, 0, k.Bs))
                out.append(ptx.ldmatrix(L(k.bfrag, 4 * jp), L(k.Bs, src), 4, True))
            if k.ni % 2:
                jn = k.ni - 1
                krow = 16 * ks + lane % 8 + ((lane // 8) % 2) * 8
                src = (stage, k.swizzle(krow, (wn0 + 8 * jn) // 8, 0, k.Bs))
                out.append(ptx.ldmatrix(L(k.bfrag, 2 * jn), L(k.Bs, src), 2, True))
            for im in range(k.mi):
                for jn in range(k.ni):
                    out.append(ptx.mma(L(k.acc, (im * k.ni + jn) * 4), L(k.afrag, 4 * im),
                                       L(k.bfrag, 2 * jn), k.view.in_dtype))
        return out


def _vector_store_ok(stmt, view) -> bool:
    """Does ``stmt`` store ``out[o]`` at its own output point (N innermost), with no
    statement of the group reading ``out`` from memory (the in-out ``C`` of a C GEMM
    nest, or an epilogue statement after it reading ``C``)?  A lane's quad store writes
    elements that other lanes own; their reads would be ordered by nothing but the
    shuffle, so those statements store element by element, each by its owner."""
    idx = stmt.write_indices
    reads: list = []
    for s in [stmt] + view.epilogue[view.epilogue.index(stmt) + 1:] \
            if stmt in view.epilogue else [stmt]:
        ir.walk(s.value, lambda e: reads.append(e) if isinstance(e, ir.Load)
                and e.buffer.name == stmt.write.name else None)
    return not reads and len(idx) == len(view.stage.iters) and \
        all(i is v for i, v in zip(idx, stmt.iters[:len(idx)]))


def _unrolled(var, n, body):
    return ir.For(var, _imm(0), _imm(n), "unrolled", body, (("unroll", True),))


class _Redirect(ir.Mutator):
    """Loads/stores of register-resident arrays go to fragment element ``idx``."""

    def __init__(self, regs, idx):
        self.regs, self.idx = regs, idx

    def visit_Load(self, e):
        b = self.regs.get(e.buffer.name)
        if b is None:
            return self.generic(e)
        return ir.Load(b, (self.idx,), e.dtype)

    def visit_Store(self, s):
        b = self.regs.get(s.buffer.name)
        v = self.visit(s.value)
        if b is None:
            return ir.Store(s.buffer, tuple(self.visit(i) for i in s.indices), v, s.lanes)
        return ir.Store(b, (self.idx,), v)


def _origin_store(region):
    """The region's (first) Store and its write indices at the region's first point."""
    stores: list[ir.Store] = []
    binds: dict = {}

    def fn(n):
        if isinstance(n, ir.Store) and not stores:
            stores.append(n)
        elif isinstance(n, ir.For):
            binds[n.var] = n.min
        elif isinstance(n, ir.LetStmt):
            binds[n.var] = n.value
    ir.walk(region, fn)
    if not stores:
        raise PolycompInternalError("a tensor-core region without a statement")
    idx = list(stores[0].indices)
    for _ in range(len(binds) + 1):
        idx = [ir.substitute(i, binds) for i in idx]
    return stores[0], [simplify(i) for i in idx]


def _insert_after_update(body, extra):
    """Insert ``extra`` right after the statement holding the update's loops (the
    innermost statement containing the copies but no ``tc_frag`` region)."""
    if not _contains(body, marks.TC_FRAGMENT):
        return ir.seq(body, extra)
    if isinstance(body, ir.Block):
        stmts = list(body.stmts)
        for i, s in enumerate(stmts):
            if _contains(s, marks.TC_LOAD):
                stmts[i] = _insert_after_update(s, extra)
                return ir.Block(tuple(stmts))
        raise PolycompInternalError("tensor-core block without its update loop")
    if isinstance(body, ir.LetStmt):
        return ir.LetStmt(body.var, body.value, _insert_after_update(body.body, extra))
    if isinstance(body, ir.For):
        return ir.For(body.var, body.min, body.extent, body.kind,
                      _insert_after_update(body.body, extra), body.annotations)
    if isinstance(body, ir.IfThenElse) and body.orelse is None:
        return ir.IfThenElse(body.cond, _insert_after_update(body.then, extra))
    if isinstance(body, ir.AttrStmt):
        return ir.AttrStmt(body.key, body.value, _insert_after_update(body.body, extra))
    raise PolycompInternalError("cannot place the accumulator store-back")


def _contains(s, key) -> bool:
    found = []
    ir.walk(s, lambda n: found.append(1) if isinstance(n, ir.AttrStmt) and n.key == key
            else None)
    return bool(found)
