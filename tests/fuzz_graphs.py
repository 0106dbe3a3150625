"""Random PyTorch programs for the model-level differential fuzzer
(``tests/test_fuzz_graphs.py``): ``torch.compile(backend="polycomp")`` against eager.

A *program* is the source of an ``nn.Module`` whose ``forward`` is a straight line of
torch ops drawn from the set the graph importer supports (elementwise arithmetic with
tensors and Python scalars and broadcasting, the unary functions, casts, ``matmul`` /
``linear`` with parameters or input weights, ``softmax``, ``layer_norm``, single-axis
``sum`` / ``mean`` / ``amax``, and the views ``view`` / ``reshape`` / ``transpose`` /
``permute`` / slicing / ``narrow`` / ``contiguous`` / ``split`` / ``chunk`` /
``unsqueeze`` / ``flatten`` / ``expand``, ``cat``, comparisons, ``where`` /
``masked_fill``, ``addmm``), in-place ops (``add_``, ``mul_``, ``relu_``, ``+=``,
``F.relu(inplace=True)``) on intermediates, on inputs and on views, and one to three
outputs.  Inputs are float32, float64, int64 and bool tensors of small shapes
whose extents come from a short list (so that kernels repeat across programs and the
gcc cache serves them).

The generator runs every op eagerly as it draws it: an op torch rejects is not kept,
and shapes and dtypes are known exactly.  It also records whether the program may
legitimately run (partly) eagerly -- an in-place update of a tensor that shares storage
with another (a view), which polycomp refuses on purpose; every other program must be
compiled as one piece.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import torch

EXTENTS = (1, 2, 3, 4, 5, 6, 8)
FLOAT_UNARY = ("torch.relu({})", "torch.tanh({})", "torch.sigmoid({})", "torch.exp({})",
               "torch.erf({})", "torch.neg({})", "F.gelu({})", "F.gelu({}, approximate='tanh')",
               "torch.sqrt({})", "torch.rsqrt({})", "{}.relu()", "{}.exp()", "-{}")
INT_UNARY = ("torch.relu({})", "torch.neg({})", "-{}", "{}.relu()")
BINARY = ("+", "-", "*", "/")
INPLACE = ("{v}.add_({o})", "{v}.mul_({o})", "{v}.sub_({o})", "{v} += {o}", "{v} *= {o}",
           "{v}.relu_()", "F.relu({v}, inplace=True)", "{v}.div_({o})")


@dataclass
class Program:
    seed: int
    source: str
    inputs: list[torch.Tensor]
    params: dict[str, torch.Tensor]
    may_fall_back: bool = False     # an in-place update of an aliased tensor
    ops: list[str] = field(default_factory=list)
    # per output: True when float32 rounding fed it (a float64 output of float32 work
    # is compared at float32's tolerance)
    rounded32: list[bool] = field(default_factory=list)

    def module(self) -> torch.nn.Module:
        env: dict = {"torch": torch, "F": torch.nn.functional, "nn": torch.nn}
        exec(compile(self.source, f"<fuzz graph {self.seed}>", "exec"), env)  # noqa: S102
        m = env["M"]()
        for k, t in self.params.items():
            setattr(m, k, torch.nn.Parameter(t.clone(), requires_grad=False))
        return m.eval()

    def fresh_inputs(self) -> list[torch.Tensor]:
        return [t.clone() for t in self.inputs]


class Gen:
    """Draws one program; ``values`` are (name, eager tensor) in order of creation."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.lines: list[str] = []
        self.env: dict = {"torch": torch, "F": torch.nn.functional}
        self.values: list[str] = []
        self.inputs: list[tuple[str, torch.Tensor]] = []
        self.params: dict[str, torch.Tensor] = {}
        self.may_fall_back = False
        self.void = False
        self.exact: set[str] = set()   # values computed without rounding
        self.rounded32: set[str] = set()  # values float32 arithmetic fed
        self.ops: list[str] = []
        self.count = 0
        self.gen = torch.Generator().manual_seed(seed)

    # ------------------------------------------------------------------ tensors
    def tensor(self, shape, dtype) -> torch.Tensor:
        if dtype == torch.bool:
            return torch.rand(shape, generator=self.gen) > 0.5
        if dtype == torch.int64:
            return torch.randint(-6, 7, shape, generator=self.gen)
        return (torch.randn(shape, generator=self.gen) * 1.5).to(dtype)

    def shape(self, rank=None) -> tuple:
        rank = rank if rank is not None else self.rng.choice((1, 2, 2, 3, 3))
        return tuple(self.rng.choice(EXTENTS) for _ in range(rank))

    def new_input(self, shape, dtype) -> str:
        name = f"x{len(self.inputs)}"
        t = self.tensor(shape, dtype)
        self.inputs.append((name, t))
        self.env[name] = t.clone()
        self.values.append(name)
        self.exact.add(name)
        return name

    def new_param(self, shape, dtype=torch.float32) -> str:
        name = f"w{len(self.params)}"
        t = self.tensor(shape, dtype) * 0.5
        self.params[name] = t
        self.env[name] = t.clone()
        return f"self.{name}"

    def t(self, name: str) -> torch.Tensor:
        return self.env[name.replace("self.", "")]

    def pick(self, pred=lambda t: True) -> str | None:
        cands = [v for v in self.values if pred(self.t(v))]
        if not cands:
            return None
        # prefer recent values: longer chains
        return cands[-1 - min(int(self.rng.expovariate(0.5)), len(cands) - 1)]

    def emit(self, expr: str, op: str, exact: bool = False) -> str | None:
        """Evaluate ``expr`` eagerly (it has no side effects); keep it as a new value when
        torch accepts it.  ``exact``: the value is computed without rounding."""
        name = f"v{self.count}"
        try:
            with torch.no_grad():
                val = eval(expr.replace("self.", "self_"), {**self.env, **_selfs(self)})  # noqa: S307
        except Exception:
            return None
        if not isinstance(val, torch.Tensor) or val.numel() > 4096:
            return None
        if val.dtype not in (torch.float32, torch.float64, torch.int64, torch.bool):
            return None
        self.count += 1
        self.env[name] = val
        self.values.append(name)
        self.lines.append(f"{name} = {expr}")
        self.ops.append(op)
        if exact or not val.is_floating_point():
            self.exact.add(name)
        if self._rounded32(expr, val, name in self.exact):
            self.rounded32.add(name)
        return name

    def _rounded32(self, code: str, val: torch.Tensor, exact: bool) -> bool:
        used = re.findall(r"\b(v\d+|x\d+)\b", code)
        return any(u in self.rounded32 for u in used) or (
            val.dtype == torch.float32 and not exact) or any(
            self.t(u).dtype == torch.float32 for u in used if u in self.env) and not exact

    def statement(self, stmt: str, target: str, op: str) -> bool:
        """An in-place statement on ``target`` (kept when torch accepts it)."""
        env = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in self.env.items()}
        try:
            with torch.no_grad():
                exec(stmt.replace("self.", "self_"), {**env, **_selfs(self)})  # noqa: S102
        except Exception:
            return False
        t = self.t(target)
        others = [self.t(v) for v in self.values if v != target]
        if t._base is not None or any(_shares(t, o) for o in others):
            self.may_fall_back = True  # a view, or viewed: polycomp may run it eagerly
        try:
            with torch.no_grad():
                exec(stmt.replace("self.", "self_"), {**self.env, **_selfs(self)})  # noqa: S102
        except Exception:  # it failed on the real (aliased) tensors: the program is void
            self.void = True
            return False
        self.lines.append(stmt)
        self.ops.append(op)
        if t.is_floating_point():
            self.exact.discard(target)
            if self._rounded32(stmt, t, False):
                self.rounded32.add(target)
        return True

    # ------------------------------------------------------------------ ops
    def op_unary(self) -> None:
        v = self.pick(lambda t: t.dtype != torch.bool)
        if v is None:
            return
        floating = self.t(v).is_floating_point()
        f = self.rng.choice(FLOAT_UNARY if floating or self.rng.random() < 0.3 else INT_UNARY)
        self.emit(f.format(v), "unary")

    def scalar(self, t: torch.Tensor):
        if t.is_floating_point() or self.rng.random() < 0.3:
            return self.rng.choice((0.5, 2.0, -1.25, 3.0, 0.1))
        return self.rng.choice((1, 2, 3, -2))

    def op_binary(self) -> None:
        a = self.pick()
        if a is None:
            return
        ta = self.t(a)
        op = self.rng.choice(BINARY)
        r = self.rng.random()
        if ta.dtype == torch.bool and op != "*":
            op = "+"
        if r < 0.3:
            s = self.scalar(ta)
            expr = f"{a} {op} {s!r}" if self.rng.random() < 0.7 else f"{s!r} {op} {a}"
            self.emit(expr, "binary-scalar")
            return
        b = self.pick(lambda t: _broadcastable(ta.shape, t.shape))
        if b is None or self.rng.random() < 0.25:
            b = self.new_input(self.broadcast_shape(ta.shape), self.rng.choice(
                (torch.float32, torch.float32, torch.int64, torch.bool, torch.float64)))
        fn = self.rng.choice((f"{a} {op} {b}", f"{a} {op} {b}", f"torch.maximum({a}, {b})"))
        self.emit(fn, "binary")

    def broadcast_shape(self, shape) -> tuple:
        shape = list(shape)
        k = self.rng.randrange(len(shape) + 1)
        shape = shape[k:]  # a suffix
        return tuple(1 if self.rng.random() < 0.3 else d for d in shape)

    def op_cast(self) -> None:
        """Casts; a float value is truncated to an integer only when it was computed
        exactly (else a last-bit difference could flip the integer)."""
        v = self.pick()
        if v is None:
            return
        to_int = ("{}.long()", "{}.to(torch.int64)", "{}.type_as({})")
        forms = ("{}.float()", "{}.double()", "{}.to(torch.float32)") + \
            (to_int if v in self.exact else ())
        c = self.rng.choice(forms)
        exact = v in self.exact
        if "type_as" in c:
            o = self.pick()
            self.emit(c.format(v, o), "cast", exact)
        else:
            self.emit(c.format(v), "cast", exact and "float()" not in c or exact)

    def op_matmul(self) -> None:
        a = self.pick(lambda t: t.dim() >= 2 and t.is_floating_point())
        if a is None:
            a = self.new_input(self.shape(self.rng.choice((2, 3))), torch.float32)
        ta = self.t(a)
        k, m = ta.shape[-1], self.rng.choice(EXTENTS)
        r = self.rng.random()
        if r < 0.35:
            w = self.new_param((m, k), ta.dtype)
            bias = self.new_param((m,), ta.dtype) if self.rng.random() < 0.6 else None
            self.emit(f"F.linear({a}, {w}, {bias})" if bias else f"F.linear({a}, {w})",
                      "linear")
        elif r < 0.6 or ta.dim() == 2:
            b = self.new_input((k, m), ta.dtype)
            self.emit(self.rng.choice((f"{a} @ {b}", f"torch.matmul({a}, {b})")), "matmul")
        else:
            b = self.new_input(tuple(ta.shape[:-2]) + (k, m), ta.dtype)
            self.emit(f"torch.matmul({a}, {b})", "bmm")

    def op_reduce(self) -> None:
        v = self.pick(lambda t: t.dim() >= 1 and t.dtype != torch.bool)
        if v is None:
            return
        t = self.t(v)
        ax = self.rng.randrange(-t.dim(), t.dim())
        kd = self.rng.random() < 0.4
        f = self.rng.choice(("sum", "amax", "mean") if t.is_floating_point() else ("sum", "amax"))
        if f == "amax":
            self.emit(f"torch.amax({v}, {ax}, keepdim={kd})", "reduce")
        else:
            self.emit(f"{v}.{f}({ax}, keepdim={kd})" if self.rng.random() < 0.5
                      else f"torch.{f}({v}, dim={ax}, keepdim={kd})", "reduce")

    def op_softmax(self) -> None:
        v = self.pick(lambda t: t.dim() >= 1 and t.is_floating_point())
        if v is None:
            return
        ax = self.rng.randrange(-self.t(v).dim(), self.t(v).dim())
        self.emit(self.rng.choice((f"torch.softmax({v}, {ax})", f"{v}.softmax(dim={ax})",
                                   f"F.softmax({v}, dim={ax})")), "softmax")

    def op_layer_norm(self) -> None:
        v = self.pick(lambda t: t.dim() >= 1 and t.dtype == torch.float32)
        if v is None:
            return
        d = self.t(v).shape[-1]
        w, b = self.new_param((d,)), self.new_param((d,))
        self.emit(f"F.layer_norm({v}, ({d},), {w}, {b}, eps=1e-5)", "layer_norm")

    def op_view(self) -> None:
        v = self.pick(lambda t: t.dim() >= 1)
        if v is None:
            return
        t = self.t(v)
        r = self.rng.random()
        if r < 0.3 and t.dim() >= 2:
            a, b = self.rng.sample(range(t.dim()), 2)
            self.emit(f"{v}.transpose({a}, {b})", "transpose", v in self.exact)
        elif r < 0.45 and t.dim() >= 2:
            perm = list(range(t.dim()))
            self.rng.shuffle(perm)
            self.emit(f"{v}.permute({', '.join(map(str, perm))})", "permute", v in self.exact)
        elif r < 0.7:
            shape = _refactor(self.rng, t.shape)
            meth = self.rng.choice(("view", "reshape")) if t.is_contiguous() else "reshape"
            self.emit(f"{v}.{meth}({', '.join(map(str, shape))})", "reshape", v in self.exact)
        elif r < 0.85:
            ax = self.rng.randrange(t.dim())
            n = t.shape[ax]
            lo = self.rng.randrange(n)
            hi = self.rng.randrange(lo + 1, n + 1)
            idx = ", ".join([":"] * ax + [f"{lo}:{hi}"])
            self.emit(self.rng.choice((f"{v}[{idx}]", f"torch.narrow({v}, {ax}, {lo}, "
                                                       f"{hi - lo})")), "slice",
                      v in self.exact)
        else:
            self.emit(f"{v}.contiguous()", "contiguous", v in self.exact)

    def op_inplace(self) -> None:
        v = self.pick(lambda t: t.dtype != torch.bool)
        if v is None:
            return
        t = self.t(v)
        form = self.rng.choice(INPLACE)
        other = self.pick(lambda o: _broadcastable_to(o.shape, t.shape) and o.dtype != torch.bool)
        o = repr(self.scalar(t)) if other is None or self.rng.random() < 0.4 else other
        self.statement(form.format(v=v, o=o), v, "inplace")

    def op_split(self) -> None:
        """``split`` / ``chunk`` (slices handed out in a tuple)."""
        v = self.pick(lambda t: t.dim() >= 1 and t.shape[-1] >= 2)
        if v is None:
            return
        t = self.t(v)
        ax = self.rng.randrange(-t.dim(), 0)
        n = t.shape[ax]
        if n < 2:
            return
        a = self.rng.randrange(1, n)
        k = self.rng.randrange(2, n + 1)
        expr = self.rng.choice((f"{v}.split({a}, {ax})[-1]", f"torch.chunk({v}, {k}, {ax})[0]",
                                f"{v}.split([{a}, {n - a}], dim={ax})[1]",
                                f"{v}.chunk({k}, dim={ax})[-1]"))
        self.emit(expr, "split", v in self.exact)

    def op_shape(self) -> None:
        """``unsqueeze`` / ``flatten`` / ``expand`` (negative dims included)."""
        v = self.pick(lambda t: t.dim() >= 1)
        if v is None:
            return
        t = self.t(v)
        r = self.rng.random()
        if r < 0.35:
            d = self.rng.randrange(-t.dim() - 1, t.dim() + 1)
            self.emit(f"{v}.unsqueeze({d})", "unsqueeze", v in self.exact)
        elif r < 0.65:
            lo = self.rng.randrange(-t.dim(), t.dim())
            self.emit(f"torch.flatten({v}, {lo})", "flatten", v in self.exact)
        else:
            sizes = [self.rng.choice((-1, d)) if d != 1 else self.rng.choice((1, 3, 5))
                     for d in t.shape]
            if self.rng.random() < 0.5:
                sizes.insert(0, self.rng.choice((1, 2, 3)))
            self.emit(f"{v}.expand({', '.join(map(str, sizes))})", "expand", v in self.exact)

    def op_cat(self) -> None:
        """``torch.cat`` of two or three tensors (dtypes promoted as torch does)."""
        v = self.pick(lambda t: t.dim() >= 1)
        if v is None:
            return
        t = self.t(v)
        ax = self.rng.randrange(-t.dim(), t.dim())
        parts = [v]
        for _ in range(self.rng.choice((1, 2))):
            shape = list(t.shape)
            shape[ax] = self.rng.choice(EXTENTS)
            same = self.pick(lambda o, sh=tuple(shape): tuple(o.shape) == sh)
            parts.append(same if same is not None and self.rng.random() < 0.5 else
                         self.new_input(tuple(shape), self.rng.choice(
                             (torch.float32, torch.float32, torch.int64))))
        exact = all(p in self.exact for p in parts)
        self.emit(f"torch.cat([{', '.join(parts)}], {ax})", "cat", exact)

    def op_where(self) -> None:
        """comparisons, ``torch.where``, ``masked_fill``."""
        v = self.pick(lambda t: t.dtype != torch.bool)
        if v is None:
            return
        t = self.t(v)
        cmp = self.rng.choice(("<", ">", "<=", ">=", "==", "!="))
        c = self.emit(f"{v} {cmp} {self.scalar(t)!r}", "compare", True)
        if c is None:
            return
        o = self.pick(lambda u: _broadcastable(u.shape, t.shape) and u.dtype != torch.bool)
        if self.rng.random() < 0.5 and o is not None:
            self.emit(f"torch.where({c}, {v}, {o})", "where",
                      v in self.exact and o in self.exact)
        else:
            self.emit(f"{v}.masked_fill({c}, {self.scalar(t)!r})", "masked_fill",
                      v in self.exact)

    def op_addmm(self) -> None:
        """``torch.addmm`` with a parameter matrix and bias (GPT-2's Conv1D)."""
        v = self.pick(lambda t: t.dim() == 2 and t.dtype == torch.float32)
        if v is None:
            return
        k, m = self.t(v).shape[-1], self.rng.choice(EXTENTS)
        w, b = self.new_param((k, m)), self.new_param((m,))
        extra = self.rng.choice(("", ", beta=0.5", ", alpha=2.0", ", beta=2.0, alpha=0.5"))
        self.emit(f"torch.addmm({b}, {v}, {w}{extra})", "addmm")
    OPS = (("op_unary", 4), ("op_binary", 6), ("op_cast", 1), ("op_matmul", 2),
           ("op_reduce", 2), ("op_softmax", 1), ("op_layer_norm", 1), ("op_view", 3),
           ("op_inplace", 2), ("op_split", 1), ("op_shape", 1), ("op_cat", 1),
           ("op_where", 1), ("op_addmm", 1))

    def program(self, n_ops: int) -> Program:
        for _ in range(self.rng.choice((1, 1, 2))):
            self.new_input(self.shape(), self.rng.choice(
                (torch.float32, torch.float32, torch.float32, torch.float64, torch.int64)))
        names, weights = zip(*self.OPS)
        while len(self.ops) < n_ops:
            getattr(self, self.rng.choices(names, weights)[0])()
        made = [v for v in self.values if v.startswith("v")]
        outs = self.rng.sample(made[-4:], min(len(made[-4:]), self.rng.choice((1, 1, 2, 3))))
        if self.rng.random() < 0.1:
            outs.append(self.inputs[0][0])
        args = ", ".join(n for n, _ in self.inputs)
        body = "\n".join(f"        {line}" for line in self.lines)
        ret = ", ".join(outs) + ("," if len(outs) == 1 and self.rng.random() < 0.5 else "")
        src = (f"class M(nn.Module):\n    def forward(self, {args}):\n{body}\n"
               f"        return {ret}\n")
        return Program(self.seed, src, [t for _, t in self.inputs], dict(self.params),
                       self.may_fall_back, list(self.ops), [o in self.rounded32 for o in outs])



