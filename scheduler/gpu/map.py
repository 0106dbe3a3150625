"""Pass: map tiled groups onto CUDA blocks and threads with filters (PPCG style).

Assumes: the tree of :class:`~polycomp.scheduler.gpu.tile.GpuTilingPass`: each tiled
group has a ``tile:block:<k>`` mark above its block band; below, ``tile:point`` marks
sit above the point bands; ``gpu_kernels(ctx).tile_configs[k]`` holds the thread block.

For every tiled group (one CUDA kernel each, in tree order ``n = 0, 1, ...``):

* a mark ``kernel:<n>`` is inserted above the ``tile:block`` mark;
* the last (at most three) *coincident* block-band members ``o_m`` are mapped to block parameters
  ``bx<n>`` (innermost), ``by<n>``, ``bz<n>`` by the filter ``{ S : floor(o_m / T_m) =
  b_m }`` placed right above the block band — the block loops become degenerate in the
  AST, i.e. "for my block";
* right above each point band (below its ``tile:point`` mark), the filter
  ``{ S : (o_m mod T_m) mod P_m = t_m }`` (``o_m mod T_m`` is the point member) maps the
  point members with ``P_m > 1`` cyclically onto thread parameters ``tx<n>`` (innermost),
  ``ty<n>``, ``tz<n>``: thread ``t`` executes points ``t, t + P, t + 2P, ...`` of the tile
  (consecutive threads touch consecutive elements: coalesced).  Loops above the point
  bands (the K-tile loop) are executed by every thread of the block, as promotion copies
  and barriers require.
  (Parameter ids come from :func:`polycomp.islutil.param_id`: islpy's ``isl.Id`` would
  be a different parameter for isl.)
* ``gpu_kernels(ctx).launches[n]`` records the grid (isl ``PwAff`` number of blocks per
  axis, from the block band's range over the domain) and the block size, and
  ``ctx.ast_context`` is intersected with the parameter ranges
  ``0 <= b < grid``, ``0 <= t < block`` (AST generation takes them as its context; isl's
  context *nodes* cannot introduce parameters for AST generation in this isl version,
  hence per-kernel parameter names).

Top-level groups that were not tiled (rank-0 outputs) become kernels of one block of
one thread.  Guarantees: every statement instance of a kernel is executed by exactly
one (block, thread) pair: the filters over all parameter values partition the
instances, and block/thread-mapped members are coincident, so instances that depend on
each other within a kernel are executed by the same thread in the original order;
kernels execute in sequence (global synchronisation between groups).
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp.errors import ScheduleError
from polycomp.islutil import intersect_params, param_id, pieces
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.gpu.tile import find_first, is_marked
from polycomp.state import CompileState

AXES = ("x", "y", "z")


def block_param(axis: int, kernel: int) -> str:
    return f"b{AXES[axis]}{kernel}"


def thread_param(axis: int, kernel: int) -> str:
    return f"t{AXES[axis]}{kernel}"


@dataclass
class KernelLaunch:
    """Launch geometry of one kernel: grid extents (isl PwAff in the kernel's
    parameters, x first) and threads per block (x first)."""
    grid: list
    block: tuple
    block_params: tuple
    thread_params: tuple
    full_tile: object = None   # isl parameter set: this block's tile is full (or None)


def param_upa(domain: isl.UnionSet, name: str) -> isl.UnionPwAff:
    """``{ S[i] -> [name] : S[i] in domain }``: parameter ``name`` as a function on
    ``domain`` (to equate a schedule member with a block or thread id)."""
    return isl.UnionPwAff.param_on_domain_id(domain, param_id(domain.get_ctx(), name))


def member_range(band, m) -> isl.Set:
    """The values band member ``m`` takes over the band's domain (a 1-D set)."""
    upa = band.band_get_partial_schedule().get_union_pw_aff(m)
    rng = isl.UnionMap.from_union_pw_aff(upa).intersect_domain(band.get_domain()).range()
    return isl.Set.from_union_set(rng)


def as_param(rng: isl.Set, name: str) -> isl.Set:
    """{ [v] : P(v) }  ->  [name] -> { : P(name) }."""
    n = rng.dim(isl.dim_type.param)
    s = rng.move_dims(isl.dim_type.param, n, isl.dim_type.set, 0, 1)
    return s.set_dim_name(isl.dim_type.param, n, name).params()


