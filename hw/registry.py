"""The target registry: every backend registers itself here; the driver and the CLI ask
the registry, never an if-chain.

A backend is a package under ``hw/`` (``hw/cpu``, ``hw/cuda``) with a
:class:`Backend` subclass that says, for one family of targets:

* ``names``: the target names it makes (``make_target(name)`` builds the
  :class:`~polycomp.hw.target.Target`: memory hierarchy, compute units, parameters);
* ``options_class``: its typed options (:mod:`polycomp.options`);
* ``schedule_passes(state)``, ``ir_passes(state)`` (IR the interpreter still runs),
  ``codegen_passes(state)`` (to the printed IR), ``target_passes(state)`` (a lowering
  to the backend's own target IR and passes on it, where it has one: the NPU) and
  ``emit(func, state)`` (source);
* ``lowering_statements(state, var)``: extra statement builders for lowering (e.g. the
  copy statements of promotions);
* ``suffix`` of emitted files, ``runner(ck)`` (a callable on numpy arrays and how it
  runs), ``execute(ck, inputs, params)`` (the reference semantics of the target IR:
  interpreter or simulator) and ``check(path, ck)`` (compile the emitted file with the
  vendor compiler, return a report);
* tuning (docs/tuning.md): ``tuning_space(ck, shape)`` (the configurations worth trying,
  only knobs that change the code), ``measure(ck, arrays, shape, repeat, threads)``;
  multi-version kernels: ``version_plan`` (which rule picks a version),
  ``multiversion_module`` (versions, selector and dispatchers as one
  :class:`~polycomp.ir.LoweredModule`), ``emit_module`` (printed once),
  ``load_module`` and ``execute_module``.

Built-in backends are imported on first use; others register through the
``polycomp.targets`` entry-point group (a module that calls :func:`register`).
See docs/architecture.md, "Adding a target".
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from polycomp.errors import TargetError

if TYPE_CHECKING:  # pragma: no cover
    from polycomp import ir
    from polycomp.compiled import CompiledKernel
    from polycomp.hw.target import Target
    from polycomp.lowering.ir_pass import IRPass
    from polycomp.options import Options
    from polycomp.pass_manager import TargetPass
    from polycomp.scheduler.common.pass_base import Pass
    from polycomp.state import CompileState
    from polycomp.tuning_contract import Measurement, TuningSpace, VersionPlan

BUILTIN_BACKENDS = ("polycomp.hw.cpu.backend", "polycomp.hw.cuda.backend",
                    "polycomp.hw.npu.backend")
ENTRY_POINT_GROUP = "polycomp.targets"


@dataclass(frozen=True)
class Runner:
    """What ``polycomp run`` calls: ``call(*arrays, **sizes)``, how it runs (one line
    for the report) and whether it runs natively (then it is timed)."""
    call: Callable
    how: str
    native: bool


@dataclass(frozen=True)
class ModuleLibrary:
    """A loaded multi-version module (``Backend.load_module``): ``call(*arrays,
    **sizes)`` runs its dispatcher entry point, ``select(sizes)`` asks its own selector
    which version runs at those sizes."""
    call: Callable
    select: Callable[[Mapping[str, int]], int]
    how: str


class Backend:
    """A family of targets; see the module docstring.  Subclasses override what they
    support (the defaults raise a clear error or do nothing)."""

    family: str = ""                      # Target.kind of the targets it makes
    names: tuple[str, ...] = ()           # target names, first the canonical ones
    aliases: Mapping[str, str] = MappingProxyType({})        # alias -> canonical name
    options_class: type[Options]
    suffix: str = ".txt"
    descriptions: Mapping[str, str] = MappingProxyType({})   # target name -> one line

    def make_target(self, name: str) -> Target:
        raise NotImplementedError

    def schedule_passes(self, state: CompileState) -> list[Pass]:
        return []

    def ir_passes(self, state: CompileState) -> list[IRPass]:
        return []

    def codegen_passes(self, state: CompileState) -> list[IRPass]:
        return []

    def target_passes(self, state: CompileState) -> list[TargetPass]:
        """Steps on the backend's own target IR after the code-generation passes: the
        first lowers the LoweredFunc into it, the others rewrite it; ``emit`` prints
        the result (``CompiledKernel.final_ir``).  None by default: C and CUDA print
        the LoweredFunc."""
        return []

    def emit(self, func: ir.LoweredFunc, state: CompileState) -> str:
        raise NotImplementedError

    def lowering_statements(self, state: CompileState,
                            var: Callable[[str], Any]) -> dict[str, Callable]:
        return {}

    def load(self, ck: CompiledKernel) -> Callable:
        """``build()``: the compiled kernel as a callable on numpy arrays, run natively
        (gcc-built library, GPU through pycuda); a clear error where it cannot run."""
        raise TargetError(f"no runner for target {ck.target.name}")

    def runner(self, ck: CompiledKernel) -> Runner:
        """``polycomp run``: a callable and how it runs — natively, or where that is not
        possible here, in a simulator (the default: the target IR's reference
        executor, :meth:`execute`)."""
        def run(*arrays, **params):
            return self.execute(ck, arrays, params)
        return Runner(run, f"{ck.target.name} IR reference executor (no native runner)",
                      native=False)

    def execute(self, ck: CompiledKernel, inputs: tuple, params: dict):
        """Run the target-level IR ``ck.ir`` with its reference semantics."""
        from polycomp.lowering.interpreter import run_func
        from polycomp.shapes import checked_arguments
        f = ck.ir
        expected, arrays, values = checked_arguments(f, inputs, params)
        n = len(f.inputs)
        outs = run_func(f, {b.name: a for b, a in zip(f.inputs, arrays[:n])}, values,
                        {b.name: a for b, a in zip(expected[n:], arrays[n:])})
        res = tuple(outs[b.name] for b in f.outputs)
        return res[0] if len(res) == 1 else res

    def check(self, path: str, ck: CompiledKernel) -> str:
        raise TargetError(f"--check is not available for target {ck.target.name}: its "
                          f"backend has no compiler to check the emitted file with")

    # ------------------------------------------------------------ tuning (docs/tuning.md)
    def tuning_space(self, ck: CompiledKernel, shape: Mapping[str, int]) -> TuningSpace:
        """The configurations ``polycomp tune`` tries for ``ck``'s kernel at ``shape``
        (every size symbol bound): only knobs that change the generated code; no points
        (``about`` says why) when there is nothing to tune."""
        from polycomp.tuning_contract import TuningSpace
        return TuningSpace((), about=f"the {self.family} backend has no tuning space")

    def measure(self, ck: CompiledKernel, arrays: list, shape: Mapping[str, int],
                repeat: int, threads: int | None = None) -> Measurement:
        """Time ``ck`` natively on ``arrays`` (best of ``repeat`` runs after one
        warm-up), with ``threads`` threads where the target runs threads."""
        raise TargetError(f"target {ck.target.name} has no native runner to time "
                          f"trials on")

    def version_plan(self, kernel, target: Target, records: list,
                     func: ir.LoweredFunc) -> VersionPlan | None:
        """The multi-version plan of ``kernel`` from tuning ``records``, or None for the
        tuner's default (measured records by bucket ranges and shape guards,
        :func:`polycomp.scheduler.tuning.multiversion.guard_plan`)."""
        return None

    def multiversion_module(self, versions: Sequence[CompiledKernel],
                            selector: ir.LoweredFunc,
                            comments: Sequence[str] = ()) -> ir.LoweredModule:
        """One module of the compiled ``versions`` (one kernel, one target, same
        signature), the ``selector`` (returns the version index) and dispatchers with the
        kernel's entry points."""
        raise TargetError(f"the {self.family} backend makes no multi-version modules")

    def emit_module(self, module: ir.LoweredModule,
                    versions: Sequence[CompiledKernel]) -> str:
        """The source of ``module`` (one translation unit), printed by this backend's
        printer; ``versions`` are the compiled kernels its versions came from."""
        raise TargetError(f"the {self.family} backend prints no multi-version modules")

    def load_module(self, module: ir.LoweredModule, source: str,
                    versions: Sequence[CompiledKernel]) -> ModuleLibrary:
        """Build and load ``source`` (the printed ``module``) natively."""
        raise TargetError(f"the {self.family} backend cannot load a multi-version module "
                          f"here")

    def execute_module(self, module: ir.LoweredModule, source: str,
                       versions: Sequence[CompiledKernel], inputs: tuple, params: dict):
        """(outputs, version index): the version ``module``'s selector picks, run with
        the reference semantics of :meth:`execute`."""
        from polycomp.lowering.host_eval import call_host
        from polycomp.shapes import infer_params
        f = module.function(module.name).func
        values = infer_params(f.params, f.inputs, list(inputs), params, outputs=f.outputs)
        i = call_host(module.selector, values, module)
        if i is None or not 0 <= i < len(versions):
            raise TargetError(f"{module.name}: no version's guard holds for "
                              f"{', '.join(f'{k}={v}' for k, v in sorted(values.items()))}")
        return self.execute(versions[i], inputs, params), i


