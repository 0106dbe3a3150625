"""Multi-version CUDA modules: several compiled versions of one kernel, the selector and
the host dispatchers as ONE :class:`~polycomp.ir.LoweredModule`, printed as one ``.cu``
(issue #22 item 3; the plan and selector come from :mod:`polycomp.scheduler.tuning`).

The module (:func:`multiversion_module`):

* ``version`` functions: each version's final IR renamed ``<name>__v<i>``; printed as
  :func:`~.codegen.emit_cuda` prints a kernel (``__global__`` kernels
  ``<name>__v<i>_k<j>``, ``<name>__v<i>_launch_config``, ``<name>__v<i>_num_kernels`` and
  the launcher ``<name>__v<i>``, all ``extern "C"``);
* the ``selector`` ``int64_t <name>__select(<size symbols>)`` (IR from the plan);
* two ``dispatch`` functions with the single-version entry points:
  ``int <name>(<sizes>, <device pointers>)`` returns the selected version's launcher's
  result (``-1`` when no version is selected) and ``void <name>_launch_config(<sizes>,
  long long* cfg)`` writes the selected version's launch configuration; both are IR
  (:class:`~polycomp.ir.FuncCall` of the version, :class:`~polycomp.ir.Return`).

:func:`polycomp.hw.cuda.codegen.emit_module` prints it: the header once (PTX helpers when
any version uses them), then every function in order with the CUDA printer.  GPU check bundles
(``hw/cuda/gpu_bundle.py``) record the dispatcher entry ``<name>`` and ``<name>__select``;
``scripts/gpu_bundle_run.py`` calls both on a GPU.
"""
from __future__ import annotations

from collections.abc import Sequence

from polycomp import ir
from polycomp.hw.modules import version_functions, version_name

from .codegen import (
    kernel_function_names,
)

#: the dispatcher's local holding the selected version
_VERSION = "pc_version"


def multiversion_module(versions: Sequence, selector: ir.LoweredFunc,
                        comments: Sequence[str] = ()) -> ir.LoweredModule:
    base = versions[0].final_ir
    name = base.name
    fns = version_functions(versions, comments, "int32")
    fns.append(ir.ModuleFunction(selector, ir.SELECTOR, "int64"))
    sel = ir.Var(_VERSION)
    pick = ir.FuncCall(selector.name, tuple(base.params), "int64")

    def is_(i):
        return ir.Binary("==", sel, ir.IntImm(i), "bool")
    args = tuple(base.params) + tuple(base.args)
    launch = ir.seq(*[ir.IfThenElse(is_(i), ir.Return(ir.FuncCall(
        version_name(name, i), args, "int32"))) for i in range(len(versions))],
        ir.Return(ir.IntImm(-1, "int32")))
    entry = ir.LoweredFunc(name, base.params, base.inputs, base.outputs,
                           ir.LetStmt(sel, pick, launch), inout=base.inout)
    fns.append(ir.ModuleFunction(entry, ir.DISPATCH, "int32"))
    cfg = ir.Buffer("cfg", "int64", (ir.IntImm(6),))
    cfg_name = kernel_function_names(entry)[1]          # <name>_launch_config
    configs = ir.seq(*[ir.IfThenElse(is_(i), ir.Evaluate(ir.FuncCall(
        kernel_function_names(fns[i].func)[1], tuple(base.params) + (cfg,))))
        for i in range(len(versions))])
    fns.append(ir.ModuleFunction(ir.LoweredFunc(cfg_name, base.params, (), (cfg,),
                                                ir.LetStmt(sel, pick, configs)),
                                 ir.DISPATCH))
    return ir.LoweredModule(name, tuple(fns))


def record_dispatch(module: ir.LoweredModule, source: str, version: int, version_ck,
                    target: str, inputs: tuple, values: dict, outputs) -> None:
    """With a GPU check bundle being recorded (:mod:`.gpu_bundle`), add this run as a
    case of the module's ``.cu``: its host dispatcher must pick the version the selector
    picked here and reproduce the simulator's outputs on a real GPU."""
    import numpy as np

    from .codegen import split_kernels
    from .gpu_bundle import bundle_dir, record_case
    root = bundle_dir()
    if root is None:
        return
    entry = module.function(module.name).func
    outs = outputs if isinstance(outputs, tuple) else (outputs,)
    temps, _ = split_kernels(version_ck.final_ir)
    record_case(source, entry, [], temps, values,
                {b.name: np.ascontiguousarray(a) for b, a in zip(entry.inputs, inputs)},
                {b.name: o for b, o in zip(entry.outputs, outs)}, root, target=target,
                extra={"select": module.selector.name, "version": str(version)},
                arch=_arch(version_ck))


def _arch(ck) -> str:
    """The nvcc architecture an architecture-specific target's code needs ("90a")."""
    cu = getattr(ck.target, "cuda", None)
    return cu.arch if cu is not None and cu.arch_suffix else ""
