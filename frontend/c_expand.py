"""Renaming and expansion of a C SCoP's local scalars (what pet/PPCG do before
scheduling), so that a scalar temporary does not serialise the loops around it.

Assumes: a :class:`~polycomp.frontend.c_program.CProgram` as the reader made it (local
scalars are zero-dimensional temporaries, the program order is the C order).

Guarantees, for each local scalar ``t`` every read of which has a source write in the
SCoP (``compute_flow`` under the program order: no read of an uninitialised value):

* **webs**: the statements that access ``t`` are split into webs, the connected
  components of the flow dependences through ``t``; each web after the first gets its
  own scalar ``t_1``, ``t_2``, ... .  Every read still reads the value of the same
  write (a read's sources all lie in its web), so the results do not change, and the
  anti/output dependences between unrelated uses of one name (deriche reuses ``ym1``
  in two loop nests) disappear;
* **expansion**: a web whose statements share the enclosing loops ``L_0 .. L_{p-1}``
  and whose flow dependences all relate instances with equal ``L_0 .. L_{p-1}`` (each
  iteration writes the scalar before reading it) becomes an array indexed by those
  iterators (``temp2`` in symm becomes ``temp2[i][j]``), when each iterator is ``>= 0``
  and its largest value is one affine expression of the parameters (the extent).  The
  values read are unchanged; the dependences through it stay inside one iteration of
  those loops, so they may run in parallel.  polycomp's ``contract`` pass turns the
  array back into one scalar per iteration (per thread) when generating C.

A scalar that does not meet the conditions is left as it is (its real dependences
then constrain the schedule).

:func:`expand_arrays` does the same for arrays (privatisation: doitgen's ``sum[p]``),
with a copy-out for array parameters; see its docstring.
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.islutil import maps

from .c_expr import param_prefix
from .c_program import CArray, CIf, CLoop, CProgram, CSeq, CStatementSource, CStmt

__all__ = ["expand_scalars", "expand_arrays"]


def expand_scalars(program: CProgram) -> None:
    """Rename the webs of ``program``'s local scalars and expand them (in place; see
    the module doc)."""
    g = program.graph
    scalars = [t for t in g.temporaries if not t.buffer.shape]
    if not scalars or not program.statements:
        return
    from .c_model import build_c_model
    model = build_c_model(program)
    by_name = {s.name: s for s in model.statements}
    temps = list(g.temporaries)
    for t in scalars:
        users = [cs for cs in program.statements if _uses(cs, t.buffer)]
        webs = _webs(model, by_name, t.buffer, users)
        if webs is None:
            continue
        for k, (web, flow) in enumerate(webs):
            name = t.name if k == 0 else _fresh(f"{t.name}_{k}", g, temps)
            shape, idx = _expansion(model, by_name, web, flow, g)
            if k == 0 and not shape:
                continue
            buf = ir.Buffer(name, t.buffer.dtype, shape)
            arr = CArray(buf, t.location)
            temps = [arr if x is t and k == 0 else x for x in temps]
            if k:
                temps.append(arr)
            for cs in web:
                _rewrite(cs, t.buffer, buf, idx)
    g.temporaries = tuple(temps)


def _rewrite(cs: CStmt, old: ir.Buffer, new: ir.Buffer, idx: tuple) -> None:
    cs.value = _Replace(old, new, idx).visit(cs.value)
    if cs.write is old:
        cs.write = new
        cs.write_indices = tuple(idx) + tuple(cs.write_indices)


def _uses(cs: CStmt, buf: ir.Buffer) -> bool:
    if cs.write is buf:
        return True
    found = []
    ir.walk(cs.value, lambda n: found.append(n) if isinstance(n, ir.Load) and
            n.buffer is buf else None)
    return bool(found)


def _flow(model, by_name, buf, users, flat: bool = False) -> isl.UnionMap | None:
    """The flow dependences through ``buf`` under the program order, or None when some
    read of it has no source (or nothing writes it).  ``flat``: under the program
    order as a flat map of ``users`` only (:meth:`~polycomp.model.PolyModel.
    program_order`: the same relation, at the cost of those statements; under the
    schedule tree the analysis costs time in the size of the whole tree)."""
    space = model.context.get_space()
    reads = writes = isl.UnionMap.empty(space)
    for cs in users:
        for a in by_name[cs.name].accesses:
            if a.buffer is buf:
                um = isl.UnionMap.from_map(a.relation)
                if a.kind == "read":
                    reads = reads.union(um)
                else:
                    writes = writes.union(um)
    if writes.is_empty():
        return None
    access = isl.UnionAccessInfo.from_sink(reads).set_must_source(writes)
    access = access.set_schedule_map(model.program_order([cs.name for cs in users])) \
        if flat else access.set_schedule(model.initial_schedule)
    info = access.compute_flow()
    if not info.get_may_no_source().is_empty():
        return None
    return info.get_may_dependence()


def _webs(model, by_name, buf, users):
    """``[(statements of a web, its flow dependences)]`` in textual order, or None when
    some read of ``buf`` has no source."""
    flow = _flow(model, by_name, buf, users)
    if flow is None:
        return None
    order = [cs.name for cs in users]
    parent = {cs.name: cs.name for cs in users}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for m in maps(flow):
        a = find(m.get_tuple_name(isl.dim_type.in_))
        b = find(m.get_tuple_name(isl.dim_type.out))
        if a != b:
            first, second = sorted((a, b), key=order.index)
            parent[second] = first
    groups: dict = {}
    for cs in users:
        groups.setdefault(find(cs.name), []).append(cs)
    out = []
    for web in groups.values():
        names = {cs.name for cs in web}
        f = isl.UnionMap.empty(flow.get_space())
        for m in maps(flow):
            if m.get_tuple_name(isl.dim_type.in_) in names:
                f = f.union(isl.UnionMap.from_map(m))
        out.append((web, f))
    return out


def _expansion(model, by_name, web, flow, g) -> tuple[tuple, tuple]:
    """``(shape, index iterators)`` of the expansion of one web (empty: none)."""
    from .c_model import extent_of
    common = _shared_loops(web)
    p = len(common)
    while p and not _flow_within(flow, p, model):
        p -= 1
    shape: list = []
    for k in range(p):
        rng = None
        for cs in web:
            d = by_name[cs.name].domain
            s = d.project_out(isl.dim_type.set, k + 1, d.dim(isl.dim_type.set) - k - 1) \
                .project_out(isl.dim_type.set, 0, k).reset_tuple_id()
            rng = s if rng is None else rng.union(s)
        assert rng is not None
        nonneg = isl.Set.read_from_str(rng.get_ctx(), "{ [x] : x >= 0 }").align_params(
            rng.get_space())
        if not rng.is_subset(nonneg):
            break
        ext = extent_of(rng, 0, g, model.context)
        if ext is None:
            break
        shape.append(ext)
    return tuple(shape), tuple(common[:len(shape)])


def _shared_loops(web) -> list:
    """The iterators of the loops around every statement of ``web`` (outermost first):
    an expansion's index iterators are a prefix of them."""
    common = list(web[0].iters)
    for cs in web[1:]:
        n = 0
        while n < min(len(common), len(cs.iters)) and common[n] is cs.iters[n]:
            n += 1
        common = common[:n]
    return common


