"""Lower one fusion group to one multi-stage ``@tensor_expr`` kernel.

Each distinct non-integer extent of the group (``B``, ``S``, ``B*S``, ...) becomes an isl
parameter of the kernel: affine combinations of dim symbols stay affine (``S + 1``), a
product of symbols (``B*S``, not affine in isl) becomes a parameter of its own whose value
the runtime evaluates from the bound dims.  The kernel's inputs are the group's external
values (graph inputs, constants, other groups' outputs) and its outputs the values used
outside the group; every operator contributes its stages (:mod:`polycomp.graph.opdefs`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace

import sympy

from polycomp import ir
from polycomp.frontend.dsl import Kernel, Tensor

from .ir import Value
from .opdefs import OPS
from .partition import Group, Partition


@dataclass
class ParamMap:
    """sympy extents -> isl parameters of one kernel."""
    exprs: dict[str, sympy.Expr] = field(default_factory=dict)
    _vars: dict[sympy.Expr, ir.Var] = field(default_factory=dict)

    def to_ir(self, e: sympy.Expr):
        e = sympy.sympify(e)
        if e.is_Integer:
            return int(e)
        if isinstance(e, sympy.Add):
            parts = [self.to_ir(a) for a in e.args]
            acc = parts[0]
            for p in parts[1:]:
                acc = acc + p
            return acc
        if isinstance(e, sympy.Mul) and len(e.args) == 2 and e.args[0].is_Integer:
            return int(e.args[0]) * self.to_ir(e.args[1])
        if isinstance(e, sympy.floor):  # floor(affine / d): a convolution's output extent
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if den.is_Integer and int(den) > 0 and sympy.Poly(num).is_linear:
                return self.to_ir(sympy.expand(num)) // int(den)
        if e not in self._vars:
            name = str(e) if isinstance(e, sympy.Symbol) else f"d{len(self._vars)}"
            self._vars[e] = ir.Var(name, "int64", is_param=True)
            self.exprs[name] = e
        return self._vars[e]

    def shape(self, shape) -> tuple:
        return tuple(self.to_ir(d) for d in shape)


@dataclass
class GroupKernel:
    kernel: Kernel
    inputs: list[Value]
    outputs: list[Value]
    params: ParamMap
    key: str


def _argname(v: Value) -> str:
    return f"t_{v.name}"


def structural_key(group: Group, inputs: list[Value], outputs: list[Value]) -> str:
    """Equal keys <=> the same kernel (names aside): identical groups compile once."""
    ref = {v: f"i{k}" for k, v in enumerate(inputs)}
    parts = [";".join(f"{v.dtype}{tuple(map(str, v.shape))}" for v in inputs)]
    for k, n in enumerate(group.nodes):
        ref[n.output] = f"n{k}"
        attrs = sorted((a, str(b)) for a, b in n.attrs.items())
        parts.append(f"{n.op}({','.join(ref[v] for v in n.inputs)}){attrs}")
    parts.append("->" + ",".join(ref[v] for v in outputs))
    return "|".join(parts)


def group_kernel(part: Partition, group: Group) -> GroupKernel:
    inputs, outputs = part.inputs_of(group), part.outputs_of(group)
    pm = ParamMap()
    types = {_argname(v): Tensor[pm.shape(v.shape), v.dtype] for v in inputs}  # type: ignore

    def fn(*args):
        env: dict[Value, Tensor] = dict(zip(inputs, args))
        for n in group.nodes:
            node = n
            s = n.attrs.get("scalar")
            if isinstance(s, sympy.Expr) and s.free_symbols:  # x * S: a size parameter
                node = replace(n, attrs={**n.attrs, "scalar": pm.to_ir(s)})
            env[n.output] = OPS[n.op].lower(node, [env[v] for v in n.inputs],
                                            pm.shape(n.output.shape))
        return tuple(env[v] for v in outputs)

    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in types])
    fn.__name__ = f"{part.graph.name}_{group.name}"
    kernel = Kernel(fn, f"{_clean(part.graph.name)}_{group.name}", types)
    _ = kernel.graph  # trace now: errors surface at compile time
    for v in outputs:  # output extents may introduce parameters (B*S from a matmul)
        pm.shape(v.shape)
    return GroupKernel(kernel, inputs, outputs, pm, structural_key(group, inputs, outputs))


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
