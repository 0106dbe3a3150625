"""The 2-d view of an N-d memory-bound kernel for the vector unit.

Every iteration dimension of the kernel's stages is identified by its extent (a size
symbol such as ``N`` or a constant; extent-1 dimensions of ``keepdims`` results are
*unit* dimensions and ignored) and gets one role:

* ``c`` — the **columns**: a reduced dimension (the last axis of the first reduction),
  or, for kernels without reductions, the output's last dimension extended by the
  dimensions before it that every tensor holds right before it (NCHW ``(H, W)``),
  leaving the output at least one dimension for the rows; a
  tile row holds the whole column group, padded to ``CP`` elements;
* ``r`` — the **row** dimension, tiled by ``TR`` rows per UB tile: the output's last
  dimension that is not a column (none for a full reduction: one virtual row);
* ``b`` — **batch** dimensions: the output's other dimensions, outer loops;
* ``k`` — **carried** dimensions: the other reduced dimensions of a single reduction,
  loops inside the tile loop that accumulate into the tile's result.

Assumes: every access indexes a tensor with one iterator per dimension (or 0 on a
unit dimension), iterators of one stage have pairwise distinct extents.  Guarantees:
with these roles, every stage of a kernel the vector mapping accepts computes on
``(r, c)`` tiles, ``(r)`` values per row or ``(c)`` rows, and every GM tensor is read
or written as a 2-d box — ``(r, c..)`` directly, ``(c.., r)`` through a transpose in
UB.  Anything else raises :class:`~polycomp.errors.TargetError` naming the stage.
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp import ir
from polycomp.errors import TargetError


def dim_key(e, what: str) -> str | None:
    """The identity of a dimension of extent ``e`` (None for a unit dimension)."""
    if ir.is_const(e, 1):
        return None
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.IntImm):
        return str(e.value)
    if not ir.free_vars(e) or all(isinstance(v, ir.Var) for v in ir.free_vars(e)):
        return f"expr:{e}"      # a derived extent (a convolution's output size)
    raise TargetError(f"npu: {what}: extent {e} is not a size expression")


def dim_size(key: str) -> str | int:
    """The tiling-data size of a dimension key (a symbol's name or a constant)."""
    if key.startswith("expr:"):
        raise TargetError(f"npu: the extent {key[5:]} is neither a size symbol nor a "
                          f"constant; the vector mapping tiles plain extents only")
    return int(key) if key.isdigit() else key


def tensor_keys(t) -> tuple[str | None, ...]:
    """The dimension keys of a tensor (pairwise distinct, unit dimensions aside)."""
    keys = tuple(dim_key(e, t.name) for e in t.shape)
    real = [k for k in keys if k is not None]
    if len(real) != len(set(real)):
        raise TargetError(f"npu: tensor {t.name} has two dimensions of the same extent; the "
                          f"vector mapping identifies dimensions by their extents")
    return keys


def stage_vars(s) -> dict[str, str | None]:
    """``{iterator name: dimension key}`` of a stage (output iterators and reduce axes);
    raises when two of its dimensions have the same extent."""
    out: dict[str, str | None] = {}
    for v, e in zip(s.iters, s.output.shape):
        out[v.name] = dim_key(e, f"stage {s.name}")
    for a in s.reduce_axes:
        out[a.var.name] = dim_key(a.extent, f"stage {s.name}")
    keys = [k for k in out.values() if k is not None]
    if len(keys) != len(set(keys)):
        raise TargetError(f"npu: stage {s.name} has two dimensions of the same extent; the "
                          f"vector mapping identifies dimensions by their extents")
    return out


@dataclass(frozen=True)
class VectorView:
    """The roles of a kernel's dimensions (see the module docstring)."""
    row: str | None                 # None: one virtual row (a full reduction)
    cols: tuple[str, ...]           # in layout order
    batch: tuple[str, ...]
    carried: tuple[str, ...]

    def role(self, key: str | None) -> str:
        if key is None:
            return "u"
        if key == self.row:
            return "r"
        if key in self.cols:
            return "c"
        if key in self.carried:
            return "k"
        if key in self.batch:
            return "b"
        raise TargetError(f"npu: dimension {key} is neither a dimension of the output nor one "
                          f"reduced by the first reduction; the vector mapping has no role "
                          f"for it")


def _extend_cols(cols: list[str], tensors: list[tuple[str | None, ...]]) -> list[str]:
    """Grow the column group leftwards while every tensor holding it holds the
    candidate right before it and no tensor holds one without the other."""
    out = tensors[0]
    while True:
        first = out.index(cols[0])
        before = [k for k in out[:first] if k is not None]
        if len(before) < 2:       # keep a row dimension to tile
            return cols
        cand = before[-1]
        for keys in tensors:
            ks = [k for k in keys if k is not None]
            has_c, has_x = cols[0] in ks, cand in ks
            if has_c != has_x or (has_c and ks.index(cand) + 1 != ks.index(cols[0])):
                return cols
        cols = [cand, *cols]


def choose_view(graph) -> VectorView:
    """The roles of ``graph``'s dimensions (module docstring)."""
    out = graph.outputs[0]
    out_keys = [k for k in tensor_keys(out) if k is not None]
    reductions = [s for s in graph.stages if s.is_reduction]
    carried: list[str] = []
    if reductions:
        first = reductions[0]
        keys = [dim_key(a.extent, f"stage {first.name}") for a in first.reduce_axes]
        red = [k for k in keys if k is not None]
        if not red:
            raise TargetError(f"npu: stage {first.name} reduces only unit dimensions")
        cols = [red[-1]]
        carried = red[:-1]
        if carried and len(reductions) > 1:
            raise TargetError(f"npu: stage {first.name} reduces {len(red)} dimensions in a "
                              f"kernel with other reductions; the vector mapping carries "
                              f"extra reduced dimensions only for a single reduction")
    else:
        if not out_keys:
            raise TargetError(f"npu: kernel {graph.name}: a 0-d output without a reduction "
                              f"is not mapped")
        tensors = [tensor_keys(out), *(tensor_keys(t) for t in graph.inputs)]
        cols = _extend_cols([out_keys[-1]], tensors)
    rest = [k for k in out_keys if k not in cols and k not in carried]
    row = rest[-1] if rest else None
    batch = tuple(k for k in rest[:-1])
    return VectorView(row, tuple(cols), batch, tuple(carried))