def _flow_within(flow, p, model) -> bool:
    """Do all dependences of ``flow`` relate instances with equal first ``p``
    iterators?"""
    for m in maps(flow):
        n_in, n_out = m.dim(isl.dim_type.in_), m.dim(isl.dim_type.out)
        if n_in < p or n_out < p:
            return False
        ins = [f"i{k}" for k in range(n_in)]
        outs = [f"o{k}" for k in range(n_out)]
        eq = " and ".join(f"i{k} = o{k}" for k in range(p))
        prefix = param_prefix(model.params)
        same = isl.Map.read_from_str(
            m.get_ctx(), f"{prefix}{{ {m.get_tuple_name(isl.dim_type.in_)}[{', '.join(ins)}]"
            f" -> {m.get_tuple_name(isl.dim_type.out)}[{', '.join(outs)}] : {eq} }}")
        if not m.is_subset(same.align_params(m.get_space())):
            return False
    return True


def _fresh(name: str, g, temps) -> str:
    taken = {a.name for a in g.arrays} | {t.name for t in temps} | {p.name for p in g.params}
    out, k = name, 1
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    return out


class _Replace(ir.Mutator):
    def __init__(self, old, new, idx):
        self.old, self.new, self.idx = old, new, idx

    def visit_Load(self, node):
        if node.buffer is self.old:
            return ir.Load(self.new, tuple(self.idx) + tuple(node.indices), node.dtype)
        return self.generic(node)


