"""A readable text form of IR (pseudo-C), used by ``polycomp explain`` and in tests."""
from __future__ import annotations

from polycomp import ir

_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6}


def expr_str(e, parent_prec: int = 0) -> str:
    """Print an expression with minimal parentheses."""
    if isinstance(e, ir.IntImm):
        return ("true" if e.value else "false") if e.dtype == "bool" else str(e.value)
    if isinstance(e, ir.FloatImm):
        return repr(e.value) + ("f" if e.dtype == "float32" else "")
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        if e.op in ir.BITWISE_OPS:  # C's precedence of these surprises: parenthesise
            return f"({expr_str(e.a, 9)} {e.op} {expr_str(e.b, 9)})"
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < parent_prec else s
    if isinstance(e, ir.Unary):
        return ("-" if e.op == "neg" else "!") + expr_str(e.a, 9)
    if isinstance(e, ir.Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, ir.Cast):
        return f"({e.dtype}){expr_str(e.value, 9)}"
    if isinstance(e, ir.Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, ir.Load):
        lanes = f"<x{e.lanes}>" if e.lanes > 1 else ""
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]{lanes}"
    return _vector_or_call_str(e)


def _vector_or_call_str(e) -> str:
    if isinstance(e, ir.Ramp):
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if isinstance(e, ir.Broadcast):
        return f"x{e.lanes}({expr_str(e.value)})"
    if isinstance(e, ir.FuncCall):
        args = ", ".join(a.name if isinstance(a, ir.Buffer) else expr_str(a) for a in e.args)
        return f"{e.func}({args})"
    name = type(e).__name__
    if hasattr(e, "op") and hasattr(e, "body"):  # frontend Reduce
        return f"{e.op}({expr_str(e.body)}, axis=[{', '.join(a.name for a in e.axes)}])"
    return f"<{name}>"


def attr_words(s: ir.AttrStmt) -> tuple[str, str]:
    """``(head, rest)`` of an attribute's comment ``// head: rest``: the mark's name
    (``<kind>:<value>``) split after its first word, as isl prints it (``tile:block`` /
    ``0`` -> ``tile`` / ``block:0``); a value that is no text prints whole."""
    if not isinstance(s.value, str):
        return s.key, str(s.value) if s.value else ""
    head, _, rest = (f"{s.key}:{s.value}" if s.value else s.key).partition(":")
    return head, rest


def stmt_str(s, indent: int = 0) -> str:
    """Print a statement tree, two spaces per level."""
    pad = "  " * indent
    if isinstance(s, ir.Block):
        return "".join(stmt_str(x, indent) for x in s.stmts)
    if isinstance(s, ir.For):
        ann = "".join(f" {k}={v}" for k, v in s.annotations)
        kind = "" if s.kind == "serial" else f"{s.kind} "
        hi = expr_str(s.extent) if ir.is_const(s.min, 0) else \
            f"{expr_str(s.min)} + {expr_str(s.extent, 6)}"
        lo = "" if ir.is_const(s.min, 0) else f"{expr_str(s.min)}, "
        return (f"{pad}{kind}for {s.var.name} in range({lo}{hi if lo else expr_str(s.extent)})"
                f"{ann}:\n" + stmt_str(s.body, indent + 1))
    if isinstance(s, ir.IfThenElse):
        out = f"{pad}if {expr_str(s.cond)}:\n" + stmt_str(s.then, indent + 1)
        if s.orelse is not None:
            out += f"{pad}else:\n" + stmt_str(s.orelse, indent + 1)
        return out
    if isinstance(s, ir.Store):
        lanes = f"<x{s.lanes}>" if s.lanes > 1 else ""
        idx = ", ".join(expr_str(i) for i in s.indices)
        return f"{pad}{s.buffer.name}[{idx}]{lanes} = {expr_str(s.value)}\n"
    if isinstance(s, ir.LetStmt):
        return f"{pad}let {s.var.name} = {expr_str(s.value)}\n" + stmt_str(s.body, indent)
    if isinstance(s, ir.Allocate):
        shp = ", ".join(expr_str(d) for d in s.buffer.shape)
        return (f"{pad}allocate {s.buffer.name}[{shp}] {s.buffer.dtype} in {s.buffer.scope}\n"
                + stmt_str(s.body, indent))
    if isinstance(s, ir.Evaluate):
        return f"{pad}{expr_str(s.value)}\n"
    if isinstance(s, ir.AttrStmt):
        head, rest = attr_words(s)
        return f"{pad}// {head}: {rest}\n" + stmt_str(s.body, indent)
    if isinstance(s, ir.Return):
        return f"{pad}return{'' if s.value is None else ' ' + expr_str(s.value)}\n"
    return f"{pad}<{type(s).__name__}>\n"


def func_str(f) -> str:
    """Print a :class:`polycomp.ir.LoweredFunc`."""
    params = ", ".join(p.name for p in f.params)
    args = ", ".join(f"{b.name}: {b.dtype}[{', '.join(expr_str(d) for d in b.shape)}]"
                     for b in f.args)
    return f"func {f.name}({params}; {args}):\n" + stmt_str(f.body, 1)


def module_str(m) -> str:
    """Print a :class:`polycomp.ir.LoweredModule`: every function with its role."""
    out = [f"module {m.name}:"]
    for mf in m.functions:
        tail = f" -> {mf.result}" if mf.result != "void" else ""
        out.append(f"# {mf.role}{'' if mf.exported else ' (internal)'}{tail}"
                   f"{': ' + mf.comment if mf.comment else ''}")
        out.append(func_str(mf.func).rstrip("\n"))
    return "\n".join(out) + "\n"
