"""Multi-version GPU GEMM kernels: several Tensor Core kernels in ONE module with a
host-side selection rule, the wave model (issue #12 item 4, GPU; issue #22 item 3).

Versions: the analytic model's choice (:func:`.gpu_space.rank`) at each bucket of the
rows symbol (e.g. BERT's ``32·L``), distinct configurations once.  The host rule is
TSCompiler's wave model ``T_s * ceil(blocks / blocks_per_wave)`` refined for the last,
partial wave, with a DRAM bound.  For version ``v`` (block tile ``BM x BN``, K tile ``k``,
``P_v`` blocks per SM, ``W_v = SMs * P_v`` blocks per wave) and ``T_v[s]`` the mma time of
one ``k`` step of a block while ``s`` blocks share its SM (the model's datasheet
constants, fewer than four warps per SM leaving the tensor pipes part idle):

    ``blocks = ceil(rows/BM) * ceil(cols/BN)``, ``steps = ceil(depth/k)``,
    ``q, r = divmod(blocks, W_v)``
    ``t_v = max(steps * (q * T_v[P_v] + T_v[ceil(r / SMs)]),
               blocks * steps * (BM + BN) * k * 2 / BW)``

and the host launches the version with the smallest ``t_v`` (the first on ties).  Times
are integers (femtoseconds, ``int64``).  The rule is an IR function
(:func:`wave_selector`: ``<name>__select`` over the size symbols, the ``T_v`` as local
tables), which the backend prints into the module and
:mod:`polycomp.lowering.host_eval` evaluates in Python; :func:`select` states the same
rule independently in Python, and tests compare the three (Python, the IR in Python, the
IR printed as C and built with gcc) at every bucket boundary without a GPU.
The rule is coarser than the ranking model (no partial pipeline overlap, no
occupancy-dependent bandwidth share), so it can pick another version than the per-bucket
choice; ``polycomp bench tune --gpu-table`` lists both (docs/tuning.md).

The artifact is the CUDA backend's module (``hw/cuda/multiversion.py``): the shared
header (CUDA includes, PTX helpers) once; version ``i``'s kernels, launcher and
launch-config function as the function ``<name>__v<i>``; ``<name>__select(<params>)``; and
``<name>(...)`` / ``<name>_launch_config(...)`` with the single-version signatures,
calling the selected version.  Tests compile it with ``nvcc -arch=sm_80 -cubin`` and run
every version in the GPU-semantics simulator against numpy.  No GPU was lent while this
was written: the constants are the model's (datasheet peaks), not measurements.
"""
from __future__ import annotations

from dataclasses import dataclass

from polycomp import ir
from polycomp.errors import UsageError

from .gpu_space import GpuPoint, blocks_per_sm, predict_seconds, rank
from .multiversion import MultiVersion, config_key, selector_name


@dataclass(frozen=True)
class GemmSymbols:
    """The size symbols of a GEMM kernel: output rows, output columns, reduction."""
    rows: str
    cols: str
    depth: str


#: the host rule counts time in femtoseconds (int64: exact, the same in Python and C)
FS = 1e15


