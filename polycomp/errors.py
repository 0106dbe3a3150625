"""The PolycompError hierarchy.

Every error a user can cause (bad kernel, bad shape, unsupported construct, a kernel
that does not fit a target) is a :class:`PolycompError` subclass whose message names
the construct and, where the construct comes from user code, the source line
(``file:line``) that created it.  Errors raised from inside isl are caught at the
boundary and re-raised as :class:`PolycompInternalError` with the isl message.
"""
from __future__ import annotations

import inspect
import os
import sys

__all__ = [
    "PolycompError", "DSLError", "NonAffineIndexError", "ShapeMismatchError",
    "UnknownSymbolError", "ReduceAxisError", "DTypeError", "UnsupportedConstructError",
    "ScheduleError", "IllegalScheduleError", "TargetError", "ResourceLimitError",
    "BuildError", "UsageError", "PolycompInternalError", "SourceLocation", "user_location",
]


class SourceLocation:
    """A ``file:line`` position in user code, with the source text of that line."""

    __slots__ = ("filename", "lineno", "text")

    def __init__(self, filename: str, lineno: int, text: str = ""):
        self.filename, self.lineno, self.text = filename, lineno, text

    def __str__(self) -> str:
        s = f"{self.filename}:{self.lineno}"
        return f"{s}: {self.text.strip()}" if self.text else s

    def __repr__(self) -> str:
        return f"SourceLocation({self.filename!r}, {self.lineno})"


_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL_DIRS = tuple(os.path.join(_PKG_ROOT, d) + os.sep
                       for d in ("polycomp", "frontend", "scheduler", "lowering", "hw"))


def _is_internal(filename: str) -> bool:
    f = os.path.abspath(filename)
    if f.startswith(_INTERNAL_DIRS):
        # the operator library is written in the DSL: its lines are "user" lines
        return not f.endswith(os.path.join("frontend", "ops.py"))
    return "/polycomp/" in f and "site-packages" in f and not f.endswith("ops.py")


def user_location(skip_internal: bool = True) -> SourceLocation | None:
    """The innermost stack frame outside polycomp's own modules."""
    frame = inspect.currentframe()
    try:
        f = frame.f_back if frame else None
        while f is not None:
            fn = f.f_code.co_filename
            if not (skip_internal and _is_internal(fn)) and not fn.startswith("<frozen"):
                try:
                    import linecache
                    text = linecache.getline(fn, f.f_lineno)
                except Exception:  # pragma: no cover - defensive
                    text = ""
                return SourceLocation(fn, f.f_lineno, text)
            f = f.f_back
        return None
    finally:
        del frame


class PolycompError(Exception):
    """Base class of every error polycomp reports to a user."""

    def __init__(self, message: str, location: SourceLocation | None = None):
        self.message = message
        self.location = location
        super().__init__(f"{message}\n  at {location}" if location else message)


class DSLError(PolycompError):
    """A kernel written with the @tensor_expr DSL is malformed."""


class NonAffineIndexError(DSLError):
    """An index (or a bound) is not a quasi-affine function of iterators and symbols."""


class ShapeMismatchError(DSLError):
    """Tensor ranks or extents disagree (wrong number of indices, incompatible shapes)."""


class UnknownSymbolError(DSLError):
    """A symbolic dimension or a variable is used where it is not defined."""


class ReduceAxisError(DSLError):
    """A reduce axis is used outside a reduction, reduced twice, or not reduced at all."""


class DTypeError(DSLError):
    """An unknown or unsupported data type, or an operation not defined on it."""


class UserCodeError(DSLError):
    """The user's kernel function raised a Python error of its own while it was traced
    (a typo such as ``A[i] + undefined_name``): reported at the user's line."""


class UnsupportedConstructError(PolycompError):
    """A construct polycomp cannot compile (with the reason)."""


class ScheduleError(PolycompError):
    """A scheduling pass could not do what it was asked."""


class IllegalScheduleError(ScheduleError):
    """A pass produced a schedule that violates a dependence (debug-mode legality check)."""


class TargetError(PolycompError):
    """An unknown target, or a kernel the target cannot express."""


class OptionError(TargetError):
    """An unknown compile option for the target, or a value it does not take; the
    message names the option and lists the valid ones."""


class ResourceLimitError(TargetError):
    """A kernel does not fit a target's memory (shared memory, registers, local buffers)."""


class BuildError(PolycompError):
    """An external compiler (gcc, nvcc) rejected generated source."""


class ArgumentError(PolycompError):
    """A built kernel called with bad arguments: a size keyword the kernel does not have
    or that is not a positive integer, sizes whose buffers cannot exist, or ``out=``
    arrays that are missing, read-only or overlap each other."""


class IndexOutOfRangeError(ArgumentError, IndexError):
    """A gather (``table[idx[i], j]``) read an index outside ``[0, extent)`` of the
    indexed dimension at run time; the generated code never reads outside the array, it
    records the fault and the runtime raises this after the call."""


class UsageError(PolycompError):
    """Bad command-line input: a missing file, an unknown kernel name, a malformed option,
    or a user file that fails to load."""


class PolycompInternalError(PolycompError):
    """An internal invariant failed (a polycomp bug); the message says where."""


class UnsupportedOpError(UnsupportedConstructError):
    """A graph operator (builder, torch.fx or Dynamo import) that polycomp.graph cannot
    compile; the message names the operator."""


__all__ += ["UnsupportedOpError", "ArgumentError", "UserCodeError", "IndexOutOfRangeError"]


def location_of_exception(exc: BaseException) -> "SourceLocation | None":
    """The innermost frame of ``exc``'s traceback that is outside polycomp's own
    packages (the user's line), or None."""
    import linecache
    import traceback
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ours = tuple(os.path.join(root, d) + os.sep
                 for d in ("polycomp", "frontend", "scheduler", "lowering", "hw", "benchmarks",
                           "graph"))
    for fs in reversed(traceback.extract_tb(exc.__traceback__)):
        if not os.path.abspath(fs.filename).startswith(ours):
            text = fs.line or linecache.getline(fs.filename, fs.lineno or 0)
            return SourceLocation(fs.filename, fs.lineno or 0, text or "")
    return None


class deep_recursion:
    """Context manager: a recursion limit high enough for deeply nested expressions (a
    2,000-term sum is a 2,000-deep tree that the tracer, the model builder, isl's AST
    lowering and the printers walk recursively)."""

    LIMIT = 30000

    def __enter__(self):
        self.old = sys.getrecursionlimit()
        if self.old < self.LIMIT:
            sys.setrecursionlimit(self.LIMIT)
        return self

    def __exit__(self, *exc):
        sys.setrecursionlimit(self.old)
        return False


class NpuSimulationError(TargetError):
    """The NPU simulator found a program that real hardware would not run correctly:
    the message names the instruction (as printed in the emitted source) and the
    buffer."""


class NpuRaceError(NpuSimulationError):
    """Two pipes access one on-chip buffer with no set/wait flag ordering them (a
    missing wait), or a wait has no matching set (a deadlock)."""


class NpuCapacityError(ResourceLimitError):
    """An NPU program's buffers do not fit a memory level (L1, L0A, L0B, L0C, UB), or a
    buffer or transfer breaks the 32-byte alignment rule."""


__all__ += ["NpuSimulationError", "NpuRaceError", "NpuCapacityError"]
