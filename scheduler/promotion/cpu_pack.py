"""Pass: operand packing as promotion to a packed buffer (footprints of pack requests).

Assumes: marks ``cpu_pack_request:<n>`` (placed by
:mod:`polycomp.scheduler.cpu.backbone_tile`, which recorded
``promotion_state(state).pack_requests[n]``: a
:class:`~polycomp.scheduler.promotion.record.PackRequest` for an array, a panel dimension
and width, and a memory level) above the subtrees that should read the array
from a packed copy; ``state.model`` holds the statements' access relations.

Guarantees: each request is decided by the promotion engine.  With ``P`` the prefix
schedule at the mark (the values ``c_0 .. c_{d-1}`` of the outer loops), the group is
every read reference of the array, its access restricted to the statements below the
mark; the footprint ``F = P^-1 . reads(array)`` is a map ``[c] -> array[x]`` and, for
every ``c``, ``F(c)`` lies in the box ``origin(c) <= x < origin(c) + s`` (``origin`` is
the per-dimension minimum of ``F``, piecewise affine in ``c``; ``s`` the largest extent
over all ``c``, a constant).  A promoted request becomes a
:class:`~polycomp.scheduler.promotion.record.PackedOperand` (that scoped footprint with
a packed-panel layout: dimension ``dim`` split into panels of ``width``, the in-panel
index innermost) appended to ``promotion_state(state).packs``, and the mark becomes ``cpu_pack:<m>``
with ``m`` its index (with the request's grouping, element offset and compensation,
see :class:`~polycomp.scheduler.promotion.record.PackRequest`).  A *pre-packed*
request (``PackRequest.prepacked``: the array is a kernel input the caller packs once,
option ``prepack``) is decided the same way and also recorded as a
:class:`~polycomp.scheduler.promotion.record.PrepackedInput` (the whole array in the
request's panel layout), which the IR packing reads instead of copying.  The IR packing pass
(:mod:`polycomp.hw.cpu.pack`) copies that box (clipped to the array) into the packed
buffer and redirects the reads below the mark to it.  A request whose footprint is
empty or unbounded is refused (noted, the mark removed; the reads stay on the original
array).  A request of one reference (``PackRequest.reference``) groups that reference
only, and its packing gets an *alias*: a distinct buffer object with the array's name
that the reference reads in the lowered IR (the CPU backend's statement builders), so
the IR packing redirects that reference's loads and no other.  The schedule itself is
unchanged, so it stays legal.
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.islutil import maps
from polycomp.scheduler.common import marks
from polycomp.scheduler.common.pass_base import Pass
from polycomp.scheduler.promotion.decision import PromotionDecision, Refusal
from polycomp.scheduler.promotion.footprint import Layout, ScopedFootprint, min_box_of
from polycomp.scheduler.promotion.record import (
    PackedOperand,
    PackRequest,
    PrepackedInput,
    promotion_state,
)
from polycomp.scheduler.promotion.reference import guarded_read_group
from polycomp.state import CompileState


def request_mark(requests: list[PackRequest], request: PackRequest) -> str:
    """Record ``request`` in ``requests`` (``promotion_state(state).pack_requests``); the
    name of the mark naming it (``cpu_pack_request:<its index>``)."""
    requests.append(request)
    return marks.make(marks.CPU_PACK_REQUEST, len(requests) - 1).get_name()


def decide(node: isl.ScheduleNode, model, request: PackRequest) -> PromotionDecision:
    """The packing decision for ``request`` at ``node`` (the request mark's child)."""
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
    group = guarded_read_group(model.statements, request.array, domain, request.reference)
    scope = f"below {prefix_depth(node)} outer loops"
    d = PromotionDecision(group, request.level, scope)
    ms = maps(prefix.reverse().apply_range(group.access))
    if not ms:
        return d.refuse(Refusal.EMPTY)
    if len(ms) != 1:        # prefix points of several spaces: no single box
        return d.refuse(Refusal.UNBOUNDED)
    f = ms[0]
    box = min_box_of(f)
    if box is None:
        return d.refuse(Refusal.UNBOUNDED)
    d.footprint = ScopedFootprint(group, f, box, Layout.packed_panel(
        request.dim, request.width, request.group_dim, request.group, request.order))
    return d


def record_prepacked(records: list[PrepackedInput], request: PackRequest) -> None:
    """Append the :class:`PrepackedInput` of a pre-packed request (once per array: the
    whole array in ``Layout.packed_panel(dim, width, order=order)``, or in the
    request's cache tiles, ``Layout.packed_tiles``; its extents are constants)."""
    a = request.array
    if any(r.name == a.name for r in records):
        return
    shape = tuple(static_extents(a) or ())
    lay = Layout.packed_tiles(request.dim, request.width, *request.tiles) if request.tiles \
        else Layout.packed_panel(request.dim, request.width, order=request.order)
    records.append(PrepackedInput(a.name, shape, lay))


def static_extents(a: ir.Buffer) -> list[int] | None:
    """The extents of ``a`` when all are compile-time constants, else None."""
    out = []
    for d in a.shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, ir.IntImm):
            out.append(d.value)
        else:
            return None
    return out


def prefix_depth(node: isl.ScheduleNode) -> int:
    return node.get_schedule_depth()


class CpuPackPass(Pass):
    name = "cpu-pack"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        promo = promotion_state(ctx)

        def visit(node):
            if marks.is_kind(node, marks.CPU_PACK_REQUEST):
                request = promo.pack_requests[marks.index_of(node, marks.CPU_PACK_REQUEST)]
                d = decide(node.child(0), ctx.model, request)
                ctx.note(self.name, d.remark())
                node = node.delete()
                if not d.promoted:
                    return visit(node)
                a = request.array
                alias = ir.Buffer(a.name, a.dtype, a.shape, a.scope, a.flat) \
                    if request.reference else None
                promo.packs.append(PackedOperand(d.footprint, request.level, request.offset,
                                                request.compensate, alias, request.reference,
                                                request.prepacked, request.fill,
                                                request.stream, request.stream_aim,
                                                request.prefetch_rows))
                if request.prepacked:
                    record_prepacked(promo.prepacked, request)
                node = node.insert_mark(marks.make(marks.CPU_PACK, len(promo.packs) - 1))
            for k in range(node.n_children()):
                node = visit(node.child(k)).parent()
            return node

        return visit(schedule.get_root()).get_schedule()
