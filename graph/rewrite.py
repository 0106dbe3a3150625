"""Graph rewrites before the partition (the C/CPU family, ``graph/compile.py``).

:func:`split_projections`: a fused projection whose result is cut into column ranges --
GPT-2's ``c_attn``, ``addmm(view(x, (B*S, K)), W, b)`` to ``3*H*D`` columns, ``view(B, S,
3*H*D)``, ``split`` into q, k, v, each then split into heads -- becomes one projection per
range, ``add(matmul(x, W[:, a:e]), b[a:e])`` on the ``(B, S, K)`` source, with the column
ranges of the weight and the bias as new constants (copied once, at compile time).  Each
range is then a projection like BERT's, whose head split ``graph/lower.py`` ``head_split``
folds into its GEMM (no slice, reshape or transpose stage, no ``B*S x 3*H*D``
temporary).  ``POLYCOMP_HEAD_FOLD=0`` (:func:`polycomp.graph.lower.head_fold_enabled`)
leaves the graph as it is.
"""
from __future__ import annotations

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
    names = {v.name for v in [*graph.inputs, *graph.constants]} | \
        {x.output.name for x in graph.nodes}

    def fresh(base: str) -> str:
        k = 0
        while f"{base}_{k}" in names:
            k += 1
        names.add(f"{base}_{k}")
        return f"{base}_{k}"

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


def _replace_uses(graph: Graph, old: Value, new: Value) -> None:
    for x in graph.nodes:
        x.inputs = [new if v is old else v for v in x.inputs]
    graph.outputs = [new if v is old else v for v in graph.outputs]
