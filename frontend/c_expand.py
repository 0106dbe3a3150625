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
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.islutil import maps

from .c_expr import param_prefix
from .c_program import CArray, CProgram, CStmt

__all__ = ["expand_scalars"]


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


def _uses(cs: CStmt, buf: ir.Buffer) -> bool:
    if cs.write is buf:
        return True
    found = []
    ir.walk(cs.value, lambda n: found.append(n) if isinstance(n, ir.Load) and
            n.buffer is buf else None)
    return bool(found)


def _flow(model, by_name, buf, users) -> isl.UnionMap | None:
    """The flow dependences through ``buf`` under the program order, or None when some
    read of it has no source (or nothing writes it)."""
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
    info = isl.UnionAccessInfo.from_sink(reads).set_must_source(writes) \
        .set_schedule(model.initial_schedule).compute_flow()
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
    common = list(web[0].iters)
    for cs in web[1:]:
        n = 0
        while n < min(len(common), len(cs.iters)) and common[n] is cs.iters[n]:
            n += 1
        common = common[:n]
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
            return ir.Load(self.new, self.idx, node.dtype)
        return self.generic(node)


def _rewrite(cs: CStmt, old: ir.Buffer, new: ir.Buffer, idx: tuple) -> None:
    cs.value = _Replace(old, new, idx).visit(cs.value)
    if cs.write is old:
        cs.write = new
        cs.write_indices = idx
