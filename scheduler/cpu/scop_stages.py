"""The top-level stages of a C SCoP's schedule tree, as the CPU SCoP rewrites
(``scop-gemm``, ``scop-factor``, ``scop-trmm``, ``scop-symm``) walk them: each child of the
root sequence (or the root itself) with its statements in program order; a rewritten child
is tried in the whole tree (for the dependence check) before it replaces the old one.
:meth:`ScopStages.of` is the rewrites' shared prologue: stages only for a C SCoP model
compiled for a target with vector instructions (None otherwise: the pass returns the
schedule unchanged); :meth:`ScopStages.legal` their shared dependence check.

Assumes the schedule's root is a domain node over a sequence of filters or a single
subtree (``T.stage_children``).  Guarantees: :meth:`ScopStages.schedule` is the input
schedule when no stage was replaced, else the tree with exactly the replaced children
changed."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import islpy as isl

from polycomp.frontend.c_model import CScopModel
from polycomp.model import Statement
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu import tree as T
from polycomp.state import CompileState

M = TypeVar("M")


@dataclass(frozen=True)
class Stage:
    """One top-level child: its position, node, statement filter and subtree, and its
    statements (names and model statements) in program order."""
    index: int
    child: object
    filter: isl.UnionSet
    sub: object
    names: list[str]
    group: list[Statement]


class ScopStages:
    """See the module docstring."""

    def __init__(self, schedule: isl.Schedule, statements: list[Statement],
                 dependences: isl.UnionMap):
        self.original = schedule
        self.domain, self.tree = T.from_schedule(schedule)
        self.kids = T.stage_children(self.tree)
        self.changed = False
        self._stmts = {s.name: s for s in statements}
        self._order = [s.name for s in statements]
        self._deps = dependences

    @classmethod
    def of(cls, schedule: isl.Schedule, ctx: CompileState) -> ScopStages | None:
        """The stages of ``schedule`` when ``ctx`` compiles a C SCoP model
        (:class:`~polycomp.frontend.c_model.CScopModel`: its statements and
        dependences) for a target with vector instructions, else None."""
        if not ctx.target.isa or not isinstance(ctx.model, CScopModel):
            return None
        return cls(schedule, ctx.model.statements, ctx.model.dependences)

    def dependences(self, stage: Stage) -> isl.UnionMap:
        """The model's dependences between instances of ``stage``."""
        return self._deps.intersect_domain(stage.filter).intersect_range(stage.filter)

    def legal(self, stage: Stage, node) -> bool:
        """Whether the whole schedule with ``stage``'s subtree replaced by ``node``
        (:meth:`trial`) violates none of the stage's dependences
        (:func:`~polycomp.scheduler.common.tree.violated_dependences` empty)."""
        return violated_dependences(self.trial(stage, node),
                                    self.dependences(stage)).is_empty()

    def __iter__(self) -> Iterator[Stage]:
        for idx, child in enumerate(self.kids):
            is_filter = isinstance(child, T.Filter)
            filt = child.filter if is_filter else self.domain
            names = sorted(T.statements_of(filt), key=self._order.index)
            yield Stage(idx, child, filt, child.child if is_filter else child, names,
                        [self._stmts[n] for n in names if n in self._stmts])

    def matched(self, match: Callable[[list[Statement]], M | str]) \
            -> Iterator[tuple[Stage, M]]:
        """``(stage, match(stage.group))`` for the stages ``match`` takes (it returns
        why not, a string, for the others)."""
        for st in self:
            m = match(st.group)
            if not isinstance(m, str):
                yield st, m

    def _wrapped(self, stage: Stage, node):
        return T.Filter(stage.child.filter, node) if isinstance(stage.child, T.Filter) \
            else node

    def trial(self, stage: Stage, node) -> isl.Schedule:
        """The whole schedule with ``stage``'s subtree replaced by ``node`` (nothing kept)."""
        kids = list(self.kids)
        kids[stage.index] = self._wrapped(stage, node)
        return T.to_schedule(self.domain, T.Sequence(kids, self.tree.kind)
                             if isinstance(self.tree, T.Sequence) else kids[0])

    def replace(self, stage: Stage, node) -> None:
        """Keep ``node`` as ``stage``'s subtree."""
        self.kids[stage.index] = self._wrapped(stage, node)
        if not isinstance(self.tree, T.Sequence):
            self.tree = self.kids[stage.index]
        self.changed = True

    def schedule(self) -> isl.Schedule:
        return T.to_schedule(self.domain, self.tree) if self.changed else self.original