@dataclass(frozen=True)
class CudaVersion:
    point: GpuPoint
    sms: int                     # streaming multiprocessors
    per_sm: int                  # blocks one SM holds (occupancy)
    share_fs: tuple[int, ...]    # [s]: one k step of a block while s blocks share its SM
    fs_per_byte: int             # DRAM time of one byte
    buckets: tuple[int, ...]     # the row buckets whose model choice this is

    @property
    def blocks_per_wave(self) -> int:
        return self.sms * self.per_sm

    @property
    def bytes_per_step(self) -> int:
        return sum(self.point.block) * self.point.k * 2

    def blocks(self, rows: int, cols: int) -> int:
        bm, bn = self.point.block
        return -(-rows // bm) * -(-cols // bn)

    def predict_fs(self, rows: int, cols: int, depth: int) -> int:
        """The host rule's time in femtoseconds (see the module docstring)."""
        blocks = self.blocks(rows, cols)
        steps = -(-depth // self.point.k)
        q, r = divmod(blocks, self.blocks_per_wave)
        last = -(-r // self.sms)                 # blocks on the busiest SM, last wave
        compute = steps * (q * self.share_fs[self.per_sm] + self.share_fs[last])
        traffic = blocks * steps * self.bytes_per_step * self.fs_per_byte
        return max(compute, traffic)


def gemm_symbols(func: ir.LoweredFunc) -> GemmSymbols:
    """Rows/cols from the first output's two symbolic dimensions; depth: the other
    parameter."""
    out = func.outputs[0] if func.outputs else None
    if out is None or len(out.shape) != 2 or not all(isinstance(d, ir.Var)
                                                     for d in out.shape):
        raise UsageError(f"{func.name}: multi-version CUDA dispatch takes a GEMM whose "
                         f"output has two symbolic dimensions")
    rows, cols = (d.name for d in out.shape)   # type: ignore[attr-defined]
    rest = [p.name for p in func.params if p.name not in (rows, cols)]
    if len(rest) != 1:
        raise UsageError(f"{func.name}: multi-version CUDA dispatch takes a GEMM with one "
                         f"reduction size symbol, got {rest}")
    return GemmSymbols(rows, cols, rest[0])


def plan_cuda_versions(target, row_buckets, cols: int, depth: int,
                       space: list[GpuPoint] | None = None,
                       points: list[GpuPoint] | None = None) -> list[CudaVersion]:
    """The model's choice at every row bucket (among ``space``, default the whole Tensor
    Core space), distinct points once, in order of first choice; or exactly ``points``
    (given versions, e.g. from records), in that order."""
    chosen: dict[GpuPoint, list[int]] = {p: [] for p in points or []}
    for b in ([] if points else sorted(set(int(x) for x in row_buckets))):
        if space is None:
            p = rank(target, b, cols, depth, top=1)[0][1]
        else:
            p = min(space, key=lambda q: (predict_seconds(q, target, b, cols, depth),
                                          q.warps, q.block, q.k, q.stages))
        chosen.setdefault(p, []).append(b)
    sms, flops_sm, bw = _sm_data(target)
    out = []
    for p, bs in chosen.items():
        per_sm = max(1, blocks_per_sm(p, target))
        share = [0] + [round(2 * p.block[0] * p.block[1] * p.k * n / flops_sm
                             / min(1.0, p.warps * n / 4) * FS) for n in range(1, per_sm + 1)]
        out.append(CudaVersion(p, sms, per_sm, tuple(share), round(FS / bw), tuple(bs)))
    return out


def _sm_data(target) -> tuple[int, float, float]:
    from .gpu_space import SM_DATA
    return SM_DATA.get(target.cuda.sm, SM_DATA[80])


def select(versions: list[CudaVersion], rows: int, cols: int, depth: int) -> int:
    """The host rule in Python: the version with the smallest predicted time."""
    best, best_t = 0, 0
    for i, v in enumerate(versions):
        t = v.predict_fs(rows, cols, depth)
        if i == 0 or t < best_t:
            best, best_t = i, t
    return best


def _ceil_div(a: ir.Expr, b: int) -> ir.Expr:
    return ir.Binary("//", ir.Binary("+", a, ir.IntImm(b - 1), "int64"), ir.IntImm(b),
                     "int64")


def _int(op: str, a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Binary(op, a, b, "int64")


def wave_selector(func: ir.LoweredFunc, syms: GemmSymbols,
                  versions: list[CudaVersion]) -> ir.LoweredFunc:
    """``<name>__select(<size symbols>)``: :func:`select` as IR (``int64`` only).  Per
    version a block computes ``t_v`` from its table ``T_v`` (a local array); the
    smallest time so far and its version live in a two-element local array."""
    params = {p.name: p for p in func.params}
    try:
        rows, cols, depth = (params[x] for x in (syms.rows, syms.cols, syms.depth))
    except KeyError as e:
        raise UsageError(f"{func.name}: no size symbol {e} for the wave-model rule") from None
    best = ir.Buffer("pc_best", "int64", (ir.IntImm(2),), scope="local")
    blocks_of = []
    for i, v in enumerate(versions):
        bm, bn = v.point.block
        table = ir.Buffer(f"pc_T{i}", "int64", (ir.IntImm(len(v.share_fs)),), scope="local")
        blocks = ir.Var(f"pc_blocks{i}")
        steps = ir.Var(f"pc_steps{i}")
        t = ir.Var(f"pc_t{i}")
        w = ir.IntImm(v.blocks_per_wave)
        last = _ceil_div(_int("%", blocks, w), v.sms)           # busiest SM, last wave
        compute = _int("*", steps, _int("+", _int("*", _int("//", blocks, w),
                                                  ir.IntImm(v.share_fs[v.per_sm])),
                                        ir.Load(table, (last,), "int64")))
        traffic = _int("*", _int("*", blocks, steps),
                       ir.IntImm(v.bytes_per_step * v.fs_per_byte))
        if i == 0:
            keep = ir.seq(ir.Store(best, (ir.IntImm(0),), ir.IntImm(0)),
                          ir.Store(best, (ir.IntImm(1),), t))
        else:
            keep = ir.IfThenElse(
                ir.Binary("<", t, ir.Load(best, (ir.IntImm(1),), "int64"), "bool"),
                ir.seq(ir.Store(best, (ir.IntImm(0),), ir.IntImm(i)),
                       ir.Store(best, (ir.IntImm(1),), t)))
        body = ir.LetStmt(
            blocks, _int("*", _ceil_div(rows, bm), _ceil_div(cols, bn)),
            ir.LetStmt(steps, _ceil_div(depth, v.point.k),
                       ir.LetStmt(t, _int("max", compute, traffic), keep)))
        stores = [ir.Store(table, (ir.IntImm(n),), ir.IntImm(x))
                  for n, x in enumerate(v.share_fs)]
        blocks_of.append(ir.Allocate(table, ir.seq(*stores, body)))
    result = ir.Return(ir.Load(best, (ir.IntImm(0),), "int64"))
    return ir.LoweredFunc(selector_name(func), func.params, (), (),
                          ir.Allocate(best, ir.seq(*blocks_of, result)))


@dataclass(frozen=True)
class WavePlan:
    """Versions of a Tensor Core GEMM chosen at run time by the wave model."""
    versions: tuple[CudaVersion, ...]
    symbols: GemmSymbols

    def configs(self) -> list[dict]:
        return [v.point.options() for v in self.versions]

    def selector(self, func: ir.LoweredFunc) -> ir.LoweredFunc:
        return wave_selector(func, self.symbols, list(self.versions))

    def comments(self) -> list[str]:
        return [v.point.label() for v in self.versions]

    def explain(self, name: str, target: str) -> str:
        s = self.symbols
        lines = [f"multi-version CUDA kernel {name} on {target}: "
                 f"{len(self.versions)} versions in one .cu",
                 f"rule: argmin_v max(steps * (T_v[P_v] * floor(blocks / W_v) + "
                 f"T_v[ceil((blocks mod W_v) / SMs)]), blocks * steps * (BM+BN) * k * 2 / BW) "
                 f"with blocks = ceil({s.rows}/BM) * ceil({s.cols}/BN), steps = "
                 f"ceil({s.depth}/k), W_v = SMs * P_v (wave model + DRAM bound; "
                 f"first on ties)"]
        for i, v in enumerate(self.versions):
            lines.append(f"  v{i}: {v.point.label():26s} T_v[P_v]="
                         f"{v.share_fs[v.per_sm] / 1e6:8.3f} ns/k-step P_v={v.per_sm:2d} "
                         f"W_v={v.blocks_per_wave:4d}  chosen at {s.rows} in "
                         f"{list(v.buckets)}")
        return "\n".join(lines)

    def select(self, values: dict[str, int]) -> int:
        s = self.symbols
        return select(list(self.versions), int(values[s.rows]), int(values[s.cols]),
                      int(values[s.depth]))



class CudaMultiVersion(MultiVersion):
    """Every version of a Tensor Core GEMM ``kernel`` on a CUDA ``target`` and the one
    ``.cu`` holding them (:attr:`source`, printed from :attr:`module`)."""

    def __init__(self, kernel, target, row_buckets, cols: int, depth: int,
                 space: list[GpuPoint] | None = None, points: list[GpuPoint] | None = None):
        from polycomp.driver import compile_kernel
        from polycomp.hw.target import get_target
        t = get_target(target)
        if t.cuda is None:
            raise UsageError(f"CudaMultiVersion builds targets with a CUDA machine "
                             f"description; {t.name} has none")
        versions = plan_cuda_versions(t, row_buckets, cols, depth, space, points)
        first = versions[0].point.options()
        base = compile_kernel(kernel, t, first)
        self.symbols = gemm_symbols(base.final_ir)
        self.versions = versions
        super().__init__(kernel, t, WavePlan(tuple(versions), self.symbols),
                         {config_key(first): base})

    def select_model(self, **values: int) -> int:
        """The rule stated in Python (:func:`select`), independent of the IR."""
        s = self.symbols
        return select(self.versions, int(values[s.rows]), int(values[s.cols]),
                      int(values[s.depth]))

    def simulate(self, *arrays, **params):
        """(outputs, version index) of the selected version in the GPU-semantics
        simulator (the backend's ``execute_module``; with a GPU check bundle being
        recorded, the run becomes a case of the one-module ``.cu``)."""
        return self.execute(*arrays, **params)


def _point(config: dict) -> GpuPoint:
    tc = config["tc_tile"]
    pe = tc.get("persistent")
    return GpuPoint(tuple(tc["block"]), tuple(tc["warp"]), int(tc["k"]),   # type: ignore[arg-type]
                    int(tc["stages"]), bool(tc.get("swizzle", True)),
                    None if pe is None else bool(pe))


def wave_plan(kernel, target, records, func: ir.LoweredFunc) -> WavePlan:
    """The wave-model plan of ``kernel`` on ``target`` from its records
    (``polycomp tune -t cuda`` writes the model's choice per shape): the versions are the
    distinct ``tc_tile`` configs in order of their rows (``Backend.version_plan`` of the
    CUDA backend)."""
    from .records import kernel_hash
    mine = [r for r in records if r.kernel == kernel_hash(kernel) and r.target == target.name
            and r.ok and "tc_tile" in r.config]
    if not mine:
        raise UsageError(f"no tc_tile records of this kernel on {target.name}")
    syms = gemm_symbols(func)
    try:
        mine.sort(key=lambda r: r.shape[syms.rows])
        points = list(dict.fromkeys(_point(r.config) for r in mine))
        last = mine[-1].shape
        versions = plan_cuda_versions(target, [], last[syms.cols], last[syms.depth],
                                      points=points)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"tc_tile records without the sizes of {syms.rows}, {syms.cols} "
                         f"and {syms.depth}: {e}") from None
    return WavePlan(tuple(versions), syms)

