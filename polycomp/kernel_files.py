"""User kernel files: import a Python file or read a C file, find and pick its kernels,
turn the command line's shape and option arguments into the driver's dicts, and make
random inputs for a compiled kernel.

The command line (:mod:`polycomp.cli`), the tuner and the graph explainer share these; the
module sits at the driver layer so that none of them imports the command line.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
import traceback

import numpy as np

from polycomp import dtypes as dt
from polycomp.errors import PolycompError, SourceLocation, UsageError

__all__ = ["load_module", "find_kernels", "pick_kernel", "load_kernels", "parse_shapes",
           "compile_options", "random_inputs", "check_run_memory"]


def load_module(path: str):
    """Import the Python file at ``path`` as a fresh module (its folder goes on sys.path
    while it runs, so it can import its neighbours)."""
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    full = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(full))[0]
    name = "polycomp_user_" + "".join(c if c.isalnum() else "_" for c in stem)
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path} is not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    folder = os.path.dirname(full)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(mod)
    except PolycompError:
        raise
    except SyntaxError as e:
        loc = SourceLocation(e.filename or path, e.lineno or 0, e.text or "")
        raise UsageError(f"{path} has a syntax error: {e.msg}", loc) from e
    except SystemExit as e:   # a BaseException: it would end polycomp with its status
        raise UsageError(f"{path} called sys.exit({e.code!r}) while loading; polycomp "
                         f"imports the file to find its kernels: put the script part "
                         f"under `if __name__ == \"__main__\":`",
                         _innermost_location(e, full)) from e
    except Exception as e:
        raise UsageError(f"{path} raised {type(e).__name__} while loading: {e}",
                         _innermost_location(e, full)) from e
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:  # pragma: no cover - the user file removed it
            pass
    return mod


def _innermost_location(exc: BaseException, filename: str) -> SourceLocation | None:
    """The deepest traceback frame of ``exc`` that lies in ``filename``."""
    loc = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(fs.filename) == filename:
            loc = SourceLocation(fs.filename, fs.lineno or 0, fs.line or "")
    return loc


def _is_kernel(v) -> bool:
    from polycomp.frontend.dsl import Kernel
    if isinstance(v, Kernel):
        return True
    # other front ends (e.g. the C SCoP reader) give objects with polyhedral_model()
    return not isinstance(v, type) and callable(getattr(v, "polyhedral_model", None)) \
        and isinstance(getattr(v, "name", None), str)


def find_kernels(module) -> list:
    """The kernels a module defines, in definition order (kernels it merely imports are
    used only when it defines none itself)."""
    seen: set[int] = set()
    own: list = []
    imported: list = []
    for v in vars(module).values():
        if _is_kernel(v) and id(v) not in seen:
            seen.add(id(v))
            fn = getattr(v, "fn", None)
            (own if getattr(fn, "__module__", module.__name__) == module.__name__
             else imported).append(v)
    return own or imported


def pick_kernel(kernels: list, name: str | None, path: str):
    """The kernel called ``name`` (or the only one)."""
    names = [k.name for k in kernels]
    if not kernels:
        raise UsageError(f"{path} defines no @tensor_expr kernel")
    if name is None:
        if len(kernels) == 1:
            return kernels[0]
        raise UsageError(f"{path} defines {len(kernels)} kernels ({', '.join(names)}); "
                         f"pick one with --kernel NAME")
    for k in kernels:
        if k.name == name:
            return k
    raise UsageError(f"{path} has no kernel named {name!r}; it defines: {', '.join(names)}")


def _int_tuple(text: str, what: str) -> tuple:
    try:
        vals = tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{what} takes integers separated by commas, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise UsageError(f"{what} takes positive integers, got {text!r}")
    return vals


def _takes_tile(target: str) -> bool:
    import dataclasses

    from polycomp.hw.registry import backend_for_name
    cls = backend_for_name(target).options_class
    return any(f.name == "tile" for f in dataclasses.fields(cls))


def compile_options(args) -> dict:
    """The ``options`` dict the driver passes to the pipelines."""
    opts: dict = {}
    for item in getattr(args, "option", None) or ():
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-O takes KEY=VALUE, got {item!r}")
        try:
            opts[key.strip()] = ast.literal_eval(val)
        except (ValueError, SyntaxError):
            opts[key.strip()] = val
    tile = {}
    if getattr(args, "tile", None):
        tile["block"] = _int_tuple(args.tile, "--tile")
    if getattr(args, "threads", None):
        tile["threads"] = _int_tuple(args.threads, "--threads")
    if getattr(args, "tile_k", None) is not None:
        tile["k"] = args.tile_k
    if tile:
        if not _takes_tile(getattr(args, "target", "c")):
            raise UsageError(f"--tile, --threads and --tile-k set the CUDA option tile; "
                             f"target {args.target} does not take it (`polycomp targets "
                             f"{args.target} --options` lists its options)")
        base = opts.get("tile")
        opts["tile"] = {**(base if isinstance(base, dict) else {}), **tile}
    if getattr(args, "isl_scheduler", False):
        opts["isl_scheduler"] = True
    return opts


def load_kernels(path: str):
    """``(module, kernels)`` of a user file: a Python file's @tensor_expr kernels, or the
    kernels of a C file (``.c``: affine loop nests, read by the C SCoP front end; there
    is no module then)."""
    if path.endswith(".c"):
        if not os.path.isfile(path):
            raise UsageError(f"no such file: {path}")
        from polycomp.frontend.c_reader import load_c_kernels
        return None, load_c_kernels(path)
    mod = load_module(path)
    return mod, find_kernels(mod)


def parse_shapes(items) -> dict:
    out = {}
    for item in items or ():
        for part in item.split(","):
            if not part.strip():
                continue
            key, sep, val = part.partition("=")
            key = key.strip()
            try:
                n = int(val)
            except ValueError:
                n = None
            if not sep or not key or n is None:
                raise UsageError(f"--shape takes NAME=INT (e.g. --shape N=512), got {part!r}")
            if n < 1:
                raise UsageError(f"--shape {key}={n}: symbolic dimensions are >= 1")
            out[key] = n
    return out


def _gb(n: int) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e7 else f"{n} bytes"


def check_run_memory(func, params: dict) -> None:
    """Refuse sizes up front, before any input is generated: a buffer whose bytes int64
    indexing cannot address is an :class:`ArgumentError`; inputs, outputs and the
    float64 draw of the largest float input that together exceed this machine's memory
    are a :class:`ResourceLimitError` (docs/errors.md)."""
    from polycomp.errors import ArgumentError, ResourceLimitError
    from polycomp.lowering.printer import expr_str
    from polycomp.shapes import MAX_BUFFER_BYTES, _physical_memory, buffer_bytes, caller_arrays
    sizes = " ".join(f"{k}={v}" for k, v in params.items())
    bufs = list(caller_arrays(func)) + [b for b in func.outputs if b not in caller_arrays(func)]
    need: list[tuple[str, int]] = []
    draw = 0
    for b in bufs:
        n = buffer_bytes(b, params)
        if n > MAX_BUFFER_BYTES:
            shape = "(" + ", ".join(expr_str(d) for d in b.shape) + ")"
            raise ArgumentError(f"--shape {sizes}: {b.name} of shape {shape} would have {n} "
                                f"bytes, more than a kernel can index (2**62)")
        need.append((b.name, n))
        if dt.is_float(b.dtype) and b in caller_arrays(func):
            draw = max(draw, n // dt.itemsize(b.dtype) * 8)   # standard_normal's float64
    total = sum(n for _, n in need) + draw
    mem = _physical_memory()
    if total > mem:
        parts = ", ".join(f"{name} {_gb(n)}" for name, n in need)
        raise ResourceLimitError(f"--shape {sizes}: the inputs and outputs of {func.name} "
                                 f"need {_gb(total)} ({parts}, and {_gb(draw)} to draw the "
                                 f"random inputs), more than this machine's memory "
                                 f"({_gb(mem)})")


def random_inputs(func, params: dict, seed: int = 0) -> list:
    """Random numpy arrays for the arrays a caller passes to a lowered function: its
    inputs, then the initial contents of its in-out outputs
    (:func:`polycomp.shapes.caller_arrays`).

    Floats are standard normal, integers uniform in [-8, 8) (int8: [-4, 4)), bools fair
    coins.  ``params`` must bind every symbolic dimension of the input shapes.
    """
    from polycomp.shapes import caller_arrays, eval_int
    rng = np.random.default_rng(seed)
    out = []
    for b in caller_arrays(func):
        shape = tuple(eval_int(d, params) for d in b.shape)
        if dt.is_float(b.dtype):
            a = rng.standard_normal(shape).astype(dt.to_numpy(b.dtype))
        elif b.dtype == "bool":
            a = rng.random(shape) < 0.5
        else:
            hi = 4 if b.dtype == "int8" else 8
            a = rng.integers(-hi, hi, size=shape).astype(dt.to_numpy(b.dtype))
        out.append(a)
    return out