def _selfs(gen: Gen) -> dict:
    return {f"self_{k}": gen.env[k] for k in gen.params}


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _broadcastable(a, b) -> bool:
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


def _broadcastable_to(src, dst) -> bool:
    """``src`` broadcasts to ``dst`` without growing it (an in-place operand)."""
    if len(src) > len(dst):
        return False
    return all(x == y or x == 1 for x, y in zip(reversed(src), reversed(dst)))


def _refactor(rng: random.Random, shape) -> tuple:
    """Another shape with the same element count (sometimes with a -1)."""
    n = 1
    for d in shape:
        n *= d
    dims = []
    rest = n
    for _ in range(rng.choice((1, 2, 3)) - 1):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = rng.choice(divs)
        dims.append(d)
        rest //= d
    dims.append(rest)
    rng.shuffle(dims)
    if rng.random() < 0.3:
        dims[rng.randrange(len(dims))] = -1
    return tuple(dims)


def make_program(seed: int, n_ops: int | None = None) -> Program:
    """The program of ``seed`` (a generator that hit an aliasing corner draws again from
    a derived seed)."""
    for k in range(10):
        g = Gen(seed * 1000 + k if k else seed)
        p = g.program(n_ops if n_ops is not None else g.rng.choice((3, 4, 5, 6, 7)))
        if not g.void:
            p.seed = seed
            return p
    raise RuntimeError(f"no valid program for seed {seed}")
