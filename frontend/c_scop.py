"""Reading one C function as a SCoP: signature, ``#pragma scop`` region, loops, ifs and
assignments -> :class:`~polycomp.frontend.c_program.CProgram`.

:class:`ScopReader` checks every construct as it reads it and raises a
:class:`~polycomp.errors.PolycompError` subclass naming the construct and its C line for
anything outside the supported subset (see :mod:`polycomp.frontend.c_reader`).  Each
``for`` loop adds to the enclosing constraints ``i >= lb`` (``i <= lb`` going down),
a stride ``exists e: i = lb + c*e`` when ``|c| > 1`` and its condition, after checking
with isl that the condition is monotone in the loop's direction (so the loop's
iterations are exactly the integer points of those constraints); an ``if`` adds its
condition (``not (...)`` in the ``else`` branch).
"""
from __future__ import annotations

import islpy as isl

from polycomp import ir
from polycomp.affine import to_isl
from polycomp.errors import (
    DTypeError,
    NonAffineIndexError,
    PolycompError,
    ShapeMismatchError,
    UnknownSymbolError,
    UnsupportedConstructError,
)

from .c_expr import (
    ELEMENT_TYPES,
    INT_WORDS,
    ISL_KEYWORDS,
    ExprReader,
    Scope,
    affine_pieces,
    c_text,
    guarded,
    isl_name,
    node_kind,
    param_prefix,
)
from .c_program import CArray, CGraph, CIf, CLoop, CProgram, CSeq, CStatementSource, CStmt

__all__ = ["ScopReader", "find_pragma"]


#: Largest loop step (in magnitude): a step near 2^63 overflows isl's and the generated
#: code's int64 arithmetic (``i += 9223372036854775807`` ran zero iterations).
MAX_LOOP_STEP = 1 << 31


