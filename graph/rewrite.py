"""Graph rewrites before the partition (the C/CPU family, ``graph/compile.py``).

:func:`split_projections`: a fused projection whose result is cut into column ranges --
GPT-2's ``c_attn``, ``addmm(view(x, (B*S, K)), W, b)`` to ``3*H*D`` columns, ``view(B, S,
3*H*D)``, ``split`` into q, k, v, each then split into heads -- becomes one projection per
range, ``add(matmul(x, W[:, a:e]), b[a:e])`` on the ``(B, S, K)`` source, with the column
ranges of the weight and the bias as new constants (copied once, at compile time).  Each
range is then a projection like BERT's, whose head split ``graph/lower.py`` ``head_split``
folds into its GEMM (no slice, reshape or transpose stage, no ``B*S x 3*H*D``
temporary).

:func:`stack_projections`: two or more such head-split projections of the same rows
(those ranges, or BERT's three linears) become one GEMM writing the stacked head layout
``(T, *P, H, S, D)``, each part a zero-copy ``select`` view (the rows packed once for
q, k and v; one kernel call).  ``POLYCOMP_HEAD_FOLD=0``
(:func:`polycomp.graph.lower.head_fold_enabled`) leaves the graph as it is,
``POLYCOMP_QKV_STACK=0`` the projections unstacked.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import sympy

from .ir import Graph, Node, Value


def _rows_source(a: Value, consumers: dict) -> Value | None:
    """The ``(*P, S, K)`` value the matmul's left operand ``a`` is: ``a`` itself when it
    has rank >= 3, or the source of a ``reshape`` to ``(prod(P) * S, K)`` read only by
    that matmul."""
    if len(a.shape) >= 3:
        return a
    p = a.producer
    if p is None or p.op != "reshape" or len(consumers.get(a, [])) != 1:
        return None
    src = p.inputs[0]
    if len(src.shape) < 3 or src.shape[-1] != a.shape[-1] or \
            sympy.simplify(sympy.Mul(*src.shape[:-1]) - a.shape[0]) != 0:
        return None
    return src


def _one_user(v: Value, consumers: dict, outputs: set) -> Node | None:
    us = consumers.get(v, [])
    return us[0] if len(us) == 1 and v not in outputs else None


def _ranges(full: Value, consumers: dict, outputs: set, n: int) -> list[Node] | None:
    """The ``slice`` nodes along the last axis that are ``full``'s only readers, or
    None."""
    us = consumers.get(full, [])
    if len(us) < 2 or full in outputs:
        return None
    rank = len(full.shape)
    for u in us:
        if u.op != "slice" or u.inputs[0] is not full or \
                int(u.attrs["axis"]) % rank != rank - 1 or u.attrs.get("end") is None:
            return None
        st, en = int(u.attrs.get("start", 0)), sympy.sympify(u.attrs["end"])
        if not en.is_Integer or not 0 <= st < int(en) <= n:
            return None
    return us


def split_projections(graph: Graph) -> int:
    """Rewrite every projection cut into column ranges (module docstring) in place;
    returns how many.  Assumes propagated shapes.  A candidate is a ``matmul`` by a
    constant 2-D weight ``(K, N)`` whose left operand is ``(*P, S, K)`` or a reshape of
    one to rows, followed (each the only reader of the previous value, none a graph
    output) by an optional ``add`` of a constant ``(N,)`` bias and, when the operand was
    reshaped, a reshape back to ``(*P, S, N)``, whose only readers are two or more
    ``slice`` nodes along the last axis with constant bounds.  Guarantees: each slice's
    readers read a value of the same shape, dtype and elements (``x @ W[:, a:e] +
    b[a:e]`` is the columns ``a:e`` of ``x @ W + b``); the replaced nodes and constants
    no other node reads are dropped."""
    done = 0
    for mm in list(graph.nodes):
        if mm.op == "matmul" and mm in graph.nodes and _split_one(graph, mm):
            done += 1
    return done


def _split_one(graph: Graph, mm: Node) -> bool:
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    a, w = mm.inputs
    if w.const is None or len(w.shape) != 2 or not w.shape[1].is_Integer:
        return False
    n = int(w.shape[1])
    src = _rows_source(a, consumers)
    if src is None:
        return False
    dead = [mm]
    cur = mm.output
    bias: Value | None = None
    nxt = _one_user(cur, consumers, outputs)
    if nxt is not None and nxt.op == "add" and nxt.inputs[0] is cur and \
            nxt.inputs[1].const is not None and tuple(nxt.inputs[1].shape) == (n,):
        bias, cur = nxt.inputs[1], nxt.output
        dead.append(nxt)
    if src is not a:
        nxt = _one_user(cur, consumers, outputs)
        if nxt is None or nxt.op != "reshape" or \
                tuple(nxt.output.shape) != tuple(src.shape[:-1]) + (w.shape[1],):
            return False
        cur = nxt.output
        dead.append(nxt)
    slices = _ranges(cur, consumers, outputs, n)
    if slices is None or mm.output.dtype != cur.dtype:
        return False
    fresh = _fresh_names(graph)

    new_nodes: list[Node] = []
    for sl in slices:
        st, en = int(sl.attrs.get("start", 0)), int(sl.attrs["end"])
        wt = Value(fresh(w.name), w.dtype, (w.shape[0], sympy.Integer(en - st)),
                   const=np.ascontiguousarray(np.asarray(w.const)[:, st:en]))
        graph.constants.append(wt)
        out = Value(fresh(mm.output.name), mm.output.dtype,
                    tuple(src.shape[:-1]) + (sympy.Integer(en - st),))
        node = Node("matmul", out.name, [src, wt], {}, out, mm.location)
        out.producer = node
        new_nodes.append(node)
        if bias is not None:
            bt = Value(fresh(bias.name), bias.dtype, (sympy.Integer(en - st),),
                       const=np.ascontiguousarray(np.asarray(bias.const)[st:en]))
            graph.constants.append(bt)
            res = Value(fresh(sl.output.name), sl.output.dtype, out.shape)
            add = Node("add", res.name, [out, bt], {}, res, mm.location)
            res.producer = add
            new_nodes.append(add)
            out = res
        _replace_uses(graph, sl.output, out)
        dead.append(sl)
    at = graph.nodes.index(mm)
    graph.nodes[at:at] = new_nodes
    gone = set(dead)
    graph.nodes = [x for x in graph.nodes if x not in gone]
    if src is not a and a.producer is not None:
        graph.nodes.remove(a.producer)
    used = {v for x in graph.nodes for v in x.inputs} | set(graph.outputs)
    graph.constants = [c for c in graph.constants if c in used]
    return True


def _fresh_names(graph: Graph) -> Callable[[str], str]:
    """A function giving names ``<base>_<k>`` that no value of ``graph`` (inputs,
    constants, node outputs) and no name it gave before uses."""
    names = {v.name for v in [*graph.inputs, *graph.constants]} | \
        {x.output.name for x in graph.nodes}

    def fresh(base: str) -> str:
        k = 0
        while f"{base}_{k}" in names:
            k += 1
        names.add(f"{base}_{k}")
        return f"{base}_{k}"
    return fresh


def _replace_uses(graph: Graph, old: Value, new: Value) -> None:
    for x in graph.nodes:
        x.inputs = [new if v is old else v for v in x.inputs]
    graph.outputs = [new if v is old else v for v in graph.outputs]


@dataclass(frozen=True, eq=False)
class _HeadChain:
    """``matmul(a, w) [-> add(bias)] -> reshape(*P, S, H, D) -> transpose(S, H)``:
    one projection split into heads (:func:`stack_projections`)."""
    nodes: tuple[Node, ...]
    w: Value
    bias: Value | None
    heads: int
    dim: int


def _head_chain(mm: Node, consumers: dict, outputs: set) -> _HeadChain | None:
    """The head-split projection that starts at ``mm``, each value of the chain read only
    by the next operator (the last one's result excepted), or None."""
    from .lower import _swaps
    a, w = mm.inputs
    if w.const is None or len(w.shape) != 2 or len(a.shape) < 3 or \
            not all(d.is_Integer for d in w.shape) or mm.output.dtype != w.dtype or \
            a.dtype != w.dtype or w.dtype not in ("float32", "float64"):
        return None             # (the dtypes head_split folds)
    n = int(w.shape[1])
    lead = tuple(a.shape[:-1])
    nodes, cur, bias = [mm], mm.output, None
    nxt = _one_user(cur, consumers, outputs)
    if nxt is not None and nxt.op == "add":
        other = [v for v in nxt.inputs if v is not cur]
        if len(other) == 1 and other[0].const is not None and \
                tuple(other[0].shape) == (n,) and nxt.output.dtype == cur.dtype:
            bias, cur = other[0], nxt.output
            nodes.append(nxt)
            nxt = _one_user(cur, consumers, outputs)
    if nxt is None or nxt.op != "reshape":
        return None
    shp = tuple(nxt.output.shape)
    p = len(lead)
    if len(shp) != p + 2 or shp[:p] != lead or not all(d.is_Integer for d in shp[p:]):
        return None
    heads, dim = int(shp[p]), int(shp[p + 1])
    if heads < 2 or heads * dim != n:
        return None
    tr = _one_user(nxt.output, consumers, outputs)
    if tr is None or tr.op not in ("transpose", "permute") or not _swaps(tr, p - 1, p):
        return None
    return _HeadChain((*nodes, nxt, tr), w, bias, heads, dim)


def qkv_stack_enabled() -> bool:
    """:func:`stack_projections` runs (C/CPU family, with the head fold);
    ``POLYCOMP_QKV_STACK=0`` leaves one projection per q, k, v (for comparisons)."""
    import os
    return os.environ.get("POLYCOMP_QKV_STACK", "1") != "0"


def stack_projections(graph: Graph) -> int:
    """Stack the head-split projections that read the same rows into one; returns how
    many stacked projections were made.  Assumes propagated shapes.

    Candidates are :class:`_HeadChain` s -- ``matmul(a, W_t)`` (``a (*P, S, K)``, ``W_t``
    a constant ``(K, H*D)``), an optional ``add`` of a constant ``(H*D,)`` bias,
    ``reshape(*P, S, H, D)``, the transpose of ``S`` and ``H``, each value but the last
    read only by the next -- with the same ``a``, ``H``, ``D``, dtype and bias or no
    bias (BERT's three linears; GPT-2's ``c_attn`` after :func:`split_projections`).
    Two or more become ``matmul(a, [W_0 .. W_T-1]) [-> add([b_0 .. b_T-1])] ->
    reshape(*P, S, T, H, D) -> permute -> (T, *P, H, S, D)`` followed by ``select(t)``
    for each former result: one GEMM of ``T*H*D`` columns whose tiles
    ``graph/lower.py`` ``head_split`` writes straight into the stacked head layout, the
    activation rows packed once for all three, and each ``select`` a zero-copy view of
    its contiguous block (``opdefs.is_runtime_view``).  Guarantees: each former result's
    readers read a value of the same shape, dtype and elements (columns ``t*H*D ..`` of
    ``a @ [W_0 ..] + [b_0 ..]`` are ``a @ W_t + b_t``); the constants are concatenated
    once, at compile time, and the former ones dropped when nothing else reads them."""
    made = 0
    while True:
        consumers = graph.consumers()
        outputs = set(graph.outputs)
        found: dict[tuple, list[_HeadChain]] = {}
        for mm in graph.nodes:
            if mm.op != "matmul":
                continue
            ch = _head_chain(mm, consumers, outputs)
            if ch is not None:
                key = (id(mm.inputs[0]), ch.heads, ch.dim, ch.w.dtype, ch.bias is None,
                       None if ch.bias is None else ch.bias.dtype)
                found.setdefault(key, []).append(ch)
        todo = next((c for c in found.values() if len(c) >= 2), None)
        if todo is None:
            return made
        _stack(graph, todo)
        made += 1


def _stack(graph: Graph, chains: list[_HeadChain]) -> None:
    fresh = _fresh_names(graph)

    first = chains[0]
    mm0 = first.nodes[0]
    a = mm0.inputs[0]
    lead = tuple(a.shape[:-1])
    p, t_n = len(lead), len(chains)
    h, d = sympy.Integer(first.heads), sympy.Integer(first.dim)
    n = sympy.Integer(t_n * first.heads * first.dim)
    loc = mm0.location
    new: list[Node] = []

    def node(op: str, base: str, ins: list, attrs: dict, shape: tuple, dtype: str) -> Value:
        out = Value(fresh(base), dtype, shape)
        nd = Node(op, out.name, ins, attrs, out, loc)
        out.producer = nd
        new.append(nd)
        return out

    w = Value(fresh(first.w.name), first.w.dtype, (first.w.shape[0], n), const=np.concatenate(
        [np.asarray(c.w.const) for c in chains], axis=1))
    graph.constants.append(w)
    dtype = mm0.output.dtype
    cur = node("matmul", "matmul_qkv", [a, w], {}, lead + (n,), dtype)
    if first.bias is not None:
        b = Value(fresh(first.bias.name), first.bias.dtype, (n,), const=np.concatenate(
            [np.asarray(c.bias.const) for c in chains if c.bias is not None]))
        graph.constants.append(b)
        cur = node("add", "add_qkv", [cur, b], {}, cur.shape, dtype)
    cur = node("reshape", "reshape_qkv", [cur],
               {"shape": lead + (sympy.Integer(t_n), h, d)}, lead + (sympy.Integer(t_n), h, d),
               dtype)
    perm = [p, *range(p - 1), p + 1, p - 1, p + 2]
    shp = cur.shape
    cur = node("permute", "permute_qkv", [cur], {"perm": perm},
               tuple(shp[q] for q in perm), dtype)
    for t, c in enumerate(chains):
        old = c.nodes[-1].output
        sel = node("select", f"{old.name}_{'qkv'[t] if t_n == 3 else t}", [cur], {"index": t},
                   tuple(cur.shape[1:]),
                   dtype)
        _replace_uses(graph, old, sel)
    at = min(graph.nodes.index(c.nodes[0]) for c in chains)
    graph.nodes[at:at] = new
    gone = {x for c in chains for x in c.nodes}
    graph.nodes = [x for x in graph.nodes if x not in gone]
    used = {v for x in graph.nodes for v in x.inputs} | set(graph.outputs)
    graph.constants = [c for c in graph.constants if c in used]


def patch_conv_enabled() -> bool:
    """:func:`patchify_convs` runs (C/CPU family); ``POLYCOMP_PATCH_CONV=0`` leaves such
    convolutions to the convolution lowering (for comparisons)."""
    import os
    return os.environ.get("POLYCOMP_PATCH_CONV", "1") != "0"


def _patch_conv(n: Node) -> bool:
    """``n`` is a ``conv2d`` whose windows tile its input without overlap or gap: a
    constant float weight ``(F, C, KH, KW)``, stride ``(KH, KW)``, no padding, dilation
    1, one group, integer ``C, H, W`` with ``KH | H`` and ``KW | W`` (ViT's patch
    embedding: 16 x 16 patches, stride 16)."""
    if n.op != "conv2d" or len(n.inputs) < 2:
        return False
    x, w = n.inputs[0], n.inputs[1]
    if w.const is None or w.dtype not in ("float32", "float64") or x.dtype != w.dtype or \
            n.output.dtype != w.dtype or len(x.shape) != 4 or len(w.shape) != 4:
        return False
    if len(n.inputs) > 2 and (n.inputs[2].const is None or n.inputs[2].dtype != w.dtype):
        return False
    _, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    if not all(getattr(d, "is_Integer", False) for d in (c, h, wd, f, cg, kh, kw)):
        return False
    kh, kw = int(kh), int(kw)
    if int(n.attrs.get("groups", 1)) != 1 or int(cg) != int(c):
        return False
    from .opdefs import _pair_attr
    if _pair_attr(n, "stride") != (kh, kw) or _pair_attr(n, "padding") != (0, 0) or \
            _pair_attr(n, "dilation") != (1, 1):
        return False
    return int(h) % kh == 0 and int(wd) % kw == 0 and (kh, kw) != (1, 1)


def patchify_convs(graph: Graph) -> int:
    """Rewrite every convolution whose windows tile its input (:func:`_patch_conv`) as
    the product it is; returns how many.  Assumes propagated shapes.

    ``conv2d(x (N, C, H, W), w (F, C, KH, KW), b)`` with stride ``(KH, KW)``, no padding,
    becomes ``reshape(N, C, OH, KH, OW, KW) -> permute(0, 2, 4, 1, 3, 5) -> reshape(N,
    OH*OW, C*KH*KW)`` (the patches: each input element in exactly one row, no im2col
    duplication), ``matmul`` by the constant ``w.reshape(F, C*KH*KW).T`` (copied once,
    at compile time), ``add(b)``, then ``reshape(N, OH, OW, F) -> permute(0, 3, 1, 2)``
    back to the convolution's ``(N, F, OH, OW)``.  Where the convolution's only reader
    is ViT's ``flatten(2)`` (a reshape to ``(N, F, OH*OW)``) whose only reader swaps its
    last two axes, that transpose's result is the product itself, ``(N, OH*OW, F)``: no
    layout operator after the GEMM.  The product is then a weight GEMM like a linear
    layer's (pre-packed weight, the register block of ``graph/compile.py``) instead of
    the convolution lowering's direct loops.  Guarantees: every replaced value's readers
    read the same shape, dtype and elements (``out[n, f, oh, ow] = b[f] + sum_{c, i, j}
    x[n, c, oh*KH + i, ow*KW + j] w[f, c, i, j]``, the sum over the same terms in another
    order); constants no node reads any more are dropped."""
    from .lower import _swaps
    done = 0
    for conv in list(graph.nodes):
        if not _patch_conv(conv):
            continue
        consumers = graph.consumers()
        outputs = set(graph.outputs)
        fresh = _fresh_names(graph)
        x, w = conv.inputs[0], conv.inputs[1]
        nb, c, h, wd = x.shape
        f, _, kh, kw = (int(d) for d in w.shape)
        oh, ow = int(h) // kh, int(wd) // kw
        kdim = int(c) * kh * kw
        dtype, loc = conv.output.dtype, conv.location
        new: list[Node] = []

        def node(op: str, base: str, ins: list, attrs: dict, shape: tuple,
                 fresh=fresh, dtype=dtype, loc=loc, new=new) -> Value:
            out = Value(fresh(base), dtype, shape)
            nd = Node(op, out.name, ins, attrs, out, loc)
            out.producer = nd
            new.append(nd)
            return out
        I = sympy.Integer  # noqa: E741 - extents
        s6 = (nb, c, I(oh), I(kh), I(ow), I(kw))
        cur = node("reshape", "patch_split", [x], {"shape": s6}, s6)
        perm = [0, 2, 4, 1, 3, 5]
        cur = node("permute", "patch_order", [cur], {"perm": perm},
                   tuple(s6[q] for q in perm))
        rows = (nb, I(oh * ow), I(kdim))
        cur = node("reshape", "patches", [cur], {"shape": rows}, rows)
        wc = Value(fresh(w.name), w.dtype, (I(kdim), I(f)), const=np.ascontiguousarray(
            np.asarray(w.const).reshape(f, kdim).T))
        graph.constants.append(wc)
        cur = node("matmul", "patch_matmul", [cur, wc], {}, (nb, I(oh * ow), I(f)))
        if len(conv.inputs) > 2:
            cur = node("add", "patch_bias", [cur, conv.inputs[2]], {}, cur.shape)
        dead = [conv]
        fl = _one_user(conv.output, consumers, outputs)
        tr = _one_user(fl.output, consumers, outputs) if fl is not None else None
        if fl is not None and fl.op == "reshape" and \
                tuple(fl.output.shape) == (nb, I(f), I(oh * ow)) and tr is not None and \
                tr.op in ("transpose", "permute") and _swaps(tr, 1, 2):
            old = tr.output
            dead += [fl, tr]
        else:
            s4 = (nb, I(oh), I(ow), I(f))
            cur = node("reshape", "patch_grid", [cur], {"shape": s4}, s4)
            cur = node("permute", "patch_nchw", [cur], {"perm": [0, 3, 1, 2]},
                       (nb, I(f), I(oh), I(ow)))
            old = conv.output
        _replace_uses(graph, old, cur)
        at = graph.nodes.index(conv)
        graph.nodes[at:at] = new
        gone = set(dead)
        graph.nodes = [x for x in graph.nodes if x not in gone]
        used = {v for x in graph.nodes for v in x.inputs} | set(graph.outputs)
        graph.constants = [k for k in graph.constants if k in used]
        done += 1
    return done
