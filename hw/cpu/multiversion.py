"""Multi-version C modules: several compiled versions of one kernel, the selector and the
dispatcher as ONE :class:`~polycomp.ir.LoweredModule`, printed as one C translation unit
and built into one shared object (issue #22 item 3; the plan and selector come from
:mod:`polycomp.scheduler.tuning`).

The module (:func:`multiversion_module`):

* ``version`` functions ``static void <name>__v<i>(...)``: each version's final IR,
  renamed, printed with its own printer (scalar C or the AVX2/AVX-512 printer);
* the ``selector`` ``int64_t <name>__select(<size symbols>)`` (IR from the plan);
* the ``dispatch`` function ``void <name>(...)`` with the kernel's own signature: it
  calls the selector and then the selected version (IR: :class:`~polycomp.ir.FuncCall`),
  so the object is called exactly like a single-version build.

:func:`polycomp.hw.cpu.codegen.emit_module` prints it (the header once: C header, vector
prelude, the helper code the versions call, each distinct part once; then every function
in order).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence

from polycomp import ir
from polycomp.hw.modules import version_functions, version_name
from polycomp.hw.registry import ModuleLibrary

_VERSION = "pc_version"


def multiversion_module(versions: Sequence, selector: ir.LoweredFunc,
                        comments: Sequence[str] = ()) -> ir.LoweredModule:
    base = versions[0].final_ir
    name = base.name
    fns = version_functions(versions, comments, exported=False)
    fns.append(ir.ModuleFunction(selector, ir.SELECTOR, "int64",
                                 comment="selector: the version to run at these sizes"))
    sel = ir.Var(_VERSION)
    args = tuple(base.params) + tuple(base.args)
    calls = [ir.IfThenElse(ir.Binary("==", sel, ir.IntImm(i), "bool"),
                           ir.Evaluate(ir.FuncCall(version_name(name, i), args)))
             for i in range(len(versions))]
    body = ir.LetStmt(sel, ir.FuncCall(selector.name, tuple(base.params), "int64"),
                      ir.seq(*calls))
    entry = ir.LoweredFunc(name, base.params, base.inputs, base.outputs, body,
                           inout=base.inout)
    fns.append(ir.ModuleFunction(entry, ir.DISPATCH,
                                 comment="dispatcher: runs the selected version"))
    return ir.LoweredModule(name, tuple(fns))


def load_module(module: ir.LoweredModule, source: str) -> ModuleLibrary:
    from .build import CFunction, build_shared
    path = build_shared(source)
    entry = CFunction(module.function(module.name).func, path)
    sel = module.selector
    fn = getattr(entry.lib, sel.name)
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64] * len(sel.params)

    def select(values) -> int:
        return int(fn(*[int(values[p.name]) for p in sel.params]))
    return ModuleLibrary(entry, select, f"gcc-built shared library {path} "
                                        f"(multi-version)")
