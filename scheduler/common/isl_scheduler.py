"""Pass: replace the schedule by the one isl's scheduler computes (Pluto-like)."""
from __future__ import annotations

import islpy as isl

from polycomp.scheduler.common.pass_base import Pass
from polycomp.state import CompileState


class IslSchedulerPass(Pass):
    """Recompute the schedule with ``isl_schedule_constraints_compute_schedule``.

    Assumes: ``ctx.model`` holds the flow/anti/output dependences of the statements in
    the input schedule's domain.
    Guarantees: the output tree schedules the same domain; every dependence is a
    validity constraint (so it is respected), flow dependences are proximity
    constraints (locality), and flow+output dependences are coincidence constraints so
    the bands isl marks coincident are parallel.  Marks and extension nodes of the
    input are dropped (run this pass first).
    """
    name = "isl-scheduler"

    def run(self, schedule: isl.Schedule, ctx: CompileState) -> isl.Schedule:
        m = ctx.model
        deps = m.dependences
        sc = isl.ScheduleConstraints.on_domain(schedule.get_domain())
        sc = sc.set_context(m.context)
        sc = sc.set_validity(deps).set_proximity(m.flow).set_coincidence(deps)
        return sc.compute_schedule()
