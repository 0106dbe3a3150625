"""One pass manager for every step of a compile: schedule passes, lowering, IR passes,
code-generation passes, the steps on a backend's own target IR (:class:`TargetPass`:
the NPU's lowering to its program and that program's passes) and emission.

Each step is timed and recorded as a :class:`PassRecord` (``polycomp explain`` prints
the table).  With ``dump=True`` each record keeps the step's output as text: the
schedule tree after a schedule pass, the IR after lowering and each IR pass, the
target IR after each target step (``str`` of it), the source after emission.  With
``dump_dir`` the same texts are written as numbered files (``00-model.model``,
``01-initial.tree``, ``07-lower.ir``, ``15-emit.cu``; the numbered files of an earlier
compile in that folder are removed first) so two compiles can be diffed.
With ``debug=True`` every schedule pass's output is checked for legality: each
flow/anti/output dependence of the model must remain lexicographically positive under
the new schedule, else :class:`~polycomp.errors.IllegalScheduleError` names the pass and
the violated dependences (the pairs a pass recorded in the state slot
:class:`~polycomp.scheduler.common.tree.RelaxedDependences` are replaced by the
dependences it recorded with them).
"""
from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import islpy as isl

from polycomp.errors import IllegalScheduleError, PolycompError, PolycompInternalError
from polycomp.scheduler.common.tree import (
    RelaxedDependences,
    tree_str,
    violated_dependences,
)
from polycomp.state import CompileState

if TYPE_CHECKING:  # pragma: no cover
    from polycomp import ir
    from polycomp.lowering.ir_pass import IRPass
    from polycomp.scheduler.common.pass_base import Pass

T = TypeVar("T")

# The kinds of step, in pipeline order, and the suffix of their dump files.
STAGES = {"model": "model", "schedule": "tree", "lower": "ir", "ir": "ir", "codegen": "ir",
          "target": "ir", "emit": "src"}


class TargetPass:
    """A step on a backend's own target-level IR, after the code-generation passes
    (``Backend.target_passes``): the first takes the :class:`~polycomp.ir.LoweredFunc`
    and lowers it into the target IR (as MLIR's dialect conversion or TVM's lowering
    to intrinsics would), the others rewrite that IR; the last one's result is
    ``CompiledKernel.final_ir``, which ``emit`` prints.  ``str()`` of the IR is its
    dump.  Subclasses set ``name`` and document what they assume and guarantee."""
    name: str = "target-pass"

    def run(self, ir_in: Any, state: CompileState) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<target pass {self.name}>"


@dataclass
class PassRecord:
    """What one step did: its name, its stage (``model``, ``schedule``, ``lower``, ``ir``,
    ``codegen``, ``target``, ``emit``), the time it took and (when dumping) its output as
    text."""
    name: str
    seconds: float
    tree: str | None            # the step's output text (tree, IR or source)
    stage: str = "schedule"

    @property
    def output(self) -> str | None:
        return self.tree


class PassManager:
    """Runs the steps of one compile; see the module docstring.

    ``PassManager(passes).run(schedule, state)`` runs schedule passes alone (golden
    tests); the driver also calls :meth:`run_ir` and :meth:`step`.
    """

    def __init__(self, passes: Sequence[Pass] = (), debug: bool = False, dump: bool = False,
                 dump_dir: str | None = None, source_suffix: str = "src"):
        self.passes = list(passes)
        self.debug = debug
        self.dump = dump or dump_dir is not None
        self.dump_dir = dump_dir
        self.source_suffix = source_suffix
        self.records: list[PassRecord] = []
        if dump_dir is not None:
            os.makedirs(dump_dir, exist_ok=True)
            for old in os.listdir(dump_dir):   # a previous compile's steps
                if re.match(r"^[0-9]{2,}-.*\.(tree|ir|src|txt|c|cu|cpp)$", old):
                    os.remove(os.path.join(dump_dir, old))

    # ------------------------------------------------------------------ records
    def _record(self, name: str, stage: str, seconds: float, text: str | None) -> None:
        self.records.append(PassRecord(name, seconds, text, stage))
        if self.dump_dir is not None and text is not None:
            suffix = self.source_suffix if stage == "emit" else STAGES.get(stage, "txt")
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
            path = os.path.join(self.dump_dir, f"{len(self.records) - 1:02d}-{safe}.{suffix}")
            with open(path, "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")

    def step(self, name: str, stage: str, fn: Callable[[], T],
             show: Callable[[T], str] | None = None) -> T:
        """Run ``fn()`` as one timed step; ``show`` renders its result when dumping."""
        t0 = time.perf_counter()
        try:
            out = fn()
        except PolycompError:
            raise
        except isl.Error as e:
            raise PolycompInternalError(f"isl error in {stage} step {name}: {e}") from None
        dt = time.perf_counter() - t0
        self._record(name, stage, dt, show(out) if (self.dump and show) else None)
        return out

    # ------------------------------------------------------------------ schedule passes
    def run(self, schedule: isl.Schedule, state: CompileState,
            passes: Sequence[Pass] | None = None) -> isl.Schedule:
        """Apply the schedule passes (``passes`` or the constructor's) in order."""
        if passes is not None:
            self.passes = list(passes)
        else:   # schedule passes alone (golden tests): a fresh record
            self.records = []
        if self.dump:
            self._record("initial", "schedule", 0.0, tree_str(schedule))
        for p in self.passes:
            schedule = self.step(p.name, "schedule", functools.partial(p.run, schedule, state),
                                 tree_str)
            if self.debug:
                self._check_legality(p.name, schedule, state)
        return schedule

    def _check_legality(self, name: str, schedule: isl.Schedule, state: CompileState) -> None:
        if _has_extension(schedule):
            # isl cannot flatten trees with extension nodes; the promotion passes only
            # add statements (copies, barriers) and leave the original statements'
            # subtree order unchanged, so the last check stands
            state.note("pass-manager", f"legality after {name}: not re-checked (the tree "
                                       f"has extension nodes, which isl cannot flatten)")
            return
        deps = checked_dependences(state.model)
        relaxed = state.slots.get(RelaxedDependences)
        if relaxed is not None:
            deps = relaxed.apply(deps)
        bad = violated_dependences(schedule, deps)
        if not bad.is_empty():
            raise IllegalScheduleError(
                f"pass {name} produced an illegal schedule: these dependences are no "
                f"longer satisfied: {bad}")

    # ------------------------------------------------------------------ IR passes
    def run_ir(self, func: ir.LoweredFunc, state: CompileState, passes: Sequence[IRPass],
               stage: str = "ir") -> ir.LoweredFunc:
        from polycomp.lowering.printer import func_str
        for p in passes:
            func = self.step(p.name, stage, functools.partial(p.run, func, state), func_str)
        return func

    def run_target(self, ir_in: Any, state: CompileState,
                   passes: Sequence[TargetPass]) -> Any:
        """Run ``passes`` (:class:`TargetPass`) in order, each a timed step of stage
        ``target`` dumped as ``str()`` of its result."""
        out = ir_in
        for p in passes:
            out = self.step(p.name, "target", functools.partial(p.run, out, state), str)
        return out

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