# --------------------------------------------------------------------------- arrays


def expand_arrays(program: CProgram):
    """Privatise the arrays that each iteration of some outer loops writes before it
    reads them (in place; what PPCG calls privatisation, done as an expansion).
    Returns the model of the program as it is on return when one was built after its
    last change (None otherwise: the caller that needs one builds it).

    Assumes: :func:`expand_scalars` has run (scalars are expanded or left alone).

    Guarantees, for an array ``X`` (a local array, or an array parameter the SCoP
    writes) whose every read has a source write in the SCoP (``compute_flow`` under the
    program order) and whose accessing statements share the loops ``L_0 .. L_{p-1}``
    with all flow dependences through ``X`` relating instances with equal ``L_0 ..
    L_{p-1}`` (doitgen's ``sum[p]`` under ``for r: for q:``):

    * ``X`` becomes a new local array ``X_priv[L_0]..[L_{p-1}][...]`` in those
      statements (each iteration its own copy), so the flow dependences carried by
      those loops on ``X`` are empty and the anti/output dependences between
      iterations through ``X`` disappear; every read still reads the value of the same
      write;
    * only when it frees a loop: some ``L_k`` such that no two instances of the
      statements inside ``L_k`` with equal ``L_0 .. L_{k-1}`` and different ``L_k``
      touch one element of another array with at least one write (otherwise the
      expansion would cost memory for no parallelism: durbin's ``z``);
    * an array parameter keeps its final contents: a copy-out statement at the end of
      the innermost expanded loop's body, in the last iteration that writes the
      elements, sets each element the SCoP writes from its copy (``if (r == nr - 1 &&
      q == nq - 1) for c: sum[c] = sum_priv[r][q][c]``), when that last iteration is
      one affine function of the parameters on one convex set of elements without
      existentials and the loops increase; otherwise the array is left alone.
    """
    g = program.graph
    cands = [t for t in g.temporaries if t.buffer.shape] + \
        [a for a in g.outputs if a.buffer.shape]
    if not cands or not program.statements:
        return None
    from .c_model import build_c_model
    model = None
    steps = _loop_steps(program.tree)
    for arr in cands:
        buf = arr.buffer
        users = [cs for cs in program.statements if _uses(cs, buf)]
        if not users or not _shared_loops(users):
            # the expansion is indexed by loops around every access (a prefix of the
            # shared ones): none, no expansion -- without the model and the dataflow
            # analysis (c-inplace-1000: one array in 1000 loop nests, 10 s of a read)
            continue
        if model is None:       # (re)built only for a candidate that may expand
            model = build_c_model(program)
        by_name = {s.name: s for s in model.statements}
        # (the flat order: the expansion tests each dependence map's set, so the
        # relation decides, not how isl splits it into maps)
        flow = _flow(model, by_name, buf, users, flat=True)
        if flow is None:
            continue
        shape, idx = _expansion(model, by_name, users, flow, g)
        if not shape or not _frees_a_loop(model, program, buf, idx):
            continue
        is_temp = any(arr is t for t in g.temporaries)
        copy = None
        name = _fresh(f"{buf.name}_priv", g, list(g.temporaries))
        new = ir.Buffer(name, buf.dtype, tuple(shape) + tuple(buf.shape))
        if not is_temp:
            if any(steps.get(v, 1) < 0 for v in idx):
                continue
            copy = _copy_out(model, by_name, users, buf, new, idx, program)
            if copy is None:
                continue
        for cs in users:
            _rewrite(cs, buf, new, idx)
        priv = CArray(new, arr.location)
        if is_temp:
            g.temporaries = tuple(priv if t is arr else t for t in g.temporaries)
        else:
            g.temporaries = tuple(g.temporaries) + (priv,)
            assert copy is not None
            program.statements.append(copy[0])
            loop = _loop_of(program.tree, idx[-1])
            assert loop is not None
            loop.body = CSeq(list(loop.body.children) + [copy[1]]) \
                if isinstance(loop.body, CSeq) else CSeq([loop.body, copy[1]])
        model = None
    return model


