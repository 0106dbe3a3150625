"""IR pass: turn the loops under ``gpu_blocks``/``gpu_threads`` marks into GPU loops.

Assumes: the IR comes from a schedule tree mapped by
:class:`~polycomp.scheduler.gpu.baseline.GpuBaselineMappingPass` (or a later mapping
pass using the same marks): under ``AttrStmt("gpu_blocks", "<k>")`` the next
``gpu_kernels(state).baseline[k].block_loops`` loops (a ``let`` stands for a loop isl
found to have one iteration) are the tile loops, and under ``AttrStmt("gpu_threads",
"<k>")`` the next loops are the point loops of those tiles,
``gpu_kernels(state).baseline[k].threads`` wide (a shared-memory copy grafted before
the kernel's ``gpu_threads`` mark has its own ``gpu_threads:<k>`` mark above its point
loops).  Guarantees: tile loops get kind ``gpu_block`` and point loops kind
``gpu_thread`` with an ``axis`` annotation (the innermost loop maps to ``x``) and, for
thread loops, the ``threads`` block extent; the kernel's shared buffers
(``promotion_state(state).promotions``) are allocated inside its block loops.  Loop
bounds are unchanged, so executing a mapped loop as a loop (the interpreter does) gives
the same result as the unmapped IR.
"""
from __future__ import annotations

from polycomp import ir
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pattern_schedule import backbones
from polycomp.scheduler.gpu.state import gpu_kernels
from polycomp.scheduler.promotion.record import promotion_state

AXES = ("x", "y", "z")


def _take_loops(s, n):
    """Up to n loop levels below s (Fors; a LetStmt counts as a 1-iteration loop).  Fewer
    are found when isl eliminated a loop whose value the context fixes (e.g. the only
    tile of a dimension of at most one tile): that dimension is a single block/thread."""
    loops: list[ir.Stmt] = []
    cur = s
    while len(loops) < n and isinstance(cur, (ir.For, ir.LetStmt)):
        loops.append(cur)
        cur = cur.body
    return loops


def _rebuild(loops, inner, kinds_axes):
    out = inner
    for loop, (kind, ann) in reversed(list(zip(loops, kinds_axes))):
        if isinstance(loop, ir.LetStmt):
            out = ir.For(loop.var, loop.value, ir.IntImm(1), kind, out, ann)
        else:
            out = ir.For(loop.var, loop.min, loop.extent, kind, out, ann + loop.annotations)
    return out


class _MapGpu(ir.Mutator):
    def __init__(self, baseline: dict, promotions: list):
        self.baseline = baseline     # kernel number -> BaselineMapping
        self.promotions = promotions

    def visit_AttrStmt(self, s):
        # the mapped marks keep, as their printed comment, what was mapped
        k = marks.attr_index(s, marks.GPU_BLOCKS)
        if k is not None:
            n = self.baseline[k].block_loops
            if n == 0:
                return ir.AttrStmt(s.key, "0", self.visit(s.body))
            loops = _take_loops(s.body, n)
            if not loops:
                return ir.AttrStmt(s.key, str(n), self.visit(s.body))
            inner = self.visit(_after(loops[-1]))
            for p in self.promotions:   # shared buffers: per block, inside the block loops
                if p.kernel == k and p.local.scope == "shared":
                    inner = ir.Allocate(p.local, inner)
            f = len(loops)
            ka: list[tuple[str, tuple]] = [("gpu_block", (("axis", AXES[f - 1 - k]),))
                                           for k in range(f)]
            return ir.AttrStmt(s.key, str(n), _rebuild(loops, inner, ka))
        k = marks.attr_index(s, marks.GPU_THREADS)
        if k is not None:
            sizes = list(self.baseline[k].threads)
            n = len(sizes)
            text = ",".join(map(str, sizes))
            loops = _take_loops(s.body, n)
            if not loops:
                return ir.AttrStmt(s.key, text, self.visit(s.body))
            inner = self.visit(_after(loops[-1]))
            f = len(loops)
            ka = [("gpu_thread", (("axis", AXES[f - 1 - k]),
                                  ("threads", _threads(loop, sizes[n - f + k]))))
                  for k, loop in enumerate(loops)]
            return ir.AttrStmt(s.key, text, _rebuild(loops, inner, ka))
        return self.generic(s)


def _threads(loop, default: int) -> int:
    """Threads for a point loop: its constant trip-count bound (the tile size)."""
    from polycomp.lowering.simplify import upper_bound
    if isinstance(loop, ir.LetStmt):
        return 1
    ub = upper_bound(loop.extent)
    return ub if ub is not None and 1 <= ub <= default else default


