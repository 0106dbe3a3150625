"""Build generated C with gcc into a cached shared library and call it through ctypes."""
from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import BuildError, IndexOutOfRangeError, ResourceLimitError, user_location

from .target import requested_threads

#: ``-fwrapv``: signed integer overflow wraps (numpy's semantics, docs/dsl.md "Integer
#: arithmetic"); the printers already compute data arithmetic without signed overflow,
#: this covers every other signed operation gcc could otherwise assume never overflows.
DEFAULT_FLAGS = ("-O3", "-march=native", "-fopenmp", "-std=gnu11", "-fPIC", "-shared",
                 "-ffp-contract=fast", "-fno-math-errno", "-fwrapv")


# --------------------------------------------------------------------------- fork safety


def _openmp_runtime() -> ctypes.CDLL | None:
    """GNU libgomp if this process has loaded it (a kernel ran), else None."""
    try:
        return ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def _pause_function(lib: ctypes.CDLL):
    """libgomp's ``omp_pause_resource_all`` (OpenMP 5.0, GCC >= 11), or None."""
    f = getattr(lib, "omp_pause_resource_all", None)
    if f is not None:
        f.argtypes, f.restype = [ctypes.c_int], ctypes.c_int
    return f


def release_openmp_threads() -> None:
    """Before ``fork``: libgomp's worker threads do not survive a fork, and a child that
    reaches a parallel region would wait for them forever (a ``multiprocessing`` pool
    with the fork start method after a kernel ran).  ``omp_pause_resource_all(
    omp_pause_soft)`` ends this thread's pool, so the child starts its own; the parent
    re-creates its pool at its next parallel region (a few hundred microseconds)."""
    lib = _openmp_runtime()
    pause = _pause_function(lib) if lib is not None else None
    if pause is not None:
        pause(1)   # omp_pause_soft


#: process state, not a cache: True in a forked child whose libgomp could not release
#: its pool before the fork (every kernel call there runs on one thread)
_one_thread_after_fork = False


def openmp_after_fork_in_child() -> None:
    """In a forked child whose libgomp cannot release its pool before the fork (no
    ``omp_pause_resource_all``): run parallel regions on one thread, which never touches
    the parent's dead workers (also against the per-call thread count of
    :meth:`CFunction.__call__`, which would otherwise raise it again)."""
    global _one_thread_after_fork
    lib = _openmp_runtime()
    if lib is not None and _pause_function(lib) is None:
        lib.omp_set_num_threads(1)
        _one_thread_after_fork = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=release_openmp_threads,
                        after_in_child=openmp_after_fork_in_child)


# --------------------------------------------------------------------------- building


def cache_dir() -> str:
    """The kernel cache's directory (created); see :mod:`polycomp.cache`."""
    from polycomp.cache import default_dir
    d = default_dir()
    os.makedirs(d, exist_ok=True)
    return d


def compiler() -> str:
    """``$CC`` (default ``gcc``), checked: a command, possibly with arguments
    (``CC="ccache gcc"``), whose first word ``PATH`` finds.  :func:`compiler_command`
    gives it as the argument list to run."""
    cc = os.environ.get("CC", "gcc")
    compiler_command(cc)
    return cc


def compiler_command(cc: str | None = None) -> list[str]:
    """The words of the C compiler command ``cc`` (default ``$CC`` or ``gcc``), split as
    a shell would; a :class:`BuildError` if it is empty, malformed or not found."""
    cc = os.environ.get("CC", "gcc") if cc is None else cc
    try:
        words = shlex.split(cc)
    except ValueError as e:
        raise BuildError(f"C compiler command CC={cc!r} cannot be split into words: {e}") \
            from None
    if not words:
        raise BuildError("the C compiler command CC is empty (set CC, e.g. CC=gcc)")
    if shutil.which(words[0]) is None:
        raise BuildError(f"C compiler {words[0]!r} (CC={cc!r}) not found (set CC)")
    return words


