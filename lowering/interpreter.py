"""The IR interpreter: executes a LoweredFunc on numpy arrays (the reference executor).

Execution is *lane-vectorised*: a loop that carries no dependence (a ``For`` whose
kind is parallel/vectorized/gpu_*, or annotated ``coincident``) does not iterate; its
variable becomes a vector of all its values and the body runs once over all lanes.
Lanes multiply as such loops nest (the lane space is kept flat, 1-D).  Serial loops
iterate; inside lanes their bounds may differ per lane, in which case the loop runs to
the largest bound with the finished lanes masked off.  ``if`` and ``select`` narrow the
active-lane mask; loads in inactive lanes are never performed (so a select may guard
an out-of-bounds padding read), and loads/stores in active lanes are bounds-checked:
an out-of-bounds access raises :class:`InterpreterError`, which makes the interpreter
a checker of generated code too.

A serial loop whose body is a single reduction update ``X[idx] = X[idx] op e`` (``idx``
independent of the loop variable, ``e`` not reading ``X``) is executed as a vector
reduction over the loop (the summation order differs from sequential order), in
chunks of at most :data:`MAX_REDUCTION_LANES` lanes x iterations.

Arithmetic follows :mod:`polycomp.dtypes`: float16/bfloat16 values compute in float32
and are rounded when stored; ``//`` and ``%`` are floor division and modulo.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from polycomp import dtypes as dt
from polycomp import ir
from polycomp.errors import IndexOutOfRangeError, PolycompError, user_location

_PARALLEL_KINDS = ("parallel", "vectorized", "gpu_block", "gpu_thread", "gpu_warp")

#: (:meth:`Interpreter.binary`) the operators whose result on two Python ints is what
#: the general path computes for them (it applies Python's operators to Python ints
#: too); ``//``, ``%``, ``min`` and ``max`` keep numpy's semantics (``x // 0 == 0``)
_PYTHON_INT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul,
                   "<": operator.lt, "<=": operator.le, ">": operator.gt,
                   ">=": operator.ge, "==": operator.eq, "!=": operator.ne}

#: (:meth:`Interpreter.binary`) the other binary operators on numpy values: ``//``
#: and ``%`` are numpy's floor division and modulo (``x // 0 == 0`` on integers)
_NUMPY_BINARY_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": np.floor_divide, "%": np.mod, "min": np.minimum, "max": np.maximum,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne}

#: Largest lane count of a reduction evaluated at once (lanes x iterations): beyond it
#: the reduction runs in chunks of iterations, so memory stays bounded (a 1024^3 matmul
#: would otherwise materialise 2^30 products at once: the OOM killer's 24 GB).
MAX_REDUCTION_LANES = 1 << 23


class InterpreterError(PolycompError):
    """The interpreted IR did something invalid (out-of-bounds access, bad extent)."""


def _np_compute(dtype: str):
    return dt.to_numpy(dt.compute_dtype(dtype))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _math(name, args, dtype):
    x = args[0]
    if name == "prefetch":      # a cache hint (hw/cpu): no value; its address was read
        return 0
    if name == "pin_register":  # hw/cpu/microkernel.py PIN_REGISTER: the value itself
        return x
    with np.errstate(all="ignore"):
        if name == "exp":
            return np.exp(x)
        if name == "log":
            return np.log(x)
        if name == "sqrt":
            return np.sqrt(x)
        if name == "rsqrt":
            return 1 / np.sqrt(x)
        if name == "tanh":
            return np.tanh(x)
        if name == "erf":
            r = _erf(np.asarray(x, dtype=np.float64))
            return r.astype(_np_compute(dtype)) if isinstance(r, np.ndarray) else r
        if name == "abs":
            return np.abs(x)
        if name == "pow":
            return np.power(x, args[1])
        if name == "floor":
            return np.floor(x)
        if name == "ceil":
            return np.ceil(x)
        if name == "sigmoid":
            one = np.asarray(1, dtype=np.asarray(x).dtype)
            return one / (one + np.exp(-x))
    raise InterpreterError(f"the interpreter has no implementation of call {name!r}")


def gather_index(value, extent, mask=None):
    """:data:`polycomp.ir.GATHER_INDEX`: ``value`` (a scalar or one per lane), checked
    against ``[0, extent)`` on the active lanes (``mask``); an index outside is an
    :class:`~polycomp.errors.IndexOutOfRangeError`, inactive lanes read index 0."""
    v = np.asarray(value, dtype=np.int64)
    n = int(extent)
    bad = (v < 0) | (v >= n)
    active = bad if mask is None else bad & np.asarray(mask, dtype=bool)
    if np.any(active):
        first = int(np.broadcast_to(v, np.shape(active))[active].reshape(-1)[0])
        raise IndexOutOfRangeError(
            f"gather index {first} is out of range [0, {n}) of the indexed dimension")
    if v.ndim == 0:
        return np.int64(v)
    return np.where(bad, 0, v)


class InterpreterState:
    __slots__ = ("env", "buffers", "lanes", "mask")

    def __init__(self, env, buffers):
        self.env = env
        self.buffers = buffers
        self.lanes = 1            # length of the flat lane space
        self.mask = None          # bool array of length lanes, or None (all active)


class Interpreter:
    """Executes IR statements; see the module docstring."""

    progress: Callable[[int], None] | None = None

    def __init__(self, func: ir.LoweredFunc, progress: Callable[[int], None] | None = None):
        self.func = func
        # called with the number of statement instances each store executed (lanes, or
        # lanes x iterations for a reduction chunk): drives a progress bar
        self.progress = progress
        # the numpy type each IR dtype computes in, looked up once per interpreter
        self._compute_types: dict[str, np.dtype] = {}

    def _compute_type(self, dtype: str) -> np.dtype:
        """The numpy scalar type ``dtype`` computes in (:func:`polycomp.dtypes.compute_dtype`)."""
        t = self._compute_types.get(dtype)
        if t is None:
            t = self._compute_types[dtype] = _np_compute(dtype)
        return t

    # ----------------------------------------------------------------- entry
    def run(self, arrays: dict, params: dict) -> None:
        buffers = {}
        for b in self.func.args:
            if b.name not in arrays:
                raise InterpreterError(f"no array given for argument {b.name!r}")
            buffers[b] = arrays[b.name]
        env = {p: int(params[p.name]) for p in self.func.params}
        st = InterpreterState(env, buffers)
        # floating-point errors give IEEE values (inf, NaN) and integer division by zero
        # numpy's 0: ignored once here rather than around every operation
        with np.errstate(all="ignore"):
            self.stmt(self.func.body, st)

    # ----------------------------------------------------------------- exprs
    def expr(self, e, st: InterpreterState, mask=None):
        t = type(e)
        # the most frequent nodes first (the order of the tests is all that differs)
        if t is ir.Binary:
            return self.binary(e, st, mask)
        if t is ir.Var or isinstance(e, ir.Var):
            try:
                return st.env[e]
            except KeyError:
                raise InterpreterError(f"variable {e.name!r} is not bound") from None
        if t is ir.Load:
            return self.load(e, st, mask)
        if t is ir.IntImm:
            return e.value if e.dtype != "bool" else bool(e.value)
        if t is ir.FloatImm:
            return self._compute_type(e.dtype).type(e.value)
        if t is ir.Unary:
            a = self.expr(e.a, st, mask)
            return np.logical_not(a) if e.op == "!" else -a
        if t is ir.Select:
            c = self.expr(e.cond, st, mask)
            if np.ndim(c) == 0:
                return self.expr(e.t if c else e.f, st, mask)
            m = c if mask is None else (mask & c)
            nm = ~c if mask is None else (mask & ~c)
            tv = self.expr(e.t, st, m) if m.any() else 0
            fv = self.expr(e.f, st, nm) if nm.any() else 0
            return np.where(c, tv, fv).astype(self._compute_type(e.dtype), copy=False)
        if t is ir.Cast:
            v = self.expr(e.value, st, mask)
            nd = self._compute_type(e.dtype)
            if e.dtype in ("float16", "bfloat16"):
                v = np.asarray(v).astype(dt.to_numpy(e.dtype)).astype(nd)
            elif e.dtype in dt.INTS and dt.is_float(e.value.dtype):
                with np.errstate(all="ignore"):
                    v = np.trunc(v)
            with np.errstate(all="ignore"):   # out of range: numpy's (and the CPU's) value
                return np.asarray(v).astype(nd) if np.ndim(v) else nd.type(v)
        if t is ir.Call:
            return self.call(e, st, mask)
        raise InterpreterError(f"the interpreter cannot evaluate {type(e).__name__}")

    def call(self, e, st, mask):
        """A ``Call``: the math functions.  Hook: executors of target IR (the CUDA
        simulator) override it to add intrinsics such as barriers and warp shuffles."""
        args = [self.expr(a, st, mask) for a in e.args]
        if e.name == ir.GATHER_INDEX:
            return gather_index(args[0], args[1], mask)
        return _math(e.name, args, e.dtype)

    def binary(self, e, st, mask):
        op = e.op
        a = self.expr(e.a, st, mask)
        b = self.expr(e.b, st, mask)
        if op == "&&":
            return np.logical_and(a, b)
        if op == "||":
            return np.logical_or(a, b)
        if type(a) is int and type(b) is int:
            # index arithmetic on Python ints: the same result as below without numpy
            # (most of the binaries an interpreted nest evaluates)
            f = _PYTHON_INT_OPS.get(op)
            if f is not None and e.dtype not in dt.FLOATS:
                return f(a, b)
        if op in ir.BITWISE_OPS:
            return _bitwise(op, a, b, e.dtype)
        if e.dtype in dt.FLOATS:
            nd = self._compute_type(e.dtype)
            a = np.asarray(a, dtype=nd) if type(a) is np.ndarray and a.ndim else nd.type(a)
            b = np.asarray(b, dtype=nd) if type(b) is np.ndarray and b.ndim else nd.type(b)
        f = _NUMPY_BINARY_OPS.get(op)
        if f is None:
            raise InterpreterError(f"unknown operator {op!r}")
        # numpy's floating-point error state is "ignore" for the whole run (:meth:`run`)
        return f(a, b)

    def _addresses(self, buf, indices, st, mask, what):
        arr = st.buffers.get(buf)
        if arr is None:
            raise InterpreterError(f"{what} of {buf.name!r}, which is not allocated here")
        idx = []
        for k, i in enumerate(indices):
            try:
                idx.append(self.expr(i, st, mask))
            except IndexOutOfRangeError as e:     # a gather index: name the array
                raise IndexOutOfRangeError(f"{what} of {buf.name}, index {k}: {e.message}",
                                           user_location()) from None
        if buf.flat:
            if len(idx) != 1:
                raise InterpreterError(f"flat buffer {buf.name!r} accessed with {len(idx)} indices")
            view, shape = arr.reshape(-1), (arr.size,)
        else:
            if len(idx) != arr.ndim:
                raise InterpreterError(f"{buf.name!r} has {arr.ndim} dims, {what} uses {len(idx)}")
            view, shape = arr, arr.shape
        for i in idx:
            if type(i) is np.ndarray and i.ndim:
                return self._lane_addresses(buf, idx, view, shape, st.lanes, mask, what)
        for k, (i, s) in enumerate(zip(idx, shape)):
            if not 0 <= int(i) < s:
                if mask is not None and not np.any(mask):
                    return view, None, False
                raise InterpreterError(f"{what} of {buf.name}: index {k} = {int(i)} is out of "
                                       f"bounds [0, {s})")
        return view, tuple(int(i) for i in idx), False

    @staticmethod
    def _lane_addresses(buf, idx, view, shape, n, mask, what):
        """:meth:`_addresses` where an index differs per lane: one row-major offset per
        lane (0 in the inactive lanes) into ``view`` as a 1-D array (a C-contiguous
        buffer; any other, one index array per dimension); an active lane outside the
        buffer raises."""
        flat = None
        outside = False
        for i, s in zip(idx, shape):
            i = np.asarray(i, dtype=np.int64)
            if i.ndim:
                outside = outside or bool((i.view(np.uint64) >= s).any())
            else:
                outside = outside or not 0 <= int(i) < s
            flat = i if flat is None else flat * s + i
        if outside:         # which lanes: an active one raises, inactive ones are set to 0
            for k, (i, s) in enumerate(zip(idx, shape)):
                i = np.broadcast_to(np.asarray(i, dtype=np.int64), (n,))
                bad = (i < 0) | (i >= s)
                if mask is not None:
                    bad &= mask
                if bad.any():
                    j = int(np.argmax(bad))
                    raise InterpreterError(f"{what} of {buf.name}: index {k} = {int(i[j])} "
                                           f"is out of bounds [0, {s})")
        assert flat is not None
        if flat.shape != (n,):
            flat = np.broadcast_to(flat, (n,))
        if mask is not None:
            flat = np.where(mask, flat, 0)
        if view.flags.c_contiguous:
            return view.reshape(-1), flat, True
        return view, np.unravel_index(flat, view.shape), True

    def load(self, e, st, mask):
        view, idx, vector = self._addresses(e.buffer, e.indices, st, mask, "load")
        nd = self._compute_type(e.dtype)
        if idx is None:
            return nd.type(0)
        v = view[idx]
        return v.astype(nd) if vector else nd.type(v)

    # ----------------------------------------------------------------- stmts
    def stmt(self, s, st: InterpreterState):
        t = type(s)
        if t is ir.Block:
            for x in s.stmts:
                self.stmt(x, st)
        elif t is ir.Store:
            self.store(s, st)
        elif t is ir.For:
            self.for_(s, st)
        elif t is ir.IfThenElse:
            self.if_(s, st)
        elif t is ir.LetStmt:
            st.env[s.var] = self.expr(s.value, st, st.mask)
            self.stmt(s.body, st)
            del st.env[s.var]
        elif t is ir.Allocate:
            self.allocate(s, st)
        elif t is ir.AttrStmt:
            self.stmt(s.body, st)
        elif t is ir.Evaluate:
            self.expr(s.value, st, st.mask)
        else:
            raise InterpreterError(f"the interpreter cannot execute {type(s).__name__}")

    def allocate(self, s, st):
        shape = []
        for d in s.buffer.shape:
            v = self.expr(d, st)
            if np.ndim(v):
                raise InterpreterError(f"allocation {s.buffer.name} has a lane-dependent size")
            shape.append(int(v))
        if st.lanes > 1:
            raise InterpreterError(f"allocation of {s.buffer.name} inside a parallel loop: "
                                   f"per-lane storage is the GPU simulator's job")
        arr = np.zeros(tuple(shape), dtype=dt.to_numpy(s.buffer.dtype))
        prev = st.buffers.get(s.buffer)
        st.buffers[s.buffer] = arr
        self.stmt(s.body, st)
        if prev is None:
            del st.buffers[s.buffer]
        else:
            st.buffers[s.buffer] = prev

    def store(self, s, st):
        if self.progress is not None:
            self.progress(st.lanes)
        mask = st.mask
        view, idx, vector = self._addresses(s.buffer, s.indices, st, mask, "store")
        if idx is None:
            return
        v = self.expr(s.value, st, mask)
        target = dt.to_numpy(s.buffer.dtype)
        if not vector:
            if np.ndim(v):
                # scalar address, vector value: only legal if all active lanes agree
                vv = np.asarray(v) if mask is None else np.asarray(v)[mask]
                if vv.size == 0:
                    return
                first = vv.flat[0]
                same = vv == first
                if vv.dtype.kind == "f" and np.isnan(first):   # NaN lanes agree too
                    same = np.isnan(vv)
                if not np.all(same):
                    raise InterpreterError(f"lanes race on {s.buffer.name}{list(idx)}")
                v = vv.flat[0]
            view[idx] = store_value(v, target)
            return
        vals = np.broadcast_to(np.asarray(v), (st.lanes,))
        flat_index = type(idx) is np.ndarray      # into a 1-D view (_lane_addresses)
        if mask is not None:
            idx = idx[mask] if flat_index else tuple(i[mask] for i in idx)
            vals = vals[mask]
        flat = idx if flat_index else np.ravel_multi_index(idx, view.shape)
        if len(flat) > 1 and _repeats(flat):
            raise InterpreterError(f"store to {s.buffer.name}: several lanes write the same "
                                   f"element (a loop executed as parallel carries a dependence)")
        view[idx] = store_value(vals, target)

    def if_(self, s, st):
        c = self.expr(s.cond, st, st.mask)
        if np.ndim(c) == 0:
            if c:
                self.stmt(s.then, st)
            elif s.orelse is not None:
                self.stmt(s.orelse, st)
            return
        c = np.broadcast_to(c, (st.lanes,))
        saved = st.mask
        for branch, m in ((s.then, c), (s.orelse, ~c)):
            if branch is None:
                continue
            nm = m if saved is None else (saved & m)
            if nm.any():
                st.mask = nm
                self.stmt(branch, st)
        st.mask = saved

    def for_(self, s, st):
        lo = self.expr(s.min, st, st.mask)
        ext = self.expr(s.extent, st, st.mask)
        parallel = self.lane_parallel(s)
        if parallel and np.ndim(lo) == 0 and np.ndim(ext) == 0:
            return self._for_lanes(s, st, int(lo), int(ext))
        if np.ndim(lo) == 0 and np.ndim(ext) == 0:
            lo, ext = int(lo), int(ext)
            if ext <= 0:
                return
            if self._try_reduction(s, st, lo, ext):
                return
            for v in range(lo, lo + ext):
                st.env[s.var] = v
                self.stmt(s.body, st)
            del st.env[s.var]
            return
        # lane-dependent bounds: run to the largest extent, masking finished lanes
        lo = np.broadcast_to(np.asarray(lo, dtype=np.int64), (st.lanes,))
        ext = np.broadcast_to(np.asarray(ext, dtype=np.int64), (st.lanes,))
        active = ext > 0 if st.mask is None else (st.mask & (ext > 0))
        if not active.any():
            return
        saved = st.mask
        for t in range(int(ext[active].max())):
            m = active & (t < ext)
            st.mask = m
            st.env[s.var] = lo + t
            self.stmt(s.body, st)
        st.mask = saved
        del st.env[s.var]

    def lane_parallel(self, s) -> bool:
        """Whether loop ``s`` runs as lanes (its iterations carry no dependence).
        Hook: an executor with fixed lanes (the CUDA simulator's threads) overrides it."""
        return s.kind in _PARALLEL_KINDS or bool(s.annotation("coincident", False))

    @staticmethod
    def _expand_lanes(st, var, lo, ext):
        """Multiply the lane space by the ``ext`` values of ``var``: lane ``l*ext + t``
        (every lane-vector in the environment is repeated, ``var`` tiled).  Returns the
        saved (env, lanes, mask) for :meth:`_restore_lanes`."""
        saved = (dict(st.env), st.lanes, st.mask)
        n = st.lanes
        for k, v in st.env.items():
            if np.ndim(v):
                st.env[k] = np.repeat(np.broadcast_to(v, (n,)), ext)
        st.env[var] = np.tile(np.arange(lo, lo + ext, dtype=np.int64), n)
        if st.mask is not None:
            st.mask = np.repeat(st.mask, ext)
        st.lanes = n * ext
        return saved

    @staticmethod
    def _restore_lanes(st, saved):
        st.env, st.lanes, st.mask = saved

    def _for_lanes(self, s, st, lo, ext):
        if ext <= 0:
            return
        saved = self._expand_lanes(st, s.var, lo, ext)
        try:
            self.stmt(s.body, st)
        finally:
            self._restore_lanes(st, saved)

    def _try_reduction(self, s, st, lo, ext) -> bool:
        body = s.body
        if not isinstance(body, ir.Store) or ext < 2:
            return False
        v = body.value
        if not (isinstance(v, ir.Binary) and v.op in ("+", "max", "min")
                and isinstance(v.a, ir.Load) and v.a.buffer is body.buffer
                and len(v.a.indices) == len(body.indices)
                and all(ir.structural_equal(x, y) for x, y in zip(v.a.indices, body.indices))):
            return False
        for i in body.indices:
            if s.var in ir.free_vars(i):
                return False
        reads_x = []
        ir.walk(v.b, lambda n: reads_x.append(n)
                if isinstance(n, ir.Load) and n.buffer is body.buffer else None)
        if reads_x:
            return False
        # evaluate e over the iterations as extra lanes, reduce, then update once per
        # chunk of iterations (chunks keep lanes x iterations <= MAX_REDUCTION_LANES)
        chunk = max(1, MAX_REDUCTION_LANES // max(1, st.lanes))
        for start in range(0, ext, chunk):
            self._reduce_chunk(s, st, lo + start, min(chunk, ext - start))
        return True

    def _reduce_chunk(self, s, st, lo, ext) -> None:
        """Iterations ``lo .. lo + ext - 1`` of the reduction loop ``s`` (see
        :meth:`_try_reduction`) as one vector reduction and one update."""
        body = s.body
        v = body.value
        n = st.lanes
        saved = self._expand_lanes(st, s.var, lo, ext)
        mask = st.mask
        try:
            e = np.broadcast_to(np.asarray(self.expr(v.b, st, mask)), (n * ext,))
        finally:
            self._restore_lanes(st, saved)
        e = e.reshape(n, ext)
        if mask is not None:
            ident = {"+": 0, "max": -np.inf, "min": np.inf}[v.op]
            if e.dtype.kind in "iub" and v.op != "+":
                info = np.iinfo(e.dtype)
                ident = info.min if v.op == "max" else info.max
            e = np.where(mask.reshape(n, ext), e, np.asarray(ident).astype(e.dtype))
        reducers: dict[str, Callable] = {"+": np.sum, "max": np.max, "min": np.min}
        red = reducers[v.op](e, axis=1)
        if self.progress is not None:  # the store below counts n of the n * ext
            self.progress(n * ext - n)
        acc = ir.Var("__acc", v.b.dtype)
        st.env[acc] = red if n > 1 else red[0]
        self.store(ir.Store(body.buffer, body.indices,
                            ir.Binary(v.op, v.a, acc, v.dtype)), st)
        del st.env[acc]


def _repeats(flat: np.ndarray) -> bool:
    """Whether an offset occurs twice in ``flat`` (lanes storing to one element)."""
    ordered = np.sort(flat)
    return bool((ordered[1:] == ordered[:-1]).any())


def store_value(v, target):
    with np.errstate(all="ignore"):
        if target.kind in "iu" and np.asarray(v).dtype.kind == "f":
            v = np.trunc(v)
        return np.asarray(v).astype(target)


def run_func(func: ir.LoweredFunc, inputs: dict, params: dict,
             initial: dict | None = None,
             progress: Callable[[int], None] | None = None) -> dict:
    """Run ``func``: allocate its outputs (copies of ``initial[name]`` for in-out
    outputs, else zeros) and return them by name.  ``progress(n)`` is told of the
    statement instances as they run (their total is :func:`statement_instances` for the
    program-order IR)."""
    arrays = dict(inputs)
    initial = initial or {}
    for b in func.outputs:
        shape = tuple(int(_eval_shape(d, params)) for d in b.shape)
        if b.name in initial:
            arrays[b.name] = np.array(initial[b.name], dtype=dt.to_numpy(b.dtype), copy=True)
        else:
            arrays[b.name] = np.zeros(shape, dtype=dt.to_numpy(b.dtype))
    Interpreter(func, progress).run(arrays, params)
    return {b.name: arrays[b.name] for b in func.outputs}


def statement_instances(model, params: dict) -> int:
    """An upper bound of the statement instances ``model`` executes with the sizes
    ``params`` (each statement's domain's bounding box; exact for rectangular domains):
    the work of interpreting its program-order IR."""
    import islpy as isl
    total = 0
    for s in model.statements:
        dom = s.domain
        for k in range(dom.dim(isl.dim_type.param)):
            name = dom.get_dim_name(isl.dim_type.param, k)
            if name in params:
                dom = dom.fix_val(isl.dim_type.param, k, isl.Val.int_from_si(dom.get_ctx(),
                                                                        int(params[name])))
        if dom.is_empty():
            continue
        n = 1
        for d in range(dom.dim(isl.dim_type.set)):
            lo, hi = dom.dim_min_val(d), dom.dim_max_val(d)
            if not (lo.is_int() and hi.is_int()):
                return -1  # unbounded with these sizes: unknown
            n *= int(hi.to_python()) - int(lo.to_python()) + 1
        total += n
    return total


def _eval_shape(d, params):
    from polycomp.shapes import eval_int
    return eval_int(d, params)


_BITWISE_UFUNCS = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor,
                   "<<": np.left_shift, ">>": np.right_shift}


def _bitwise(op: str, a, b, dtype: str):
    """``a op b`` on integers of ``dtype`` with numpy's ufunc (its semantics define the
    operator, see :func:`polycomp.ir.bitwise`)."""
    nd = np.dtype(dt.to_numpy(dtype))
    a = np.asarray(a).astype(nd) if np.ndim(a) else nd.type(int(a))
    b = np.asarray(b).astype(nd) if np.ndim(b) else nd.type(int(b))
    return _BITWISE_UFUNCS[op](a, b)
