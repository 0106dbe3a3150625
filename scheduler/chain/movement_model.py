"""The data-movement model of a fused chain (Chimera, thesis ch. 3), as code.

Per batch, a chain ``T = X . Y`` (loops ``m, k, l``), ``O = T . Z`` (loops ``m, l, n``)
runs as a nest of *blocks*: an order of the chain's loops ``(m, n, k, l)`` (outermost
first) and tile sizes ``T_d``.  The loops each operator uses come from the access
relations: a tensor's dimensions are the loops its access relation depends on
(``X[m, k]``, ``Y[k, l]``, ``T[m, l]``, ``Z[l, n]``, ``O[m, n]``).

* **Data volume** moved between a memory level and the next outer one, tensor by
  tensor: one tile of ``A`` is ``prod_{d in dims(A)} T_d`` elements; it is reloaded once
  per iteration of every block loop of its operator from the outermost down to the
  innermost loop that indexes ``A`` (the loops further in reuse the resident tile):
  ``DV(A) = tile(A) * prod_{q <= p(A)} ceil(D_q / T_q)``.  The intermediate ``T`` of a
  fused chain never leaves the level (it is produced and consumed in the block), so it
  moves nothing; unfused, it is written by the first operator and read by the second.
* **Memory usage**: the two operators run one after the other inside a block, so the
  level must hold the larger working set,
  ``MU = max(T_M T_K + T_K T_L + T_M T_L, T_M T_L + T_L T_N + T_M T_N)``.
* An order is *fusible without recomputation* when the loops shared by both operators
  (``m, l``) enclose the private ones (``k`` of the first, ``n`` of the second): a
  private loop outside a shared one re-runs the other operator (the intermediate would
  be recomputed ``ceil(D/T)`` times); such orders are reported, never chosen.

With the order ``(m, l, k | n)``: ``DV = ceil(L/T_L) M (K + N) + ceil(M/T_M) L (K + N)``,
independent of ``T_K, T_N``, so these take the smallest tile the micro-kernel allows,
``alpha``, and ``MU = T_M T_L + alpha (T_M + T_L) <= MC`` with the symmetric optimum
``T_M = T_L = -alpha + sqrt(alpha^2 + MC)`` (Chimera's closed form).  The tests check it
against :func:`brute_force` on small spaces.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

__all__ = ["LOOPS", "ChainDims", "Tiles", "Movement", "LevelPlan", "data_volume",
           "memory_usage", "movement", "fusible", "analytic_tiles", "brute_force", "unfused_volume",
           "plan_levels"]

#: the chain's loops; the order of a block nest is a permutation of them
LOOPS = ("m", "n", "k", "l")
#: tensor -> (operator, dimensions); "t" is the intermediate
TENSORS = {"x": (1, ("m", "k")), "y": (1, ("k", "l")), "t1": (1, ("m", "l")),
           "t2": (2, ("m", "l")), "z": (2, ("l", "n")), "o": (2, ("m", "n"))}
OP_LOOPS = {1: ("m", "k", "l"), 2: ("m", "l", "n")}


@dataclass(frozen=True)
class ChainDims:
    """Extents per batch and the batch count."""
    m: int
    n: int
    k: int
    l: int  # noqa: E741
    batch: int = 1

    def extent(self, d: str) -> int:
        return int(getattr(self, d))


@dataclass(frozen=True)
class Tiles:
    m: int
    n: int
    k: int
    l: int  # noqa: E741

    def size(self, d: str) -> int:
        return int(getattr(self, d))


@dataclass(frozen=True)
class Movement:
    """Elements moved per tensor (whole chain, all batches) and the memory usage
    (elements) of one block; ``fusible`` as defined in the module docstring."""
    order: tuple[str, ...]
    tiles: Tiles
    volume: tuple[tuple[str, float], ...]
    usage: int
    fusible: bool

    @property
    def total(self) -> float:
        return sum(v for _, v in self.volume)


def _trips(dims: ChainDims, tiles: Tiles, d: str, continuous: bool = False) -> float:
    """Block iterations of loop ``d``: ``ceil(D/T)``, or ``D/T`` (the relaxation the
    closed form solves) when ``continuous``."""
    t = max(1, min(tiles.size(d), dims.extent(d)))
    return dims.extent(d) / t if continuous else -(-dims.extent(d) // t)


def fusible(order: tuple[str, ...]) -> bool:
    """Shared loops ``m, l`` enclose both private loops ``k, n``."""
    pos = {d: i for i, d in enumerate(order)}
    return max(pos["m"], pos["l"]) < min(pos["k"], pos["n"])


def data_volume(dims: ChainDims, order: tuple[str, ...], tiles: Tiles,
                fused: bool = True, continuous: bool = False) -> dict[str, float]:
    """``DV`` per tensor (elements, all batches) for the block nest ``order``."""
    out: dict[str, float] = {}
    for name, (op, tdims) in TENSORS.items():
        if fused and name in ("t1", "t2"):
            continue
        op_order = [d for d in order if d in OP_LOOPS[op]]
        inner = max(op_order.index(d) for d in tdims)
        tile = math.prod(min(tiles.size(d), dims.extent(d)) for d in tdims)
        reloads = math.prod(_trips(dims, tiles, d, continuous) for d in op_order[:inner + 1])
        out[name] = float(tile * reloads * dims.batch)
    return out


def memory_usage(tiles: Tiles) -> int:
    """``MU`` (elements): the larger of the two operators' resident tiles."""
    tm, tn, tk, tl = tiles.m, tiles.n, tiles.k, tiles.l
    return max(tm * tk + tk * tl + tm * tl, tm * tl + tl * tn + tm * tn)