_BACKENDS: dict[str, Backend] = {}        # family -> backend
_BY_NAME: dict[str, Backend] = {}         # target name or alias -> backend
_loaded = False
_loading = False


def _check_backend(backend: Backend) -> None:
    what = type(backend).__name__
    if not backend.family or not backend.names:
        raise TargetError(f"backend {what} declares no family or no target names")
    if not isinstance(getattr(backend, "options_class", None), type):
        raise TargetError(f"backend {what} declares no options_class")
    for alias, canonical in backend.aliases.items():
        if canonical not in backend.names:
            raise TargetError(f"backend {what}: alias {alias!r} names {canonical!r}, which "
                              f"is not one of its targets {list(backend.names)}")


def register(backend: Backend) -> Backend:
    """Register ``backend`` (its family and target names must be new; the built-in
    backends are registered first)."""
    _check_backend(backend)
    if not _loaded and not _loading:
        _load()
    if backend.family in _BACKENDS and _BACKENDS[backend.family] is not backend:
        raise TargetError(f"a backend for target family {backend.family!r} is already "
                          f"registered")
    for name in (*backend.names, *backend.aliases):
        other = _BY_NAME.get(name)
        if other is not None and other is not backend:
            raise TargetError(f"target name {name!r} is already registered by the "
                              f"{other.family} backend")
    _BACKENDS[backend.family] = backend
    for name in (*backend.names, *backend.aliases):
        _BY_NAME[name] = backend
    return backend


