"""Row-reduction kernels on CUDA: what the mapping of
:mod:`polycomp.scheduler.gpu.rowreduce` leaves for lowering, the IR passes and the printer.

* :func:`allreduce` — the IR of a privatised reduction's ``warp_allreduce`` statement:
  a ``__shfl_xor_sync`` butterfly over the row's lanes (member mask: the whole warp, or
  for ``width < 32`` the row's segment ``((1 << width) - 1) << (width * (ty mod (32 /
  width)))`` — the lanes of block row ``ty`` in its warp); for a row of several warps
  lane 0 of each warp stores its result in the shared ``scratch[warp]``, a
  ``__syncthreads()`` publishes them, every lane takes ``scratch[lane mod warps]`` and a
  butterfly over ``warps`` lanes combines them.
* :func:`row_builders` — statement builders for the register row caches' load
  statements (``rowload_X``: ``X_row[index(c)] = X[rows..., c]``).
* :func:`lower_row_kernels` — the IR pass after ``wrap-kernels``: each ``row_vector``
  mark's loop becomes a ``vectorized`` loop annotated ``("vector", V)`` (the printer
  prints its global unit-stride accesses as ``V``-element aligned vector accesses,
  :func:`print_vector_loop`; every other loop kind runs it as a loop), the shared
  scratch arrays are allocated per block, and a kernel that assumes its symbolic row
  length is a multiple of ``V`` or within a bound checks that first (``__trap()``).
* :func:`print_vector_loop` — how :class:`~polycomp.hw.cuda.codegen.CudaPrinter` prints
  a vector loop ``for v in [0, V)``: each global load whose flat index is ``b + v``
  becomes one ``V * itemsize``-byte load into a temporary (``uint4``/``uint2``/
  ``unsigned``), each global store ``Y[b + v] = ...`` collects its ``V`` values and is
  one vector store; the body is printed once per ``v`` (constant register indices).
"""
from __future__ import annotations

from collections.abc import Callable

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.affine import aff_to_ir
from polycomp.errors import PolycompInternalError
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.rowstate import row_kernels
from polycomp.scheduler.promotion.record import promotion_state

from .promoted import ParamLookup

FULL_MASK = 0xFFFFFFFF
WARP = 32
TRAP = "__trap"
#: a vector access of this many bytes is printed through this integer vector type
_VECTOR_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned int", 2: "unsigned short"}


# --------------------------------------------------------------------------- combine


def _shfl(mask: ir.Expr, v: ir.Expr, off: int, dtype: str) -> ir.Expr:
    return ir.Call("__shfl_xor_sync", (mask, v, ir.IntImm(off, "int32")), dtype, pure=False)


def _butterfly(local: ir.Buffer, zero: tuple, combine: str, width: int,
               mask: ir.Expr) -> list[ir.Stmt]:
    out: list[ir.Stmt] = []
    off = width // 2
    while off >= 1:
        v = ir.Load(local, zero, local.dtype)
        out.append(ir.Store(local, zero, ir.Binary(combine, v, _shfl(mask, v, off, local.dtype),
                                                   local.dtype)))
        off //= 2
    return out


