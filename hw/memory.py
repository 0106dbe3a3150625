"""A target's memory hierarchy and compute units, as data.

Every target declares, once, the memory levels its code may place data in, how a copy
between two levels is made and synchronised, and the compute units with their
intrinsic shapes.  The promotion engine (:mod:`polycomp.scheduler.promotion`) asks the
hierarchy for capacities, alignment and copy rules; ``polycomp targets`` prints it.

Levels are listed from the outermost (largest, slowest) to the innermost.  A capacity
of 0 means "unbounded for the compiler's purposes" (global memory).
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp.errors import TargetError


@dataclass(frozen=True)
class MemoryLevel:
    """One level: ``name`` (as the promotion engine and docs say it), the IR buffer
    ``scope`` that lives there, its capacity per owner and alignment in bytes, and who
    may access it (``"host"``, ``"grid"``, ``"block"``, ``"thread"``, ``"warp"``,
    ``"core"``, a unit name...)."""
    name: str
    scope: str
    capacity: int
    alignment: int
    accessed_by: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class CopyRule:
    """How data moves from level ``src`` to level ``dst``: the ``mechanism`` (the
    instruction or code form a promotion copy is emitted as) and the ``sync`` that
    makes the copy visible to its readers (``""``: program order suffices)."""
    src: str
    dst: str
    mechanism: str
    sync: str = ""
    variant: str = ""      # "" the default form; e.g. "async" for cp.async pipelines
    tensor: TensorCopy | None = None   # a tiled bulk-tensor copy engine's rules (TMA)


@dataclass(frozen=True)
class TensorCopy:
    """The rules of a tiled *tensor copy* (a copy engine that moves a box of a tensor
    between global and shared memory from a descriptor, e.g. CUDA's tensor memory
    accelerator, ``cp.async.bulk.tensor``): the box may have ``max_rank`` dimensions of
    at most ``max_box`` elements each, its innermost dimension a multiple of
    ``inner_multiple`` bytes; the global base address must be aligned to
    ``global_alignment`` bytes and every stride of the tensor (bytes) be a multiple of
    ``stride_multiple``; the shared destination is written in one of the ``swizzles``
    (the span, in bytes, of the 16-byte-chunk XOR pattern; 0: rows kept linear; the
    innermost box dimension may not exceed the span), starting at an address aligned to
    ``pattern_alignment[span]`` bytes (where the pattern repeats); elements outside the
    tensor read as ``oob_fill``; completion is signalled by ``completion`` (a transaction
    count on a barrier)."""
    swizzles: tuple[int, ...] = (0, 32, 64, 128)
    max_rank: int = 5
    max_box: int = 256
    inner_multiple: int = 16
    global_alignment: int = 16
    stride_multiple: int = 16
    pattern_alignment: tuple[tuple[int, int], ...] = ((0, 128), (32, 256), (64, 512),
                                                      (128, 1024))
    oob_fill: str = "zero"
    completion: str = "mbarrier complete_tx (bytes)"

    def alignment(self, span: int) -> int:
        """The shared-memory alignment of a box written with swizzle span ``span``."""
        return dict(self.pattern_alignment)[span]


@dataclass(frozen=True)
class ComputeUnit:
    """A compute unit and its intrinsic: ``shape`` is (M, N, K) for matrix units, the
    lane count for vector units; ``dtypes`` the operand types it takes (accumulator
    after ``->``), as text.

    A *dot-product* unit (a vector unit whose lanes each add a dot product of a group
    of elements to an accumulator: AVX512_BF16 ``vdpbf16ps``, AVX512_VNNI ``vpdpbusd``)
    has ``shape = (lanes, group)`` and says what it multiplies in typed fields:
    ``operands`` (the dtypes of the broadcast and the vector operand, in that order)
    and ``accumulator`` (the lanes' dtype); passes choose such units by these fields."""
    name: str
    kind: str              # "matrix" | "vector" | "scalar"
    shape: tuple[int, ...]
    dtypes: tuple[str, ...]
    note: str = ""
    threads: int = 0       # threads issuing one instruction together (0: not stated)
    n_values: tuple[int, ...] = ()   # the N an instruction may take (0..: only shape[1])
    operands: tuple[str, ...] = ()
    accumulator: str = ""

    @property
    def is_dot(self) -> bool:
        """A dot-product unit (``shape = (lanes, group)``, typed operands)."""
        return self.kind == "vector" and len(self.shape) == 2 and bool(self.accumulator)


@dataclass(frozen=True)
class MemoryHierarchy:
    levels: tuple[MemoryLevel, ...]
    copies: tuple[CopyRule, ...]

    def level(self, name: str) -> MemoryLevel:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise TargetError(f"no memory level {name!r}; levels: "
                          f"{', '.join(lv.name for lv in self.levels)}")

    def has_level(self, name: str) -> bool:
        return any(lv.name == name for lv in self.levels)

    def capacity(self, name: str) -> int:
        return self.level(name).capacity

    def copy_rule(self, src: str, dst: str, variant: str = "") -> CopyRule:
        for c in self.copies:
            if c.src == src and c.dst == dst and c.variant == variant:
                return c
        form = f" ({variant})" if variant else ""
        raise TargetError(f"no copy{form} from {src} to {dst} on this target")

    def table(self) -> list[tuple[str, str, str, str, str]]:
        """Rows ``(level, scope, capacity, alignment, accessed by)`` for printing."""
        return [(lv.name, lv.scope, format_bytes(lv.capacity) if lv.capacity else "-",
                 f"{lv.alignment} B", ", ".join(lv.accessed_by)) for lv in self.levels]


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"
