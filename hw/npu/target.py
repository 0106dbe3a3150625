"""The NPU targets as data: an Ascend 910-class AI core (``npu``) and a smaller variant
with the same structure and shrunken buffers (``npu-lite``, for tests that must
exercise tiling, tails and capacity limits on small shapes).

Levels: ``GM`` (off-chip) -> ``L1`` -> ``L0A``/``L0B`` (cube operands, fractal) ->
cube -> ``L0C`` (fp32 accumulators, fractal NZ) -> GM; ``GM`` <-> ``UB`` (unified buffer
of the vector unit).  Every on-chip address and every transfer is in 32-byte blocks.
Pipes: MTE2 (GM -> L1/UB), MTE1 (L1 -> L0A/L0B, load-2D), M (cube), V (vector), FIX
(L0C -> GM), MTE3 (UB -> GM); they run concurrently and are ordered by set/wait flags.

The cycle figures (:class:`NpuParams`) are the simulator's model, chosen from public
descriptions of the 910 core (1 cube op of 16x16x16 fp16 per cycle, 256 B per vector
cycle); the transfer bandwidths are assumptions stated in docs/npu.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp.errors import TargetError
from polycomp.hw.memory import ComputeUnit, CopyRule, MemoryHierarchy, MemoryLevel
from polycomp.hw.target import Target

KIB = 1024
ALIGN = 32          # bytes: addresses and transfer lengths of on-chip buffers
FRACTAL = 16        # rows/cols of one fractal tile (fp16)
PIPES = ("MTE2", "MTE1", "M", "V", "FIX", "MTE3")


@dataclass(frozen=True)
class NpuParams:
    """The simulator's cycle model of one AI core: bytes per cycle of each transfer
    pipe, fixed start-up latency per transfer, vector bytes per cycle and vector
    instruction latency, cube fractal ops per cycle (16x16x16 fp16)."""
    gm_bytes_per_cycle: int = 128       # MTE2 GM -> L1/UB (through L2)
    out_bytes_per_cycle: int = 128      # FIX L0C -> GM, MTE3 UB -> GM
    l1_bytes_per_cycle: int = 256       # MTE1 L1 -> L0A/L0B
    transfer_latency: int = 64          # cycles before the first byte of a GM transfer
    local_latency: int = 8              # cycles before the first byte of an on-chip copy
    vector_bytes_per_cycle: int = 256   # one vector repeat
    vector_latency: int = 4             # issue latency of one vector instruction
    cube_fp32_factor: int = 2           # fp32 operands take twice the cube cycles


@dataclass(frozen=True)
class NpuSpec:
    capacities: dict
    params: NpuParams


SPECS = {
    "npu": NpuSpec({"L1": 1024 * KIB, "L0A": 64 * KIB, "L0B": 64 * KIB,
                    "L0C": 256 * KIB, "UB": 256 * KIB}, NpuParams()),
    "npu-lite": NpuSpec({"L1": 64 * KIB, "L0A": 8 * KIB, "L0B": 8 * KIB,
                         "L0C": 16 * KIB, "UB": 16 * KIB}, NpuParams()),
}


def npu_hierarchy(cap: dict, p: NpuParams) -> MemoryHierarchy:
    return MemoryHierarchy(
        levels=(
            MemoryLevel("GM", "global", 0, ALIGN, ("host", "core"), "off-chip global memory"),
            MemoryLevel("L1", "npu_l1", cap["L1"], ALIGN, ("MTE2", "MTE1"),
                        "cube operand staging, fractal NZ"),
            MemoryLevel("L0A", "npu_l0a", cap["L0A"], 512, ("MTE1", "cube"),
                        "left cube operand, fractal zZ (512 B = one 16x16 fp16 tile)"),
            MemoryLevel("L0B", "npu_l0b", cap["L0B"], 512, ("MTE1", "cube"),
                        "right cube operand, fractal nZ"),
            MemoryLevel("L0C", "npu_l0c", cap["L0C"], 1024, ("cube", "FIX"),
                        "fp32 accumulators, fractal NZ"),
            MemoryLevel("UB", "npu_ub", cap["UB"], ALIGN, ("MTE2", "V", "MTE3"),
                        "unified buffer of the vector unit"),
        ),
        copies=(
            CopyRule("GM", "L1", f"MTE2 DataCopy nd2nz ({p.gm_bytes_per_cycle} B/cycle)",
                     "SetFlag/WaitFlag MTE2->MTE1"),
            CopyRule("L1", "L0A", f"MTE1 LoadData 2D zZ ({p.l1_bytes_per_cycle} B/cycle)",
                     "SetFlag/WaitFlag MTE1->M"),
            CopyRule("L1", "L0B", f"MTE1 LoadData 2D nZ, transposing "
                     f"({p.l1_bytes_per_cycle} B/cycle)", "SetFlag/WaitFlag MTE1->M"),
            CopyRule("L0C", "GM", f"FIX Fixpipe nz2nd with cast ({p.out_bytes_per_cycle} "
                     f"B/cycle)", "SetFlag/WaitFlag M->FIX"),
            CopyRule("GM", "UB", f"MTE2 DataCopyPad, 32 B blocks ({p.gm_bytes_per_cycle} "
                     f"B/cycle)", "SetFlag/WaitFlag MTE2->V"),
            CopyRule("UB", "GM", f"MTE3 DataCopyPad ({p.out_bytes_per_cycle} B/cycle)",
                     "SetFlag/WaitFlag V->MTE3"),
        ))


def npu_units(p: NpuParams) -> tuple[ComputeUnit, ...]:
    return (
        ComputeUnit("cube", "matrix", (16, 16, 16), ("float16->float32", "float32->float32"),
                    f"1 fractal op per cycle (fp32 operands: 1/{p.cube_fp32_factor})"),
        ComputeUnit("vector", "vector", (128,),
                    ("float16", "float32"),
                    f"{p.vector_bytes_per_cycle} B per repeat: 128 fp16 / 64 fp32 lanes, "
                    f"repeat/stride/mask"),
        ComputeUnit("scalar", "scalar", (1,), ("all",), "address and loop control"),
    )


def npu_target(name: str) -> Target:
    spec = SPECS.get(name)
    if spec is None:
        raise TargetError(f"no NPU target {name!r}; NPU targets: {', '.join(SPECS)}")
    return Target(name=name, kind="npu", memory=npu_hierarchy(spec.capacities, spec.params),
                  units=npu_units(spec.params), features=("cube", "vector", "fractal"))


def npu_params(target: Target) -> NpuParams:
    spec = SPECS.get(target.name)
    return spec.params if spec is not None else NpuParams()