def _segment_mask(w, params) -> ir.Expr:
    full = ir.IntImm(FULL_MASK, "int64")
    if w.width >= WARP or w.warps > 1:
        return full
    row = params[w.row_param]
    seg = ir.Binary("*", ir.IntImm(w.width, "int64"),
                    ir.Binary("%", row, ir.IntImm(WARP // w.width, "int64"), "int64"), "int64")
    return ir.Binary("<<", ir.IntImm((1 << w.width) - 1, "int64"), seg, "int64")


def allreduce(promo, params) -> ir.Stmt:
    """The ``warp_allreduce`` statement of ``promo`` (a privatised reduction with its
    :class:`~polycomp.scheduler.promotion.record.WarpReduction`); see the module
    docstring.  ``params`` maps parameter names to their IR values (thread ids)."""
    w = promo.warp
    if w.online_max is not None:
        return _online_allreduce(promo, params)
    local = promo.local
    zero = tuple(ir.IntImm(0) for _ in local.shape)
    full = ir.IntImm(FULL_MASK, "int64")
    mask = _segment_mask(w, params)
    out = _butterfly(local, zero, w.combine, w.width, mask)
    if w.warps > 1:
        lane = params[w.lane_param]
        scratch = w.scratch
        lane_in_warp = ir.Binary("%", lane, ir.IntImm(WARP, "int64"), "int64")
        warp = ir.Binary("//", lane, ir.IntImm(WARP, "int64"), "int64")
        out.append(ir.IfThenElse(ir.Binary("==", lane_in_warp, ir.IntImm(0, "int64"), "bool"),
                                 ir.Store(scratch, (warp,), ir.Load(local, zero, local.dtype))))
        out.append(ir.barrier())
        pick = ir.Binary("%", lane_in_warp, ir.IntImm(w.warps, "int64"), "int64")
        out.append(ir.Store(local, zero, ir.Load(scratch, (pick,), local.dtype)))
        out.extend(_butterfly(local, zero, w.combine, w.warps, full))
    return ir.Block(tuple(out))


# --------------------------------------------------------------------------- online pairs

NEG_INF = float("-inf")


def _rescale(a: ir.Expr, mn: ir.Expr, dtype: str) -> ir.Expr:
    """``(mn == -inf) ? 0 : exp(a - mn)``: the weight of a sum relative to ``a`` once the
    maximum is ``mn`` (``-inf`` rows keep a zero sum; ``+inf`` and NaN propagate)."""
    return ir.Select(ir.Binary("==", mn, ir.FloatImm(NEG_INF, dtype), "bool"),
                     ir.FloatImm(0.0, dtype),
                     ir.Call("exp", (ir.Binary("-", a, mn, dtype),), dtype), dtype)


def _as(e: ir.Expr, dtype: str) -> ir.Expr:
    return e if e.dtype == dtype else ir.Cast(e, dtype)


def online_value(stmt: ir.Stmt, max_local: ir.Buffer) -> ir.Stmt:
    """The online form of a sum update ``s = s + exp(A - m)`` (``m`` read from
    ``max_local``, the running maximum updated right after):
    ``s = s * f(m, mn) + f(A, mn)`` with ``mn = max(m, A)`` and ``f`` :func:`_rescale`."""
    if not isinstance(stmt, ir.Store):
        raise PolycompInternalError("online sum: the update is not one store")
    v = stmt.value
    ex = v.b if isinstance(v, ir.Binary) and v.op == "+" else None
    d = ex.args[0] if isinstance(ex, ir.Call) and ex.name == "exp" else None
    if not (isinstance(v, ir.Binary) and isinstance(ex, ir.Call) and
            isinstance(d, ir.Binary) and d.op == "-"):
        raise PolycompInternalError(f"online sum: unexpected update {v}")
    acc = ex.dtype
    a, m = d.a, d.b
    inner = m.value if isinstance(m, ir.Cast) else m
    if not (isinstance(inner, ir.Load) and inner.buffer.name == max_local.name):
        raise PolycompInternalError("online sum: the exponent does not subtract the maximum")
    # the element and the new maximum in Lets: their loads stay outside the selects
    av = ir.Var(f"{stmt.buffer.name}_a", acc)
    mn = ir.Var(f"{stmt.buffer.name}_mn", acc)
    value = ir.Binary("+", ir.Binary("*", _as(v.a, acc), _rescale(_as(m, acc), mn, acc), acc),
                      _rescale(av, mn, acc), acc)
    return ir.LetStmt(av, _as(a, acc), ir.LetStmt(
        mn, ir.Binary("max", _as(m, acc), av, acc),
        ir.Store(stmt.buffer, stmt.indices, _as(value, v.dtype), stmt.lanes)))


def _online_step(m_loc, s_loc, zero, mask, off, name) -> ir.Stmt:
    """One butterfly step of a (max, sum) pair: the other lane's pair combined."""
    acc = s_loc.dtype
    m = ir.Load(m_loc, zero, m_loc.dtype)
    s = ir.Load(s_loc, zero, s_loc.dtype)
    mo = ir.Var(f"{name}_mo", m_loc.dtype)
    so = ir.Var(f"{name}_so", s_loc.dtype)
    mn = ir.Var(f"{name}_mn", m_loc.dtype)
    mc = _as(mn, acc)
    body = ir.seq(
        ir.Store(s_loc, zero, ir.Binary("+", ir.Binary("*", s, _rescale(_as(m, acc), mc, acc), acc),
                                        ir.Binary("*", so, _rescale(_as(mo, acc), mc, acc), acc),
                                        acc)),
        ir.Store(m_loc, zero, mn))
    return ir.LetStmt(mo, _shfl(mask, m, off, m_loc.dtype),
                      ir.LetStmt(so, _shfl(mask, s, off, s_loc.dtype),
                                 ir.LetStmt(mn, ir.Binary("max", m, mo, m_loc.dtype), body)))


def _pair_butterfly(m_loc, s_loc, zero, width, mask, name) -> list[ir.Stmt]:
    out = []
    off = width // 2
    while off >= 1:
        out.append(_online_step(m_loc, s_loc, zero, mask, off, f"{name}{off}"))
        off //= 2
    return out


def _online_allreduce(promo, params) -> ir.Stmt:
    """The pair combine of an online max-and-sum (:mod:`polycomp.scheduler.gpu.rowonline`):
    butterflies of ``(m, s)`` pairs, ``m = max(m, m')``, ``s = s f(m) + s' f(m')``."""
    w = promo.warp
    s_loc, m_loc = promo.local, w.online_max
    zero = tuple(ir.IntImm(0) for _ in s_loc.shape)
    name = f"row{s_loc.name}"
    out = _pair_butterfly(m_loc, s_loc, zero, w.width, _segment_mask(w, params), name)
    if w.warps > 1:
        lane = params[w.lane_param]
        lane_in_warp = ir.Binary("%", lane, ir.IntImm(WARP, "int64"), "int64")
        warp = ir.Binary("//", lane, ir.IntImm(WARP, "int64"), "int64")
        first = ir.Binary("==", lane_in_warp, ir.IntImm(0, "int64"), "bool")
        out.append(ir.IfThenElse(first, ir.seq(
            ir.Store(w.online_scratch, (warp,), ir.Load(m_loc, zero, m_loc.dtype)),
            ir.Store(w.scratch, (warp,), ir.Load(s_loc, zero, s_loc.dtype)))))
        out.append(ir.barrier())
        pick = ir.Binary("%", lane_in_warp, ir.IntImm(w.warps, "int64"), "int64")
        out.append(ir.Store(m_loc, zero, ir.Load(w.online_scratch, (pick,), m_loc.dtype)))
        out.append(ir.Store(s_loc, zero, ir.Load(w.scratch, (pick,), s_loc.dtype)))
        out.extend(_pair_butterfly(m_loc, s_loc, zero, w.warps,
                                   ir.IntImm(FULL_MASK, "int64"), name + "w"))
    return ir.Block(tuple(out))


# --------------------------------------------------------------------------- row caches


def row_builders(state, var, existing: dict | None = None) -> dict:
    """Statement builders (name -> fn(args) -> Stmt) of the register caches' loads, and
    of the online sums (``existing[name]`` rewritten by :func:`online_value`)."""
    params = ParamLookup(var)
    out: dict[str, Callable[..., ir.Stmt]] = {}
    for pair in row_kernels(state).online:
        base = (existing or {}).get(pair.sum_stmt)
        if base is None:
            raise PolycompInternalError(f"online sum {pair.sum_stmt} has no builder")

        def make_online(args, base=base, pair=pair):
            return online_value(base(args), pair.max_local)
        out[pair.sum_stmt] = make_online
    for c in row_kernels(state).caches:
        def make(args, c=c):
            idx = aff_to_ir(c.index, args, params)
            local = (ir.IntImm(0),) * c.rank + (idx,)
            return ir.Store(c.local, local, ir.Load(c.array, tuple(args), c.array.dtype))
        out[c.load] = make
    return out




# --------------------------------------------------------------------------- IR pass


class _RowKernels(ir.Mutator):
    def __init__(self, state):
        self.rk = row_kernels(state)
        self.params = {p.name: p for p in state.model.params}
        self.scratch: dict[int, list] = {}
        for p in promotion_state(state).promotions:
            if p.warp is not None and p.warp.scratch is not None:
                self.scratch.setdefault(p.kernel, []).append(p.warp.scratch)

    def visit_AttrStmt(self, s):
        k = marks.attr_index(s, marks.ROW_VECTOR)
        if k is not None:
            body = self.visit(s.body)
            vec = self.rk.vectors[k]
            from polycomp.lowering.simplify import simplify as simplify_expr
            if isinstance(body, ir.For) and ir.is_const(simplify_expr(body.extent), vec.width) \
                    and ir.is_const(simplify_expr(body.min), 0):
                body = ir.For(body.var, body.min, body.extent, "vectorized", body.body,
                              body.annotations + (("vector", vec.width),))
            return ir.AttrStmt(s.key, s.value, body)
        k = marks.attr_index(s, marks.KERNEL)
        if k is not None and (k in self.rk.kernels or k in self.scratch):
            body = self.visit(s.body)
            return ir.AttrStmt(s.key, s.value, self._kernel(k, body))
        return self.generic(s)

    def _kernel(self, k: int, body: ir.Stmt) -> ir.Stmt:
        """Allocate the scratch arrays per block; add the row-length check."""
        rec = self.rk.kernels.get(k)
        check = None
        if rec is not None and rec.width_param is not None:
            w = self.params[rec.width_param]
            conds = []
            if rec.multiple_of > 1:
                conds.append(ir.Binary("!=", ir.Binary("%", w, ir.IntImm(rec.multiple_of),
                                                       "int64"), ir.IntImm(0), "bool"))
            if rec.bound is not None:
                conds.append(ir.Binary(">", w, ir.IntImm(rec.bound), "bool"))
            cond = conds[0]
            for c in conds[1:]:
                cond = ir.Binary("||", cond, c, "bool")
            check = ir.IfThenElse(cond, ir.Evaluate(ir.Call(TRAP, (), "int32", pure=False)))
        return _inside(body, self.scratch.get(k, []), check)


def _inside(s: ir.Stmt, scratch: list, check) -> ir.Stmt:
    """``s`` (a kernel body after wrap-kernels) with ``scratch`` allocated inside its
    block loops and ``check`` first inside its thread loops."""
    if isinstance(s, ir.For) and s.kind == "gpu_block":
        inner = s.body
        if not (isinstance(inner, ir.For) and inner.kind == "gpu_block"):
            inner = _threads(inner, check)
            for b in scratch:
                inner = ir.Allocate(b, inner)
            return ir.For(s.var, s.min, s.extent, s.kind, inner, s.annotations)
        return ir.For(s.var, s.min, s.extent, s.kind, _inside(inner, scratch, check),
                      s.annotations)
    if isinstance(s, ir.Allocate):
        return ir.Allocate(s.buffer, _inside(s.body, scratch, check))
    return s


def _threads(s: ir.Stmt, check) -> ir.Stmt:
    if check is None:
        return s
    if isinstance(s, ir.For) and s.kind == "gpu_thread":
        return ir.For(s.var, s.min, s.extent, s.kind, _threads(s.body, check), s.annotations)
    if isinstance(s, ir.Allocate):
        return ir.Allocate(s.buffer, _threads(s.body, check))
    return ir.seq(check, s)


def lower_row_kernels(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """IR pass (after ``wrap-kernels``): see the module docstring.

    Assumes: the kernels of :mod:`polycomp.scheduler.gpu.rowreduce` wrapped in their
    block and thread loops.  Guarantees: the loops below ``row_vector`` marks whose
    bounds are ``[0, V)`` are ``vectorized`` loops annotated ``vector``; the semantics
    of every loop are unchanged (a vectorized loop still runs its iterations in order);
    each block has its scratch arrays; a kernel with assumptions on its row length
    traps before doing anything where they fail."""
    rk = row_kernels(state)
    if not rk.kernels and not rk.vectors:
        return func
    return func.with_body(_RowKernels(state).visit(func.body))


# --------------------------------------------------------------------------- printing


def vector_width(s: ir.For) -> int | None:
    """``V`` of a vector loop (a ``vectorized`` loop annotated ``vector``), else None."""
    if s.kind != "vectorized":
        return None
    v = s.annotation("vector")
    return int(v) if v is not None else None


def _unit_stride(indices: tuple, var: ir.Var) -> tuple | None:
    """``indices`` at ``var = 0`` when the last is ``b + var`` and no other one uses
    ``var`` (else None)."""
    from polycomp.lowering.simplify import const_difference
    from polycomp.lowering.simplify import simplify as simplify_expr
    if not indices or var not in ir.free_vars(indices[-1]) or \
            any(var in ir.free_vars(i) for i in indices[:-1]):
        return None
    last = indices[-1]
    nxt = ir.substitute(last, {var: ir.Binary("+", var, ir.IntImm(1), var.dtype)})
    if const_difference(nxt, last) != 1:
        return None
    return tuple(indices[:-1]) + (simplify_expr(ir.substitute(last, {var: ir.IntImm(0)})),)


def _key(e: ir.Expr) -> str:
    from polycomp.lowering.printer import expr_str
    return expr_str(e)


def vector_accesses(loop: ir.For) -> tuple[list, list]:
    """The global accesses of vector loop ``loop`` that are printed as vector accesses:
    ``(loads, stores)``, each a list of ``(buffer, indices at var = 0)``, distinct.
    An access qualifies when its last index is ``b + var`` (unit stride, other indices
    free of ``var``), it is not below a condition or a ``select`` inside the loop, and
    its buffer is not both loaded and stored in the loop (hoisting the loads before the
    stores keeps the order of every element's accesses)."""
    loads: list = []
    stores: list = []
    written: set = set()
    read: set = set()

    def note(lst, buf, base):
        key = (buf.name, tuple(map(_key, base)))
        if all((b.name, tuple(map(_key, x))) != key for b, x in lst):
            lst.append((buf, base))

    def walk(n, guarded):
        if isinstance(n, ir.IfThenElse):
            walk(n.cond, guarded)
            walk(n.then, True)
            if n.orelse is not None:
                walk(n.orelse, True)
            return
        if isinstance(n, ir.Select):
            walk(n.cond, guarded)
            walk(n.t, True)
            walk(n.f, True)
            return
        if isinstance(n, ir.Load) and n.buffer.scope == "global":
            read.add(n.buffer.name)
            base = None if guarded else _unit_stride(n.indices, loop.var)
            if base is not None:
                note(loads, n.buffer, base)
        if isinstance(n, ir.Store) and n.buffer.scope == "global":
            written.add(n.buffer.name)
            base = None if guarded else _unit_stride(n.indices, loop.var)
            if base is not None:
                note(stores, n.buffer, base)
        for c in ir.children(n):
            walk(c, guarded)
    walk(loop.body, False)
    both = read & written
    return ([x for x in loads if x[0].name not in both],
            [x for x in stores if x[0].name not in both])


def print_vector_loop(p, s: ir.For) -> None:
    """Print vector loop ``s`` with printer ``p`` (see the module docstring)."""
    v = vector_width(s)
    assert v is not None
    loads, stores = vector_accesses(s)
    load_keys = {(b.name, tuple(map(_key, x))) for b, x in loads}
    store_keys = {(b.name, tuple(map(_key, x))) for b, x in stores}
    names: dict = {}
    decl: list[str] = []
    tail: list[str] = []

    def temp(kind, buf, base):
        key = (kind, buf.name, tuple(map(_key, base)))
        if key not in names:
            name = f"pc_v{kind}{len(names)}"
            names[key] = name
            st = p.storage_type(buf.dtype)
            vt = _VECTOR_TYPES[v * dt.itemsize(buf.dtype)]
            addr = f"&{buf.name}[{p.expr(base[0])}]"
            if kind == "l":
                decl.append(f"const {vt} {name}_v = *reinterpret_cast<const {vt}*>({addr});")
                decl.append(f"const {st}* {name} = reinterpret_cast<const {st}*>(&{name}_v);")
            else:
                decl.append(f"{vt} {name}_v;")
                decl.append(f"{st}* {name} = reinterpret_cast<{st}*>(&{name}_v);")
                tail.append(f"*reinterpret_cast<{vt}*>({addr}) = {name}_v;")
        return ir.Buffer(names[key], buf.dtype, (ir.IntImm(v),), "local", flat=True)

    class Vec(ir.Mutator):
        guarded = 0

        def visit_IfThenElse(self, n):
            self.guarded += 1
            try:
                return self.generic(n)
            finally:
                self.guarded -= 1

        def visit_Select(self, n):
            c = self.visit(n.cond)                  # the condition is always evaluated
            self.guarded += 1
            try:
                t, f = self.visit(n.t), self.visit(n.f)
            finally:
                self.guarded -= 1
            return ir.Select(c, t, f, n.dtype)

        def visit_Load(self, e):
            base = None if self.guarded else _unit_stride(e.indices, s.var)
            if e.buffer.scope == "global" and base is not None and \
                    (e.buffer.name, tuple(map(_key, base))) in load_keys:
                return ir.Load(temp("l", e.buffer, base), (s.var,), e.dtype)
            return self.generic(e)

        def visit_Store(self, st):
            base = None if self.guarded else _unit_stride(st.indices, s.var)
            if st.buffer.scope == "global" and base is not None and \
                    (st.buffer.name, tuple(map(_key, base))) in store_keys:
                return ir.Store(temp("s", st.buffer, base), (s.var,), self.visit(st.value))
            return self.generic(st)

    body = Vec().visit(s.body)
    p.emit("{")
    p.level += 1
    mark = len(p.lines)
    from polycomp.lowering.simplify import simplify
    for lane in range(v):
        p.stmt(simplify(ir.substitute(body, {s.var: ir.IntImm(lane, s.var.dtype)})))
    lanes = p.lines[mark:]
    del p.lines[mark:]
    for d in decl:
        p.emit(d)
    p.lines.extend(lanes)
    for t in tail:
        p.emit(t)
    p.level -= 1
    p.emit("}")
