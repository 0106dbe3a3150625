"""Footprints, boxes and promotion records shared by the memory-promotion passes.

A *footprint* is the relation ``{ [p] -> A[a] }`` from the prefix schedule ``p`` at a
promotion depth to the array elements that the statement instances below that depth
access.  A *box* over-approximates it by ``c_d(p) <= a_d < c_d(p) + S_d`` per
dimension with ``c_d`` affine and ``S_d`` a constant (PPCG's tile bounds); with a
stride ``s_d`` (register tiles of a cyclic thread mapping) the box holds the elements
``c_d(p) + s_d * r``, ``0 <= r < S_d``.  isl's ``FixedBox`` has no accessors in islpy,
so boxes are computed here from ``lexmin`` pieces and ``dim_max``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polycomp import ir
from polycomp.affine import to_isl
from polycomp.islutil import maps, pieces, sets


@dataclass
class Box:
    offsets: list          # isl.Aff per array dimension, on the prefix space
    sizes: list            # int per dimension (number of elements)
    strides: list          # int per dimension

    def elements(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


@dataclass
class Promotion:
    """One promoted reference group: ``array`` is read/written through ``local``.

    ``offsets[stmt]`` are isl Affs (on that statement's domain space) of the box
    offset at that instance; an access ``array[idx]`` becomes
    ``local[(idx - offset) // stride]``.  ``copies`` maps extension statement names to
    their kind (``copy_in``, ``copy_out``, ``sync``) and the Affs of the box offset on
    the extension statement's prefix coordinates.
    """
    array: ir.Buffer
    local: ir.Buffer
    kernel: int
    box: Box
    offsets: dict = field(default_factory=dict)
    copies: dict = field(default_factory=dict)
    producer: object = None      # Stage inlined into the copy-in (prologue fusion)
    reason: str = ""
    combine: str = ""            # privatised reductions: the combining operator
    lane_param: str = ""         # privatised reductions: the lane id parameter


def prefix_space_map(node: isl.ScheduleNode) -> isl.UnionMap:
    """Statement instances below ``node`` -> their prefix schedule at ``node``."""
    return node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())


def footprint(prefix: isl.UnionMap, accesses: isl.UnionMap) -> isl.Map | None:
    """{ [p] -> A[a] } for accesses of a single array (None if there are none)."""
    f = prefix.reverse().apply_range(accesses)
    ms = maps(f)
    if not ms:
        return None
    out = ms[0]
    for m in ms[1:]:
        out = out.union(m)
    return out.coalesce()


def _range_dim(m: isl.Map, d: int) -> isl.Map:
    n = m.dim(isl.dim_type.out)
    r = m.project_out(isl.dim_type.out, d + 1, n - d - 1)
    return r.project_out(isl.dim_type.out, 0, d)


def _extent_of_difference(md: isl.Map, aff: isl.Aff):
    """(min, max) constants of a - aff(p) over md = { p -> [a] }, or None if unbounded."""
    diff = md.sum(isl.Map.from_aff(aff.neg()))
    rng = diff.range()
    if rng.is_empty():
        return None
    lo = rng.dim_min(0).min_val()
    hi = rng.dim_max(0).max_val()
    if not (lo.is_int() and hi.is_int()):
        return None
    return lo.to_python(), hi.to_python()


def _dim_box(md: isl.Map, stride: int):
    """(offset aff, size) of the tightest box of md = { p -> [a] } whose elements are
    ``offset(p) + stride * r``, from the pieces of the lexicographic minimum."""
    lo = md.lexmin_pw_multi_aff().get_pw_aff(0)
    best = None
    for _, aff in pieces(lo):
        ext = _extent_of_difference(md, aff)
        if ext is None or ext[0] < 0:
            continue
        size = ext[1] // stride + 1
        if best is None or size < best[1]:
            best = (aff, size)
    return best


def box_of(f: isl.Map) -> Box | None:
    """The tightest constant-size box with an affine offset containing ``f``'s range
    for each prefix point, or None if some dimension is unbounded."""
    offsets, sizes = [], []
    for d in range(f.dim(isl.dim_type.out)):
        best = _dim_box(_range_dim(f, d), 1)
        if best is None:
            return None
        offsets.append(best[0])
        sizes.append(best[1])
    return Box(offsets, sizes, [1] * len(sizes))


def strided_box_of(f: isl.Map) -> Box | None:
    """Like :func:`box_of`, with a constant stride per dimension detected by isl (the
    per-thread footprint of a cyclic mapping: ``a_d = offset_d(p) + stride_d * r``)."""
    offsets, sizes, strides = [], [], []
    for d in range(f.dim(isl.dim_type.out)):
        md = _range_dim(f, d)
        stride = md.get_range_stride_info(0).get_stride()
        if not stride.is_int():
            return None
        s = max(1, int(stride.to_python()))
        best = _dim_box(md, s)
        if best is None:
            return None
        offsets.append(best[0])
        sizes.append(best[1])
        strides.append(s)
    return Box(offsets, sizes, strides)


def box_relation(box: Box, prefix_set: isl.Set, buf: ir.Buffer, params: tuple,
                 ctx: isl.Context) -> isl.Map:
    """{ [p] -> [a] : a in box(p) and 0 <= a < shape } over the prefix points."""
    n = len(box.offsets)
    offs = list(box.offsets)
    for k in range(n):  # a common parameter space
        for j in range(n):
            offs[k] = offs[k].align_params(offs[j].get_space())
    space = offs[0].get_domain_space()
    lst = isl.AffList.alloc(ctx, n)
    for a in offs:
        lst = lst.add(a.align_params(space))
    rng = isl.Space.set_from_params(space.params()).add_dims(isl.dim_type.set, n)
    ma = isl.MultiAff.from_aff_list(isl.Space.map_from_domain_and_range(space, rng), lst)
    names = {p: p.name for p in params}
    ls = ", ".join(f"l{d}" for d in range(n))
    as_ = ", ".join(f"a{d}" for d in range(n))
    cons = []
    for d in range(n):
        ext = to_isl(buf.shape[d], names, "extent")
        if box.strides[d] == 1:
            cons.append(f"l{d} <= a{d} < l{d} + {box.sizes[d]}")
        else:
            cons.append(f"exists r{d}: 0 <= r{d} < {box.sizes[d]} and a{d} = l{d} + {box.strides[d]}*r{d}")
        cons.append(f"0 <= a{d} < {ext}")
    prefix = "[" + ", ".join(p.name for p in params) + "] -> " if params else ""
    t = isl.Map.read_from_str(ctx, f"{prefix}{{ [{ls}] -> [{as_}] : {' and '.join(cons)} }}")
    return isl.Map.from_multi_aff(ma).apply_range(t).intersect_domain(prefix_set)


def statement_prefix(prefix: isl.UnionMap, stmt_name: str) -> isl.MultiAff | None:
    """The prefix schedule of one statement as a single MultiAff (None if piecewise)."""
    for m in maps(prefix):
        if m.get_tuple_name(isl.dim_type.in_) == stmt_name:
            ps = pieces(isl.PwMultiAff.from_map(m))
            return ps[0][1] if len(ps) == 1 else None
    raise KeyError(stmt_name)


def has_reuse(prefix: isl.UnionMap, accesses: isl.UnionMap) -> bool:
    """Do two different instances with the same prefix access the same element?"""
    same_elem = accesses.apply_range(accesses.reverse())
    same_prefix = prefix.apply_range(prefix.reverse())
    pairs = same_elem.intersect(same_prefix).subtract(accesses.domain().identity())
    return not pairs.is_empty()


def statement_sets(node: isl.ScheduleNode) -> list[str]:
    """Names of the statements with instances below ``node``."""
    return [s.get_tuple_name() for s in sets(node.get_domain())]


def pullback(aff: isl.Aff, ma: isl.MultiAff) -> isl.Aff:
    """``aff ∘ ma`` after aligning the parameters of both."""
    ma = ma.align_params(aff.get_space())
    aff = aff.align_params(ma.get_space())
    return aff.pullback_multi_aff(ma)
