"""Runs a target's schedule-tree passes in order, timing and (optionally) checking each."""
from __future__ import annotations

import time
from dataclasses import dataclass

import islpy as isl

from polycomp.errors import IllegalScheduleError, PolycompError, PolycompInternalError

from .pass_base import Pass, ScheduleContext
from .tree import tree_str, violated_dependences


@dataclass
class PassRecord:
    """What one pass did: its name, the time it took and the tree it produced."""
    name: str
    seconds: float
    tree: str | None


class PassManager:
    """An ordered list of passes for one target.

    ``run`` applies them to a schedule.  With ``dump=True`` the tree after each pass is
    recorded (``polycomp explain``).  With ``debug=True`` every pass's output is checked
    for legality: each flow/anti/output dependence of the model must remain
    lexicographically positive under the new schedule, else
    :class:`~polycomp.errors.IllegalScheduleError` names the pass and the violated
    dependences.
    """

    def __init__(self, passes: list[Pass], debug: bool = False, dump: bool = False):
        self.passes = list(passes)
        self.debug = debug
        self.dump = dump
        self.records: list[PassRecord] = []

    def run(self, schedule: isl.Schedule, ctx: ScheduleContext) -> isl.Schedule:
        self.records = []
        if self.dump:
            self.records.append(PassRecord("initial", 0.0, tree_str(schedule)))
        for p in self.passes:
            t0 = time.perf_counter()
            try:
                schedule = p.run(schedule, ctx)
            except PolycompError:
                raise
            except isl.Error as e:
                raise PolycompInternalError(f"isl error in pass {p.name}: {e}") from None
            dt_ = time.perf_counter() - t0
            self.records.append(PassRecord(p.name, dt_, tree_str(schedule) if self.dump else None))
            if self.debug and _has_extension(schedule):
                # isl cannot flatten trees with extension nodes; the promotion passes
                # only add statements (copies, barriers) and leave the original
                # statements' subtree order unchanged, so the last check stands
                ctx.note("pass-manager", f"legality after {p.name}: not re-checked (the tree "
                                         f"has extension nodes, which isl cannot flatten)")
            elif self.debug:
                bad = violated_dependences(schedule, checked_dependences(ctx.model))
                if not bad.is_empty():
                    raise IllegalScheduleError(
                        f"pass {p.name} produced an illegal schedule: these dependences are "
                        f"no longer satisfied: {bad}")
        return schedule

    def timing_table(self) -> str:
        return "\n".join(f"  {r.name:28s} {r.seconds * 1e3:8.2f} ms" for r in self.records)


def _has_extension(schedule: isl.Schedule) -> bool:
    found = []

    def fn(n):
        if n.get_type() == isl.schedule_node_type.extension:
            found.append(n)
            return False
        return True
    schedule.get_root().foreach_descendant_top_down(fn)
    return bool(found)


def checked_dependences(model) -> isl.UnionMap:
    """The dependences the debug check enforces: all of the model's, except those
    between two instances of the same reduction update (``C[i] = C[i] op e``): ``op`` is
    associative and commutative, so passes may reorder a reduction (tiling its axes,
    tensor-core tiling of a convolution's window) — the order of a floating-point sum
    changes, as in every parallel reduction, but not its meaning."""
    deps = model.dependences
    for s in model.statements:
        if s.kind == "update":
            sp = isl.Set.universe(s.domain.get_space())
            self_deps = isl.UnionMap.from_map(isl.Map.from_domain_and_range(sp, sp))
            deps = deps.subtract(self_deps)
    return deps