def _after(loop):
    return loop.body


def map_gpu_loops(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """Map the loops below the baseline mapping's marks onto blocks and threads, as
    ``gpu_kernels(state).baseline`` records for each kernel."""
    return func.with_body(_MapGpu(gpu_kernels(state).baseline,
                                  promotion_state(state).promotions).visit(func.body))


class _WrapKernels(ir.Mutator):
    """Wrap each ``kernel:<n>`` region in its block/thread loops (see wrap_kernels)."""

    def __init__(self, launches, context, params, promotions):
        self.launches, self.context, self.params = launches, context, params
        self.promotions = promotions
        self.ids = {name for l in launches.values()
                    for name in l.block_params + l.thread_params}
        self.guards: list = []

    def visit_IfThenElse(self, s):
        # isl hoists conditions on block/thread ids ("this thread has work") above the
        # kernel mark; they belong inside the kernel, below the id loops
        if s.orelse is None and any(v.name in self.ids for v in ir.free_vars(s.cond)):
            self.guards.append(s.cond)
            try:
                return self.visit(s.then)
            finally:
                self.guards.pop()
        return self.generic(s)

    def visit_AttrStmt(self, s):
        n = marks.attr_index(s, marks.KERNEL)
        if n is None or n not in self.launches:
            return self.generic(s)
        from polycomp.lowering.ast_to_ir import pw_aff_to_ir
        launch = self.launches[n]
        body = s.body
        mine_ids = set(launch.block_params + launch.thread_params)
        for g in reversed(self.guards):
            if {v.name for v in ir.free_vars(g)} & mine_ids:
                body = ir.IfThenElse(g, body)
        free = {v.name: v for v in ir.free_vars(body)}
        mine = [p.local for p in self.promotions if p.kernel == n]
        for buf in mine:
            if buf.scope == "local":      # per-thread: inside the thread loops
                body = ir.Allocate(buf, body)
        for axis in reversed(range(len(launch.thread_params))):
            name = launch.thread_params[axis]
            v = free[name] if name in free else ir.Var(name)
            body = ir.For(v, ir.IntImm(0), ir.IntImm(launch.block[axis]), "gpu_thread", body,
                          (("axis", AXES[axis]), ("threads", launch.block[axis])))
        for buf in mine:
            if buf.scope == "shared":     # per-block: between block and thread loops
                body = ir.Allocate(buf, body)
        for axis in reversed(range(len(launch.block_params))):
            name = launch.block_params[axis]
            v = free[name] if name in free else ir.Var(name)
            ext = pw_aff_to_ir(launch.grid[axis], self.context, self.params)
            body = ir.For(v, ir.IntImm(0), ext, "gpu_block", body, (("axis", AXES[axis]),))
        return ir.AttrStmt(s.key, s.value, body)


def wrap_kernels(func: ir.LoweredFunc, state) -> ir.LoweredFunc:
    """IR pass for kernels mapped by :class:`~polycomp.scheduler.gpu.map.GpuMappingPass`.

    Assumes: block/thread ids are free parameters (``bx<n>``, ``tx<n>``, ...) of the body
    of each ``kernel:<n>`` mark, with launch geometry in ``gpu_kernels(state).launches``.
    Guarantees: each kernel body is wrapped in ``gpu_block`` loops over the grid and
    ``gpu_thread`` loops over the block (x innermost), so the ids become loop variables:
    the IR is closed again (interpretable), and the CUDA printer turns those loops into
    ``blockIdx``/``threadIdx``.  Promoted buffers of the kernel are allocated per block
    (``shared``: between the block and the thread loops) or per thread (``local``:
    inside the thread loops).  A ``backbone:<n>`` mark's value becomes its group's class
    (``backbones(state)``), which the printed comment names.
    """
    model = state.model
    body = _WrapKernels(gpu_kernels(state).launches, model.context, model.params,
                        promotion_state(state).promotions).visit(func.body)
    return func.with_body(_BackboneWords(backbones(state)).visit(body))


class _BackboneWords(ir.Mutator):
    """A ``backbone:<n>`` attribute's value becomes its group's class (the payload in
    ``backbones(state)``), which the printed comment names."""

    def __init__(self, payloads):
        self.payloads = payloads

    def visit_AttrStmt(self, s):
        g = marks.attr_index(s, marks.BACKBONE)
        if g is None:
            return self.generic(s)
        return ir.AttrStmt(s.key, self.payloads.items[g].kind, self.visit(s.body))
