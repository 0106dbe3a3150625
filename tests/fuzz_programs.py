"""Random DSL programs with a numpy reference, for the differential fuzzer.

A *program* is a short chain of stages over 2-d float32 (or int8/int32/int64) tensors of
shape ``(R, C)``: elementwise ops with the inputs, row/column broadcasts, shifted reads
under an affine ``select`` (zero padding at the border), a transpose, a row reduction
(``sum``/``max``/``min``) and a contraction with an epilogue; integer programs also get
comparisons of overflowing expressions (``select(x + k > x, ..)``, ``x * x >= 0``).
Each stage is built twice from the same random choices: once as DSL (``pc.compute``)
and once as numpy (float64 for floats; for integers the case's dtype, which wraps
around as the DSL must, see docs/dsl.md "Integer arithmetic"), so the reference is
independent of every polycomp path.

Integer inputs are small values with, in most cases, edge values mixed in: the dtype's
MIN, MAX, MAX-1, -1 and 0.

A *case* bundles several independent programs into one kernel (one output each) over
shared inputs, so that one compilation per backend checks many programs; shapes are
constant or symbolic, with extents drawn from 1, primes and small odd numbers.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

import polycomp as pc

EXTENTS = (1, 2, 3, 5, 7, 8, 13, 17)


@dataclass
class Value:
    """A tensor of a program: its DSL tensor (set while tracing), its numpy value and its
    axes as names of the case's extents (``"R"``, ``"C"``, ``"K"``)."""
    axes: tuple[str, ...]
    build: object = None          # callable(inputs) -> DSL tensor, memoised per trace
    ref: np.ndarray | None = None


@dataclass
class Program:
    """One random program: a description (for failure messages) and its output."""
    steps: list[str] = field(default_factory=list)
    out: Value | None = None
    reduction_length: int = 1     # longest sum, for the tolerance