def unregister(family: str) -> None:
    """Remove the backend of ``family`` and its target names (tests, plug-in reloads)."""
    backend = _BACKENDS.pop(family, None)
    if backend is not None:
        for name in (*backend.names, *backend.aliases):
            _BY_NAME.pop(name, None)


def _load() -> None:
    global _loaded, _loading
    if _loaded or _loading:
        return
    _loading = True
    try:
        for mod in BUILTIN_BACKENDS:
            importlib.import_module(mod)
    finally:
        _loading = False
    _loaded = True
    from importlib.metadata import entry_points
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as e:  # a broken plug-in must not break the other targets
            import warnings
            warnings.warn(f"polycomp: target plug-in {ep.name!r} ({ep.value}) failed to "
                          f"load: {type(e).__name__}: {e}", stacklevel=2)


def backends() -> list[Backend]:
    _load()
    return list(_BACKENDS.values())


def target_names() -> tuple[str, ...]:
    """Every canonical target name (aliases excluded), in registration order."""
    _load()
    return tuple(n for b in _BACKENDS.values() for n in b.names)


def backend_for_name(name: str) -> Backend:
    _load()
    b = _BY_NAME.get(name)
    if b is None:
        raise TargetError(f"unknown target {name!r}; known: {', '.join(target_names())}")
    return b


def canonical_name(name: str) -> str:
    """The target name an alias stands for (``cuda-sm80`` -> ``cuda``)."""
    return backend_for_name(name).aliases.get(name, name)


def backend_for(target: Target) -> Backend:
    _load()
    b = _BACKENDS.get(target.kind)
    if b is None:
        raise TargetError(f"no backend for target family {target.kind!r}")
    return b
