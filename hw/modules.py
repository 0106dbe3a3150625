"""What the backends' multi-version modules share (:class:`~polycomp.ir.LoweredModule`,
``hw/cpu/multiversion.py``, ``hw/cuda/multiversion.py``): the version functions, their
names and the check that every version has one signature."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from polycomp import ir
from polycomp.errors import PolycompInternalError


def version_name(name: str, i: int) -> str:
    """The function of version ``i`` of kernel ``name`` in a module."""
    return f"{name}__v{i}"


def version_functions(versions: Sequence, comments: Sequence[str] = (),
                      result: str = "void", exported: bool = True
                      ) -> list[ir.ModuleFunction]:
    """The module functions of the versions (CompiledKernels, checked to share version 0's
    signature): version ``i``'s final IR renamed :func:`version_name` ``(name, i)``, with
    ``comments[i]`` in its comment line."""
    check_signatures(versions)
    name = versions[0].final_ir.name
    out = []
    for i, ck in enumerate(versions):
        f = replace(ck.final_ir, name=version_name(name, i))
        note = f"version {i}" + (f": {comments[i]}" if i < len(comments) else "")
        out.append(ir.ModuleFunction(f, ir.VERSION, result, exported, version=i,
                                     comment=note))
    return out


def check_signatures(versions: Sequence) -> None:
    """Every version (a CompiledKernel) must have version 0's entry point: its name,
    size symbols, and buffers with their dtypes, in order."""
    f0 = versions[0].final_ir

    def sig(f):
        return (f.name, tuple(p.name for p in f.params),
                tuple((b.name, b.dtype) for b in f.inputs),
                tuple((b.name, b.dtype) for b in f.outputs))
    for i, ck in enumerate(versions):
        if sig(ck.final_ir) != sig(f0):
            raise PolycompInternalError(f"multi-version {f0.name}: version {i} has another "
                                        f"signature than version 0")