class CaseBuilder:
    """Builds the programs of one case with one random generator."""

    def __init__(self, rng: random.Random, sizes: dict[str, int], dtype: str,
                 inputs: dict[str, np.ndarray]):
        self.rng, self.sizes, self.dtype, self.inputs = rng, sizes, dtype, inputs
        self.floating = dtype.startswith("float")
        self.symbols: dict = {}     # axis name -> pc.sym, for symbolic shapes

    # ------------------------------------------------------------------ leaves
    def leaf(self, name: str) -> Value:
        axes = {"A": ("R", "C"), "B": ("R", "C"), "u": ("R",), "v": ("C",),
                "W": ("C", "K")}[name]
        v = Value(axes, None, self.inputs[name].astype(np.float64) if self.floating
                  else self.inputs[name].copy())
        v.build = lambda env, name=name: env[name]
        return v

    def program(self) -> Program:
        prog = Program()
        cur = self.leaf(self.rng.choice("AB"))
        prog.steps.append("load")
        for _ in range(self.rng.randint(1, 4)):
            cur = self.stage(prog, cur)
            if len(cur.axes) == 1 and self.rng.random() < 0.5:
                break
        prog.out = cur
        return prog

    # ------------------------------------------------------------------ stages
    def stage(self, prog: Program, x: Value) -> Value:
        options = ["ew", "ew", "bcast", "shift"]
        if len(x.axes) == 2:
            options += ["transpose", "reduce"]
            if x.axes == ("R", "C"):
                options.append("contract")
        if not self.floating:
            options += ["cmp", "cmp"]
        kind = self.rng.choice(options)
        prog.steps.append(kind)
        out = getattr(self, kind)(prog, x)
        if not self.floating:   # numpy upcasts some results (sum): wrap to the dtype
            out.ref = out.ref.astype(self.dtype)
        return out

    def _binary(self):
        ops = [("+", lambda a, b: a + b, np.add), ("-", lambda a, b: a - b, np.subtract),
               ("*", lambda a, b: a * b, np.multiply),
               ("max", pc.max, np.maximum), ("min", pc.min, np.minimum)]
        if self.floating:
            ops.append(("relu+", lambda a, b: pc.max(a, 0.0) + b,
                        lambda a, b: np.maximum(a, 0.0) + b))
        return self.rng.choice(ops)

    def ew(self, prog: Program, x: Value) -> Value:
        name, dsl_op, np_op = self._binary()
        if x.axes == ("R", "C") and self.rng.random() < 0.6:
            other = self.leaf(self.rng.choice("AB"))
        else:
            other = x
        prog.steps[-1] = f"ew({name})"
        return self._elementwise(x, other, dsl_op, np_op)

    def bcast(self, prog: Program, x: Value) -> Value:
        """``x`` combined with a vector along one of its axes (``u`` along R, ``v``
        along C); a 1-d value gets the matching vector elementwise."""
        name, dsl_op, np_op = self._binary()
        axis = self.rng.randrange(len(x.axes))
        vec = self.leaf("u" if x.axes[axis] == "R" else "v") \
            if x.axes[axis] in ("R", "C") else None
        if vec is None:
            return self.ew(prog, x)
        prog.steps[-1] = f"bcast({name}, axis {axis})"
        shape = [1] * len(x.axes)
        shape[axis] = -1
        ref = np_op(x.ref, vec.ref.reshape(shape))

        def build(env, x=x, vec=vec, axis=axis):
            xt, vt = x.build(env), vec.build(env)
            return pc.compute(self.shape(x.axes),
                              _indexed(len(x.axes), lambda ij: dsl_op(xt[ij], vt[ij[axis]])))
        return self._memo(Value(x.axes, build, ref))

    def shift(self, prog: Program, x: Value) -> Value:
        """``out[.., i, ..] = (i >= 1 ? x[.., i - 1, ..] : 0) + x[.., i, ..]``."""
        axis = self.rng.randrange(len(x.axes))
        prog.steps[-1] = f"shift(axis {axis})"
        ref = x.ref.copy()
        src = [slice(None)] * len(x.axes)
        dst = [slice(None)] * len(x.axes)
        src[axis], dst[axis] = slice(None, -1), slice(1, None)
        ref[tuple(dst)] += x.ref[tuple(src)]

        def build(env, x=x, axis=axis):
            xt = x.build(env)

            def body(ij):
                prev = list(ij)
                prev[axis] = ij[axis] - 1
                return pc.select(ij[axis] >= 1, xt[tuple(prev)], 0) + xt[ij]
            return pc.compute(self.shape(x.axes), _indexed(len(x.axes), body))
        return self._memo(Value(x.axes, build, ref))

    def cmp(self, prog: Program, x: Value) -> Value:
        """A comparison of an expression that overflows at the edges (integers):
        ``select(x + k > x, x, -x)``, ``select(x - k < 0, x, k)`` or
        ``select(x * x >= 0, x, 1)``, with ``k`` from 1, MAX and MIN + 1."""
        info = np.iinfo(self.dtype)
        k = self.rng.choice([1, int(info.max), int(info.min) + 1])
        form = self.rng.randrange(3)
        prog.steps[-1] = f"cmp(form {form}, k={k})"
        kk = np.array(k, self.dtype)
        with np.errstate(all="ignore"):
            if form == 0:
                ref = np.where(x.ref + kk > x.ref, x.ref, -x.ref)
            elif form == 1:
                ref = np.where(x.ref - kk < 0, x.ref, kk)
            else:
                ref = np.where(x.ref * x.ref >= 0, x.ref, np.array(1, self.dtype))

        def build(env, x=x, form=form, k=k):
            xt = x.build(env)

            def body(ij):
                v = xt[ij]
                if form == 0:
                    return pc.select(v + k > v, v, -v)
                if form == 1:
                    return pc.select(v - k < 0, v, k)
                return pc.select(v * v >= 0, v, 1)
            return pc.compute(self.shape(x.axes), _indexed(len(x.axes), body))
        return self._memo(Value(x.axes, build, ref.astype(self.dtype)))

    def transpose(self, prog: Program, x: Value) -> Value:
        axes = (x.axes[1], x.axes[0])

        def build(env, x=x):
            xt = x.build(env)
            return pc.compute(self.shape(axes), lambda i, j: xt[j, i] * 1)
        return self._memo(Value(axes, build, x.ref.T.copy()))

    def reduce(self, prog: Program, x: Value) -> Value:
        op = self.rng.choice(["sum", "max", "min"] if self.floating else ["sum", "max"])
        axis = self.rng.randrange(2)
        prog.steps[-1] = f"reduce({op}, axis {axis})"
        ref = {"sum": np.sum, "max": np.max, "min": np.min}[op](x.ref, axis=axis)
        if op == "sum":
            prog.reduction_length = max(prog.reduction_length, self.sizes[x.axes[axis]])
        keep = (x.axes[1 - axis],)

        def build(env, x=x, axis=axis, op=op):
            xt = x.build(env)
            r = pc.reduce_axis(self.extent(x.axes[axis]))
            red = {"sum": pc.sum, "max": pc.max, "min": pc.min}[op]
            if axis == 1:
                return pc.compute(self.shape(keep), lambda i: red(xt[i, r], axis=r))
            return pc.compute(self.shape(keep), lambda j: red(xt[r, j], axis=r))
        return self._memo(Value(keep, build, ref))

    def contract(self, prog: Program, x: Value) -> Value:
        """``out[i, k] = sum_j x[i, j] * W[j, k]`` and an epilogue."""
        prog.steps[-1] = "contract"
        prog.reduction_length = max(prog.reduction_length, self.sizes["C"])
        w = self.leaf("W")
        prod = x.ref @ w.ref

        def build_prod(env, x=x, w=w):
            xt, wt = x.build(env), w.build(env)
            r = pc.reduce_axis(self.extent("C"))
            return pc.compute(self.shape(("R", "K")),
                              lambda i, k: pc.sum(xt[i, r] * wt[r, k], axis=r))
        p = self._memo(Value(("R", "K"), build_prod, prod))
        if self.floating:
            ref = np.maximum(prod, 0.0)
            return self._memo(Value(("R", "K"), lambda env, p=p: pc.compute(
                self.shape(("R", "K")), lambda i, k: pc.max(p.build(env)[i, k], 0.0)), ref))
        return p

    # ------------------------------------------------------------------ helpers
    def _elementwise(self, x: Value, y: Value, dsl_op, np_op) -> Value:
        def build(env, x=x, y=y):
            xt, yt = x.build(env), y.build(env)
            return pc.compute(self.shape(x.axes),
                              _indexed(len(x.axes), lambda ij: dsl_op(xt[ij], yt[ij])))
        return self._memo(Value(x.axes, build, np_op(x.ref, y.ref)))

    @staticmethod
    def _memo(v: Value) -> Value:
        """Build each stage once per trace (a value used twice is one tensor)."""
        inner = v.build
        key = object()

        def build(env, inner=inner, key=key):
            if key not in env:
                env[key] = inner(env)
            return env[key]
        v.build = build
        return v

    def extent(self, axis: str):
        return self.symbols.get(axis, self.sizes[axis])

    def shape(self, axes) -> tuple:
        return tuple(self.extent(a) for a in axes)