def one_piece_bound(pw: isl.PwAff) -> isl.PwAff:
    """``pw`` itself when it has one piece, else one of its affine pieces that is ``>=``
    ``pw`` wherever ``pw`` is defined (an upper bound of the grid: the extra blocks own
    no instance, since the block filters intersect the domain), else ``pw``.  A C loop
    nest with conditions gives piecewise maxima (``N <= 32 ? 1 : (N - 1)/32 + 1``) whose
    pieces differ only where the domain is empty or where they agree."""
    if pw.n_piece() <= 1:
        return pw
    dom = pw.domain()
    for _, aff in pieces(pw):
        cand = isl.PwAff.from_aff(aff)
        if dom.is_subset(pw.le_set(cand)):
            return cand
    return pw


@dataclass
class BlockMapping:
    """Block-parameter mapping of one band (see :func:`map_block_members`)."""
    grid: list          # isl PwAff per axis (x first): number of blocks, 1 + max b_m
    params: list        # block parameter names, x first
    context: isl.Set    # parameter set 0 <= b < grid (universe when nothing is mapped)
    filter: object      # isl UnionSet { S : b_m(S) = b<axis><n> } within the domain, or None


def map_block_members(band, mapped, kernel: int) -> BlockMapping:
    """Map band members ``mapped`` (innermost last) onto the block parameters of kernel
    ``kernel``: the last member to ``bx<kernel>``, the one before to ``by``, then ``bz``.

    Returns the grid (``1 + max`` of each member's values over the band's domain), the
    parameter names, the parameter ranges ``0 <= b < grid`` (from the members' ranges, as
    parameter sets), and the filter ``{ S : b_m(S) = b }`` intersected with the band's
    domain, to be inserted right above the band (``None`` when ``mapped`` is empty)."""
    ictx = band.get_ctx()
    dom = band.get_domain()
    grid, params, filt = [], [], None
    ctx_set = isl.Set.universe(isl.Space.params_alloc(ictx, 0))
    for axis, m in enumerate(reversed(mapped)):
        name = block_param(axis, kernel)
        params.append(name)
        rng = member_range(band, m)
        grid.append(one_piece_bound(rng.dim_max(0).add_constant_val(isl.Val.one(ictx))))
        ctx_set = intersect_params(ctx_set, as_param(rng, name))
        upa = band.band_get_partial_schedule().get_union_pw_aff(m)
        f = upa.sub(param_upa(dom, name)).zero_union_set()
        filt = f if filt is None else filt.intersect(f)
    if filt is not None:
        filt = filt.intersect(dom)
    return BlockMapping(grid, params, ctx_set, filt)


