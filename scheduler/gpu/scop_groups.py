"""Pass: choose, for each loop nest of a C SCoP, the tiled GPU pipeline or the baseline.

A C SCoP's model has no DSL stages, so the pattern schedule does not apply; this pass
plays its part for the CUDA pipeline.  It looks at every top-level loop nest of the
program-order tree (each child of the root's sequence, or the root's only child) and
decides which path it takes.

Assumes: the program-order tree of :func:`polycomp.frontend.c_model.build_c_model`, or
isl's (option ``isl_scheduler``): ``domain`` -> optional ``sequence``/``set`` of filters
-> per top-level nest a subtree; the model's dependences (flow, anti and output).

A nest takes the **tiled** path when its subtree starts with a band whose leading
members ``o_0 .. o_{n-1}`` (``n >= 1``) are *coincident*: every dependence between two
instances of the nest has distance 0 on them (:func:`band_coincidence`), and every one
of them is non-negative over the domain for all parameter values (block ids are
``floor(o / T) >= 0``).  The band is split after ``o_{n-1}`` and a mark
``backbone:<b>`` (payload ``backbones(state).items[b]``: the path kind) is inserted above
the first part (the *output band* of
:class:`~polycomp.scheduler.gpu.tile.GpuTilingPass`).  Since the output members have
distance 0 on every dependence of the nest, each point ``o`` of the output band is
independent of every other point: tiling them, sinking the point band below any inner
loops or sequences (multi-level tiling), mapping them cyclically to threads and
strip-mining the first inner band (the K tile) only reorder independent instances, so
the tiled schedule respects every dependence.

The class is ``contraction`` (GEMM-like: :func:`is_contraction`) or ``elementwise``
otherwise; it only selects the default tile sizes and whether the first reduction band
is K-tiled (``gpu-tiling``), which in turn gives shared-memory promotion a site per K
tile.  Every other nest (no coincident outer member, a tree that does not start with a
band) keeps the **baseline** mapping
(:mod:`~polycomp.scheduler.gpu.baseline`), which the pass ``gpu-baseline-mapping``
applies to the unmarked nests only; it numbers the kernel of nest ``c`` as ``c``, and
:class:`~polycomp.scheduler.gpu.map.GpuMappingPass` gives the tiled nests the free
numbers in tree order, so kernel numbers follow the nests.  Each decision, with its
reason, is noted for ``polycomp explain``.

Before a nest falls back to the baseline, three rewrites are tried, each legal by
construction or checked: a permutable band whose outer member is not coincident gets its
fully coincident members first (any member order of a permutable band is legal); a
coincident member with negative values (``-i`` of a decreasing loop) is negated (its
order is irrelevant, all distances on it are 0); and when a baseline nest holds several
strongly connected components of the dependence graph, or a tiled ``elementwise`` nest
holds a reduction, isl's scheduler with outer coincidence computes a tree for the whole
SCoP, kept when it puts more statements in tiled (then contraction) nests (isl's
schedules respect every dependence).  In a contraction, a band between the output band
and a sequence is sunk into the sequence's statements when the resulting tree still
respects every dependence (:func:`~polycomp.scheduler.common.tree.is_legal`).

Guarantees: the schedule respects every dependence of the model; each top-level nest
holds at most one ``backbone`` mark, right above its output band, whose members are
coincident and non-negative.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp.islutil import maps, sets
from polycomp.model import Statement
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.common.pattern_schedule import backbones
from polycomp.scheduler.common.tree import band_coincidence, is_legal
from polycomp.scheduler.gpu.baseline import GpuBaselineMappingPass
from polycomp.scheduler.gpu.scop_reduce import (
    THREADS,
    block_loop,
    block_reduction_candidate,
    group_reductions,
    grouped_children,
    map_block_reduction,
    reduction_group,
)
from polycomp.scheduler.gpu.scop_singles import merge_singles
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.state import CompileState

TILED = "tiled"
BASELINE = "baseline"


@dataclass(frozen=True)
class NestPath:
    """The path of top-level nest ``index``: ``tiled`` with operator class ``kind``
    (``contraction``/``elementwise``) and ``members`` output-band members, or
    ``baseline``; ``reason`` says why in words (for ``polycomp explain``)."""
    index: int
    path: str
    kind: str
    members: int
    reason: str


def nest_roots(schedule: isl.Schedule) -> list[isl.ScheduleNode]:
    """The root node of every top-level nest (the child of each filter of the root's
    sequence, or the root's only child)."""
    top = schedule.get_root().child(0)
    if top.get_type() in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        return [top.child(k).child(0) for k in range(top.n_children())]
    return [top]


def _nonnegative(band: isl.ScheduleNode, m: int) -> bool:
    """Member ``m`` of ``band`` is ``>= 0`` at every instance, for all parameter values."""
    upa = band.band_get_partial_schedule().get_union_pw_aff(m)
    um = isl.UnionMap.from_union_pw_aff(upa).intersect_domain(band.get_domain())
    for s in sets(um.range()):
        neg = isl.Set.read_from_str(s.get_ctx(), "{ [v] : v < 0 }")
        s2, neg = s.align_params(neg.get_space()), neg.align_params(s.get_space())
        if not s2.intersect(neg).is_empty():
            return False
    return True


def _statements_below(node: isl.ScheduleNode, model) -> list[Statement]:
    names = {s.get_tuple_name() for s in sets(node.get_domain())}
    return [s for s in model.statements if s.name in names]


def is_contraction(band: isl.ScheduleNode, model) -> bool:
    """GEMM-like (``C[o] += A[..] * B[..]``, alpha/beta scaling allowed): some statement
    below the output ``band`` writes one element per point of the band (its write is
    constant along every loop below the band: a reduction), reads that same element,
    and reads at least two other references whose element changes along the loops below
    (the operands of the contraction)."""
    prefix = band.child(0).get_prefix_schedule_union_map()
    for st in _statements_below(band, model):
        if len(st.writes) != 1 or len(st.iters) <= band.band_n_member():
            continue
        w = st.writes[0].relation
        dom = isl.UnionSet.from_set(st.domain)
        same_point = prefix.intersect_domain(dom)
        same_point = same_point.apply_range(same_point.reverse())
        wu = isl.UnionMap.from_map(w)
        same_elem = wu.apply_range(wu.reverse())
        if not same_point.is_subset(same_elem):
            continue           # not one element per point: not a reduction into C[o]
        acc = [a for a in st.reads if a.buffer.name == st.write.name and a.relation.is_equal(w)]
        varying = []
        for a in st.reads:
            if a.buffer.name == st.write.name:
                continue
            ru = isl.UnionMap.from_map(a.relation)
            if not same_point.is_subset(ru.apply_range(ru.reverse())):
                varying.append(a)
        if acc and len(varying) >= 2:
            return True
    return False


def choose_path(root: isl.ScheduleNode, index: int, model) -> NestPath:
    """The path of the nest at ``root`` (see the module doc)."""
    if root.get_type() != isl.schedule_node_type.band:
        return NestPath(index, BASELINE, "", 0, "the nest does not start with a loop band")
    coinc = band_coincidence(root, model.dependences)
    n = 0
    while n < len(coinc) and coinc[n]:
        n += 1
    if n == 0:
        if root.band_get_permutable() and any(fully_coincident(root, model.dependences)):
            return NestPath(index, TILED, "", 0, "interchange")   # see ScopGroupingPass
        return NestPath(index, BASELINE, "", 0,
                        "its outer loop carries a dependence (no coincident band member)")
    neg = [m for m in range(n) if not _nonnegative(root, m)]
    if neg:
        if all(_nonnegative(reverse_members(root, [m]), m) for m in neg):
            return NestPath(index, TILED, "", n, "reverse")    # see ScopGroupingPass
        return NestPath(index, BASELINE, "", 0,
                        f"band member {neg[0]} takes negative values")
    band = root.band_split(n) if n < root.band_n_member() else root
    kind = "contraction" if is_contraction(band, model) else "elementwise"
    why = (f"{n} coincident outer member(s)"
           + ("; a GEMM-like reduction X[o] += a * b below" if kind == "contraction" else ""))
    return NestPath(index, TILED, kind, n, why)


def _statement_sccs(names: set[str], deps: isl.UnionMap) -> int:
    """The number of strongly connected components of the statement-level dependence
    graph of the statements ``names``."""
    succ: dict[str, set[str]] = {n: set() for n in names}
    for m in maps(deps):
        a, b = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
        if a in names and b in names:
            succ[a].add(b)

    def reach(n: str) -> set[str]:
        seen, todo = {n}, [n]
        while todo:
            for x in succ[todo.pop()] - seen:
                seen.add(x)
                todo.append(x)
        return seen
    r = {n: reach(n) for n in names}
    comps = {frozenset(x for x in names if x in r[n] and n in r[x]) for n in names}
    return len(comps)


def distributable_baseline_nest(schedule: isl.Schedule, model) -> bool:
    """Some nest takes the baseline path while its statements form more than one
    strongly connected component of the dependence graph: distributing it (which isl's
    scheduler may do) could give parts with a parallel outer loop.  (A nest whose
    statements form one component, such as a stencil's time loop, is left alone: isl
    would search long for a schedule that does not exist.)"""
    for index, root in enumerate(nest_roots(schedule)):
        if choose_path(root, index, model).path == TILED:
            continue
        names = {x.get_tuple_name() for x in sets(root.get_domain())}
        if len(names) > 1 and _statement_sccs(names, model.dependences) > 1:
            return True
    return False


#: isl's scheduler is asked for a better tree of a SCoP with a single-thread nest only
#: up to this many statements (its search time grows fast with them)
SERIAL_RETRY_STATEMENTS = 6


def serial_statements(schedule: isl.Schedule, model, reduce: bool = False) -> int:
    """How many statements the baseline mapping would run on a single thread: those of
    baseline nests below no coincident band member, no host loop and no wavefront band
    (as :class:`ScopBaselinePass` maps them); with ``reduce`` (option
    ``block_reduce``), not those of block reductions and the one-instance statements
    grouped with them (:mod:`~polycomp.scheduler.gpu.scop_reduce`)."""
    deps = model.dependences
    red = model if reduce else None

    def count(node) -> int:
        t = node.get_type()
        if t == isl.schedule_node_type.band:
            if _leading_coincident(node, deps):
                return 0
            if red is not None and block_reduction_candidate(node, model) is not None:
                return 0
            if host_loop_ok(node, deps, red):
                return count(node.band_split(1).child(0) if node.band_n_member() > 1
                             else node.child(0))
            if wavefront_band(node, deps) is not None:
                return 0
            return len(sets(node.get_domain()))
        if t in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
            grouped = grouped_children(node, model) if red is not None else set()
            return sum(count(node.child(k).child(0)) for k in range(node.n_children())
                       if k not in grouped)
        if t in (isl.schedule_node_type.filter, isl.schedule_node_type.mark):
            return count(node.child(0))
        return len(sets(node.get_domain()))
    out = 0
    for index, root in enumerate(nest_roots(schedule)):
        if choose_path(root, index, model).path != TILED:
            out += count(root)
    return out


@dataclass(frozen=True, order=True)
class TreeScore:
    """How well a tree suits the tiled pipeline: statements in tiled nests, then
    statements in contraction nests (compared in that order)."""
    tiled: int
    contraction: int


def tree_score(schedule: isl.Schedule, model) -> TreeScore:
    tiled = contraction = 0
    for index, root in enumerate(nest_roots(schedule)):
        path = choose_path(root, index, model)
        if path.path == TILED:
            n = len(sets(root.get_domain()))
            tiled += n
            contraction += n if path.kind == "contraction" else 0
    return TreeScore(tiled, contraction)


def reduction_in_elementwise_nest(schedule: isl.Schedule, model) -> bool:
    """Some nest is tiled as ``elementwise`` although one of its statements writes the
    same element at several instances (a reduction whose loop is not below the output
    band, e.g. ``for i: for k: for j <= i: C[i][j] += A[i][k] * A[j][k]``): another
    loop order may make it a contraction."""
    for index, root in enumerate(nest_roots(schedule)):
        path = choose_path(root, index, model)
        if path.path != TILED or path.kind != "elementwise":
            continue
        for st in _statements_below(root, model):
            for w in st.writes:
                wu = isl.UnionMap.from_map(w.relation)
                same = wu.apply_range(wu.reverse())
                ident = isl.UnionMap.from_map(isl.Map.identity(
                    w.relation.get_space().domain().map_from_set()))
                if not same.subtract(ident).is_empty():
                    return True
    return False


def outer_coincident_schedule(model, domain: isl.UnionSet) -> isl.Schedule:
    """isl's scheduler with every dependence as validity and coincidence constraint and
    flow dependences as proximity, asked (``schedule_outer_coincidence``, as PPCG does
    for GPUs) to make the outermost band of each component coincident: it distributes
    a nest whose statements cannot share a parallel outer loop (atax, bicg)."""
    ctx = domain.get_ctx()
    old = ctx.get_schedule_outer_coincidence()
    ctx.set_schedule_outer_coincidence(1)
    try:
        deps = model.dependences
        sc = isl.ScheduleConstraints.on_domain(domain).set_context(model.context)
        sc = sc.set_validity(deps).set_proximity(model.flow).set_coincidence(deps)
        return sc.compute_schedule()
    finally:
        ctx.set_schedule_outer_coincidence(old)


def sink_reduction_band(out: isl.ScheduleNode, deps: isl.UnionMap
                        ) -> tuple[isl.ScheduleNode, bool]:
    """When the output band ``out`` is followed by a band above a sequence (isl's
    ``(i, j, k)`` band for ``C *= beta; C += A * B`` puts the scaling at ``k = 0``),
    sink that band into the sequence's statements, so that the reduction band lies
    directly above its statement (where ``gpu-tiling`` K-tiles it and shared promotion
    finds a site per K tile).  Kept only when every dependence is still respected
    (checked on the whole tree); returns the output band's node and whether it sank."""
    inner = out.child(0)
    if inner.get_type() != isl.schedule_node_type.band or inner.child(0).get_type() not in (
            isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        return out, False
    sunk = inner.band_sink()
    if not is_legal(sunk.get_schedule(), deps):
        return out, False
    return sunk.parent(), True


def reverse_members(band: isl.ScheduleNode, members: list[int]) -> isl.ScheduleNode:
    """Negate the given members of ``band`` (``-i`` of a decreasing loop becomes
    ``i``).  Legal for coincident members: every dependence has distance 0 on them, so
    the order of their values is irrelevant (later members keep theirs)."""
    mupa = band.band_get_partial_schedule()
    for m in members:
        mupa = mupa.set_union_pw_aff(m, mupa.get_union_pw_aff(m).neg())
    perm = band.band_get_permutable()
    flags = [band.band_member_get_coincident(m) for m in range(band.band_n_member())]
    node = band.delete().insert_partial_schedule(mupa).band_set_permutable(perm)
    for m, c in enumerate(flags):
        node = node.band_member_set_coincident(m, c)
    return node


def fully_coincident(band: isl.ScheduleNode, deps: isl.UnionMap) -> list[bool]:
    """For each member of ``band``: do all dependences between instances below it with
    equal outer schedule have distance 0 on it (whatever the other members are)?"""
    dom = band.get_domain()
    deps = deps.intersect_domain(dom).intersect_range(dom)
    prefix = band.get_prefix_schedule_union_map()
    if not prefix.is_empty():
        deps = deps.intersect(prefix.apply_range(prefix.reverse()))
    mupa = band.band_get_partial_schedule()
    out = []
    for m in range(band.band_n_member()):
        mk = isl.UnionMap.from_union_pw_aff(mupa.get_union_pw_aff(m))
        out.append(deps.is_subset(mk.apply_range(mk.reverse())))
    return out


def interchange_coincident_first(band: isl.ScheduleNode, deps) -> isl.ScheduleNode:
    """Reorder the members of the permutable ``band`` so that the fully coincident ones
    come first (in their order).  Any order of a permutable band's members respects
    every dependence (each has non-negative distance on every member)."""
    full = fully_coincident(band, deps)
    order = [m for m, c in enumerate(full) if c] + [m for m, c in enumerate(full) if not c]
    mupa = band.band_get_partial_schedule()
    new = mupa
    for k, m in enumerate(order):
        new = new.set_union_pw_aff(k, mupa.get_union_pw_aff(m))
    node = band.delete().insert_partial_schedule(new)
    return node.band_set_permutable(1)


class ScopGroupingPass(Pass):
    """See the module doc.  A permutable band whose outer member carries a dependence
    while another member does not (``for i: for j: s[j] += A[i][j] * r[i]``) is first
    interchanged so that the coincident members lead (noted)."""
    name = "scop-gpu-groups"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        model = ctx.model
        red = ctx.cuda_options.block_reduce
        mine = tree_score(schedule, model)
        if (mine.tiled < len(model.statements) and distributable_baseline_nest(schedule, model)) \
                or reduction_in_elementwise_nest(schedule, model):
            alt = outer_coincident_schedule(model, schedule.get_domain())
            theirs = tree_score(alt, model)
            if theirs > mine and serial_statements(alt, model, red) <= \
                    serial_statements(schedule, model, red):
                ctx.note(self.name, f"isl's scheduler (outer coincidence) chosen: "
                                    f"{theirs.tiled} of {len(model.statements)} statements "
                                    f"in tiled nests ({theirs.contraction} in contractions), "
                                    f"{mine.tiled} ({mine.contraction}) with the input "
                                    f"schedule")
                schedule = alt
        serial = serial_statements(schedule, model)
        if serial and len(model.statements) <= SERIAL_RETRY_STATEMENTS:
            # fewer statements on one thread (block reductions counted as parallel),
            # then fewer that need a block reduction (lu: isl's host loop of parallel
            # kernels, not a host loop per row of block reductions)
            alt = outer_coincident_schedule(model, schedule.get_domain())
            theirs, mine = tree_score(alt, model), tree_score(schedule, model)
            fewer = serial_statements(alt, model)
            if (serial_statements(alt, model, red), fewer) < \
                    (serial_statements(schedule, model, red), serial) and theirs >= mine:
                ctx.note(self.name, f"isl's scheduler (outer coincidence) chosen: "
                                    f"{fewer} statement(s) on a single thread, {serial} with "
                                    f"the input schedule")
                schedule = alt
        for index in range(len(nest_roots(schedule))):
            root = nest_roots(schedule)[index]
            path = choose_path(root, index, model)
            if path.reason == "interchange":
                order = fully_coincident(root, model.dependences)
                root = interchange_coincident_first(root, model.dependences)
                schedule = root.get_schedule()
                ctx.note(self.name, f"kernel {index} (loop nest {index}): permutable band "
                                    f"interchanged: coincident member(s) "
                                    f"{[m for m, c in enumerate(order) if c]} moved outermost")
                path = choose_path(root, index, model)
            if path.reason == "reverse":
                neg = [m for m in range(path.members) if not _nonnegative(root, m)]
                root = reverse_members(root, neg)
                schedule = root.get_schedule()
                ctx.note(self.name, f"kernel {index} (loop nest {index}): coincident band "
                                    f"member(s) {neg} of decreasing loops reversed")
                path = choose_path(root, index, model)
            if path.path == TILED:
                if path.members < root.band_n_member():
                    root = root.band_split(path.members)
                if path.kind == "contraction":
                    root, sunk = sink_reduction_band(root, model.dependences)
                    if sunk:
                        ctx.note(self.name, f"kernel {index} (loop nest {index}): the band "
                                            f"below the output band sunk into its statements")
                root = root.insert_mark(backbones(ctx).mark(path.kind))
                schedule = root.get_schedule()
                ctx.note(self.name, f"kernel {index} (loop nest {index}): tiled GPU pipeline "
                                    f"({path.kind}): {path.reason}")
            else:
                ctx.note(self.name, f"kernel {index} (loop nest {index}): baseline mapping: "
                                    f"{path.reason}")
        return schedule


class ScopBaselinePass(Pass):
    """The baseline mapping (:class:`GpuBaselineMappingPass`) of the nests that
    :class:`ScopGroupingPass` left unmarked; nest ``c`` becomes kernel ``c``.

    A nest whose outer loop carries a dependence (a stencil's time loop) but holds
    parallel loops below it becomes a *host loop* of launches (as PPCG does): its outer
    band member ``h`` is split off and left outside every ``kernel`` mark, and each nest
    below it (each filter of a sequence below, or the rest of the band) is mapped on its
    own, recursively (a host loop inside a host loop), so each gets its own grid and
    block.  Taken only when (:func:`host_loop_ok`) some band below has a coincident outer
    member given ``h`` (else one kernel on a single thread is cheaper than a launch per
    iteration); a kernel's grid may depend on ``h`` (a pivot loop's shrinking
    triangle: the baseline maps members whose range is a box for each ``h``).  Legal:
    the host loop runs its iterations in order and the launches inside one iteration
    in program order, with a global synchronisation between launches, so the execution
    order of dependent instances is the schedule's; inside each kernel the baseline
    mapping's guarantees hold (its coincidence is computed with ``h`` in the prefix
    schedule).  The kernel numbers of the nests below a host loop are ``c`` for the
    first and fresh numbers (after every nest's) for the others.

    A subtree with no parallel band at all whose band carries every dependence of it
    (seidel-2d) is first rewritten by :func:`wavefront_band`, whose outer member then
    becomes the host loop.
    """
    name = "gpu-baseline-mapping"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        base = GpuBaselineMappingPass()
        deps = ctx.model.dependences
        count = len(nest_roots(schedule))
        self._next = count
        self._reduce = ctx.cuda_options.block_reduce
        self._model = ctx.model if self._reduce else None
        for index in range(count):
            root = nest_roots(schedule)[index]
            if marks.is_kind(root, marks.BACKBONE):
                continue
            self._first: int | None = index
            schedule = self._map(root, base, deps, ctx, 0).get_schedule()
        return schedule

    def _number(self) -> int:
        if self._first is not None:
            k, self._first = self._first, None
            return k
        self._next += 1
        return self._next - 1

    def _map(self, node, base, deps, ctx, depth: int):
        """Map the subtree at ``node`` (host loop or kernel); return a node in it."""
        if not _parallel_below(node, deps, self._model):   # else: one thread; try a wavefront
            wave = wavefront_band(node, deps)
            if wave is not None and host_loop_ok(wave[0], deps, self._model):
                node = wave[0]
                ctx.note(self.name, f"wavefront {wave[1]} of {_statement_names(node)} "
                                    f"(every member carried a dependence)")
        if self._reduce and depth >= 1 and host_loop_ok(node, deps, self._model):
            mapped = self._block_loop(node, ctx)     # a loop of reductions: in one kernel
            if mapped is not None:
                return mapped
        if host_loop_ok(node, deps, self._model):
            if node.band_n_member() > 1:
                node = node.band_split(1)
            node = node.band_member_set_coincident(0, 0)
            ctx.note(self.name, f"host loop (depth {depth}) over the outer loop of "
                                f"{_statement_names(node)}: one launch per iteration")
            child = node.child(0)
            if child.get_type() == isl.schedule_node_type.sequence and self._reduce:
                child = group_reductions(child, ctx.model)
            if child.get_type() == isl.schedule_node_type.sequence:
                child, moved = merge_singles(child, ctx.model, parallel_only=True)
                if moved:
                    ctx.note(self.name, f"one-instance statement(s) {', '.join(moved)} moved "
                                        f"into an adjacent parallel band below the host loop")
            if child.get_type() in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
                for k in range(child.n_children()):
                    child = self._map(child.child(k).child(0), base, deps, ctx,
                                      depth + 1)
                    child = _ancestor(child, child.get_tree_depth() - node.get_tree_depth() - 1)
                return child.parent()
            return self._map(child, base, deps, ctx, depth + 1).parent()
        k = self._number()
        mapped = self._block_reduction(node, deps, ctx, k)
        if mapped is not None:
            return mapped
        node = base._map_stage(node, deps, ctx, k)
        ctx.note(self.name, f"kernel {k}: {_baseline_words(ctx, k)}")
        return node


    def _block_loop(self, node, ctx):
        """Kernel of a sequential loop of block reductions (:func:`block_loop`), or
        None."""
        loop = block_loop(node, ctx.model)
        if loop is None:
            return None
        k = self._number()
        inner, position, red, up = loop
        node = map_block_reduction(inner, red, k, ctx, position, up)
        ctx.note(self.name, f"kernel {k}: block reduction of {red.name} into one element "
                            f"of {red.write.name} per iteration of a loop the block runs "
                            f"({THREADS} threads, the terms reassociated)")
        return node

    def _block_reduction(self, node, deps, ctx, k: int):
        """Kernel ``k`` as a block reduction (a candidate band, or a sequence grouped
        around one), or None."""
        if not self._reduce:
            return None
        red, position = None, -1
        if node.get_type() == isl.schedule_node_type.sequence:
            group = reduction_group(node, ctx.model)
            if group is not None:
                position, red = group
        elif not _leading_coincident(node, deps):
            red = block_reduction_candidate(node, ctx.model)
        if red is None:
            return None
        node = map_block_reduction(node, red, k, ctx, position)
        ctx.note(self.name, f"kernel {k}: block reduction of {red.name} into one "
                            f"element of {red.write.name} ({THREADS} threads, the terms "
                            f"reassociated)")
        return node


def wavefront_band(node: isl.ScheduleNode, deps: isl.UnionMap
                   ) -> tuple[isl.ScheduleNode, str] | None:
    """A band whose every member carries a dependence (seidel-2d's in-place sweep),
    rewritten as ``(w, rest)``: ``w = h·(members)`` with ``h·Δ >= 1`` for every
    dependence distance ``Δ`` of the band (:func:`~polycomp.scheduler.common.cone.
    wavefront`), then the members but one ``d`` with ``h_d = 1`` (the band stays
    unimodular, so each statement's schedule stays injective), the outermost member
    last (its extent, a time loop's, is usually the smallest).  Legal: ``w`` strictly
    increases along every dependence, so the new band respects them all and instances
    with equal ``w`` are independent (every other member is coincident below ``w``).
    None when the band does not carry every dependence of its subtree, or no ``h``
    with small coefficients exists.  Returns the new band and ``h`` in words."""
    from polycomp.scheduler.common.cone import wavefront
    if node.get_type() != isl.schedule_node_type.band or node.band_n_member() < 2:
        return None
    dom = node.get_domain()
    deps = deps.intersect_domain(dom).intersect_range(dom)
    if deps.is_empty():
        return None
    pm = node.band_get_partial_schedule_union_map()
    deltas = sets(deps.apply_domain(pm).apply_range(pm).deltas())
    if len(deltas) != 1:
        return None
    h = wavefront(deltas[0])
    if h is None:
        return None
    n = node.band_n_member()
    d = max(m for m in range(n) if h[m] == 1)
    mupa = node.band_get_partial_schedule()
    w = None
    for m in range(n):
        if h[m]:
            term = mupa.get_union_pw_aff(m).scale_val(isl.Val.int_from_si(node.get_ctx(), h[m]))
            w = term if w is None else w.add(term)
    assert w is not None, "h has a coefficient 1"
    rest = [m for m in range(1, n) if m != d] + ([0] if d != 0 else [])
    new = mupa.set_union_pw_aff(0, w)
    for k, m in enumerate(rest):
        new = new.set_union_pw_aff(k + 1, mupa.get_union_pw_aff(m))
    words = " + ".join(f"{c}*m{m}" if c != 1 else f"m{m}" for m, c in enumerate(h) if c)
    return node.delete().insert_partial_schedule(new), f"w = {words}"


def _ancestor(node, up: int):
    for _ in range(up):
        node = node.parent()
    return node


def _statement_names(node) -> str:
    return ", ".join(sorted(x.get_tuple_name() for x in sets(node.get_domain())))


def _leading_coincident(node: isl.ScheduleNode, deps: isl.UnionMap) -> int:
    """The number of leading coincident members of the band at ``node`` (given its
    prefix schedule), at most 3, that the baseline mapping would map."""
    coinc = band_coincidence(node, deps)
    n = 0
    while n < len(coinc) and coinc[n] and n < 3:
        n += 1
    return n


def _parallel_below(node: isl.ScheduleNode, deps: isl.UnionMap, model=None) -> bool:
    """Some band in the subtree at ``node`` (looking through sequences, sets and
    filters, and through non-coincident outer members) has a coincident member (or,
    given ``model``, is a block reduction)."""
    t = node.get_type()
    if t == isl.schedule_node_type.band:
        if _leading_coincident(node, deps):
            return True
        if model is not None and block_reduction_candidate(node, model) is not None:
            return True
        if node.band_n_member() > 1:
            return _parallel_below(node.band_split(1).child(0), deps, model)
        return _parallel_below(node.child(0), deps, model)
    if t in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
        return any(_parallel_below(node.child(k).child(0), deps, model)
                   for k in range(node.n_children()))
    if t in (isl.schedule_node_type.filter, isl.schedule_node_type.mark):
        return _parallel_below(node.child(0), deps, model)
    return False


def host_loop_ok(node: isl.ScheduleNode, deps: isl.UnionMap, model=None) -> bool:
    """Should the outer member of the band at ``node`` become a host loop (see
    :class:`ScopBaselinePass`)?  Its outer member carries a dependence and something
    below it is parallel (given ``model``, a block reduction counts)."""
    if node.get_type() != isl.schedule_node_type.band or _leading_coincident(node, deps):
        return False
    below = node.band_split(1).child(0) if node.band_n_member() > 1 else node.child(0)
    return _parallel_below(below, deps, model)


def _baseline_words(ctx: CompileState, k: int) -> str:
    m = gpu_kernels(ctx).baseline[k]
    if m.block_loops == 0:
        return "baseline, a single thread (no coincident outer loop)"
    return f"baseline, {m.block_loops} loop(s) on blocks of {m.threads} threads"
