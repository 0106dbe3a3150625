"""Pass ``scop-interleave``: recurrences below a parallel loop run several of the
parallel loop's iterations side by side (strip-mine the parallel loop, sink the strip
to the innermost level).

adi's sweeps are ``for i (parallel): for j: p[i][j] = -c / (a * p[i][j-1] + b); ...``:
each ``j`` step waits for the division of the step before (a latency-bound chain), and
the column sweep reads ``u[j][i]`` down a column.  Strip-mining ``i`` by ``T`` and
running the strip innermost (``for i0 (parallel): for j: for i in strip``) keeps ``T``
independent chains in flight, reads ``u[j][i..i+T)`` along a row, and when every access
of the innermost loop is unit-stride in ``i`` (deriche's column passes) the strip is a
vector loop.

Assumes: a tree of domain, band, sequence, set, filter and mark nodes (C SCoP, before
``scop-parallel``); ``ctx.model`` with the statements' write accesses and every
dependence (flow, anti, output).  A stage with a mark anywhere in it (another pass's
rewrite) is left alone.

Guarantees: let band member ``i`` (at schedule depth ``d``, prefix schedule ``P``) be the
first member of its band that is *parallel* (every dependence among the band's
statements with equal ``P`` has equal ``i``: ``scop-parallel``'s test) and worth a fork
(:func:`~polycomp.scheduler.cpu.scop_parallel.worth_a_fork`).  It is rewritten when a
band member ``j`` below ``i`` carries a *recurrence*: a dependence ``a -> b`` with equal
schedule above ``j``, ``j(a) != j(b)`` and different elements written by ``a`` and
``b`` (a chain of values, not a reduction into one element, which the vectoriser
handles along ``j``), and ``j`` is the innermost loop of ``a`` and ``b``.  The band is
split so that ``i`` is a band of its own, a band ``floor(i / T)`` is inserted above it
and the ``i`` band is sunk to the leaves of its subtree (isl's ``band_sink``): each
statement's schedule becomes ``(P, floor(i/T), <the loops between i and it>, i)``.  This
only reorders instances with different ``i`` and equal ``floor(i/T)``, which no
dependence relates (``i`` is parallel), so every dependence keeps its order; the result
is checked with isl (:func:`~polycomp.scheduler.common.tree.violated_dependences`) and
the input returned, with a note, otherwise.  Every element is computed by the same
operations in the same order: results are bitwise those of the C order.
"""
from __future__ import annotations

import islpy as isl

from polycomp.frontend.c_model import CScopModel
from polycomp.islutil import StatementDependences, maps, restrict_equal, some_differ
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu.scop_parallel import band_dependences, parallel_member, worth_a_fork
from polycomp.scheduler.cpu.scop_split import visit_unmarked_nests
from polycomp.state import CompileState

_T = isl.schedule_node_type

#: iterations of the parallel loop run side by side (a strip): enough independent
#: chains to cover a division's latency, few enough that a strip's rows of a handful
#: of arrays stay in L1 (32 rows x 6 arrays x 64 bytes = 12 KiB)
STRIP = 32


def _writes(model: CScopModel) -> dict[str, isl.Map]:
    out = {}
    for s in model.statements:
        w = s.writes
        if len(w) == 1:
            out[s.name] = w[0].relation
    return out


def _innermost(node: isl.ScheduleNode, m: int) -> bool:
    """Member ``m`` of the band at ``node`` is the innermost loop of its statements: no
    band member below it."""
    if m < node.band_n_member() - 1:
        return False
    found: list[bool] = []

    def fn(n: isl.ScheduleNode) -> bool:
        if n.get_type() == _T.band and n.band_n_member() > 0:
            found.append(True)
            return False
        return True
    node.child(0).foreach_descendant_top_down(fn)
    return not found


def _recurrence(node: isl.ScheduleNode, first: int, deps: StatementDependences,
                writes: dict[str, isl.Map]) -> bool:
    """A member ``j >= first`` of the band at ``node``, or of a band below it, carries
    a recurrence (module docstring)."""
    d, dom, mupa = band_dependences(node, deps)
    for m in range(node.band_n_member()):
        if d.is_empty():
            return False
        f = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(m)).intersect_domain(dom)
        if m >= first and _innermost(node, m) and some_differ(d, f):
            carried = d.subtract(restrict_equal(d, f))
            for dm in maps(carried):
                ws = writes.get(dm.get_tuple_name(isl.dim_type.in_))
                wt = writes.get(dm.get_tuple_name(isl.dim_type.out))
                if ws is None or wt is None:
                    continue
                if ws.get_tuple_name(isl.dim_type.out) != wt.get_tuple_name(isl.dim_type.out):
                    return True                         # writes to two arrays
                same = ws.apply_range(wt.reverse())     # a -> b writing one element
                a, b = dm.align_params(same.get_space()), same.align_params(dm.get_space())
                if not a.subtract(b).is_empty():
                    return True
        d = restrict_equal(d, f)
    child = node.child(0)
    return _below(child, deps, writes)


def _below(node: isl.ScheduleNode, deps: StatementDependences,
           writes: dict[str, isl.Map]) -> bool:
    if node.get_type() == _T.band:
        return _recurrence(node, 0, deps, writes)
    return any(_below(node.child(k), deps, writes) for k in range(node.n_children()))


class _Interleaver:
    def __init__(self, deps: StatementDependences, writes: dict[str, isl.Map]):
        self.deps = deps
        self.writes = writes
        self.done: list[str] = []

    def visit(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        t = node.get_type()
        if t == _T.band:
            m = parallel_member(node, self.deps)
            if m is not None:
                if worth_a_fork(node, m) and _recurrence(node, m + 1, self.deps, self.writes):
                    return self._interleave(node, m)
                return node                  # scop-parallel's loop: nothing below
        for k in range(node.n_children()):
            node = self.visit(node.child(k)).parent()
        return node

    def _interleave(self, node: isl.ScheduleNode, m: int) -> isl.ScheduleNode:
        n = node.band_n_member()
        if m + 1 < n:
            node = node.band_split(m + 1)     # [.., i] over [j, ..]
        if m > 0:
            node = node.band_split(m).child(0)
        self.done.append(f"loop at depth {node.get_schedule_depth()} strip-mined by "
                         f"{STRIP}, the strip innermost")
        mupa = node.band_get_partial_schedule()
        strip = mupa.scale_down_val(isl.Val.int_from_si(node.get_ctx(), STRIP)).floor()
        node = node.insert_partial_schedule(strip)   # floor(i/T) over i
        node = node.child(0).band_sink().parent()     # back at the floor(i/T) band
        return node.parent() if m > 0 else node


def interleave_tree(schedule: isl.Schedule, model: CScopModel) -> tuple[isl.Schedule, list[str]]:
    """The schedule with every rewrite made (module docstring), a line per rewrite."""
    it = _Interleaver(StatementDependences(model.dependences), _writes(model))
    return visit_unmarked_nests(schedule, it.visit), it.done


class ScopInterleavePass(Pass):
    """See the module docstring."""
    name = "scop-interleave"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        if not isinstance(ctx.model, CScopModel) or not ctx.cpu_options.parallel:
            return schedule
        out, done = interleave_tree(schedule, ctx.model)
        if not done:
            return schedule
        if not violated_dependences(out, ctx.model.dependences).is_empty():
            ctx.note(self.name, "not interleaved: it would violate a dependence")
            return schedule
        for line in done:
            ctx.note(self.name, f"recurrence below a parallel loop: {line}")
        return out
