"""GPU check bundles: what the simulator ran, packed so a real GPU can run it again.

There is no GPU where polycomp is developed and tested; the GPU-semantics simulator
(:mod:`.simulator`) stands in for one.  A bundle is how the simulator's results are
checked against real hardware when a GPU machine is at hand for a few minutes: with
``POLYCOMP_GPU_BUNDLE=<dir>`` in the environment, every successful
:func:`~polycomp.hw.cuda.simulator.simulate` of a compiled CUDA kernel records a *case*
(the ``.cu`` source, the parameter values, the kernels' launch geometry as the simulator
evaluated it, the caller's arrays and the simulator's outputs).  The bundle's runner,
``scripts/gpu_bundle_run.py``, needs only numpy, cupy and nvcc on the GPU machine (no
polycomp, no islpy): it builds each distinct source twice, as a shared library whose
host entry point ``<name>(params..., device pointers...)`` it calls through ctypes (so
the emitted host code, its launch configuration and its temporaries are exercised too)
and as a cubin whose kernels it launches one by one with the recorded geometry (checked
against the host's ``<name>_launch_config``), and compares both results with the
simulator's, NaN positions included.

Layout of a bundle directory::

    src/<sha>.cu            each distinct source once
    cases/<case>.json       CaseManifest (below), as JSON
    cases/<case>.npz        arrays: "in:<buffer>" the caller's, "sim:<buffer>" the outputs

bfloat16 arrays are stored as their uint16 bits (``dtype`` in the manifest says so), so
the runner needs no bfloat16 numpy type.  A case whose arrays exceed
:data:`MAX_CASE_BYTES`, or a bundle past :data:`MAX_BUNDLE_BYTES`, is not recorded (the
count of skipped cases is kept in ``skipped.txt``), so a bundle stays small enough to
carry to a GPU machine.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from polycomp import dtypes as dt
from polycomp.shapes import eval_int

__all__ = ["ENV_VAR", "BufferSpec", "CaseManifest", "KernelLaunch", "bundle_dir",
           "record_case", "MAX_CASE_BYTES", "MAX_BUNDLE_BYTES"]

#: The environment variable that turns recording on (its value: the bundle directory).
ENV_VAR = "POLYCOMP_GPU_BUNDLE"
#: Largest total of one case's arrays (inputs and simulator outputs), in bytes.
MAX_CASE_BYTES = 4 << 20
#: Largest bundle (sources and arrays), in bytes.
MAX_BUNDLE_BYTES = 48 << 20


@dataclass(frozen=True)
class BufferSpec:
    """One argument of the host entry point (or a global temporary): its name, shape
    (evaluated), polycomp dtype and role (``input``, ``output``, ``inout``, ``temp``)."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str


@dataclass(frozen=True)
class KernelLaunch:
    """One ``__global__`` kernel in launch order: its name, the grid and block the
    simulator used, the dynamic shared memory it asks for (0: static only) and its
    argument list (the parameters by name, then the buffers by name, then
    ``tensormaps`` TMA tensor maps: the runner gets them from the source's
    ``<entry>_tensormaps``, in kernel order)."""
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_shared: int
    params: tuple[str, ...]
    buffers: tuple[str, ...]
    tensormaps: int = 0


@dataclass
class CaseManifest:
    """Everything the runner needs besides the arrays (see the module docstring)."""
    case: str
    source: str                  # src/<sha>.cu, relative to the bundle
    entry: str                   # host entry point: int entry(params..., pointers...)
    params: dict[str, int]       # symbolic sizes, in the entry point's order
    args: list[BufferSpec]       # the entry point's pointer arguments, in order
    temps: list[BufferSpec]      # global temporaries (the kernel path allocates them)
    kernels: list[KernelLaunch]
    test: str = ""               # the pytest node that recorded it, where known
    target: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    arch: str = ""               # nvcc architecture the source needs ("90a"), else ""


def bundle_dir() -> str | None:
    """The bundle directory named by :data:`ENV_VAR`, or None when recording is off."""
    path = os.environ.get(ENV_VAR, "").strip()
    return path or None


def _stored(arr: np.ndarray, dtype: str) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    return arr.view(np.uint16) if dtype == "bfloat16" else arr


def _dir_bytes(root: str) -> int:
    total = 0
    for base, _dirs, files in os.walk(root):
        total += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return total


