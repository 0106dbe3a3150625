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

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.affine import aff_to_ir
from polycomp.scheduler.common import marks
from polycomp.scheduler.gpu.rowstate import row_kernels

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


def allreduce(promo, params) -> ir.Stmt:
    """The ``warp_allreduce`` statement of ``promo`` (a privatised reduction with its
    :class:`~polycomp.scheduler.promotion.record.WarpReduction`); see the module
    docstring.  ``params`` maps parameter names to their IR values (thread ids)."""
    w = promo.warp
    local = promo.local
    zero = tuple(ir.IntImm(0) for _ in local.shape)
    full = ir.IntImm(FULL_MASK, "int64")
    if w.width >= WARP or w.warps > 1:
        mask: ir.Expr = full
    else:
        row = params[w.row_param]
        seg = ir.Binary("*", ir.IntImm(w.width, "int64"),
                        ir.Binary("%", row, ir.IntImm(WARP // w.width, "int64"), "int64"),
                        "int64")
        mask = ir.Binary("<<", ir.IntImm((1 << w.width) - 1, "int64"), seg, "int64")
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


# --------------------------------------------------------------------------- row caches


def row_builders(state, var) -> dict:
    """Statement builders (name -> fn(args) -> Stmt) of the register caches' loads."""
    params = _Params(var)
    out = {}
    for c in row_kernels(state).caches:
        def make(args, c=c):
            idx = aff_to_ir(c.index, args, params)
            local = (ir.IntImm(0),) * c.rank + (idx,)
            return ir.Store(c.local, local, ir.Load(c.array, tuple(args), c.array.dtype))
        out[c.load] = make
    return out


class _Params(dict):
    def __init__(self, var):
        super().__init__()
        self.var = var

    def __contains__(self, name):
        return True

    def __getitem__(self, name):
        return self.var(name)


# --------------------------------------------------------------------------- IR pass


class _RowKernels(ir.Mutator):
    def __init__(self, state):
        self.rk = row_kernels(state)
        self.params = {p.name: p for p in state.model.params}
        self.scratch: dict[int, list] = {}
        for p in state.promotions:
            if p.warp is not None and p.warp.scratch is not None:
                self.scratch.setdefault(p.kernel, []).append(p.warp.scratch)

    def visit_AttrStmt(self, s):
        if s.key == marks.ROW_VECTOR:
            body = self.visit(s.body)
            vec = self.rk.vectors[int(s.value)]
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
            self.guarded += 1
            try:
                return self.generic(n)
            finally:
                self.guarded -= 1

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
