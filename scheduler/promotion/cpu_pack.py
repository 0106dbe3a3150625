"""Pass: operand packing as promotion to a packed buffer (footprints of pack requests).

Assumes: marks ``cpu_pack_request:<array>:<dim>:<width>`` (placed by
:mod:`polycomp.scheduler.cpu.backbone_tile`) above the subtrees that should read
``<array>`` from a packed copy; ``ctx.model`` holds the statements' access relations.

Guarantees: each request becomes a mark

    cpu_pack:<array>|panel=<dim>x<width>|box=<s_0>x..x<s_n-1>|origin=<isl multi_pw_aff>

where, with ``P`` the prefix schedule at the mark (the values ``c_0 .. c_{d-1}`` of the
outer loops), the footprint ``F = P^-1 . reads(array)`` restricted to the statements
below the mark is a map ``[c] -> array[x]`` and, for every ``c``, ``F(c)`` lies in the
box ``origin(c) <= x < origin(c) + s`` (``origin`` is the per-dimension minimum of
``F``, ``s`` the largest extent over all ``c``, a constant).  The IR packing pass
(:mod:`polycomp.hw.cpu.pack`) copies that box (clipped to the array) into a buffer whose
layout is the array's with dimension ``<dim>`` split into panels of ``<width>`` and the
in-panel index moved innermost (so the micro-kernel reads consecutive memory), and
redirects the reads below the mark to it.  A request whose footprint is empty or
unbounded is dropped (the reads stay on the original array).  The schedule itself is
unchanged, so it stays legal.
"""
from __future__ import annotations

import islpy as isl

from polycomp.islutil import maps

from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState

REQUEST = "cpu_pack_request"
MARK = "cpu_pack"


def _reads_of(model, array: str, domain: isl.UnionSet) -> isl.UnionMap:
    out = isl.UnionMap.empty(domain.get_space())
    for s in model.statements:
        for a in s.reads:
            if a.buffer.name == array:
                out = out.union(isl.UnionMap.from_map(a.relation))
    return out.intersect_domain(domain)


def footprint_mark(node: isl.ScheduleNode, model, request: str) -> str | None:
    """The ``cpu_pack`` mark text for the request mark at ``node``, or None."""
    _, array, dim, width = request.split(":")
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
    fp = prefix.reverse().apply_range(_reads_of(model, array, domain))
    ms = maps(fp)
    if len(ms) != 1:
        return None
    f = ms[0]
    n = f.dim(isl.dim_type.out)
    origins, sizes = [], []
    for d in range(n):
        lo, hi = f.dim_min(d), f.dim_max(d)
        ext = hi.sub(lo).add_constant_val(isl.Val.one(f.get_ctx()))
        v = ext.max_val()
        if not v.is_int():
            return None
        sizes.append(int(v.to_python()))
        origins.append(lo)
    space = isl.Space.map_from_domain_and_range(f.domain().get_space(),
                                                isl.Space.set_alloc(f.get_ctx(), 0, n)
                                                .align_params(f.get_space()))
    lst = isl.PwAffList.alloc(f.get_ctx(), n)
    for pa in origins:
        lst = lst.add(pa)
    origin = isl.MultiPwAff.from_pw_aff_list(space, lst)
    box = "x".join(str(s) for s in sizes)
    return f"{MARK}:{array}|panel={dim}x{width}|box={box}|origin={origin}"


class CpuPackPass(Pass):
    name = "cpu-pack"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        count = [0]

        def visit(node):
            if node.get_type() == isl.schedule_node_type.mark:
                name = node.mark_get_id().get_name()
                if name.startswith(REQUEST + ":"):
                    text = footprint_mark(node.child(0), ctx.model, name)
                    node = node.delete()
                    if text is None:
                        return visit(node)
                    node = node.insert_mark(isl.Id(text))
                    count[0] += 1
                    ctx.note(self.name, text.split("|origin")[0])
            for k in range(node.n_children()):
                node = visit(node.child(k)).parent()
            return node

        return visit(schedule.get_root()).get_schedule()