def _loop_steps(node, out=None) -> dict:
    """``ir.Var -> step`` of every loop of the tree."""
    out = {} if out is None else out
    if isinstance(node, CLoop):
        out[node.var] = node.step
        _loop_steps(node.body, out)
    elif isinstance(node, CSeq):
        for c in node.children:
            _loop_steps(c, out)
    elif isinstance(node, CIf):
        _loop_steps(node.then, out)
        if node.orelse is not None:
            _loop_steps(node.orelse, out)
    return out


def _frees_a_loop(model, program: CProgram, buf: ir.Buffer, idx: tuple) -> bool:
    """Is some ``idx[k]`` a loop whose iterations (with equal outer ``idx``) touch a
    common element of ``buf`` (so the expansion separates them) but of no other array
    with a write among the accesses?"""
    space = model.context.get_space()
    by_name = {s.name: s for s in model.statements}
    for k in range(len(idx)):
        inside = [cs for cs in program.statements
                  if len(cs.iters) > k and all(a is b for a, b in zip(cs.iters, idx[:k + 1]))]
        conflicts = {True: isl.UnionMap.empty(space), False: isl.UnionMap.empty(space)}
        for own in (True, False):
            reads = writes = isl.UnionMap.empty(space)
            for cs in inside:
                for a in by_name[cs.name].accesses:
                    if (a.buffer is buf) != own:
                        continue
                    um = isl.UnionMap.from_map(a.relation)
                    if a.kind == "read":
                        reads = reads.union(um)
                    else:
                        writes = writes.union(um)
            conflicts[own] = writes.apply_range(writes.reverse()) \
                .union(writes.apply_range(reads.reverse())) \
                .union(reads.apply_range(writes.reverse()))
        if all(_equal_prefix(m, k).is_subset(_equal_prefix(m, k + 1))
               for m in maps(conflicts[False])) and \
                not all(_equal_prefix(m, k).is_subset(_equal_prefix(m, k + 1))
                        for m in maps(conflicts[True])):
            return True
    return False


def _equal_prefix(m: isl.Map, k: int) -> isl.Map:
    """``m`` restricted to pairs equal on the first ``k`` input/output dimensions."""
    for d in range(k):
        m = m.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
    return m


def _loop_of(node, var):
    """The :class:`CLoop` of iterator ``var`` in the loop tree (None: none)."""
    if isinstance(node, CLoop):
        return node if node.var is var else _loop_of(node.body, var)
    kids = node.children if isinstance(node, CSeq) else \
        [node.then, node.orelse] if isinstance(node, CIf) else []
    for c in kids:
        found = _loop_of(c, var) if c is not None else None
        if found is not None:
            return found
    return None