def _note_skip(root: str, why: str) -> None:
    with open(os.path.join(root, "skipped.txt"), "a") as f:
        f.write(why + "\n")


def record_case(source: str, func, kernels, temps, values: dict, given: dict,
                outputs: dict, root: str, target: str = "",
                extra: dict[str, str] | None = None, arch: str = "") -> str | None:
    """Write one case into the bundle ``root``: ``source`` is the ``.cu`` whose host
    entry point ``func.name`` computes ``func`` (a LoweredFunc for a CUDA target) with
    ``kernels`` (KernelInfos; empty: the runner checks the host path only) and global
    ``temps``.  ``given`` holds the caller's arrays by buffer name as they were *before*
    the run, ``outputs`` the simulator's final output arrays by name; ``arch`` the nvcc
    architecture the source needs where it is architecture-specific (``"90a"``).
    Returns the case name, or None where it was not recorded (too big, bundle full)."""
    from .codegen import dynamic_shared
    case_bytes = sum(a.nbytes for a in given.values()) + sum(a.nbytes for a in outputs.values())
    if case_bytes > MAX_CASE_BYTES:
        _note_skip(root, f"{func.name}: {case_bytes} bytes of arrays")
        return None
    os.makedirs(os.path.join(root, "src"), exist_ok=True)
    os.makedirs(os.path.join(root, "cases"), exist_ok=True)
    if _dir_bytes(root) + case_bytes + len(source) > MAX_BUNDLE_BYTES:
        _note_skip(root, f"{func.name}: bundle full")
        return None
    sha = hashlib.sha256(source.encode()).hexdigest()[:20]
    src_rel = f"src/{sha}.cu"
    src_path = os.path.join(root, src_rel)
    if not os.path.exists(src_path):
        with open(f"{src_path}.{os.getpid()}.tmp", "w") as f:
            f.write(source)
        os.replace(f"{src_path}.{os.getpid()}.tmp", src_path)

    def spec(b, role):
        shape = tuple(int(eval_int(d, values)) for d in b.shape)
        return BufferSpec(b.name, shape, b.dtype, role)

    inout = {x if isinstance(x, str) else x.name for x in getattr(func, "inout", ())}
    args = []
    for b in func.args:
        role = "input" if b in func.inputs else ("inout" if b.name in inout else "output")
        args.append(spec(b, role))
    launches = [KernelLaunch(
        info.name,
        tuple(int(eval_int(g, values)) for g in info.grid),        # type: ignore[arg-type]
        tuple(int(x) for x in info.block),                          # type: ignore[arg-type]
        info.shared_bytes if dynamic_shared(info) else 0,
        tuple(p.name for p in info.params), tuple(b.name for b in info.buffers),
        len(info.tensor_maps))
        for info in kernels]
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    key = hashlib.sha256(repr((sha, sorted(values.items()), test,
                               [np.ascontiguousarray(a).tobytes()[:4096]
                                for a in given.values()])).encode()).hexdigest()[:16]
    case = f"{func.name}_{key}"
    manifest = CaseManifest(case, src_rel, func.name,
                            {p.name: int(values[p.name]) for p in func.params},
                            args, [spec(b, "temp") for b in temps], launches, test,
                            target, dict(extra or {}), arch)
    arrays = {f"in:{n}": _stored(a, _dtype_of(func, n)) for n, a in given.items()}
    arrays.update({f"sim:{n}": _stored(a, _dtype_of(func, n)) for n, a in outputs.items()})
    base = os.path.join(root, "cases", case)
    tmp = f"{base}.{os.getpid()}.tmp"            # test workers may record the same case
    np.savez_compressed(tmp + ".npz", **arrays)          # type: ignore[arg-type]
    os.replace(tmp + ".npz", base + ".npz")
    with open(tmp + ".json", "w") as f:
        json.dump(asdict(manifest), f, indent=1)
    os.replace(tmp + ".json", base + ".json")
    return case


def _dtype_of(func, name: str) -> str:
    for b in func.args:
        if b.name == name:
            return b.dtype
    raise KeyError(name)


def numpy_dtype(dtype: str):
    """The numpy dtype a bundle stores ``dtype`` as (bfloat16: its uint16 bits)."""
    return np.uint16 if dtype == "bfloat16" else dt.to_numpy(dtype)
