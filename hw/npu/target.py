"""The NPU targets as data: the Atlas A2 generation (Ascend 910B, ``__NPU_ARCH__`` 2201)
and a shrunken variant of it for tests.

* ``npu`` -- one Atlas A2 chip (910B-class): 24 AI cores, each one cube core (AIC: L1,
  L0A, L0B, L0C; pipes MTE2, MTE1, M, FIX) and two vector cores (AIV: UB; pipes MTE2, V,
  MTE3), all sharing HBM.  Cube and vector cores are separate cores on this generation:
  a cube result reaches the vector unit only through GM (there is no L0C -> UB and no
  UB -> L1 path; ``Fixpipe`` writes GM or L1).
* ``npu-lite`` -- the same chip structure with tiny buffers (L1 64 KiB, L0A/L0B 8 KiB,
  L0C 16 KiB, UB 16 KiB) and 2 AI cores, so that tests exercise tiling, tails, several
  cores and capacity limits on small shapes.  It models no product.

Every number and its source is in docs/npu.md ("The machine model").  Capacities,
alignments, the repeat limit and the event ids are the A2 figures of the public
asc-devkit headers and docs; the cycle figures (:class:`NpuParams`) are the simulator's
model, partly assumptions (stated there).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from polycomp.errors import TargetError
from polycomp.hw.memory import ComputeUnit, CopyRule, MemoryHierarchy, MemoryLevel
from polycomp.hw.target import Target

KIB = 1024
ALIGN = 32          # bytes: one data block; UB / L1 addresses and transfer granules
FRACTAL = 16        # rows of one fractal (16 x 32 bytes = 512 B)
FRACTAL_BYTES = 512
REPEAT_BYTES = 256  # one vector repeat: 8 data blocks
MAX_REPEAT = 255    # repeatTimes of every vector / load instruction (uint8)
# UB banks of the A2/A3 generation (dav-2201; the asc-devkit sample bank_conflict_ub and
# the Ascend C best-practices page "bank conflicts", docs/npu.md): 192 KiB in 48 banks
# of 128 rows of 32 B, in 16 bank groups of 3 banks; an address is
# {BANK[1:0], BANK_DEPTH[6:0], BG[3:0], BANK_WIDTH[4:0]}: consecutive 32-byte blocks
# rotate through the 16 groups, the bank within its group is address >> 16
UB_BANK_GROUPS = 16
UB_BANK_SHIFT = 16
UB_BANK_PERIOD = UB_BANK_GROUPS * 32      # 512 B: the block-to-group pattern repeats
#: pipes of each core kind (docs: the "核内同步" overview)
AIC_PIPES = ("MTE2", "MTE1", "M", "FIX")
AIV_PIPES = ("MTE2", "V", "MTE3")
PIPES = ("MTE2", "MTE1", "M", "V", "FIX", "MTE3")
#: the HardEvent pairs of the A2 generation between the pipes this backend uses: those
#: of ``HardEventAic`` (cube core) and ``HardEventAiv`` (vector core) in kernel_event.h
#: (``FIX_V`` / ``V_FIX`` exist only for __NPU_ARCH__ 5102 / 3003, not here)
AIC_EVENTS = frozenset({
    ("MTE2", "MTE1"), ("MTE1", "MTE2"), ("MTE1", "M"), ("M", "MTE1"), ("MTE2", "M"),
    ("M", "MTE2"), ("M", "FIX"), ("FIX", "M"), ("MTE2", "FIX"), ("FIX", "MTE2"),
    ("MTE1", "FIX"), ("FIX", "MTE1")})
AIV_EVENTS = frozenset({
    ("MTE2", "V"), ("V", "MTE2"), ("MTE3", "V"), ("V", "MTE3"), ("MTE3", "MTE2"),
    ("MTE2", "MTE3")})
HARD_EVENTS = AIC_EVENTS | AIV_EVENTS
#: event ids a static-tensor kernel may use per HardEvent (ids 6 and 7 are reserved)
EVENT_IDS = 6
#: cross-core flag ids (CrossCoreSetFlag modes 0/1/2: 0-15; SyncAll keeps 11-14)
CROSS_FLAG_IDS = 11
CROSS_FLAG_MAX = 15  # a flag's counter saturates at 15 pending sets


@dataclass(frozen=True)
class NpuParams:
    """The simulator's model of one chip: the cores, and the cycle figures of one core
    (bytes per cycle of each transfer pipe, start-up latencies, vector bytes per repeat,
    cube fractal ops per cycle) and of the shared HBM."""
    aic_cores: int = 24                 # cube cores (AI cores)
    aiv_per_aic: int = 2                # vector cores per AI core
    gm_bytes_per_cycle: int = 128       # MTE2 GM -> L1/UB of one core
    out_bytes_per_cycle: int = 128      # FIX L0C -> GM, MTE3 UB -> GM of one core
    l1_bytes_per_cycle: int = 256       # MTE1 L1 -> L0A/L0B
    transfer_latency: int = 64          # cycles before the first byte of a GM transfer
    local_latency: int = 8              # cycles before the first byte of an on-chip copy
    fb_bytes_per_cycle: int = 128       # L1 -> Fixpipe buffer (quantisation parameters;
    #                                     an assumption: no published figure)
    vector_bytes_per_cycle: int = 256   # one vector repeat
    vector_latency: int = 4             # issue latency of one vector instruction
    cube_fp32_factor: int = 2           # fp32 operands: 16x8 fractals, half the MACs
    hbm_bytes_per_cycle: int = 889      # the whole chip's HBM (1.6 TB/s at 1.8 GHz)
    l2_bytes: int = 192 * 1024 * 1024   # the chip's L2 between the cores and HBM
    l2_line: int = 512                  # the L2 model's line (hit / miss granularity)
    l2_bytes_per_cycle: int = 3584      # the L2's bandwidth to all cores (an assumption)
    flag_latency: int = 0               # cycles of a SetFlag/WaitFlag pair
    scalar_issue: int = 1               # scalar unit: issuing one instruction (flags too)
    scalar_op: int = 1                  # scalar unit: a Let, a loop iteration
    cross_latency: int = 100            # cycles of a CrossCoreSetFlag -> WaitFlag
    ub_bank_conflicts: bool = True      # vector calls pay UB bank conflicts (docs/npu.md)

    @property
    def aiv_cores(self) -> int:
        return self.aic_cores * self.aiv_per_aic


@dataclass(frozen=True)
class NpuSpec:
    """One target: its capacities per core (bytes) and its model parameters."""
    arch: int                            # __NPU_ARCH__
    product: str
    capacities: dict = field(default_factory=dict)
    params: NpuParams = field(default_factory=NpuParams)


SPECS = {
    # Atlas A2 (910B): kernel_utils_constants.h (__NPU_ARCH__ == 2201): TOTAL_L1_SIZE
    # 512 KiB - 128 B (KFC reserve), TOTAL_L0C_SIZE 128 KiB, TOTAL_UB_SIZE 192 KiB of
    # which TOTAL_VEC_LOCAL_SIZE 184 KiB for the kernel (the top 8 KiB is the reserved
    # UB some calls, Select among them, use); TOTAL_L0A_SIZE / TOTAL_L0B_SIZE 64 KiB;
    # matmul_tiling_base.cpp (ascend910b) the same
    "npu": NpuSpec(2201, "Atlas A2 (Ascend 910B): 24 AI cores = 24 AIC + 48 AIV",
                   {"L1": 512 * KIB - 128, "L0A": 64 * KIB, "L0B": 64 * KIB,
                    "L0C": 128 * KIB, "UB": 184 * KIB}, NpuParams()),
    "npu-lite": NpuSpec(2201, "the A2 structure with tiny buffers and 2 AI cores (tests)",
                        {"L1": 64 * KIB, "L0A": 8 * KIB, "L0B": 8 * KIB,
                         "L0C": 16 * KIB, "UB": 16 * KIB},
                        NpuParams(aic_cores=2, hbm_bytes_per_cycle=256,
                                  l2_bytes=1024 * 1024)),
}


def npu_hierarchy(cap: dict, p: NpuParams) -> MemoryHierarchy:
    return MemoryHierarchy(
        levels=(
            MemoryLevel("GM", "global", 0, ALIGN, ("host", "AIC", "AIV"),
                        "HBM, shared by every core"),
            MemoryLevel("L1", "npu_l1", cap["L1"], ALIGN, ("MTE2", "MTE1", "FIX"),
                        "AIC: cube operand staging (TPosition A1/B1), fractal NZ"),
            MemoryLevel("L0A", "npu_l0a", cap["L0A"], FRACTAL_BYTES, ("MTE1", "M"),
                        "AIC: left cube operand (A2), fractal zZ (512 B fractals)"),
            MemoryLevel("L0B", "npu_l0b", cap["L0B"], FRACTAL_BYTES, ("MTE1", "M"),
                        "AIC: right cube operand (B2), fractal nZ"),
            MemoryLevel("L0C", "npu_l0c", cap["L0C"], 1024, ("M", "FIX"),
                        "AIC: accumulators (CO1), fractal NZ, fp32"),
            MemoryLevel("UB", "npu_ub", cap["UB"], ALIGN, ("MTE2", "V", "MTE3"),
                        "AIV: unified buffer of each vector core (VECCALC)"),
        ),
        copies=(
            CopyRule("GM", "L1", f"MTE2 DataCopy + Nd2NzParams ({p.gm_bytes_per_cycle} "
                     f"B/cycle)", "SetFlag/WaitFlag MTE2_MTE1"),
            CopyRule("L1", "L0A", f"MTE1 LoadData + LoadData2DParams "
                     f"({p.l1_bytes_per_cycle} B/cycle)", "SetFlag/WaitFlag MTE1_M"),
            CopyRule("L1", "L0B", f"MTE1 LoadData (ifTranspose, b16) or "
                     f"LoadDataWithTranspose (b32) ({p.l1_bytes_per_cycle} B/cycle)",
                     "SetFlag/WaitFlag MTE1_M"),
            CopyRule("L0C", "GM", f"FIX Fixpipe + FixpipeParamsV220, CFG_ROW_MAJOR "
                     f"({p.out_bytes_per_cycle} B/cycle)", "SetFlag/WaitFlag M_FIX"),
            CopyRule("GM", "UB", f"MTE2 DataCopyPad + DataCopyExtParams "
                     f"({p.gm_bytes_per_cycle} B/cycle)", "SetFlag/WaitFlag MTE2_V"),
            CopyRule("UB", "GM", f"MTE3 DataCopyPad ({p.out_bytes_per_cycle} B/cycle)",
                     "SetFlag/WaitFlag V_MTE3"),
            CopyRule("L0C", "UB", "through GM: Fixpipe to a workspace, "
                     "CrossCoreSetFlag<2, PIPE_FIX>, DataCopyPad on the AIV",
                     "CrossCoreSetFlag / CrossCoreWaitFlag mode 2"),
        ))


def npu_units(p: NpuParams) -> tuple[ComputeUnit, ...]:
    return (
        ComputeUnit("cube", "matrix", (16, 16, 16), ("float16->float32", "float32->float32"),
                    f"AIC: 1 fractal op per cycle (fp32 operands: 1/{p.cube_fp32_factor}); "
                    f"{p.aic_cores} per chip"),
        ComputeUnit("vector", "vector", (128,), ("float16", "float32"),
                    f"AIV: {p.vector_bytes_per_cycle} B per repeat (128 fp16 / 64 fp32 lanes), "
                    f"mask/repeat/stride, at most {MAX_REPEAT} repeats; "
                    f"{p.aiv_cores} per chip"),
        ComputeUnit("scalar", "scalar", (1,), ("all",), "address and loop control"),
    )


def npu_target(name: str) -> Target:
    spec = SPECS.get(name)
    if spec is None:
        raise TargetError(f"no NPU target {name!r}; NPU targets: {', '.join(SPECS)}")
    return Target(name=name, kind="npu", memory=npu_hierarchy(spec.capacities, spec.params),
                  units=npu_units(spec.params),
                  features=("cube", "vector", "fractal", f"npu_arch_{spec.arch}", "aic_aiv",
                            "fixpipe_atomic"))


def npu_spec(target: Target) -> NpuSpec:
    spec = SPECS.get(target.name)
    if spec is None:
        raise TargetError(f"no NPU target {target.name!r}")
    return spec


def npu_params(target: Target) -> NpuParams:
    spec = SPECS.get(target.name)
    return spec.params if spec is not None else NpuParams()