def _indexed(ndim: int, body):
    """A compute() function of ``ndim`` index arguments calling ``body(indices)``."""
    if ndim == 1:
        return lambda i: body((i,))
    return lambda i, j: body((i, j))


@dataclass
class Case:
    """Several programs in one kernel, their inputs and references."""
    seed: int
    kernel: object
    inputs: list[np.ndarray]
    programs: list[Program]
    dtype: str
    symbolic: bool
    sizes: dict[str, int]
    edges: bool = False           # integer inputs with MIN, MAX, MAX-1, -1, 0 mixed in

    def describe(self, k: int) -> str:
        p = self.programs[k]
        return (f"seed {self.seed}, program {k}: {' -> '.join(p.steps)}; sizes {self.sizes}, "
                f"{'symbolic' if self.symbolic else 'constant'} shapes, {self.dtype}"
                f"{' with edge values' if self.edges else ''}")


#: integer dtypes of the integer cases, and the chance that a case mixes in edge values
INT_DTYPES = ("int8", "int32", "int64")
EDGE_CASES = 0.75


def int_edges(dtype: str) -> list[int]:
    """MIN, MAX, MAX-1, -1 and 0 of ``dtype``."""
    info = np.iinfo(dtype)
    return [int(info.min), int(info.max), int(info.max) - 1, -1, 0]


