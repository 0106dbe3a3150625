"""Copy insertion: extension subtrees that fill and drain a promoted buffer.

A copy of a scoped footprint is an *extension* node grafted next to the scope (PPCG's
``gpu_group.c``): with ``P`` the scope's prefix points (a set over the prefix schedule
space) and ``R = { [p] -> [a] }`` the elements to copy at ``p`` (the box clipped to the
array, or the exact footprint), the subtree is

    extension { [p] -> name[p, a] : p in P and a in R(p) }
      [filter: the statements this thread executes]
        band { name[p, a] -> [a] }   (unrolled where indices should be constants)
          [mark copy:<name>]

so every prefix point ``p`` executes the copy of its own box before (copy-in) or after
(copy-out) the scope's subtree.  How the data moves and whether a barrier must make it
visible is the target's :class:`~polycomp.hw.memory.CopyRule` for the two levels
(``state.target.memory.copy_rule(src, dst)``): a rule with a ``sync`` (shared memory
on CUDA: ``__syncthreads()``) gets ``sync`` extension statements — one after the
copies, one after the scope when the scope lies inside a loop (the next iteration's
copies must not overwrite data still being read).  A rule without one (registers:
private to the thread; CPU packing: one thread packs what it reads) gets none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import islpy as isl

from polycomp.hw.memory import MemoryHierarchy
from polycomp.scheduler.common import marks
from polycomp.scheduler.promotion.sites import root_of


@dataclass
class NameAllocator:
    """Numbers for the buffers and statements one pass creates (``A_shared<k>``,
    ``copy_A_<k>``, ``sync<k>_in``), handed out in order from ``start``."""
    start: int = 0

    def take(self) -> int:
        k = self.start
        self.start += 1
        return k


def needs_sync(memory: MemoryHierarchy, src: str, dst: str) -> bool:
    """Does a copy from level ``src`` to level ``dst`` need a barrier before its data
    may be read (the target's copy rule)?"""
    return bool(memory.copy_rule(src, dst).sync)


def copy_subtree(prefix_set: isl.Set, rel: isl.Map, name: str, *,
                 distribute: Callable[[isl.Set], isl.UnionSet | None] | None = None,
                 unroll: bool = True, mark: bool = False,
                 align: bool = False) -> isl.ScheduleNode:
    """The extension subtree copying ``rel(p)`` for every ``p`` in ``prefix_set`` (see the
    module docstring).  ``distribute(copy domain)`` gives a filter dealing the copy's
    instances to threads; ``align`` aligns the parameters of ``rel`` and the prefix
    identity first (``rel`` not already intersected with ``prefix_set``); ``mark`` puts
    the mark ``copy:<name>`` above the copy band."""
    ident = isl.Map.identity(isl.Space.map_from_set(prefix_set.get_space())) \
        .intersect_domain(prefix_set)
    if align:
        ident = ident.align_params(rel.get_space())
        rel = rel.align_params(ident.get_space())
    ext = ident.range_product(rel).flatten_range().set_tuple_name(isl.dim_type.out, name)
    n_prefix = prefix_set.dim(isl.dim_type.set)
    leaf = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)
    cdom = ext.range()
    band = isl.Map.identity(isl.Space.map_from_set(cdom.get_space())).project_out(
        isl.dim_type.out, 0, n_prefix).reset_tuple_id(isl.dim_type.out)
    filt = distribute(cdom) if distribute is not None else None
    if filt is not None:
        leaf = leaf.insert_filter(filt).child(0)
    leaf = leaf.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(
        isl.UnionMap.from_map(band)))
    if unroll:
        for m in range(leaf.band_n_member()):
            leaf = leaf.band_member_set_ast_loop_type(m, isl.ast_loop_type.unroll)
    if mark:
        leaf = leaf.insert_mark(marks.make(marks.COPY, name))
    return root_of(leaf)


def sync_subtree(prefix_set: isl.Set, name: str) -> isl.ScheduleNode:
    """``extension { [p] -> name[] : p in prefix_set }``: one barrier per prefix point."""
    m = isl.Map.from_domain_and_range(
        prefix_set, isl.Set.read_from_str(prefix_set.get_ctx(), f"{{ {name}[] }}"))
    return isl.ScheduleNode.from_extension(isl.UnionMap.from_map(m))


def thread_tiled_copy_subtree(prefix_set: isl.Set, rel: isl.Map, name: str,
                              local: Callable[[isl.Set], list[isl.Aff]],
                              threads: tuple[int, ...], kernel: int) -> isl.ScheduleNode:
    """The extension subtree copying ``rel(p)`` for every ``p`` in ``prefix_set``, its
    instances dealt to the threads of a block mapped as the baseline mapping does
    (:class:`~polycomp.scheduler.gpu.baseline.GpuBaselineMappingPass`, the IR pass
    ``hw/cuda/mapping.py``: the loops right below a ``gpu_threads:<kernel>`` mark are
    the thread loops).  ``local(copy domain)`` gives the local coordinates
    ``l_d = a_d - offset_d(p)`` (``0 <= l_d < size_d``) of a copy instance; with ``m =
    len(threads)`` (at most the box's rank) the last ``m`` are tiled by ``threads``:

        extension { [p] -> name[p, a] : a in rel(p) }
          mark copy:<name>
            band [l_0, .., l_(r-m-1), floor(l_(r-m) / T_0), ..]   (loops of every thread)
              mark gpu_threads:<kernel>
                band [l_(r-m) mod T_0, ..]                        (atomic: one loop each)

    so thread ``t`` copies the elements whose point coordinates equal ``t``: each
    element is copied by exactly one thread, and consecutive threads along x copy
    consecutive elements of the innermost dimension (coalesced loads, conflict-free
    stores)."""
    ident = isl.Map.identity(isl.Space.map_from_set(prefix_set.get_space())) \
        .intersect_domain(prefix_set)
    ext = ident.range_product(rel).flatten_range().set_tuple_name(isl.dim_type.out, name)
    cdom = ext.range()
    affs = local(cdom)
    m = len(threads)
    ictx = cdom.get_ctx()
    outer = affs[:len(affs) - m]
    inner = []
    for aff, t in zip(affs[len(affs) - m:], threads):
        tv = isl.Val.int_from_si(ictx, t)
        outer.append(aff.scale_down_val(tv).floor())
        inner.append(aff.mod_val(tv))

    def band(lst: list[isl.Aff]) -> isl.MultiUnionPwAff:
        for a in lst[1:]:
            lst = [x.align_params(a.get_space()) for x in lst]
        dom = lst[0].get_domain_space()
        lst = [x.align_params(dom) for x in lst]
        al = isl.AffList.alloc(ictx, len(lst))
        for a in lst:
            al = al.add(a)
        rng = isl.Space.set_from_params(dom.params()).add_dims(isl.dim_type.set, len(lst))
        ma = isl.MultiAff.from_aff_list(isl.Space.map_from_domain_and_range(dom, rng), al)
        return isl.MultiUnionPwAff.from_union_map(isl.UnionMap.from_map(isl.Map.from_multi_aff(ma)))

    leaf = isl.ScheduleNode.from_extension(isl.UnionMap.from_map(ext)).child(0)
    node = leaf.insert_partial_schedule(band(inner))
    for k in range(node.band_n_member()):
        node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.atomic)
    node = node.insert_mark(marks.make(marks.GPU_THREADS, kernel))
    node = node.insert_partial_schedule(band(outer))
    node = node.insert_mark(marks.make(marks.COPY, name))
    return root_of(node)