def movement(dims: ChainDims, order: tuple[str, ...], tiles: Tiles,
             continuous: bool = False) -> Movement:
    dv = data_volume(dims, order, tiles, continuous=continuous)
    return Movement(tuple(order), tiles, tuple(sorted(dv.items())), memory_usage(tiles),
                    fusible(order))


def analytic_tiles(dims: ChainDims, capacity: int, alpha: int) -> Tiles:
    """Chimera's closed form for ``MC = capacity`` elements: ``T_M = T_L =
    floor(-alpha + sqrt(alpha^2 + MC))``, ``T_N = T_K = alpha`` (each clamped to its
    extent; then the other of ``T_M, T_L`` grows while ``MU <= MC`` when one is clamped)."""
    t = max(1, int(math.floor(-alpha + math.sqrt(alpha * alpha + capacity))))
    tk, tn = min(alpha, dims.k), min(alpha, dims.n)
    tm, tl = min(t, dims.m), min(t, dims.l)
    # a clamped side frees capacity for the other: MU = tm*tl + alpha*(tm + tl)
    if tm < t:
        tl = min(dims.l, max(tl, (capacity - alpha * tm) // (tm + alpha)))
    elif tl < t:
        tm = min(dims.m, max(tm, (capacity - alpha * tl) // (tl + alpha)))
    return Tiles(tm, tn, tk, tl)


def brute_force(dims: ChainDims, capacity: int, alpha: int,
                sizes: dict[str, list[int]] | None = None,
                continuous: bool = False) -> Movement:
    """The fusible order and tiles (``T_K, T_N >= alpha``) of least total ``DV`` with
    ``MU <= capacity``, by enumeration (ties: smaller ``MU``).  For small spaces."""
    if sizes is None:
        sizes = {d: list(range(1, dims.extent(d) + 1)) for d in ("m", "l")}
        sizes.update({d: list(range(min(alpha, dims.extent(d)), dims.extent(d) + 1))
                      for d in ("k", "n")})
    best: Movement | None = None
    for order in itertools.permutations(LOOPS):
        if not fusible(order):
            continue
        for tm, tn, tk, tl in itertools.product(sizes["m"], sizes["n"], sizes["k"], sizes["l"]):
            tiles = Tiles(tm, tn, tk, tl)
            if memory_usage(tiles) > capacity:
                continue
            mv = movement(dims, order, tiles, continuous)
            if best is None or (mv.total, mv.usage) < (best.total, best.usage):
                best = mv
    if best is None:
        raise ValueError(f"no tiles fit {capacity} elements")
    return best


def unfused_volume(dims: ChainDims, capacity: int, alpha: int, softmax: bool) -> float:
    """Elements moved by the unfused chain: each product tiled alone (its own closed
    form ``T_M = T_L = -alpha + sqrt(alpha^2 + MC)`` over ``MU = T_M T_L + alpha (T_M +
    T_L)``), the intermediate written once and read once, plus, with a softmax between,
    its three passes over ``M x L`` (max: read; exp + sum: read, write; quotient: read,
    write)."""
    t = max(1, int(math.floor(-alpha + math.sqrt(alpha * alpha + capacity))))
    b = dims.batch

    def gemm(m: int, r: int, c: int) -> float:       # (m x r) . (r x c), tiles t x t
        tm, tc = min(t, m), min(t, c)
        return b * (-(-c // tc) * m * r + -(-m // tm) * r * c + m * c)
    total = gemm(dims.m, dims.k, dims.l) + gemm(dims.m, dims.l, dims.n)
    if softmax:
        total += 5 * b * dims.m * dims.l
    return float(total)


@dataclass(frozen=True)
class LevelPlan:
    """One memory level's tiles and traffic: ``capacity`` in elements; ``fused`` and
    ``unfused`` total elements moved across that level's boundary."""
    level: str
    capacity: int
    order: tuple[str, ...]
    tiles: Tiles
    usage: int
    fused: float
    unfused: float


def plan_levels(dims: ChainDims, levels: list[tuple[str, int]], alpha: int,
                softmax: bool) -> list[LevelPlan]:
    """The analytic plan for each ``(level name, capacity in bytes)`` (float32)."""
    out = []
    order = ("m", "l", "k", "n")
    for name, cap_bytes in levels:
        cap = cap_bytes // 4
        tiles = analytic_tiles(dims, cap, alpha)
        mv = movement(dims, order, tiles)
        out.append(LevelPlan(name, cap, order, tiles, mv.usage, mv.total,
                             unfused_volume(dims, cap, alpha, softmax)))
    return out
