"""Schedule-tree passes, by area: ``common/`` (pass interface, program order, pattern
schedules, operator classification), ``promotion/`` (the promotion engine and its
uses), ``gpu/``, ``cpu/`` and ``tensorcore/`` (target passes).  The pass manager that
runs them with the lowering and IR passes is :mod:`polycomp.pass_manager`."""
from polycomp.scheduler.common.pass_base import Pass  # noqa: F401