class GpuMappingPass(Pass):
    name = "gpu-mapping"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        launches = gpu_kernels(ctx).launches
        cfgs = gpu_kernels(ctx).tile_configs
        taken = set(launches) | set(gpu_kernels(ctx).baseline)  # numbers of kernels mapped before
        n = _free_number(taken, 0)
        while True:
            mark = find_first(schedule, lambda x: marks.is_kind(x, marks.TILE_BLOCK)
                              and not is_marked(x, marks.KERNEL))
            if mark is None:
                break
            k = int(marks.argument(mark, marks.TILE_BLOCK))
            cfg = cfgs.get(k)
            if cfg is None:
                raise ScheduleError(f"tiled group {k} has no tile configuration")
            self._ctx = ctx
            schedule, launch, kctx = self._map_group(mark, cfg, n)
            launches[n] = launch
            ctx.restrict_ast_context(kctx)
            ctx.note(self.name, f"kernel {n}: grid {[str(g) for g in launch.grid]}, "
                                f"block {launch.block}")
            taken.add(n)
            n = _free_number(taken, n)
        schedule = self._single_thread_kernels(schedule, ctx, n)
        return schedule

    # ------------------------------------------------------------------ tiled groups
    def _full_tile_condition(self, cfg, last, mapped, bparams):
        """{ : T_m * b_m + T_m - 1 <= last_m } over the mapped members with T_m > 1, or
        None when a tiled member is not mapped to a block id (its tiles are loops)."""
        cond = None
        for m, t in enumerate(cfg.block):
            if t == 1:
                continue
            if m not in mapped:
                return None
            name = bparams[list(reversed(mapped)).index(m)]
            ictx = last[m].get_ctx()
            b = isl.PwAff.read_from_str(ictx, f"[{name}] -> {{ [({t} * {name} + {t - 1})] }}")
            lm = last[m].align_params(b.get_space())
            b = b.align_params(lm.get_space())
            c = b.le_set(lm)
            cond = c if cond is None else intersect_params(cond, c)
        return cond

    def _map_group(self, mark, cfg, n):
        ictx = mark.get_ctx()
        band = mark.child(0)
        nb = band.band_n_member()
        # only coincident members may run in parallel blocks/threads
        coinc = [bool(band.band_member_get_coincident(m)) for m in range(nb)]
        mapped = [m for m in range(nb) if coinc[m]][-3:]
        blocks = map_block_members(band, mapped, n)
        grid, bparams, ctx_set = blocks.grid, blocks.params, blocks.context
        # threads
        tmembers = [m for m in range(len(cfg.threads)) if cfg.threads[m] > 1 and coinc[m]][-3:]
        block = [1, 1, 1]
        tparams = []
        for axis, m in enumerate(reversed(tmembers)):
            block[axis] = cfg.threads[m]
            name = thread_param(axis, n)
            tparams.append(name)
            txt = f"[{name}] -> {{ : 0 <= {name} < {cfg.threads[m]} }}"
            ctx_set = intersect_params(ctx_set, isl.Set.read_from_str(ictx, txt))
        # kernel mark above the tile mark; the block filter right above the block band
        node = mark.insert_mark(marks.make(marks.KERNEL, n)).child(0)   # tile:block mark
        node = node.child(0)                                       # block band
        if blocks.filter is not None:
            node = node.insert_filter(blocks.filter)
        schedule = node.get_schedule()
        # thread filters right above every point band of this kernel (below its mark):
        # the band then iterates over the thread's own points only (strided loops)
        while tmembers:
            pt = find_first(schedule, lambda x: x.get_type() == isl.schedule_node_type.band
                            and is_marked(x, marks.TILE_POINT) and _in_kernel(x, n)
                            and not _child_is_thread_filter(x, n))
            if pt is None:
                break
            pdom = pt.get_domain()
            tf = None
            for axis, m in enumerate(reversed(tmembers)):
                upa = pt.band_get_partial_schedule().get_union_pw_aff(m)
                v = isl.Val.int_from_si(ictx, cfg.threads[m])
                f = upa.mod_val(v).sub(param_upa(pdom, thread_param(axis, n))).zero_union_set()
                tf = f if tf is None else tf.intersect(f)
            schedule = pt.insert_filter(tf).get_schedule()
        launch = KernelLaunch(grid, tuple(block), tuple(bparams), tuple(tparams))
        k = int(marks.argument(mark, marks.TILE_BLOCK))
        last = gpu_kernels(self._ctx).output_last.get(k)
        if last is not None:
            launch.full_tile = self._full_tile_condition(cfg, last, mapped, bparams)
        return schedule, launch, ctx_set

    # ------------------------------------------------------------------ untiled groups
    def _single_thread_kernels(self, schedule, ctx, n):
        """Wrap each top-level child that holds no kernel in a 1x1 kernel."""
        root = schedule.get_root().child(0)
        children = [root.child(k).child(0) for k in range(root.n_children())] \
            if root.get_type() == isl.schedule_node_type.sequence else [root]
        positions = []
        for k, c in enumerate(children):
            if not _contains_kernel(c):
                positions.append(k)
        launches = gpu_kernels(ctx).launches
        ictx = schedule.get_ctx()
        for k in positions:
            root = schedule.get_root().child(0)
            is_seq = root.get_type() == isl.schedule_node_type.sequence
            node = root.child(k).child(0) if is_seq else root
            schedule = node.insert_mark(marks.make(marks.KERNEL, n)).get_schedule()
            one = isl.PwAff.read_from_str(ictx, "{ [(1)] }")
            launches[n] = KernelLaunch([one], (1, 1, 1), (), ())
            ctx.note(self.name, f"kernel {n}: a group without parallel output dimensions runs in "
                                f"a single thread")
            n += 1
        return schedule


def _free_number(taken: set, start: int) -> int:
    """The smallest kernel number ``>= start`` not in ``taken`` (kernels numbered by an
    earlier pass, e.g. the baseline mapping of a C SCoP's untiled nests, keep theirs)."""
    while start in taken:
        start += 1
    return start


def _contains_kernel(node) -> bool:
    found = []

    def fn(n):
        if marks.is_kind(n, marks.KERNEL):
            found.append(1)
            return False
        return True
    node.foreach_descendant_top_down(fn)
    return bool(found)


def _in_kernel(node, n) -> bool:
    x = node
    while x.has_parent():
        x = x.parent()
        if marks.kernel_number(x) == n:
            return True
    return False


def _child_is_thread_filter(band, n) -> bool:
    c = band.parent()
    if c.get_type() != isl.schedule_node_type.filter:
        return False
    space = c.filter_get_filter().get_space()
    return any(space.find_dim_by_name(isl.dim_type.param, thread_param(a, n)) >= 0
               for a in range(3))