def make_case(seed: int, n_programs: int = 6) -> Case:
    rng = random.Random(seed)
    dtype = "float32" if rng.random() < 0.8 else "int"
    sizes = {a: rng.choice(EXTENTS) for a in "RCK"}
    symbolic = rng.random() < 0.5
    nrng = np.random.default_rng(seed)
    edges = False
    if dtype == "int":   # drawn after the float cases' draws: their seeds keep their programs
        dtype = rng.choice(INT_DTYPES)
        edges = rng.random() < EDGE_CASES
    shapes = {"A": ("R", "C"), "B": ("R", "C"), "u": ("R",), "v": ("C",), "W": ("C", "K")}
    inputs = {}
    for name, axes in shapes.items():
        shape = tuple(sizes[a] for a in axes)
        if dtype == "float32":
            arr = nrng.standard_normal(shape).astype(np.float32)
            if rng.random() < 0.15 and arr.size:      # NaN where it matters
                arr.flat[rng.randrange(arr.size)] = np.nan
        else:
            arr = nrng.integers(-9, 10, shape).astype(dtype)
            if edges and arr.size:       # a quarter of the elements at the edges
                where = nrng.random(shape) < 0.25
                arr[where] = nrng.choice(np.array(int_edges(dtype), dtype), int(where.sum()))
        inputs[name] = arr
    builder = CaseBuilder(rng, sizes, dtype, inputs)
    syms = dict(zip("RCK", pc.sym("R C K"))) if symbolic else {}
    builder.symbols = syms
    programs = [builder.program() for _ in range(n_programs)]
    names = list(shapes)

    def ann(name):
        return pc.Tensor[tuple(syms.get(a, sizes[a]) for a in shapes[name]), dtype]

    def fuzz_kernel(A, B, u, v, W):
        env = dict(zip(names, (A, B, u, v, W)))
        return tuple(p.out.build(env) for p in programs)
    fuzz_kernel.__annotations__ = {n: ann(n) for n in names}
    kernel = pc.tensor_expr(fuzz_kernel, name=f"fuzz{seed}")
    return Case(seed, kernel, [inputs[n] for n in names], programs, dtype, symbolic, sizes,
                edges)


def check_outputs(case: Case, outs, backend: str) -> list[str]:
    """The programs whose output differs from numpy on ``backend`` (messages)."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    failures = []
    for k, (p, got) in enumerate(zip(case.programs, outs)):
        ref = p.out.ref
        if case.dtype in INT_DTYPES:   # exact, in the dtype (no float64 detour for int64)
            got = np.asarray(got)
            ok = got.shape == ref.shape and got.dtype == np.dtype(case.dtype) and \
                np.array_equal(got, ref.astype(case.dtype))
        else:
            got = np.asarray(got, dtype=np.float64)
            tol = 1e-4 + 4e-6 * p.reduction_length
            scale = np.nanmax(np.abs(ref)) if np.isfinite(ref).any() else 1.0
            ok = got.shape == ref.shape and np.allclose(
                got, ref, rtol=tol, atol=tol * max(1.0, float(scale)), equal_nan=True)
        if not ok:
            failures.append(f"{backend}: {case.describe(k)}")
    return failures
