"""Chain detection: two contractions where the second consumes the first's output.

A *chain* (Chimera's compute-intensive chain) is, over leading batch dimensions ``b``
shared by every array,

    T[b, m, l]  = sum_k X[b, m, k] * Y[b, k, l]          (first contraction)
    S[b, m, l]  = middle(T)[b, m, l]                      (optional, see below)
    O[b, m, n]  = sum_l S[b, m, l] * Z[b, l, n]           (second contraction)

where ``middle`` is a sequence of elementwise stages over ``(b, m, l)`` (each reads the
previous array at its own point, plus inputs indexed by a subset of the iterators:
scales, additive masks, ``select`` on the iterators for causal masks), optionally ending
with a softmax along ``l`` written as the op library writes it (row max, ``exp(x -
max)``, row sum, quotient).

What is checked, on the polyhedral model:

* both contractions are ``sum`` reductions whose update statements read exactly the
  patterns above (each index *is* the iterator, so the access relations are the
  projections ``U[b, m, l, k] -> X[b, m, k]`` ...), accumulated in float32: either
  float32 throughout, or ``X, Y, Z`` all float16 or all bfloat16 read through a widening
  cast to float32 (as ``ops.batch_matmul`` writes a half-precision product; the
  intermediate and the middle stages are float32; the output is float32, or its
  float16/bfloat16 cast when an elementwise cast stage of the product follows, as
  ``out_dtype=`` writes it: ``ChainMatch.out_cast``).  ``ChainMatch.dtype`` is the operand
  dtype; only the CUDA targets fuse half-precision chains (the Tensor Core kernel,
  :mod:`.tc_kernel`), the CPU kernel takes float32 ones (:func:`.tree.plan_for`);
* the model's flow dependences go from the first contraction's update to the next stage
  (and so on) and from the last middle stage to the second contraction's update: the
  second really consumes the first's output;
* every intermediate array (``T``, the middle stages' arrays) is a temporary read only
  by the next stage of the chain, so fusing it away changes nothing observable;
* ``X, Y, Z, O`` have the same batch extents (no broadcasting along ``b``).

:func:`detect_chains` returns the :class:`ChainMatch` es (typed, no free dicts);
:func:`why_not` says, for ``explain``, why a kernel with two contractions is no chain.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, TypeVar

from polycomp import ir
from polycomp.scheduler.common.contraction import match_contraction

__all__ = ["ChainMatch", "MiddleStage", "detect_chains", "why_not"]


@dataclass(frozen=True, eq=False)
class MiddleStage:
    """One elementwise stage between the contractions: ``out[b, m, l] = body`` where
    ``body`` reads ``prev`` at ``(b, m, l)`` (``iters``); between two convolutions
    (:mod:`.conv_detect`), ``out[n, f, y, x]`` likewise."""
    stage: object
    prev: ir.Buffer
    out: ir.Buffer
    iters: tuple[ir.Var, ...]


@dataclass(frozen=True, eq=False)
class ChainMatch:
    """A detected chain (see the module docstring).  ``stages`` lists every stage the
    fused kernel replaces, in program order; ``statements`` their statement names."""
    first: Any               # the first contraction's Stage
    second: Any              # the second contraction's Stage
    x: ir.Buffer
    y: ir.Buffer
    z: ir.Buffer
    out: ir.Buffer
    t: ir.Buffer             # the first contraction's output (intermediate)
    elementwise: tuple[MiddleStage, ...]
    softmax: tuple[object, ...]  # (max, exp, sum, div) stages, or ()
    batch_dims: int
    stages: tuple[object, ...]
    statements: tuple[str, ...]
    y_transposed: bool = False   # Y stored [.., l, k] (attention's K)
    dtype: str = "float32"       # X, Y, Z's dtype: float32, or float16/bfloat16 (Tensor Cores)
    out_cast: bool = False       # ``out`` is the half-precision cast of the float32 product

    @property
    def has_softmax(self) -> bool:
        return bool(self.softmax)

    @property
    def name(self) -> str:
        return f"{self.first.name}->{self.second.name}"


def _is(e, v) -> bool:
    return isinstance(e, ir.Var) and e is v


def _exact(load: ir.Load, *vs) -> bool:
    return len(load.indices) == len(vs) and all(_is(i, v) for i, v in zip(load.indices, vs))


def _strip(e: ir.Expr) -> ir.Expr:
    while isinstance(e, ir.Cast) and e.dtype == "float32":
        e = e.value
    return e


@dataclass(frozen=True)
class _Contr:
    stage: object
    a: ir.Buffer       # left operand  (.., m, r)
    b: ir.Buffer       # right operand (.., r, c)
    out: ir.Buffer
    nb: int
    b_transposed: bool = False   # right operand stored (.., c, r)
    a_dtype: str = "float32"     # the operands' stored dtypes
    b_dtype: str = "float32"


_HALF = ("float16", "bfloat16")


def _operand_ok(f) -> bool:
    """A float32 load, or a float16/bfloat16 load widened to float32."""
    d = f.load.buffer.dtype
    if f.widened:
        return d in _HALF and f.expr.dtype == "float32"
    return d == "float32"


def _single_axis(stage, why_float32: str) -> tuple[Any, list, Any, Any, Any] | str:
    """``stage``'s contraction (:func:`match_contraction`) as ``(c, bs, m, n, r)`` when
    it is a sum of products over one reduction axis ``r`` (not mixed), with at least two
    output dimensions ``(*bs, m, n)`` and a float32 output; else why not (a float32
    output missing: ``"dtype .. (<why_float32>)"``).  The operands' access patterns are
    not checked (the callers' matter)."""
    c = match_contraction(stage)
    if isinstance(c, str):
        return c
    if c.mixed or len(c.reduce_dims) != 1:
        return "not a single-axis contraction"
    iters = tuple(stage.iters)
    if len(iters) < 2:
        return "fewer than two output dimensions"
    if stage.output.dtype != "float32":
        return f"dtype {stage.output.dtype} ({why_float32})"
    *bs, m, n = iters
    return c, bs, m, n, c.reduce_dims[0]


def _contraction(stage, allow_transposed: bool = False) -> _Contr | str:
    """The product ``out[.., m, c] = sum_r a[.., m, r] * b[.., r, c]`` (with
    ``allow_transposed``, also ``b`` stored ``[.., c, r]``: ``Q K^T`` with ``K[.., l, k]``)."""
    got = _single_axis(stage, "fused chains are float32")
    if isinstance(got, str):
        return got
    c, bs, m, n, r = got
    found_dtype = False
    for transposed in (False, True) if allow_transposed else (False,):
        for fa, fb in ((c.a, c.b), (c.b, c.a)):
            if fa.guard is not None or fb.guard is not None:
                continue
            if not (_exact(fa.load, *bs, m, r)
                    and (_exact(fb.load, *bs, n, r) if transposed
                         else _exact(fb.load, *bs, r, n))):
                continue
            if not (_operand_ok(fa) and _operand_ok(fb)):
                found_dtype = True
                continue
            return _Contr(stage, fa.load.buffer, fb.load.buffer, stage.output.buffer, len(bs),
                          transposed, fa.load.buffer.dtype, fb.load.buffer.dtype)
    if found_dtype:
        return "operands are not float32 (nor float16/bfloat16 widened to float32)"
    return "operands are not A[.., m, k] and B[.., k, n]"


def _readers(stages, buf: ir.Buffer) -> list:
    return [s for s in stages if any(ld.buffer is buf for ld in _loads(s.body))]


def _loads(e: ir.Expr) -> list[ir.Load]:
    out: list[ir.Load] = []
    ir.walk(e, lambda n: out.append(n) if isinstance(n, ir.Load) else None)
    return out


def _elementwise(stage, prev: ir.Buffer, nb: int) -> MiddleStage | None:
    """``stage`` as a :class:`MiddleStage` after ``prev`` (same shape, no reduction,
    reads ``prev`` only at its own point, other loads indexed by its iterators)."""
    if stage.reduce_op is not None or stage.output.dtype != "float32":
        return None
    iters = tuple(stage.iters)
    if len(iters) != nb + 2:
        return None
    for ld in _loads(stage.body):
        if ld.buffer is prev:
            if not _exact(ld, *iters):
                return None
        elif ld.buffer.dtype != "float32" or not all(
                isinstance(i, ir.Var) and any(i is v for v in iters) for i in ld.indices):
            return None
        elif any(i is v for i in ld.indices for v in iters[:nb]) and not _exact(
                ld, *iters[:nb], *[i for i in ld.indices[nb:]]):
            return None      # batch indices only as the full leading prefix
    if not any(ld.buffer is prev for ld in _loads(stage.body)):
        return None
    if not _supported_expr(stage.body, prev):
        return None
    return MiddleStage(stage, prev, stage.output.buffer, iters)


_OPS = {"+", "-", "*", "/", "min", "max", "<", "<=", ">", ">=", "==", "!=", "&&", "||"}


def _supported_expr(e: ir.Expr, prev: ir.Buffer) -> bool:
    """Expressions fused between the products: what every chain target evaluates (the
    CUDA and NPU chain kernels build the stages' code themselves; on the CPU targets the
    stages are statements of the fused program, lowered like any other)."""
    if isinstance(e, ir.Var):
        return not e.is_param       # (the CUDA and NPU chain kernels take no symbols)
    if isinstance(e, (ir.FloatImm, ir.IntImm, ir.Load)):
        return True
    if isinstance(e, ir.Cast):
        return e.dtype in ("float32", "int64", "int32", "bool") and _supported_expr(e.value, prev)
    if isinstance(e, ir.Binary):
        return e.op in _OPS and _supported_expr(e.a, prev) and _supported_expr(e.b, prev)
    if isinstance(e, ir.Unary):
        return e.op in ("neg", "!") and _supported_expr(e.a, prev)
    if isinstance(e, ir.Select):
        return all(_supported_expr(x, prev) for x in (e.cond, e.t, e.f))
    if isinstance(e, ir.Call):
        return e.name in ("exp", "tanh", "sqrt", "abs") and all(
            _supported_expr(a, prev) for a in e.args)
    return False


def _softmax(stages, i: int, prev: ir.Buffer, nb: int) -> tuple | None:
    """The op library's softmax over the last axis of ``prev`` starting at ``stages[i]``:
    ``mx = max_r prev[.., r]``, ``e = exp(prev - mx)``, ``s = sum_r e``, ``e / s``."""
    if i + 4 > len(stages):
        return None
    mx, ex, sm, dv = stages[i:i + 4]
    if mx.reduce_op != "max" or sm.reduce_op != "sum" or ex.reduce_op or dv.reduce_op:
        return None
    if len(mx.iters) != nb + 1 or len(mx.reduce_axes) != 1:
        return None
    r = mx.reduce_axes[0].var
    if not (isinstance(mx.body, ir.Load) and mx.body.buffer is prev
            and _exact(mx.body, *mx.iters, r)):
        return None
    it = tuple(ex.iters)
    if len(it) != nb + 2:
        return None
    body = ex.body
    if not (isinstance(body, ir.Call) and body.name == "exp" and len(body.args) == 1):
        return None
    d = _strip(body.args[0])
    if not (isinstance(d, ir.Binary) and d.op == "-"):
        return None
    a, b = _strip(d.a), _strip(d.b)
    if not (isinstance(a, ir.Load) and a.buffer is prev and _exact(a, *it)
            and isinstance(b, ir.Load) and b.buffer is mx.output.buffer
            and _exact(b, *it[:-1])):
        return None
    r2 = sm.reduce_axes[0].var if len(sm.reduce_axes) == 1 else None
    if not (r2 is not None and isinstance(sm.body, ir.Load)
            and sm.body.buffer is ex.output.buffer and _exact(sm.body, *sm.iters, r2)):
        return None
    dit = tuple(dv.iters)
    q = _strip(dv.body)
    if not (isinstance(q, ir.Binary) and q.op == "/" and len(dit) == nb + 2):
        return None
    qa, qb = _strip(q.a), _strip(q.b)
    if not (isinstance(qa, ir.Load) and qa.buffer is ex.output.buffer and _exact(qa, *dit)
            and isinstance(qb, ir.Load) and qb.buffer is sm.output.buffer
            and _exact(qb, *dit[:-1])):
        return None
    if any(s.output.dtype != "float32" for s in (mx, ex, sm, dv)):
        return None
    return (mx, ex, sm, dv)


def _softmax_private(stages, sm: tuple, readers: list, outs: set) -> bool:
    """The softmax's arrays are read by the softmax alone and are no kernel outputs."""
    mx, ex, s_, dv = sm
    return (readers == [mx, ex] and _readers(stages, ex.output.buffer) == [s_, dv]
            and _readers(stages, mx.output.buffer) == [ex]
            and _readers(stages, s_.output.buffer) == [dv]
            and not any(id(b.output.buffer) in outs for b in (mx, ex, s_)))


def _flows(model, src_stage, dst_stage) -> bool:
    """Does the model have a flow dependence from a statement of ``src_stage`` to one of
    ``dst_stage``?"""
    import islpy as isl

    from polycomp.islutil import maps
    src = {s.name for s in model.statements if s.stage is src_stage}
    dst = {s.name for s in model.statements if s.stage is dst_stage}
    return any(m.get_tuple_name(isl.dim_type.in_) in src
               and m.get_tuple_name(isl.dim_type.out) in dst for m in maps(model.flow))


def _no_flow(model, chain: Sequence) -> str | None:
    """Why ``chain`` (stages in order) is no chain of flow dependences: the first
    consecutive pair without one (:func:`_flows`), or None when every pair has one."""
    for a, b in zip(chain, chain[1:]):
        if not _flows(model, a, b):
            return f"no flow dependence from {a.name} to {b.name}"
    return None


def _second_product(stages, j: int, prev: ir.Buffer, nb: int, outs: set,
                    product: Callable[[Any], _Contr | str]) -> _Contr | str:
    """The second contraction ``product(stages[j])`` when it reads the intermediate
    ``prev`` as its left operand over the same ``nb`` batch dimensions, ``prev`` being no
    kernel output (``outs``: the outputs' buffer ids) and read by ``stages[j]`` alone;
    else why not."""
    if id(prev) in outs:
        return f"the intermediate {prev.name} is a kernel output"
    if _readers(stages, prev) != [stages[j]]:
        return f"{prev.name} is not read by the next stage alone"
    c2 = product(stages[j])
    if isinstance(c2, str):
        return f"the stage after the first contraction: {c2}"
    if c2.a is not prev or c2.nb != nb:
        return "the second contraction does not read the intermediate as its left operand"
    return c2


def _batch_extents_equal(model, c1: _Contr, c2: _Contr) -> bool:
    bufs = (c1.a, c1.b, c2.b, c2.out)
    shapes = [tuple(b.shape[:c1.nb]) for b in bufs]
    return all(len(s) == c1.nb and all(_same_extent(x, y) for x, y in zip(s, shapes[0]))
               for s in shapes)


def _same_extent(x, y) -> bool:
    if isinstance(x, int) or isinstance(y, int):
        return x == y
    return x is y or ir.structural_equal(x, y)


def _match_from(model, stages, i: int) -> ChainMatch | str:
    c1 = _contraction(stages[i], allow_transposed=True)
    if isinstance(c1, str):
        return c1
    outs = {id(t.buffer) for t in model.graph.outputs}
    prev, j, nb = c1.out, i + 1, c1.nb
    chain_stages = [stages[i]]
    elementwise: list[MiddleStage] = []
    softmax: tuple = ()
    while j < len(stages):
        if id(prev) in outs:
            return f"the intermediate {prev.name} is a kernel output"
        readers = _readers(stages, prev)
        sm = _softmax(stages, j, prev, nb)
        if sm is not None:
            if not _softmax_private(stages, sm, readers, outs):
                return "the softmax's arrays are read outside the chain"
            softmax = sm
            chain_stages += list(sm)
            prev, j = sm[3].output.buffer, j + 4
            break
        if readers != [stages[j]]:
            return f"{prev.name} is read by {len(readers)} stages, not just the next one"
        ew = _elementwise(stages[j], prev, nb)
        if ew is None:
            break
        elementwise.append(ew)
        chain_stages.append(stages[j])
        prev, j = ew.out, j + 1
    if j >= len(stages):
        return "no second contraction follows"
    return _finish(model, stages, j, c1, prev, chain_stages, tuple(elementwise), softmax, outs)


def _finish(model, stages, j: int, c1: _Contr, prev: ir.Buffer, chain_stages: list,
            elementwise: tuple, softmax: tuple, outs: set) -> ChainMatch | str:
    """The second contraction at ``stages[j]`` reading ``prev``, and the model checks."""
    nb = c1.nb
    c2 = _second_product(stages, j, prev, nb, outs, _contraction)
    if isinstance(c2, str):
        return c2
    if c1.a_dtype != c1.b_dtype or c2.b_dtype != c1.a_dtype:
        return (f"mixed operand dtypes X {c1.a_dtype}, Y {c1.b_dtype}, Z {c2.b_dtype} "
                f"(fused chains take X, Y, Z of one dtype)")
    if c2.a_dtype != "float32":
        return f"the intermediate {prev.name} is {c2.a_dtype} (fused chains keep it float32)"
    chain_stages.append(stages[j])
    out, out_cast = c2.out, False
    if c1.a_dtype in _HALF and j + 1 < len(stages) and id(c2.out) not in outs \
            and _readers(stages, c2.out) == [stages[j + 1]]:
        cast = _output_cast(stages[j + 1], c2.out, nb)
        if cast is not None:
            chain_stages.append(stages[j + 1])
            out, out_cast = cast, True
    why = _no_flow(model, chain_stages)
    if why is not None:
        return why
    if not _batch_extents_equal(model, c1, c2):
        return "the batch extents differ"
    names = tuple(s.name for s in model.statements if any(s.stage is c for c in chain_stages))
    return ChainMatch(chain_stages[0], stages[j], c1.a, c1.b, c2.b, out, c1.out,
                      elementwise, softmax, nb, tuple(chain_stages), names, c1.b_transposed,
                      c1.a_dtype, out_cast)


def _output_cast(stage, o: ir.Buffer, nb: int) -> ir.Buffer | None:
    """``stage`` as ``O16[b, m, n] = cast(O[b, m, n], float16 | bfloat16)`` (what
    ``ops.batch_matmul(.., out_dtype=...)`` appends): its output, else None."""
    if stage.reduce_op is not None or stage.output.dtype not in _HALF:
        return None
    iters = tuple(stage.iters)
    body = stage.body
    if len(iters) != nb + 2 or not (isinstance(body, ir.Cast) and body.dtype in _HALF):
        return None
    v = _strip(body.value)
    if isinstance(v, ir.Load) and v.buffer is o and _exact(v, *iters):
        return stage.output.buffer
    return None


def _stages(model) -> tuple:
    stages = getattr(model.graph, "stages", None)
    if not stages or not all(hasattr(s, "reduce_op") and hasattr(s, "output") for s in stages):
        return ()
    return tuple(stages)


class _Match(Protocol):
    @property
    def stages(self) -> tuple: ...


_M = TypeVar("_M", bound=_Match)


def scan_chains(model, match_from: Callable[[Any, tuple, int], _M | str]) -> list[_M]:
    """The matches ``match_from(model, stages, i)`` (a match, or why none starts at
    ``stages[i]``) found scanning the model's stages (:func:`_stages`) in program order:
    after a match, the scan resumes after its ``.stages`` (matches do not overlap).
    Assumes a match's ``.stages`` are consecutive ones starting at ``stages[i]``."""
    stages = _stages(model)
    out: list[_M] = []
    i = 0
    while i < len(stages):
        m = match_from(model, stages, i)
        if not isinstance(m, str):
            out.append(m)
            i += len(m.stages)
        else:
            i += 1
    return out


def why_no_chain(model, found: Sequence[_Match], starts: Callable[[Any], bool],
                 match_from: Callable[[Any, tuple, int], object]) -> list[str]:
    """``"<stage>: <why>"`` for each of the model's stages that could start a chain
    (``starts``) but is in none of the ``found`` matches' ``.stages`` and starts none
    (``match_from(model, stages, i)`` gives the reason string), in program order (for
    ``explain``)."""
    stages = _stages(model)
    out = []
    inside = {id(st) for m in found for st in m.stages}
    for i, s in enumerate(stages):
        if id(s) in inside or not starts(s):
            continue
        m = match_from(model, stages, i)
        if isinstance(m, str):
            out.append(f"{s.name}: {m}")
    return out


def detect_chains(model) -> list[ChainMatch]:
    """Every chain of ``model`` (non-overlapping, in program order)."""
    return scan_chains(model, _match_from)


def why_not(model) -> list[str]:
    """For each contraction that starts no chain, the reason (for ``explain``)."""
    return why_no_chain(model, detect_chains(model), _starts_chain, _match_from)


def _starts_chain(stage) -> bool:
    return not isinstance(_contraction(stage, allow_transposed=True), str)