class ScopReader(ExprReader):
    """Turns one pycparser ``FuncDef`` into a :class:`CProgram` (``read()``)."""

    def __init__(self, func, filename, lines, typedefs=None):
        self.func = func
        self.typedefs: dict[str, tuple] = dict(typedefs or {})
        self.filename = filename
        self.lines = lines
        self.name = func.decl.name
        self.params: dict[str, ir.Var] = {}
        self.arrays: dict[str, CArray] = {}
        self.declared_iters: set = set()
        self.unsigned_iters: set = set()         # iterators of an unsigned C type
        self.statements: list[CStmt] = []
        self.written: set = set()
        self.scalar_params: set = set()          # read-only scalars passed by value
        self.locals: dict[str, CArray] = {}      # local scalars (0-d) and local arrays
        self.ctx: isl.Context | None = None      # set by read()

    def reject_dollar_identifiers(self) -> None:
        """gcc accepts ``$`` in identifiers; polycomp's model cannot name them."""
        from pycparser import c_ast

        class Visitor(c_ast.NodeVisitor):
            def __init__(v):
                v.found = None

            def check(v, node, name):
                if v.found is None and name and "$" in name:
                    v.found = (node, name)

            def visit_ID(v, node):
                v.check(node, node.name)

            def visit_Decl(v, node):
                v.check(node, node.name)
                v.generic_visit(node)
        vis = Visitor()
        vis.visit(self.func)
        if vis.found is not None:
            node, name = vis.found
            self.unsupported(f"the identifier {name!r} ('$' in a name)", node,
                             "rename it with letters, digits and '_'")

    def read(self) -> CProgram:
        from pycparser import c_ast

        from polycomp.islutil import context
        self.ctx = context()
        fdecl = self.func.decl.type
        ret = self.words(fdecl.type)
        if ret != ("void",):
            self.unsupported(f"return type {' '.join(ret) or '?'} of {self.name!r}",
                             self.func.decl, "a kernel function returns void and writes "
                             "its results into array parameters")
        if self.func.param_decls:
            self.unsupported(f"the K&R-style definition of {self.name!r}", self.func.decl,
                             "declare each parameter's type in the parameter list "
                             "(void f(int n, float A[n]))")
        self.reject_dollar_identifiers()
        order = []
        for p in (fdecl.args.params if fdecl.args else []):
            if isinstance(p, c_ast.Typename) and self.words(p) == ("void",):
                continue
            if isinstance(p, c_ast.EllipsisParam):
                self.unsupported("a variadic parameter list", p)
            try:
                order.append(self.parameter(p))
            except PolycompError as e:
                raise self.relocate(e, p) from None
        top = Scope()
        before, items = self.scop_items(top)
        tree = self.block(items, top)
        if before:  # initialised declarations ahead of #pragma scop run first
            tree = CSeq(before + tree.children)
        arrays = tuple(a for a in order if isinstance(a, CArray))
        params = tuple(a for a in order if isinstance(a, ir.Var))
        # every array parameter is an argument: written ones are (in-out) outputs, all
        # others (read or not used at all) inputs
        outputs = tuple(a for a in arrays if a.name in self.written)
        inputs = tuple(a for a in arrays if a.name not in self.written)
        if not self.statements:
            raise UnsupportedConstructError(f"the SCoP of {self.name!r} has no assignment "
                                            f"to compile", self.loc(self.func.decl))
        graph = CGraph(self.name, params, inputs, outputs, arrays, self.loc(self.func.decl),
                       temporaries=tuple(self.locals.values()),
                       signature=tuple(a.name for a in order))
        return CProgram(graph, list(self.statements), tree)

    def parameter(self, p):
        from pycparser import c_ast
        loc = self.loc(p)
        name = p.name
        if name is None:
            self.unsupported("an unnamed parameter", p)
        if name in self.params or name in self.arrays:
            raise UnsupportedConstructError(f"parameter {name!r} is declared twice", loc)
        t = p.type
        if isinstance(t, c_ast.PtrDecl):
            self.unsupported(f"pointer parameter {name!r}", p,
                             f"declare its shape as a C99 VLA parameter, e.g. "
                             f"`float {name}[restrict N][M]`")
        if isinstance(t, c_ast.ArrayDecl):
            dims: list = []
            while isinstance(t, c_ast.ArrayDecl):
                if t.dim is None:
                    raise ShapeMismatchError(
                        f"array parameter {name!r} has no extent in dimension {len(dims)}; "
                        f"declare every extent, e.g. `float {name}[restrict N][M]`", loc)
                dims.append(t.dim)
                t = t.type
            if isinstance(t, c_ast.PtrDecl):
                self.unsupported(f"array of pointers {name!r}", p)
            dtype = self.element_type(t, f"array {name!r}", loc)
            shape = tuple(self.extent(d, name, k) for k, d in enumerate(dims))
            if name in ISL_KEYWORDS:
                raise UnsupportedConstructError(f"array name {name!r} is reserved", loc)
            arr = CArray(ir.Buffer(name, dtype, shape), loc)
            self.arrays[name] = arr
            return arr
        words = tuple(w for w in self.words(t) if w != "const")
        if words and all(w in INT_WORDS for w in words):
            if name in ISL_KEYWORDS or name in ("floord", "min", "max"):
                raise UnsupportedConstructError(f"parameter name {name!r} is reserved", loc)
            v = ir.Var(name, "int64", is_param=True)
            self.params[name] = v
            return v
        if isinstance(t, c_ast.TypeDecl) and words in ELEMENT_TYPES:
            # a read-only scalar passed by value: a zero-dimensional input array of the
            # model (the caller passes a number or a 0-d array)
            if name in ISL_KEYWORDS:
                raise UnsupportedConstructError(f"parameter name {name!r} is reserved", loc)
            arr = CArray(ir.Buffer(name, ELEMENT_TYPES[words], ()), loc)
            self.arrays[name] = arr
            self.scalar_params.add(name)
            return arr
        self.unsupported(f"parameter {name!r} of type `{' '.join(words) or '?'}`", p)

    def element_type(self, t, what, loc) -> str:
        """The dtype of element type ``t`` (typedef names resolved)."""
        words = tuple(w for w in self.words(t) if w != "const")
        dtype = ELEMENT_TYPES.get(words)
        if dtype is None:
            hint = ("polycomp has no unsigned types; " if "unsigned" in words or
                    (words and words[0].startswith("uint")) else "")
            raise DTypeError(f"element type `{' '.join(words) or c_text(t)}` of {what} is not "
                             f"supported ({hint}use float, double, int, long, int64_t, "
                             f"int8_t, char, bool)", loc)
        return dtype

    def extent(self, node, name, k) -> ir.Expr:
        e = self.expr(node, Scope(), affine=True)
        e = ir.const(e) if not isinstance(e, ir.Expr) else e
        to_isl(e, self.names(Scope()), f"extent {k} of array {name!r}", self.loc(node))
        if isinstance(e, ir.IntImm) and e.value < 1:
            raise ShapeMismatchError(f"extent {k} of array {name!r} is {e.value}", self.loc(node))
        return e

    def scop_items(self, top) -> tuple[list, list]:
        """``(statements of the initialised declarations ahead of the region, the
        items of the region)``; the other items outside it are checked here."""
        from pycparser import c_ast
        items = list(self.func.body.block_items or []) if self.func.body else []
        marks = [k for k, it in enumerate(items) if isinstance(it, c_ast.Pragma)
                 and it.string.strip() in ("scop", "endscop")]
        kinds = [items[k].string.strip() for k in marks]
        if not marks:
            if find_pragma(self.func.body, "scop") or find_pragma(self.func.body, "endscop"):
                self.unsupported("#pragma scop inside a nested block", self.func.body,
                                 "put #pragma scop / #pragma endscop in the function's "
                                 "outermost block")
            inside = items
            outside = []
            marks = [len(items)]
        else:
            if kinds != ["scop", "endscop"]:
                self.unsupported("this arrangement of #pragma scop / #pragma endscop",
                                 items[marks[0]], "use exactly one #pragma scop followed by "
                                 "one #pragma endscop")
            inside = items[marks[0] + 1:marks[1]]
            outside = items[:marks[0]] + items[marks[1] + 1:]
        before: list = []
        for k, it in enumerate(outside):
            if isinstance(it, c_ast.Decl):
                if it.init is not None and k >= marks[0]:
                    self.unsupported(f"the initialised declaration {it.name!r} after "
                                     f"#pragma endscop", it, "polycomp compiles only the "
                                     "SCoP; move it ahead of #pragma scop")
                st = self.statement(it, top)
                if st is not None:
                    before.append(st)
            elif isinstance(it, (c_ast.Pragma, c_ast.EmptyStatement)) or \
                    (isinstance(it, c_ast.Return) and it.expr is None):
                continue
            else:
                text = c_text(it)
                shown = f" `{text}`" if "\n" not in text else ""
                self.unsupported(f"{_statement_kind(it)}{shown} outside #pragma scop "
                                 f"... #pragma endscop", it,
                                 "polycomp compiles only the SCoP; move it into the region or "
                                 "out of the kernel function")
        return before, inside

    def block(self, items, scope, nested=False) -> CSeq:
        if nested:
            scope = scope.block()
        out = []
        for it in items:
            n = self.statement(it, scope)
            if n is not None:
                out.append(n)
        return CSeq(out)

    def statement(self, node, scope):
        """The tree of one C statement; an error that names no C line gets this
        statement's (:meth:`relocate`)."""
        try:
            return self._statement(node, scope)
        except PolycompError as e:
            raise self.relocate(e, node) from None

    def _statement(self, node, scope):
        from pycparser import c_ast
        if isinstance(node, c_ast.Compound):
            return self.block(node.block_items or [], scope, nested=True)
        if isinstance(node, c_ast.For):
            return self.for_loop(node, scope)
        if isinstance(node, c_ast.If):
            return self.if_(node, scope)
        if isinstance(node, c_ast.Assignment):
            return self.assignment(node, scope)
        if isinstance(node, c_ast.UnaryOp) and node.op in ("++", "--", "p++", "p--"):
            return self.increment(node, scope)
        if isinstance(node, (c_ast.EmptyStatement, c_ast.Pragma)):
            return None
        if isinstance(node, c_ast.Decl):
            return self.declaration(node, scope)
        if isinstance(node, c_ast.FuncCall):
            self.unsupported(f"call statement `{c_text(node)}`", node,
                             "a call may have side effects; only assignments to array "
                             "elements are allowed")
        self.unsupported(f"{node_kind(node)} `{c_text(node)}`", node)

    def declaration(self, d, scope):
        """A local declaration: ``int i, j;`` (no initialiser) declares loop iterators
        assigned by later ``for`` loops; any other scalar (``double nrm;``, ``int t =
        0;``) is a zero-dimensional local array and a local array (``double z[N];``) a
        local array of the model, both temporaries of the kernel with their real
        dependences.  An initialiser is an assignment statement at that point (returned;
        None otherwise)."""
        from pycparser import c_ast
        loc = self.loc(d)
        name = d.name
        t = d.type
        words = self.words(t)
        if isinstance(t, c_ast.TypeDecl) and d.init is None and words and \
                all(w in INT_WORDS for w in words):
            self.declared_iters.add(name)
            if _unsigned(words):
                self.unsigned_iters.add(name)
            return None
        if name is None or isinstance(t, (c_ast.PtrDecl, c_ast.FuncDecl)) or \
                "static" in (d.storage or []) or "extern" in (d.storage or []):
            what = "local pointer" if isinstance(t, c_ast.PtrDecl) else "declaration"
            self.unsupported(f"{what} `{c_text(d)}`", d,
                             "only local scalars and arrays of arithmetic types are allowed")
        if name in self.params or name in self.arrays or name in scope.block_names or \
                (name in self.declared_iters and name not in scope.locals) or \
                any(v.name == name for v in scope.loops):
            self.unsupported(f"the declaration of {name!r}, which is already declared", d,
                             "give each local variable its own name")
        if name in ISL_KEYWORDS:
            self.unsupported(f"local variable name {name!r}", d, "rename it")
        dims: list = []
        while isinstance(t, c_ast.ArrayDecl):
            if t.dim is None:
                raise ShapeMismatchError(f"local array {name!r} has no extent in dimension "
                                         f"{len(dims)}", loc)
            dims.append(t.dim)
            t = t.type
        if not isinstance(t, c_ast.TypeDecl):
            self.unsupported(f"local `{c_text(d)}`", d)
        dtype = self.element_type(t, f"local {'array' if dims else 'variable'} {name!r}", loc)
        shape = tuple(self.extent(x, name, k) for k, x in enumerate(dims))
        # a name declared again in another block (C block scope) is another variable
        unique, k = name, 1
        while unique in self.locals or unique in self.arrays or unique in self.params:
            unique, k = f"{name}_{k}", k + 1
        arr = CArray(ir.Buffer(unique, dtype, shape), loc)
        self.locals[unique] = arr
        scope.locals[name] = arr
        scope.block_names.add(name)
        if d.init is None:
            return None
        if dims:
            self.unsupported(f"the initialiser of local array {name!r}", d,
                             "assign its elements in a loop")
        lhs = ir.Load(arr.buffer, (), dtype)
        return self.add_statement(d, scope, lhs, self.expr(d.init, scope))

    def for_loop(self, node, scope):
        from pycparser import c_ast
        loc = self.loc(node)
        # -- the iterator and its initial value
        init = node.init
        if isinstance(init, c_ast.DeclList) and len(init.decls) == 1:
            d = init.decls[0]
            words = self.words(d.type)
            if not (isinstance(d.type, c_ast.TypeDecl) and words and
                    all(w in INT_WORDS for w in words) and d.init is not None):
                self.unsupported(f"loop initialisation `{c_text(init)}`", node,
                                 "write `for (int i = lb; i < ub; i++)`")
            name, start_node = d.name, d.init
            unsigned = _unsigned(words)
        elif isinstance(init, c_ast.Assignment) and init.op == "=" and \
                isinstance(init.lvalue, c_ast.ID):
            name, start_node = init.lvalue.name, init.rvalue
            unsigned = name in self.unsigned_iters
            if name not in self.declared_iters:
                if name in self.params:
                    self.unsupported(f"assigning to parameter {name!r} in a loop header",
                                     node)
                raise UnknownSymbolError(f"loop iterator {name!r} is not declared "
                                         f"(declare it as `int {name};` or in the loop)", loc)
        else:
            self.unsupported(f"loop initialisation `{c_text(init) if init else ''}`", node,
                             "write `for (int i = lb; i < ub; i++)`")
        if name in self.params or name in self.arrays or name in scope.locals or \
                any(v.name == name for v in scope.loops):
            self.unsupported(f"loop iterator {name!r} shadowing a parameter, array, local "
                             f"variable or enclosing iterator", node, "rename the iterator")
        if name in ISL_KEYWORDS:
            self.unsupported(f"loop iterator name {name!r}", node, "rename the iterator")
        start = self.affine(start_node, scope, f"lower bound of loop {name!r}")
        step = self.loop_step(node, name)
        if node.cond is None:
            self.unsupported(f"loop {name!r} without a condition", node)
        var = ir.Var(name)
        inner = scope.inner(loops=scope.loops + [var])
        names = self.names(inner)
        it = names[var]
        start_pieces = affine_pieces(start, names, loc, f"lower bound of loop {name!r}")
        if abs(step) != 1 and len(start_pieces) != 1:
            self.unsupported(f"a min/max start value with stride {step} in loop {name!r}",
                             node)
        op = ">=" if step > 0 else "<="
        first = " or ".join(guarded(g, f"{it} {op} {to_isl(e, names, 'loop bound', loc)}")
                            for g, e in start_pieces)
        inner.constraints.append(first)
        if abs(step) != 1:
            s0 = to_isl(start_pieces[0][1], names, "loop bound", loc)
            sign = "+" if step > 0 else "-"
            inner.constraints.append(
                f"exists (stride_{it} : {it} = {s0} {sign} {abs(step)}*stride_{it})")
        cond = self.condition(node.cond, inner, f"condition of loop {name!r}")
        self.check_monotone(cond, inner, var, step, node)
        inner.constraints.append(cond)
        if unsigned and step < 0:
            self.check_no_wrap(inner, var, step, node)
        body = self.statement(node.stmt, inner)
        return CLoop(var, len(scope.loops), step, body, loc)

    def loop_step(self, node, name) -> int:
        from pycparser import c_ast
        nx = node.next
        step = None
        if isinstance(nx, c_ast.UnaryOp) and isinstance(nx.expr, c_ast.ID) and \
                nx.expr.name == name:
            step = {"++": 1, "p++": 1, "--": -1, "p--": -1}.get(nx.op)
        elif isinstance(nx, c_ast.Assignment) and isinstance(nx.lvalue, c_ast.ID) and \
                nx.lvalue.name == name:
            if nx.op in ("+=", "-="):
                c = self.int_constant(nx.rvalue)
                if c is not None:
                    step = c if nx.op == "+=" else -c
            elif nx.op == "=" and isinstance(nx.rvalue, c_ast.BinaryOp) and \
                    nx.rvalue.op in ("+", "-"):
                a, b = nx.rvalue.left, nx.rvalue.right
                if isinstance(a, c_ast.ID) and a.name == name:
                    c = self.int_constant(b)
                    if c is not None:
                        step = c if nx.rvalue.op == "+" else -c
                elif isinstance(b, c_ast.ID) and b.name == name and nx.rvalue.op == "+":
                    step = self.int_constant(a)
        if not step:
            self.unsupported(f"loop increment `{c_text(nx)}` of {name!r}" if nx else
                             f"loop {name!r} without an increment", node,
                             f"the increment must be {name}++, {name}--, {name} += c or "
                             f"{name} -= c for a non-zero integer constant c")
        if abs(step) > MAX_LOOP_STEP:   # isl and the generated int64 code would overflow
            self.unsupported(f"the loop step {step} of {name!r}", node,
                             f"steps up to {MAX_LOOP_STEP} in magnitude are supported")
        return step

    def int_constant(self, node):
        v = self.expr(node, Scope(), affine=True)
        if isinstance(v, int):
            return v
        if isinstance(v, ir.IntImm):
            return v.value
        return None

    def check_monotone(self, cond, scope, var, step, node):
        """The loop runs while ``cond`` holds; it is a SCoP loop only when ``cond``
        stays false once it is false (an upper bound for an increasing loop, a lower
        bound for a decreasing one), so its iterations are exactly the points of the
        domain.  Checked with isl: if ``cond`` holds at ``i + step`` it holds at ``i``."""
        assert self.ctx is not None
        names = self.names(scope)
        dims = ", ".join(names[v] for v in scope.loops)
        prefix = param_prefix(self.params.values())
        outer = " and ".join(f"({c})" for c in scope.constraints) or "1 = 1"
        try:
            here = isl.Set.read_from_str(self.ctx, f"{prefix}{{ [{dims}] : {cond} }}")
            around = isl.Set.read_from_str(self.ctx, f"{prefix}{{ [{dims}] : {outer} }}")
            shift = isl.MultiAff.read_from_str(
                self.ctx, f"{prefix}{{ [{dims}] -> [{_shifted(scope.loops, names, var, step)}] }}")
        except isl.Error as e:  # pragma: no cover - texts come from to_isl
            raise UnsupportedConstructError(f"isl rejected loop {var.name!r}: {e}",
                                            self.loc(node)) from None
        nxt = here.preimage_multi_aff(shift).intersect(around)
        if not nxt.is_subset(here):
            raise NonAffineIndexError(
                f"the condition `{c_text(node.cond)}` of loop {var.name!r} is not a "
                f"{'upper' if step > 0 else 'lower'} bound of {var.name!r} (it can become "
                f"true again after being false), so the loop is not a SCoP loop; write "
                f"`{var.name} {'<' if step > 0 else '>'} bound`", self.loc(node))

    def check_no_wrap(self, scope, var, step, node):
        """A decreasing loop over an unsigned iterator must stop before the iterator
        would go below 0: C wraps it to a huge value there, which `i >= 0` (always
        true) and `i >= lb` accept, so the C loop does not end where polycomp's would."""
        assert self.ctx is not None
        names = self.names(scope)
        it = names[var]
        dims = ", ".join(names[v] for v in scope.loops)
        prefix = param_prefix(self.params.values())
        sizes = [f"{isl_name(p)} >= 1" for p in self.params]
        where = " and ".join(f"({c})" for c in [*scope.constraints, *sizes]) or "1 = 1"
        wraps = isl.Set.read_from_str(
            self.ctx, f"{prefix}{{ [{dims}] : {where} and {it} + ({step}) < 0 }}")
        if not wraps.is_empty():
            raise NonAffineIndexError(
                f"the unsigned iterator {var.name!r} (condition `{c_text(node.cond)}`) "
                f"steps below 0, where C wraps it to a huge value (the C loop does not "
                f"end there); stop it at {var.name} >= {abs(step)} or use a signed "
                f"iterator",
                self.loc(node))

    def if_(self, node, scope):
        cond = self.condition(node.cond, scope, "if condition")
        then_scope = scope.inner(constraints=scope.constraints + [cond])
        then = self.statement(node.iftrue, then_scope)
        orelse = None
        if node.iffalse is not None:
            else_scope = scope.inner(constraints=scope.constraints + [f"not ({cond})"])
            orelse = self.statement(node.iffalse, else_scope)
        return CIf(then, orelse)

    def assignment(self, node, scope):
        from pycparser import c_ast
        ops = {"=": None, "+=": "+", "-=": "-", "*=": "*", "/=": "/"}
        if node.op not in ops:
            self.unsupported(f"compound assignment {node.op!r}", node)
        lhs = self.lvalue(node.lvalue, node, scope)
        if isinstance(node.rvalue, c_ast.Assignment) and node.op == "=":
            # a chain `a = b = e`: `b = e` first, then `a = b` (the value of an
            # assignment is its left operand after the store)
            inner = self.assignment(node.rvalue, scope)
            last = inner if isinstance(inner, CStmt) else inner.children[-1]
            rhs = ir.Load(last.write, last.write_indices, last.write.dtype)
            outer = self.add_statement(node, scope, lhs, rhs)
            return CSeq((inner.children if isinstance(inner, CSeq) else [inner]) + [outer])
        rhs = self.expr(node.rvalue, scope)
        op = ops[node.op]
        value = rhs if op is None else self.arith(op, lhs, rhs, node)
        return self.add_statement(node, scope, lhs, value)

    def increment(self, node, scope):
        lhs = self.lvalue(node.expr, node, scope)
        value = self.arith("+" if "+" in node.op else "-", lhs, 1, node)
        return self.add_statement(node, scope, lhs, value)

    def lvalue(self, lv, node, scope) -> ir.Load:
        """The element an assignment writes: an array element or a local scalar."""
        from pycparser import c_ast
        if isinstance(lv, c_ast.ArrayRef):
            if isinstance(lv.name, c_ast.ID) and lv.name.name in self.scalar_params:
                self.unsupported(f"subscripting the scalar parameter {lv.name.name!r}", node)
            return self.array_ref(lv, scope)
        if isinstance(lv, c_ast.ID):
            name = lv.name
            if name in self.scalar_params:
                self.unsupported(f"assignment to the scalar parameter {name!r}", node,
                                 "scalar parameters are read-only; copy it into a local "
                                 "variable")
            arr = scope.locals.get(name)
            if arr is not None and not arr.buffer.shape:
                return ir.Load(arr.buffer, (), arr.buffer.dtype)
            if arr is not None or name in self.arrays:
                self.unsupported(f"assignment to the whole array {name!r}", node)
            if name in self.params:
                self.unsupported(f"assignment to the integer parameter {name!r}", node)
            if name in self.declared_iters or any(v.name == name for v in scope.loops):
                self.unsupported(f"assignment to the loop iterator {name!r} outside its "
                                 f"loop header", node, "declare a separate local variable "
                                 "for values computed in the SCoP (e.g. `double t;`)")
            raise UnknownSymbolError(f"assignment to undeclared variable {name!r}",
                                     self.loc(node))
        self.unsupported(f"assignment to `{c_text(lv)}`", node)

    def add_statement(self, node, scope, lhs: ir.Load, value) -> CStmt:
        buf = lhs.buffer
        if isinstance(value, ir.Expr) and value.dtype == buf.dtype:
            pass
        else:
            value = ir.cast(ir.const(value, buf.dtype) if not isinstance(value, ir.Expr)
                            else value, buf.dtype)
        taken = {*self.params, *self.arrays, *self.locals, *self.declared_iters}
        k = len(self.statements)
        prefix = "S_"
        while any(n.startswith(prefix) for n in taken):
            prefix = "S" + prefix
        name = f"{prefix}{k}"
        self.written.add(buf.name)
        loc = self.loc(node)
        src = CStatementSource(name, loc, c_text(node), tuple(scope.loops))
        st = CStmt(name, tuple(scope.loops), self.names(scope), tuple(scope.constraints),
                   buf, tuple(lhs.indices), value, src)
        self.statements.append(st)
        return st


# --------------------------------------------------------------------------- helpers


def find_pragma(node, what) -> bool:
    from pycparser import c_ast
    found = []

    class V(c_ast.NodeVisitor):
        def visit_Pragma(self, n):
            if n.string.strip() == what:
                found.append(n)
    if node is not None:
        V().visit(node)
    return bool(found)

def _shifted(loops, names, var, step) -> str:
    return ", ".join(f"{names[v]} + {step}" if v is var else names[v] for v in loops)


def _statement_kind(node) -> str:
    """``an assignment``, ``a for loop``, ...: a statement's kind with its article."""
    kind = {"Assignment": "assignment", "UnaryOp": "increment or decrement",
            "For": "for loop", "If": "if statement", "FuncCall": "function call",
            "Compound": "block"}.get(type(node).__name__) or node_kind(node)
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _unsigned(words) -> bool:
    """Whether the integer type ``words`` (typedefs resolved) is unsigned."""
    return "unsigned" in words or any(w in ("size_t", "uint8_t", "uint16_t", "uint32_t",
                                            "uint64_t") for w in words)
