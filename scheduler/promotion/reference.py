"""Reference groups: the unit the promotion engine decides about.

A *reference* is one textual access ``(S, A[f(i)])`` of a statement ``S``; its access
relation is ``{ S[i] -> A[f(i)] }``.  A *reference group* (Tensor Comprehensions'
``TensorReferenceGroup``, PPCG's ``gpu_array_ref_group``) is a set of references to
the same array that are promoted together: they are redirected to one local copy, so
their union access relation, restricted to the statement instances below a *scope*
(a schedule-tree node), is what the footprint is computed from.

Grouping functions here build groups for the uses of the engine:

* :func:`read_only_groups` — all read references of each array that no statement of
  an enclosing region writes (shared memory, CPU packing): read-only references never
  conflict, so merging them only widens the box;
* :func:`written_array_groups` — all references (reads and writes) of each array
  written below a scope (registers), checked by :func:`thread_private_refusal` to be
  *bijective per thread*: every reference indexes the array with exactly the
  statement's output-band iterators, so a cyclic thread mapping of that band gives
  each element to exactly one thread.

Arrays read by a gather (an access with ``Access.indirect``, ``table[idx[i], j]``) are
in no group: their relation is a may-access over whole dimensions, not a footprint.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import islpy as isl

from polycomp import ir
from polycomp.errors import PolycompInternalError
from polycomp.model import Access, Statement
from polycomp.scheduler.promotion.decision import Refusal


@dataclass(frozen=True, eq=False)
class Reference:
    """One access ``access`` of statement ``stmt``."""
    stmt: Statement
    access: Access

    @property
    def is_read(self) -> bool:
        return self.access.kind == "read"

    @property
    def is_write(self) -> bool:
        return self.access.kind == "write"


@dataclass(eq=False)
class ReferenceGroup:
    """References to ``array`` promoted together.

    ``access`` is the union of the references' access relations (``index_relation``:
    without the guards of padded windows, the box a copy must fill) restricted to the
    statement instances of the scope, ``{ S[i] -> A[a] : S[i] in scope }``."""
    array: ir.Buffer
    refs: tuple[Reference, ...]
    access: isl.UnionMap

    @property
    def name(self) -> str:
        return self.array.name

    @property
    def reads(self) -> bool:
        return any(r.is_read for r in self.refs)

    @property
    def writes(self) -> bool:
        return any(r.is_write for r in self.refs)

    @property
    def read_only(self) -> bool:
        return not self.writes

    def statements(self) -> list[Statement]:
        """The statements of the references, each once, in reference order."""
        out: list[Statement] = []
        for r in self.refs:
            if all(s is not r.stmt for s in out):
                out.append(r.stmt)
        return out

    def reading_statements(self) -> list[Statement]:
        return [r.stmt for r in self.refs if r.is_read]

    def writing_statements(self) -> list[Statement]:
        return [r.stmt for r in self.refs if r.is_write]


def union_access(refs: Iterable[Reference], domain: isl.UnionSet) -> isl.UnionMap:
    """``U_r { S_r[i] -> A[f_r(i)] }`` restricted to ``domain`` (index relations)."""
    relations = [isl.UnionMap.from_map(r.access.index_relation) for r in refs]
    if not relations:
        raise PolycompInternalError("a reference group without references")
    acc = relations[0]
    for m in relations[1:]:
        acc = acc.union(m)
    return acc.intersect_domain(domain)


def make_group(array: ir.Buffer, refs: Iterable[Reference], domain: isl.UnionSet) -> ReferenceGroup:
    refs = tuple(refs)
    return ReferenceGroup(array, refs, union_access(refs, domain))


def read_only_groups(stmts: Iterable[Statement], domain: isl.UnionSet,
                     written: set[str]) -> list[ReferenceGroup]:
    """One group per array read by ``stmts`` and not in ``written``: all its read
    references, with the union access restricted to ``domain`` (the scope's instances).
    Groups come in the order of the arrays' first reads."""
    by_array: dict[str, tuple[ir.Buffer, list[Reference]]] = {}
    stmts = list(stmts)
    gathered = indirect_arrays(stmts)
    for s in stmts:
        for a in s.reads:
            if a.buffer.name in written or a.buffer.name in gathered:
                continue
            by_array.setdefault(a.buffer.name, (a.buffer, []))[1].append(Reference(s, a))
    return [make_group(buf, refs, domain) for buf, refs in by_array.values()]


def indirect_arrays(stmts: Iterable[Statement]) -> set[str]:
    """The arrays some access of ``stmts`` indexes with data (a gather,
    ``Access.indirect``): their access relations are may-accesses over whole dimensions,
    so no box, copy or index rewrite may be derived from them; every grouping here
    leaves them out (they stay in global memory, read in place)."""
    return {a.buffer.name for s in stmts for a in s.accesses if a.indirect}


def guarded_read_group(stmts: Iterable[Statement], array: ir.Buffer,
                       domain: isl.UnionSet, tag: str = "") -> ReferenceGroup:
    """All read references of ``array`` in ``stmts`` (only the one whose access tag is
    ``tag`` when given) with their *guarded* access relations (``relation``: only the
    elements actually read), restricted to ``domain`` (CPU packing copies exactly the
    elements the scope reads)."""
    stmts = list(stmts)
    if array.name in indirect_arrays(stmts):
        raise PolycompInternalError(f"packing {array.name}, which is read by a gather")
    refs = tuple(Reference(s, a) for s in stmts for a in s.reads
                 if a.buffer.name == array.name and (not tag or a.tag == tag))
    acc = isl.UnionMap.empty(domain.get_space())
    for r in refs:
        acc = acc.union(isl.UnionMap.from_map(r.access.relation))
    return ReferenceGroup(array, refs, acc.intersect_domain(domain))


def written_arrays(stmts: Iterable[Statement]) -> list[ir.Buffer]:
    """The arrays written by ``stmts``, each once, in statement order."""
    out: list[ir.Buffer] = []
    for s in stmts:
        if s.write.name not in [w.name for w in out]:
            out.append(s.write)
    return out


def array_references(stmts: Iterable[Statement], array: str) -> list[Reference]:
    """Every reference (read or write) to ``array`` in ``stmts``; none when ``array``
    is read by a gather (:func:`indirect_arrays`: never promoted)."""
    stmts = list(stmts)
    if array in indirect_arrays(stmts):
        return []
    return [Reference(s, a) for s in stmts for a in s.accesses if a.buffer.name == array]


def thread_private_refusal(refs: Iterable[Reference], n_band: int) -> Refusal | None:
    """None when every reference indexes its array with exactly the first ``n_band``
    iterators of its statement (``X[o]``, the output band: bijective per thread under a
    cyclic mapping of that band) and there are at least two (reuse); else the refusal."""
    count = 0
    for r in refs:
        iters = r.stmt.iters[:n_band]
        idx = r.access.indices
        if len(idx) != n_band or any(i is not v for i, v in zip(idx, iters)):
            return Refusal.SHARED_BETWEEN_THREADS
        count += 1
    return Refusal.NO_REUSE if count < 2 else None