def run_compiler(cmd: list[str], out: str, what: str = "generated C") -> None:
    """Run the compiler command ``cmd`` that must write ``out``: a failure, or a
    "success" that wrote nothing (``CC=/bin/true``), is a :class:`BuildError`."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BuildError(f"cannot run the C compiler ({' '.join(cmd[:1])}): "
                         f"{e.strerror or e}") from None
    if r.returncode != 0:
        raise BuildError(f"{os.path.basename(cmd[0])} failed on {what} "
                         f"({' '.join(cmd)}):\n{r.stderr[-4000:]}")
    if not os.path.isfile(out) or os.path.getsize(out) == 0:
        raise BuildError(f"the C compiler {' '.join(cmd[:1])!s} exited with status 0 but "
                         f"wrote no {os.path.basename(out)} ({' '.join(cmd)}); is CC a C "
                         f"compiler?")


def precompiled_header(text: str, flags: Sequence[str], name: str) -> str | None:
    """The path of a header holding ``text`` beside its precompiled form for ``flags``
    (``-shared`` left out), made once per compiler, flags and text in the kernel cache's
    directory; None when gcc cannot make one.  ``-include`` it as the first thing a
    compile sees: gcc loads the ``.gch`` when the compile's flags match the ones it was
    made with and parses ``text`` otherwise, so the result is the same either way."""
    from polycomp.cache import compiler_version, precompiled_header_in
    cc = compiler()
    pch_flags = [f for f in flags if f != "-shared"]
    key = hashlib.sha256("\0".join([cc, compiler_version(cc), *pch_flags, text]).encode()
                         ).hexdigest()[:24]
    return precompiled_header_in(os.path.join(cache_dir(), "pch", key), name, text,
                                 [*compiler_command(cc), *pch_flags, "-x", "c-header"])


def split_prelude(source: str) -> tuple[str, str] | None:
    """``(prelude, kernel)`` of a generated source whose shared part ends with
    :data:`~polycomp.hw.cpu.codegen.PRELUDE_END` and needs a vector ISA's headers (the
    scalar prelude parses in a few milliseconds); None otherwise.  ``prelude`` is the
    text up to that line with the kernel's name comment blanked (the one line of it that
    differs between kernels: a comment), ``kernel`` the rest after a ``#line`` directive,
    so that ``-include prelude`` then ``kernel`` is the source's translation unit, with
    its line numbers."""
    from .codegen import PRELUDE_END
    i = source.find(PRELUDE_END)
    if i < 0:
        return None
    end = i + len(PRELUDE_END)
    head = source[:end]
    if "<immintrin.h>" not in head:      # a vector prelude (the scalar one: no intrinsics)
        return None
    lines = ["" if x.startswith("/* generated by polycomp:") and x.endswith("*/") else x
             for x in head.split("\n")]
    head = "\n".join(lines)
    return head, f"#line {head.count(chr(10)) + 1}\n" + source[end:]


def build_shared(source: str, flags=DEFAULT_FLAGS, include_dirs=(), libs=("-lm",)) -> str:
    """Compile ``source`` to a shared library and return the path of a verified copy in the
    kernel cache (:mod:`polycomp.cache`: keyed by source, compiler and its version, flags;
    the object's hash is checked before the path is returned, a corrupt entry is rebuilt).

    A generated vector kernel is built as its target's prelude, precompiled once
    (:func:`precompiled_header`: ``<immintrin.h>`` and the vector helpers are most of a
    small kernel's compile), and the kernel's own text (:func:`split_prelude`): the same
    translation unit, so the same object.  Builds that ``-include`` a header of their own
    (SIMDe's) parse the whole source: gcc uses one precompiled header per compile."""
    from polycomp.cache import compiler_version, get_cache, make_key
    cc = compiler()
    key = make_key("c-so", source, cc, compiler_version(cc), *flags, *include_dirs, *libs)

    def gcc(out: str) -> None:
        src = os.path.join(os.path.dirname(out), "kernel.c")
        parts = split_prelude(source) if "-include" not in flags else None
        pch = precompiled_header(parts[0], [*flags, *[f"-I{d}" for d in include_dirs]],
                                 "pc_prelude.h") if parts is not None else None
        text, pre = (parts[1], ["-include", pch]) if parts is not None and pch else \
            (source, [])
        with open(src, "w") as f:
            f.write(text)
        cmd = [*compiler_command(cc), *flags, *[f"-I{d}" for d in include_dirs], *pre, src,
               "-o", out, *libs]
        run_compiler(cmd, out)

    return get_cache().get_or_build(key, ".so", gcc, kind="c-so")


#: the OpenMP runtime's library name (libgomp: gcc's ``-fopenmp``)
OPENMP_LIB = "libgomp.so.1"


#: ``GOMP_SPINCOUNT`` :func:`quiet_openmp` sets: how many times an idle libgomp thread
#: polls (one ``pause`` each) before it sleeps on a futex.  On the Zen 4 development host
#: (a KVM guest) one poll takes 26-35 ns, so 1000 polls are ~30 us of spinning after a
#: parallel region (``python scripts/omp_wake.py --spin 1000 3000``); libgomp's own
#: estimate is 10 ns a poll (~10 us).  Long enough that back-to-back two-thread calls (the
#: Python gap between them is ~15-70 us) find the worker still polling instead of paying
#: the 60-110 us futex wake of a halted virtual CPU; short enough that a worker never
#: holds a core for long between kernels (libgomp's default, 300000 polls, is ~8 ms here:
#: issue 27's 5-26x slower 2-thread runs on a shared machine).  docs/cpu_backend.md,
#: *Threads*.
OMP_SPIN_COUNT = 1000


def quiet_openmp() -> None:
    """Make the OpenMP runtime wait passively after a short, bounded spin when it is not
    loaded yet and the user chose no policy: sets ``OMP_WAIT_POLICY=PASSIVE`` and
    ``GOMP_SPINCOUNT=``:data:`OMP_SPIN_COUNT` in this process's environment, which
    libgomp reads once, when it is loaded.

    With both set, an idle worker polls :data:`OMP_SPIN_COUNT` times, then sleeps; with
    more OpenMP threads than CPUs in the process (libgomp's *throttled* case) the passive
    policy makes it sleep at once.  libgomp's default keeps each idle worker spinning
    ~300000 polls after every parallel region; between the short kernels of a model that
    takes the cores the next kernel (or torch, or another process on a shared machine)
    needs (issue 27: 2-thread runs 5-26x slower), while ``OMP_WAIT_POLICY=PASSIVE`` alone
    makes every parallel region wake its sleeping worker (60-110 us on the development
    host, the whole difference to OpenBLAS at 256^3).  A user's ``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT`` is kept (``OMP_WAIT_POLICY=PASSIVE`` alone: no spinning at all);
    a runtime that is already loaded (torch imported first, linking the same libgomp)
    keeps the policy it started with (docs/cpu_backend.md, *Threads*)."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    try:
        ctypes.CDLL(OPENMP_LIB, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        return                                  # loaded: its policy is fixed
    except (OSError, AttributeError):
        pass
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = str(OMP_SPIN_COUNT)


def call_threads() -> int | None:
    """The thread count a kernel call runs its parallel loops with:
    :func:`polycomp.hw.cpu.target.requested_threads` (``torch.get_num_threads()`` when
    torch is imported, also with a torch that bundles its own OpenMP runtime, else
    ``OMP_NUM_THREADS`` as it is now, also when set after the runtime was loaded); None:
    the runtime's own default (the CPUs this process may use)."""
    return requested_threads()


@dataclass(frozen=True)
class OpenMPControls:
    """``omp_get_max_threads`` / ``omp_set_num_threads`` of the OpenMP runtime a
    library uses (both act on the calling thread's ``nthreads-var``)."""
    get: Callable[[], int]
    set: Callable[[int], None]

    def ensure(self, threads: int) -> None:
        """Run the calling thread's next parallel regions with ``threads`` threads."""
        if self.get() != threads:
            self.set(threads)


def openmp_controls(lib: ctypes.CDLL | None) -> OpenMPControls | None:
    """The :class:`OpenMPControls` of the runtime ``lib`` links (found through its
    dependencies), or of libgomp when ``lib`` is None; None without an OpenMP runtime."""
    try:
        h = lib if lib is not None else ctypes.CDLL(OPENMP_LIB)
        get, set_ = h.omp_get_max_threads, h.omp_set_num_threads
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, []
    set_.restype, set_.argtypes = None, [ctypes.c_int]
    return OpenMPControls(get, set_)


#: Estimated one-thread run time (seconds) below which a graph step runs its kernel on
#: one thread: waking the passive OpenMP workers of a parallel region and joining them
#: costs tens of microseconds (docs/cpu_backend.md, *Threads*: measured on the 2-core
#: development host with ``OMP_WAIT_POLICY=PASSIVE``: a two-thread call took 30-45 us
#: more than half the one-thread time with both cores free, so two threads won from
#: ~85 us of work for elementwise / softmax steps and ~140 us for GEMMs, and lost at
#: every size with the second core busy), so a kernel whose work is about that size is
#: not faster on two threads.  :meth:`CFunction.prepare` decides per shape.
ONE_THREAD_BELOW_S = 100e-6


@dataclass
class PreparedCall:
    """A call of a :class:`CFunction` for one binding of its symbolic sizes, for callers
    that have checked the arrays' shapes at these sizes once (the graph runtime: a
    checked call of the same shape ran first).  Made by :meth:`CFunction.prepare`: the
    size arguments are evaluated, the buffers' fit checked and the thread decision made
    once; a call only takes the arrays' addresses.

    The caller guarantees: ``inputs`` and ``outs`` are C-contiguous arrays of the
    kernel's shapes and dtypes at ``values``, ``outs`` writable and not overlapping the
    inputs or each other.  The kernel's flags (out-of-range gather index, failed
    allocation) are still checked at every call."""
    fn: CFunction
    values: dict[str, int]
    head: list[int]          # the size arguments, in the entry's order
    one_thread: bool         # work below ONE_THREAD_BELOW_S: run on one thread

    def __call__(self, inputs: list, outs: list) -> None:
        self.call(self.head + [a.ctypes.data for a in inputs] + [o.ctypes.data for o in outs])

    def call(self, args: list[int]) -> None:
        """Call with ``args``: :attr:`head`, then the addresses of the inputs and the
        outputs (arrays as :meth:`__call__` requires them).  A one-thread call puts the
        runtime's thread count back afterwards: torch may share the OpenMP runtime (it
        does with the CPU wheel and the system libgomp), and ``torch.get_num_threads()``
        — which the next kernels follow — reads that count."""
        openmp = self.fn.openmp
        if not self.one_thread or openmp is None:
            self.fn._run(args, self.values, 1 if self.one_thread else None)
            return
        before = openmp.get()
        try:
            self.fn._run(args, self.values, 1)
        finally:
            openmp.ensure(before)


def _data_field_offset() -> int | None:
    """The byte offset of an ndarray's data pointer in its object (numpy's
    ``PyArrayObject_fields``: the object header, then ``char *data``, the field
    ``PyArray_DATA`` reads), checked on a few probe arrays against ``a.ctypes.data``;
    None when they disagree (another layout: read ``a.ctypes.data``, ~8x slower)."""
    off = object.__basicsize__
    probes = [np.zeros(3, np.float32), np.arange(10.0)[3:], np.zeros((2, 3), np.int8).T]
    try:
        ok = all(ctypes.c_void_p.from_address(id(p) + off).value == p.ctypes.data
                 for p in probes)
    except (ValueError, OSError):
        ok = False
    return off if ok else None


#: see :func:`_data_field_offset` (a property of the numpy build, fixed at import)
_DATA_FIELD = _data_field_offset()


def _address(a: np.ndarray) -> int:
    """The address of ``a``'s first element (an ndarray: :data:`_DATA_FIELD`)."""
    if _DATA_FIELD is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + _DATA_FIELD).value or 0


#: :func:`_address` for other modules (the graph runtime's prepared calls): ~0.4 us where
#: ``a.ctypes.data`` takes ~2 us
array_address = _address


@dataclass(frozen=True)
class _Signature:
    """The arrays of a checked call of a :class:`CFunction` (``out=`` given, no size
    keywords, no in-out outputs): each input's and output's shape and dtype, and the
    size values and arguments they bound.  A later call whose arguments are plain
    numpy arrays of the same shapes and dtypes (the very dtype objects), C-contiguous,
    the outputs writable and no output's bytes overlapping another argument's, is the
    same call for every check :meth:`CFunction.__call__` makes (no conversion, no copy,
    the same sizes): :meth:`arguments` gives its C arguments without them (the checks
    cost ~15-20 us of a 0.3 ms 256^3 product: shapes evaluated from the IR, numpy's
    exact overlap test, ``ascontiguousarray``).  Anything else takes the checked path."""
    inputs: tuple            # ((shape, dtype), ..)
    outputs: tuple           # ((shape, dtype, nbytes), ..)
    values: dict
    head: tuple              # the size arguments

    @staticmethod
    def of(given, arrays, outs, values, head) -> _Signature | None:
        """The signature of a checked call whose caller passed ``given`` (checked and
        made contiguous: ``arrays``) and ``outs``; None when some input was converted
        or copied."""
        if any(type(g) is not np.ndarray or g is not a for g, a in zip(given, arrays)) or \
                any(type(o) is not np.ndarray for o in outs):
            return None
        return _Signature(tuple((a.shape, a.dtype) for a in arrays),
                          tuple((o.shape, o.dtype, o.nbytes) for o in outs), values,
                          tuple(head))

    def arguments(self, inputs, out) -> list | None:
        """The C arguments of a call with ``inputs`` and ``out`` if it matches this
        signature, else None."""
        if len(inputs) != len(self.inputs):
            return None
        outs = (out,) if type(out) is np.ndarray else out
        if type(outs) not in (list, tuple) or len(outs) != len(self.outputs):
            return None
        args = list(self.head)
        spans = []
        for a, (shape, dtype) in zip(inputs, self.inputs):
            if type(a) is not np.ndarray or a.dtype is not dtype or a.shape != shape or \
                    not a.flags.c_contiguous:
                return None
            p = _address(a)
            args.append(p)
            spans.append((p, p + a.nbytes))
        for o, (shape, dtype, nbytes) in zip(outs, self.outputs):
            if type(o) is not np.ndarray or o.dtype is not dtype or o.shape != shape:
                return None
            flags = o.flags
            if not (flags.c_contiguous and flags.writeable):
                return None
            p = _address(o)
            if any(p < hi and lo < p + nbytes for lo, hi in spans):
                return None
            args.append(p)
            spans.append((p, p + nbytes))
        return args


class CFunction:
    """A compiled kernel: call it with numpy arrays, get the outputs back.

    Each call runs the parallel loops with ``threads`` threads when set (the tuner's
    trials), else with :func:`call_threads` (torch's count, or ``OMP_NUM_THREADS``);
    the library is loaded after :func:`quiet_openmp`."""

    def __init__(self, func, lib_path: str):
        self.func = func
        quiet_openmp()
        self.lib = ctypes.CDLL(lib_path)
        self.openmp = openmp_controls(self.lib)
        self.threads: int | None = None
        # a kernel without symbolic sizes has the same buffer sizes at every call: their
        # fit (check_buffers_fit) is checked at the first call only
        self._sizes_fit = False
        self.cfunc = getattr(self.lib, func.name)
        self.cfunc.restype = None
        self.cfunc.argtypes = [ctypes.c_int64] * len(func.params) + \
            [ctypes.c_void_p] * (len(func.inputs) + len(func.outputs))
        # the library's flags (:mod:`polycomp.hw.cpu.codegen`), looked up once
        self._index_error = self._flag("pc_index_error")
        self._failed = self._alloc_failed()
        # the last checked call's signature: a call with the same arrays' kinds skips
        # the checks (see _Signature)
        self._signature: _Signature | None = None

    def prepare(self, inputs: list, params: dict, work_s: float | None = None
                ) -> PreparedCall | None:
        """A :class:`PreparedCall` for the sizes that ``inputs`` (arrays, or anything with
        ``shape``, ``ndim`` and ``dtype``) and the size keywords ``params`` bind, checked
        as a call checks them; None for a kernel with in-out outputs (its callers pass
        their initial contents, which the checked call copies).  ``work_s``: the
        caller's estimate of the call's one-thread run time; below
        :data:`ONE_THREAD_BELOW_S` the prepared call runs on one thread."""
        from polycomp.shapes import check_buffers_fit, checked_arguments
        f = self.func
        if f.inout:
            return None
        _, _, values = checked_arguments(f, inputs, params)
        check_buffers_fit(f, values)
        one = work_s is not None and work_s < ONE_THREAD_BELOW_S
        return PreparedCall(self, values, [values[p.name] for p in f.params], one)

    def __call__(self, *inputs, out=None, **params):
        """``inputs`` are the kernel's inputs followed by the initial contents of its
        in-out outputs (:func:`polycomp.shapes.caller_arrays`); those are copied, not
        modified."""
        sig = self._signature
        if sig is not None and not params:
            args = sig.arguments(inputs, out)
            if args is not None:
                self._run(args, sig.values, None)
                return out if type(out) is np.ndarray else \
                    out[0] if len(out) == 1 else tuple(out)
        from polycomp.dlpack import call_with_dlpack, needs_conversion
        if needs_conversion(inputs, out):  # torch & co. through DLPack, zero-copy
            return call_with_dlpack(self, inputs, out, params)
        from polycomp.shapes import check_buffers_fit, checked_arguments, checked_outputs, eval_int
        f = self.func
        expected, arrays, values = checked_arguments(f, inputs, params)
        if not self._sizes_fit:
            check_buffers_fit(f, values)
            self._sizes_fit = not f.params
        arrays = [np.ascontiguousarray(a) for a in arrays]
        initial = {b.name: a for b, a in zip(expected[len(f.inputs):], arrays[len(f.inputs):])}
        shapes = [tuple(eval_int(d, values) for d in b.shape) for b in f.outputs]
        outs, arrays = checked_outputs(f, out, shapes, [dt.to_numpy(b.dtype) for b in f.outputs],
                                       arrays[:len(f.inputs)])
        for b, o in zip(f.outputs, outs):
            if b.name in initial:
                np.copyto(o, initial[b.name])
        head = [values[p.name] for p in f.params]
        args = head + [a.ctypes.data for a in arrays] + [o.ctypes.data for o in outs]
        self._run(args, values, None)
        if out is not None and not params and not f.inout:
            self._signature = _Signature.of(inputs, arrays, outs, values, head)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run(self, args: list[int], values: dict, threads: int | None) -> None:
        """Call the entry with ``args`` (sizes, then addresses) on ``threads`` threads
        (None: the tuner's count or :func:`call_threads`), then raise what its flags
        report."""
        f = self.func
        failed, index_error = self._failed, self._index_error
        if failed is not None:
            failed.value = 0
        if _one_thread_after_fork:
            threads = 1
        elif threads is None:
            threads = self.threads or call_threads()
        if threads is not None and self.openmp is not None:
            self.openmp.ensure(threads)
        if index_error is not None:
            index_error.value = 0
        self.cfunc(*args)
        if index_error is not None and index_error.value:
            index_error.value = 0
            raise IndexOutOfRangeError(
                f"{f.name}: a gather index{ir.gathered_into(f)} is out of range of the "
                f"dimension it indexes (sizes "
                f"{', '.join(f'{k}={v}' for k, v in values.items())}); the kernel read "
                f"element 0 instead and its outputs are not valid", user_location())
        if failed is not None and failed.value:
            failed.value = 0
            raise ResourceLimitError(
                f"{f.name}: a temporary buffer could not be allocated for these sizes "
                f"({', '.join(f'{k}={v}' for k, v in values.items())}): out of memory",
                user_location())

    def _flag(self, name: str):
        """The library's int flag ``name`` (:mod:`polycomp.hw.cpu.codegen`), or None."""
        try:
            return ctypes.c_int.in_dll(self.lib, name)
        except ValueError:
            return None

    def _alloc_failed(self):
        """The library's ``pc_alloc_failed`` flag (see :mod:`polycomp.hw.cpu.codegen`), or
        None for a library built from other C."""
        try:
            return ctypes.c_int.in_dll(self.lib, "pc_alloc_failed")
        except ValueError:
            return None