def _copy_out(model, by_name, users, buf: ir.Buffer, new: ir.Buffer, idx: tuple,
              program: CProgram):
    """``(CStmt, loop nest)`` of the copy-out of ``buf``: at the end of the body of the
    innermost expanded loop, in the last iteration ``idx = last`` of the expanded loops
    that writes the elements, each element of ``buf`` the SCoP writes is set from its
    copy in ``new`` (``if (r == nr - 1 && q == nq - 1) for p: sum[p] =
    sum_priv[r][q][p]``; inside the loops, so every access to ``new`` indexes its leading
    dimensions with those loops' iterators and the CPU ``contract`` pass makes it one
    array per iteration).  None when the last writing iteration is not one affine
    function of the parameters on one convex set of elements without existentials."""
    from .c_expr import isl_name
    from .c_model import _aff_to_ir
    g = program.graph
    n = len(idx)
    last = None
    for cs in users:
        if cs.write is not buf:
            continue
        for a in by_name[cs.name].accesses:
            if a.buffer is buf and a.kind == "write":
                m = a.relation.reverse()
                nd = m.dim(isl.dim_type.out)
                m = m.project_out(isl.dim_type.out, n, nd - n).reset_tuple_id(isl.dim_type.out)
                last = m if last is None else last.union(m)
    if last is None:
        return None
    pieces: list = []
    last.lexmax_pw_multi_aff().foreach_piece(lambda st, ma: pieces.append((st, ma)))
    if len(pieces) != 1:
        return None
    written, where = pieces[0]
    written = written.coalesce()
    bsets = written.get_basic_sets()
    if len(bsets) != 1 or bsets[0].dim(isl.dim_type.div):
        return None
    params = {isl_name(p.name): p for p in g.params}
    names = {p: isl_name(p.name) for p in g.params}
    outer = next(cs for cs in users if all(v in cs.isl_names for v in idx))
    for v in idx:
        names[v] = outer.isl_names[v]
    cons = []
    for k in range(n):
        aff = where.get_aff(k)
        if any(not aff.get_coefficient_val(isl.dim_type.in_, d).is_zero()
               for d in range(aff.dim(isl.dim_type.in_))) or \
                not aff.get_denominator_val().is_one():
            return None
        aff = aff.drop_dims(isl.dim_type.in_, 0, aff.dim(isl.dim_type.in_))
        if _aff_to_ir(aff, params) is None:
            return None
        cons.append(f"{names[idx[k]]} = {_aff_text(aff)}")
    taken = set(params) | set(names.values())
    iters = []
    for d in range(len(buf.shape)):
        nm, j = f"{buf.name}_c{d}", 0
        while isl_name(nm) in taken:
            j += 1
            nm = f"{buf.name}_c{d}_{j}"
        taken.add(isl_name(nm))
        v = ir.Var(nm)
        iters.append(v)
        names[v] = isl_name(nm)
    cons += [_constraint_text(c, [names[v] for v in iters]) for c in bsets[0].get_constraints()]
    value = ir.Load(new, tuple(idx) + tuple(iters), buf.dtype)
    sname = f"S_{len(program.statements)}"
    src = CStatementSource(sname, None, f"{buf.name}[...] = {new.name}[...] in the last "
                           f"iteration (copy-out of a privatised array)",
                           tuple(idx) + tuple(iters))
    stmt = CStmt(sname, tuple(idx) + tuple(iters), names, tuple(cons), buf, tuple(iters),
                 value, src)
    nest: object = stmt
    for d in reversed(range(len(iters))):
        nest = CLoop(iters[d], n + d, 1, nest)
    return stmt, nest


def _aff_text(aff: isl.Aff) -> str:
    """An integer affine function of the parameters as isl text."""
    terms = []
    for k in range(aff.dim(isl.dim_type.param)):
        v = int(aff.get_coefficient_val(isl.dim_type.param, k).to_python())
        if v:
            terms.append(f"{v}*{aff.get_dim_name(isl.dim_type.param, k)}")
    terms.append(str(int(aff.get_constant_val().to_python())))
    return "(" + " + ".join(terms) + ")"


def _constraint_text(c: isl.Constraint, dims: list) -> str:
    """An isl constraint over set dimensions ``dims`` and parameters as isl text."""
    terms = []
    for kind, names in ((isl.dim_type.set, dims),
                        (isl.dim_type.param, [c.get_space().get_dim_name(isl.dim_type.param, k)
                                              for k in range(c.get_space().dim(
                                                  isl.dim_type.param))])):
        for k, nm in enumerate(names):
            v = int(c.get_coefficient_val(kind, k).to_python())
            if v:
                terms.append(f"{v}*{nm}")
    terms.append(str(int(c.get_constant_val().to_python())))
    return " + ".join(terms) + (" = 0" if c.is_equality() else " >= 0")
