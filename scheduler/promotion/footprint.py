"""Footprints, boxes and layouts: where a reference group's data lives below a scope.

A *footprint* is the relation ``{ [p] -> A[a] }`` from the prefix schedule ``p`` at a
promotion depth (the *scope*) to the array elements that the statement instances below
that depth access.  A *box* over-approximates it by ``c_d(p) <= a_d < c_d(p) + S_d`` per
dimension with ``c_d`` affine and ``S_d`` a constant (PPCG's tile bounds); with a
stride ``s_d`` (register tiles of a cyclic thread mapping) the box holds the elements
``c_d(p) + s_d * r``, ``0 <= r < S_d``.  isl's ``FixedBox`` has no accessors in islpy,
so boxes are computed here from ``lexmin`` pieces and ``dim_max`` (:func:`box_of`,
:func:`strided_box_of`) or, for CPU packing, from the per-dimension minimum and the
largest extent (:func:`min_box_of`, piecewise offsets).

A :class:`Layout` says how the box's elements are placed in the local buffer
(row-major; packed panels; XOR-swizzled multi-stage tiles for Tensor Core staging;
fractal tiles are a declared kind that no use of the engine produces yet), and a
:class:`ScopedFootprint` (Tensor Comprehensions' ``ScopedFootprint``) ties a
reference group, its scope, its box and its layout together: the size of the local
buffer follows from it.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import islpy as isl

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.affine import to_isl
from polycomp.errors import PolycompInternalError
from polycomp.islutil import maps, pieces, sets
from polycomp.scheduler.promotion.reference import ReferenceGroup


@dataclass
class Box:
    """Per array dimension ``d``: the offset ``c_d(p)`` (an ``isl.Aff`` on the prefix
    space; an ``isl.PwAff`` for :func:`min_box_of`), the size ``S_d`` (number of
    elements) and the stride ``s_d``."""
    offsets: list
    sizes: list
    strides: list

    def elements(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


LayoutKind = Literal["row-major", "packed-panel", "swizzled", "tma-swizzled", "fractal"]


@dataclass(frozen=True)
class Layout:
    """How box elements are placed in the local buffer.

    * ``row-major``: element ``x`` (relative to the box offset, divided by the stride)
      is at ``x``;
    * ``packed-panel``: dimension ``dim`` is split into panels of ``width``; the local
      index of ``x`` is ``(x_dim // width, x_0, .., x_{dim-1}, x_{dim+1}, .., x_dim mod
      width)`` — the in-panel lane innermost, so a micro-kernel walking ``x_dim`` inside a
      panel reads consecutive memory;
      with a *group* (``group > 1`` along ``group_dim``, a dimension other than ``dim``),
      that dimension is further split into groups of ``group`` consecutive elements and
      the in-group index goes innermost, after the lane: ``(x_dim // width, ..,
      x_g // group, .., x_dim mod width, x_g mod group)`` — the packing of the
      dot-product units (``vdpbf16ps``: pairs of ``k`` per 32-bit lane, ``vpdpbusd``:
      quads), where one lane of a panel is the ``group`` values of ``k`` it multiplies;
      with an *order* (a permutation of the dimensions other than ``dim``, no group, no
      tiles) the middle indices follow it: ``(x_dim // width, x_{order[0]}, ..,
      x_dim mod width)`` -- a convolution's weights ``w[f, c, kh, kw]`` in the order its
      micro-kernel's loops read them, ``(f // NR, kh, kw, c, f mod NR)``;
    * ``swizzled`` (Tensor Core staging, :meth:`swizzled`): a 2-d box ``rows x width``
      stored ``stages`` times, ``shape = (stages, rows * width)``; a row is cut into
      chunks of ``chunk`` elements (16 bytes) and the chunk ``c`` of row ``x_0`` is
      stored at physical chunk ``c ^ key(x_0)`` with ``key = x_0 mod 8`` for rows of 8
      or more chunks, ``(x_0 / 2) mod 4`` for 4, ``(x_0 / 4) mod 2`` for 2 (no XOR for
      other counts, or when ``xor`` is off): the element ``(x_0, x_1)`` of stage ``s``
      is at ``(s, x_0 * width + (x_1 / chunk ^ key) * chunk + x_1 mod chunk)``.  Since
      ``key`` only flips bits below the chunk count, the map is a bijection of the
      stage's ``rows * width`` elements;
    * ``tma-swizzled`` (tensor-copy staging, :meth:`tma_swizzled`): a 2-d box
      ``sizes`` whose dimension ``dim`` is the contiguous one, stored ``stages`` times as
      the tensor copy engine writes it: that dimension cut into panels of ``width``
      elements (one swizzle span), each panel ``rows = sizes[1 - dim]`` rows of
      ``width``, the 16-byte chunks of row ``x`` XORed with the key of the span (the
      ``swizzled`` rule: ``x mod 8`` for 8 chunks, ``(x / 2) mod 4`` for 4, ``(x / 4)
      mod 2`` for 2): element ``x`` with ``c = x_dim``, ``r = x_{1-dim}`` of stage ``s``
      is at ``(s, (c / width) * rows * width + r * width + ((c mod width) / chunk ^
      key(r)) * chunk + c mod chunk)``;
    * ``fractal``: declared for NPU fractal tiles; no use of the engine produces it
      yet (asking for its shape is an error).
    """
    kind: LayoutKind = "row-major"
    dim: int = -1
    width: int = 0
    stages: int = 1        # swizzled: the number of copies of the tile (pipeline stages)
    chunk: int = 0         # swizzled: elements per 16-byte chunk
    xor: bool = True       # swizzled: False keeps the rows linear (stage dimension kept)
    rows: int = 0          # tma-swizzled: rows of a panel (the other box dimension)
    group_dim: int = -1    # packed-panel: the dimension split into groups (-1: none)
    group: int = 1         # packed-panel: elements per group (innermost, after the lane)
    #: packed-panel of a whole 2-d array in cache tiles (:meth:`packed_tiles`):
    #: ``(T_other, T_dim)``, () for none
    tiles: tuple[int, ...] = ()
    #: packed-panel: the other dimensions in this order (() for their own order)
    order: tuple[int, ...] = ()

    @staticmethod
    def row_major() -> Layout:
        return Layout()

    @staticmethod
    def packed_panel(dim: int, width: int, group_dim: int = -1, group: int = 1,
                     order: tuple[int, ...] = ()) -> Layout:
        if group > 1 and (group_dim < 0 or group_dim == dim):
            raise PolycompInternalError(f"a packed panel along dimension {dim} groups "
                                        f"dimension {group_dim}: it must be another one")
        if order and (group > 1 or dim in order or len(set(order)) != len(order)
                      or sorted(order) != [d for d in range(len(order) + 1) if d != dim]):
            raise PolycompInternalError(f"a packed panel along dimension {dim} in the "
                                        f"order {order} (group {group})")
        if order == tuple(d for d in range(len(order) + 1) if d != dim):
            order = ()          # the dimensions' own order: the plain layout
        if group <= 1:
            return Layout("packed-panel", dim, width, order=order)
        return Layout("packed-panel", dim, width, group_dim=group_dim, group=group)

    @staticmethod
    def packed_tiles(dim: int, width: int, tile_other: int, tile_dim: int) -> Layout:
        """A whole 2-d array in cache tiles of ``tile_other x tile_dim`` elements (a
        GEMM's ``KC x NC`` blocks of ``Y``), each tile in packed panels of ``width``
        along ``dim``: element ``x`` (``p = x_dim``, ``o = x_other``) at ``(p //
        tile_dim, o // tile_other, (p mod tile_dim) // width, o mod tile_other, p mod
        width)``; every tile complete (zeros beyond the array), so a ``(k, j)`` block
        the kernel reads is as contiguous as its per-call packed copy."""
        if dim not in (0, 1) or tile_dim % width or tile_other < 1:
            raise PolycompInternalError(f"packed tiles {tile_other} x {tile_dim} along "
                                        f"dimension {dim} in panels of {width}")
        return Layout("packed-panel", dim, width, tiles=(tile_other, tile_dim))

    @staticmethod
    def swizzled(width: int, chunk: int, stages: int, xor: bool = True) -> Layout:
        """Rows of ``width`` elements in chunks of ``chunk``, ``stages`` copies."""
        return Layout("swizzled", 1, width, stages, chunk, xor)

    @staticmethod
    def tma_swizzled(dim: int, width: int, rows: int, chunk: int, stages: int,
                     xor: bool = True) -> Layout:
        """Panels of ``width`` elements along box dimension ``dim`` (contiguous), each
        ``rows`` rows, swizzled by 16-byte chunks of ``chunk`` elements, ``stages``
        copies (see the class docstring)."""
        return Layout("tma-swizzled", dim, width, stages, chunk, xor, rows)

    def panel_elements(self) -> int:
        """tma-swizzled: the elements of one panel (``rows * width``)."""
        return self.rows * self.width

    def shape(self, sizes: Sequence[int]) -> tuple[int, ...]:
        """The local buffer's shape for a box of ``sizes``."""
        if self.kind == "row-major":
            return tuple(sizes)
        if self.kind == "packed-panel" and self.tiles:
            to, tp = self.tiles
            return (-(-sizes[self.dim] // tp), -(-sizes[1 - self.dim] // to), tp // self.width,
                    to, self.width)
        if self.kind == "packed-panel":
            p, w, g = self.dim, self.width, self.group
            panels = -(-sizes[p] // w)
            if g > 1:
                return (panels,) + tuple(-(-b // g) if d == self.group_dim else b
                                         for d, b in enumerate(sizes) if d != p) + (w, g)
            return (panels,) + tuple(sizes[d] for d in self._others(len(sizes))) + (w,)
        if self.kind == "swizzled":
            if self.chunk <= 0 or len(sizes) != 2 or sizes[1] != self.width \
                    or self.width % self.chunk:
                raise PolycompInternalError(
                    f"a swizzled layout of rows of {self.width} in chunks of {self.chunk} "
                    f"does not hold a box {list(sizes)}")
            return (self.stages, sizes[0] * sizes[1])
        if self.kind == "tma-swizzled":
            if self.chunk <= 0 or len(sizes) != 2 or sizes[1 - self.dim] != self.rows \
                    or sizes[self.dim] % self.width or self.width % self.chunk:
                raise PolycompInternalError(
                    f"a tma-swizzled layout of panels of {self.rows} x {self.width} does not "
                    f"hold a box {list(sizes)}")
            return (self.stages, sizes[0] * sizes[1])
        raise PolycompInternalError(f"layout {self.kind} is declared but not implemented")

    def pack(self, a):
        """A whole numpy array ``a`` (the box = ``a``'s extents, origin 0) placed in this
        packed-panel layout, as :meth:`index` places each element: ``out[index(x)] =
        a[x]``, the lanes of the last panel beyond ``a`` zero.  The copy a caller makes
        once for a pre-packed operand (:class:`~polycomp.scheduler.promotion.record.
        PrepackedInput`)."""
        import numpy as np
        if self.kind != "packed-panel" or self.group > 1:
            raise PolycompInternalError(f"a {self.kind} layout (group {self.group}) has no "
                                        f"whole-array packing")
        p, w = self.dim, self.width
        if self.tiles:
            to, tp = self.tiles
            nt, mt, pw, _, _ = self.shape(a.shape)
            q = 1 - p
            full = [0, 0]
            full[p], full[q] = nt * tp, mt * to
            b = np.pad(a, [(0, full[0] - a.shape[0]), (0, full[1] - a.shape[1])])
            b = b if p == 1 else b.T           # (other, dim)
            b = b.reshape(mt, to, nt, pw, w)   # (o tile, o, p tile, panel, lane)
            return np.ascontiguousarray(b.transpose(2, 0, 3, 1, 4))
        q = self.shape(a.shape)[0]
        pad = [(0, 0)] * a.ndim
        pad[p] = (0, q * w - a.shape[p])
        b = np.pad(a, pad).reshape(a.shape[:p] + (q, w) + a.shape[p + 1:])
        return np.ascontiguousarray(b.transpose(self._perm(a.ndim)))

    def _others(self, rank: int) -> tuple[int, ...]:
        """packed-panel: the dimensions other than ``dim`` in their packed order."""
        return self.order or tuple(d for d in range(rank) if d != self.dim)

    def _perm(self, rank: int) -> list[int]:
        """packed-panel: the axes of the array with ``dim`` split in ``(panel, lane)``
        (``dim`` -> ``dim, dim + 1``) in the packed order."""
        p = self.dim
        return [p] + [d if d < p else d + 1 for d in self._others(rank)] + [p + 1]

    def unpack(self, packed, sizes: Sequence[int]):
        """The inverse of :meth:`pack`: the array of shape ``sizes`` that ``pack`` placed
        as ``packed`` (a new C-contiguous array; the padding lanes dropped)."""
        import numpy as np
        if self.kind != "packed-panel" or self.group > 1:
            raise PolycompInternalError(f"a {self.kind} layout (group {self.group}) has no "
                                        f"whole-array packing")
        sizes = tuple(int(n) for n in sizes)
        if tuple(packed.shape) != self.shape(sizes):
            raise PolycompInternalError(f"a packed array of shape {tuple(packed.shape)} does "
                                        f"not hold a box {list(sizes)}")
        p, w = self.dim, self.width
        if self.tiles:
            to, tp = self.tiles
            nt, mt, pw, _, _ = packed.shape
            b = packed.transpose(1, 3, 0, 2, 4).reshape(mt * to, nt * pw * w)  # (other, dim)
            b = b if p == 1 else b.T
            return np.ascontiguousarray(b[:sizes[0], :sizes[1]])
        b = packed.transpose(np.argsort(self._perm(len(sizes))))
        b = b.reshape(sizes[:p] + (b.shape[p] * w,) + sizes[p + 1:])
        return np.ascontiguousarray(b[(slice(None),) * p + (slice(0, sizes[p]),)])

    def index(self, rel: Sequence, split: Callable | None = None) -> tuple:
        """The local index of the element at box-relative index ``rel``; ``split(e, w)``
        returns ``(e // w, e mod w)`` (Python's ``divmod`` by default; the IR passes
        give one that simplifies with loop ranges).  A swizzled layout gives the index
        in stage 0 (the stage of a copy is chosen by the pipeline, a stride of one
        stage's ``rows * width`` elements)."""
        if self.kind == "row-major":
            return tuple(rel)
        if self.kind == "packed-panel" and self.tiles:
            to, tp = self.tiles
            sp = split or divmod
            a, r = sp(rel[self.dim], tp)
            panel, lane = sp(r, self.width)
            b, o = sp(rel[1 - self.dim], to)
            return (a, b, panel, o, lane)
        if self.kind == "packed-panel":
            p, w, g = self.dim, self.width, self.group
            q, r = (split or divmod)(rel[p], w)
            if g > 1:
                gq, gr = (split or divmod)(rel[self.group_dim], g)
                return (q,) + tuple(gq if d == self.group_dim else rel[d]
                                    for d in range(len(rel)) if d != p) + (r, gr)
            return (q,) + tuple(rel[d] for d in self._others(len(rel))) + (r,)
        if self.kind == "swizzled":
            chunk, elem = (split or divmod)(rel[1], self.chunk)
            return (0, self.swizzled_offset(rel[0], chunk, elem))
        if self.kind == "tma-swizzled":
            return (0, self.tma_offset(rel[1 - self.dim], rel[self.dim], split))
        raise PolycompInternalError(f"layout {self.kind} is declared but not implemented")

    def tma_offset(self, row, col, split: Callable | None = None,
                   xor: Callable | None = None):
        """tma-swizzled: the offset within a stage of the element in row ``row`` and
        contiguous coordinate ``col`` (ints, or IR expressions with ``split`` and
        ``xor`` as in :meth:`index` / :meth:`swizzled_offset`)."""
        if self.kind != "tma-swizzled":
            raise PolycompInternalError(f"a {self.kind} layout has no tma offset")
        panel, c = (split or divmod)(col, self.width)
        chunk, elem = (split or divmod)(c, self.chunk)
        inner = Layout("swizzled", 1, self.width, 1, self.chunk, self.xor)
        return panel * self.panel_elements() + inner.swizzled_offset(row, chunk, elem, xor)

    def swizzled_offset(self, row, chunk, elem, xor: Callable | None = None):
        """The offset within a stage of element ``elem`` of chunk ``chunk`` of row
        ``row`` (ints, or IR expressions with ``xor(a, b)`` building ``a ^ b``; Python's
        ``^`` by default)."""
        if self.kind != "swizzled":
            raise PolycompInternalError(f"a {self.kind} layout has no swizzled offset")
        row_len = self.width
        cpr = row_len // self.chunk
        if not self.xor:
            return row * row_len + chunk * self.chunk + elem
        if cpr >= 8:
            key = row % 8
        elif cpr == 4:
            key = (row // 2) % 4
        elif cpr == 2:
            key = (row // 4) % 2
        else:
            key = None
        pc = chunk if key is None else (xor or operator.xor)(chunk, key)
        return row * row_len + pc * self.chunk + elem


@dataclass(eq=False)
class ScopedFootprint:
    """The footprint of ``group`` below a scope: ``relation = { [p] -> A[a] }`` with ``p``
    the scope's prefix schedule, contained in ``box`` (offsets functions of ``p``), stored
    in the local buffer with ``layout``."""
    group: ReferenceGroup
    relation: isl.Map
    box: Box
    layout: Layout = Layout()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape(self.box.sizes)

    def elements(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def bytes(self) -> int:
        return self.elements() * dt.itemsize(self.group.array.dtype)

    def origin(self) -> isl.MultiPwAff:
        """The box offsets as one ``{ [p] -> [c(p)] }`` (piecewise) multi-affine map."""
        f = self.relation
        n = len(self.box.offsets)
        space = isl.Space.map_from_domain_and_range(f.domain().get_space(),
                                                    isl.Space.set_alloc(f.get_ctx(), 0, n)
                                                    .align_params(f.get_space()))
        lst = isl.PwAffList.alloc(f.get_ctx(), n)
        for pa in self.box.offsets:
            lst = lst.add(pa)
        return isl.MultiPwAff.from_pw_aff_list(space, lst)


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


def min_box_of(f: isl.Map) -> Box | None:
    """The box whose offset in dimension ``d`` is the minimum of ``a_d`` over ``f(p)``
    (a piecewise function of ``p``) and whose size is the largest extent
    ``max_p (max a_d - min a_d + 1)``; None when some extent is unbounded."""
    offsets, sizes = [], []
    for d in range(f.dim(isl.dim_type.out)):
        lo, hi = f.dim_min(d), f.dim_max(d)
        ext = hi.sub(lo).add_constant_val(isl.Val.one(f.get_ctx()))
        v = ext.max_val()
        if not v.is_int():
            return None
        sizes.append(int(v.to_python()))
        offsets.append(lo)
    return Box(offsets, sizes, [1] * len(sizes))


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
            cons.append(f"exists r{d}: 0 <= r{d} < {box.sizes[d]} "
                        f"and a{d} = l{d} + {box.strides[d]}*r{d}")
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
    """Do two different instances with the same prefix access the same element?  (The
    prefix is restricted to the accessing statements first: composed with its inverse
    over every statement of the kernel it paired all of them, quadratic in a kernel
    of many statements.)"""
    same_elem = accesses.apply_range(accesses.reverse())
    prefix = prefix.intersect_domain(accesses.domain())
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
