"""The one contraction matcher: does a reduction stage compute
``out[o] = sum_r a(o, r) * b(o, r)``, and which iterators does each factor use?

Every target asks this module instead of pattern-matching stage bodies itself:

* :func:`contraction_class` — the operator class of a reduction (``contraction``,
  ``conv`` or ``reduce``; :mod:`.classify` uses it for fusion groups and pattern
  schedules);
* :func:`match_contraction` — the two factors of a sum of products, each a load (of
  any dtype, under same-dtype or widening casts, optionally under a padding
  ``select(c, load, 0)``) with the set of output and reduce iterators its indices use;
  or the reason there is none;
* :meth:`Contraction.split_on` — the factor that uses an iterator (e.g. the innermost
  output dimension: the ``B``/``Y`` operand) and the other one;
  :meth:`Contraction.only_in` — the output dimensions only one factor uses (``m``
  candidates).

The CPU micro-kernel matcher
(:func:`polycomp.scheduler.cpu.backbone_tile.match_outer_product`) and the Tensor Core
matcher (:func:`polycomp.scheduler.tensorcore.tile.gemm_view`) take the factors from
:func:`match_contraction` and add their targets' conditions (dtypes, widening casts,
strides, the GEMM or direct form, which dimension is M, N, K).
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp import ir


def loads_of(e: ir.Expr) -> list[ir.Load]:
    out: list[ir.Load] = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) else None)
    return out


def iterators_of(e: ir.Expr) -> set[ir.Var]:
    """The iterators (not symbols) ``e`` uses."""
    return {v for v in ir.free_vars(e) if not v.is_param}


def strip_same_casts(e: ir.Expr) -> ir.Expr:
    """``e`` without casts that keep its dtype."""
    while isinstance(e, ir.Cast) and e.value.dtype == e.dtype:
        e = e.value
    return e


@dataclass(frozen=True, eq=False)
class Factor:
    """One multiplicand: ``expr`` as written, the ``load`` it reads (``load.dtype`` is
    the stored type: a widening cast such as float16 -> float32 sits between), the
    padding ``guard`` when it is ``select(guard, load, 0)``, and the iterators its
    indices use."""
    expr: ir.Expr
    load: ir.Load
    guard: ir.Expr | None
    dims: frozenset[ir.Var]

    @property
    def widened(self) -> bool:
        return self.load.dtype != self.expr.dtype


def factor_of(e: ir.Expr) -> Factor | None:
    """The :class:`Factor` of a multiplicand: ``[cast](load)`` or
    ``[cast](select(c, [cast](load), 0))``; None for anything else."""
    inner = e
    while isinstance(inner, ir.Cast):
        inner = inner.value
    guard = None
    if isinstance(inner, ir.Select) and ir.is_const(inner.f, 0.0):
        guard, inner = inner.cond, inner.t
        while isinstance(inner, ir.Cast):
            inner = inner.value
    if not isinstance(inner, ir.Load) or any(ir.reads_data(ix) for ix in inner.indices):
        return None                 # a gather is no GEMM operand (no packing, no panels)
    dims = frozenset().union(*(iterators_of(ix) for ix in inner.indices)) \
        if inner.indices else frozenset()
    return Factor(e, inner, guard, frozenset(dims))


@dataclass(frozen=True, eq=False)
class Contraction:
    """``stage`` computes ``out[o] = sum_r a * b``; ``mixed`` when some index of a
    factor mixes an output and a reduce iterator (convolution windows)."""
    stage: object
    a: Factor
    b: Factor
    out_dims: tuple[ir.Var, ...]
    reduce_dims: tuple[ir.Var, ...]
    mixed: bool

    @property
    def kind(self) -> str:
        return "conv" if self.mixed else "contraction"

    def split_on(self, v: ir.Var) -> tuple[Factor, Factor] | None:
        """``(the factor using v, the other)`` when exactly one factor uses ``v``."""
        if (v in self.a.dims) == (v in self.b.dims):
            return None
        return (self.a, self.b) if v in self.a.dims else (self.b, self.a)

    def only_in(self, f: Factor, other: Factor) -> list[int]:
        """Positions of the output dimensions ``f`` uses and ``other`` does not."""
        return [k for k, v in enumerate(self.out_dims) if v in f.dims and v not in other.dims]

    def unused_output_dims(self) -> list[ir.Var]:
        return [v for v in self.out_dims if v not in self.a.dims and v not in self.b.dims]

    def reduce_dims_not_in_both(self) -> list[ir.Var]:
        return [v for v in self.reduce_dims if v not in self.a.dims or v not in self.b.dims]


def _product(body: ir.Expr) -> ir.Binary | None:
    """``body`` as a product, possibly under one cast of the whole product."""
    if isinstance(body, ir.Cast):
        body = body.value
    return body if isinstance(body, ir.Binary) and body.op == "*" else None


def _mixed(stage, loads: list[ir.Load]) -> bool:
    iters, axes = set(stage.iters), set(stage.reduce_axes)
    return any(iterators_of(i) & iters and iterators_of(i) & axes
               for ld in loads for i in ld.indices)


def contraction_class(stage) -> str:
    """``contraction``, ``conv`` or ``reduce`` for a reduction stage: a contraction's
    body is a product whose loads (at least two) together use every output and reduce
    iterator, each reduce iterator in at least two loads; ``conv`` when an index mixes
    an output and a reduce iterator (``h*s + kh*d``)."""
    iters, axes = set(stage.iters), set(stage.reduce_axes)
    loads = loads_of(stage.body)
    if _product(stage.body) is None or len(loads) < 2:
        return "reduce"
    used = set().union(*(iterators_of(i) for ld in loads for i in ld.indices))
    in_two = all(sum(1 for ld in loads
                     if a in set().union(*(iterators_of(i) for i in ld.indices))) >= 2
                 for a in axes)
    if not (used >= iters | axes and in_two):
        return "reduce"
    return "conv" if _mixed(stage, loads) else "contraction"


def match_contraction(stage) -> Contraction | str:
    """The :class:`Contraction` of a sum-reduction stage whose body is a product of two
    factor loads, or the reason it is not one (a short phrase)."""
    if getattr(stage, "reduce_op", None) != "sum" or not getattr(stage, "reduce_axes", ()):
        return "not a sum reduction"
    prod = _product(stage.body)
    if prod is None:
        return "the reduction body is not a product"
    a, b = factor_of(prod.a), factor_of(prod.b)
    if a is None or b is None:
        return "the factors are not loads (optionally cast or padded)"
    return Contraction(stage, a, b, tuple(stage.iters),
                       tuple(ax.var for ax in stage.reduce_axes),
                       _mixed(stage, [a.load, b.load]))
