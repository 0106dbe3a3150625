"""Multi-version CUDA GEMM kernels: several Tensor Core kernels in ONE ``.cu`` with a
host-side selection rule, the wave model (issue #12 item 4, GPU).

Versions: the analytic model's choice (:func:`.gpu_space.rank`) at each bucket of the
rows symbol (e.g. BERT's ``32·L``), distinct configurations once.  The host rule is
TSCompiler's wave model ``T_s * ceil(blocks / blocks_per_wave)`` with a DRAM bound; for
version ``v`` with block tile ``BM x BN``, K tile ``k``, ``W_v = SMs * blocks_per_SM``
blocks per wave and ``T_v`` the mma time of one ``k`` step of a block while
``blocks_per_SM`` blocks share its SM (from the same datasheet constants as the model):

    ``blocks = ceil(rows/BM) * ceil(cols/BN)``, ``steps = ceil(depth/k)``
    ``t_v = max(T_v * steps * ceil(blocks / W_v), blocks * steps * (BM+BN) * k * 2 / BW)``

and the host launches the version with the smallest ``t_v`` (the first on ties).  The
rule uses only products, quotients and a max (no ``a*b+c`` a compiler could fuse), so the
Python evaluation (:meth:`CudaMultiVersion.select`) and the plain C one (:func:`select_c`)
give the same doubles; tests compile the C with gcc and compare both choices at every
bucket boundary without a GPU.  It is coarser than the ranking model (no partial pipeline
overlap, no occupancy-dependent bandwidth share), so it can pick another version than the
per-bucket choice; ``polycomp bench tune --gpu-table`` / docs/tuning.md list both.

The ``.cu`` (:func:`multiversion_cu`): the shared header (CUDA includes, PTX helpers)
once; version ``i``'s kernels, launcher and launch-config functions renamed
``<name>__v<i>...``; ``<name>__select(<params>)``; and ``<name>(...)`` /
``<name>_launch_config(...)`` with the single-version signatures, dispatching on the
selection.  Tests compile it with ``nvcc -arch=sm_80 -cubin`` and run every version in the
GPU-semantics simulator against numpy.  No GPU was lent while this was written: the
constants are the model's (datasheet peaks), not measurements.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from polycomp import ir
from polycomp.errors import PolycompInternalError, UsageError

from .gpu_space import GpuPoint, blocks_per_sm, predict_seconds, rank


@dataclass(frozen=True)
class GemmSymbols:
    """The size symbols of a GEMM kernel: output rows, output columns, reduction."""
    rows: str
    cols: str
    depth: str


@dataclass(frozen=True)
class CudaVersion:
    point: GpuPoint
    step_seconds: float          # T_v: one k step of a block, blocks_per_SM sharing an SM
    blocks_per_wave: int         # W_v = SMs * blocks_per_SM
    bandwidth: float             # DRAM bytes/s of the target
    buckets: tuple[int, ...]     # the row buckets whose model choice this is

    def blocks(self, rows: int, cols: int) -> int:
        bm, bn = self.point.block
        return -(-rows // bm) * -(-cols // bn)

    def predict(self, rows: int, cols: int, depth: int) -> float:
        """The host rule's time (see the module docstring); only products, quotients and
        a max, so C computes the same double (no contraction into a fused multiply-add)."""
        blocks = self.blocks(rows, cols)
        steps = -(-depth // self.point.k)
        waves = -(-blocks // self.blocks_per_wave)
        compute = self.step_seconds * steps * waves
        traffic = (blocks * steps * (sum(self.point.block) * self.point.k * 2)) / self.bandwidth
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
        busy = min(1.0, p.warps * per_sm / 4)
        step = 2 * p.block[0] * p.block[1] * p.k / (flops_sm / per_sm) / busy
        out.append(CudaVersion(p, step, sms * per_sm, bw, tuple(bs)))
    return out


def _sm_data(target) -> tuple[int, float, float]:
    from .gpu_space import SM_DATA
    return SM_DATA.get(target.cuda.sm, SM_DATA[80])


def select(versions: list[CudaVersion], rows: int, cols: int, depth: int) -> int:
    """The host rule in Python: the version with the smallest predicted time."""
    best, best_t = 0, 0.0
    for i, v in enumerate(versions):
        t = v.predict(rows, cols, depth)
        if i == 0 or t < best_t:
            best, best_t = i, t
    return best


def select_c(name: str, params: list[str], syms: GemmSymbols,
             versions: list[CudaVersion]) -> str:
    """``int64_t <name>__select(int64_t <params>...)``: :func:`select` in plain C."""
    n = len(versions)
    psig = ", ".join(f"int64_t {p}" for p in params)

    def arr(ty, vals):
        return f"  static const {ty} {{}}[{n}] = {{{{{', '.join(vals)}}}}};"
    v = versions
    lines = [f"int64_t {name}__select({psig}) {{",
             *[f"  (void){p};" for p in params if p not in (syms.rows, syms.cols, syms.depth)],
             arr("double", [repr(x.step_seconds) for x in v]).format("T"),
             arr("double", [repr(x.bandwidth) for x in v]).format("BW"),
             arr("int64_t", [str(x.point.block[0]) for x in v]).format("BM"),
             arr("int64_t", [str(x.point.block[1]) for x in v]).format("BN"),
             arr("int64_t", [str(x.point.k) for x in v]).format("KT"),
             arr("int64_t", [str(x.blocks_per_wave) for x in v]).format("W"),
             "  int64_t best = 0; double best_t = 0.0;",
             f"  for (int64_t i = 0; i < {n}; ++i) {{",
             f"    int64_t blocks = (({syms.rows} + BM[i] - 1) / BM[i]) * "
             f"(({syms.cols} + BN[i] - 1) / BN[i]);",
             f"    int64_t steps = ({syms.depth} + KT[i] - 1) / KT[i];",
             "    int64_t waves = (blocks + W[i] - 1) / W[i];",
             "    double compute = T[i] * (double)steps * (double)waves;",
             "    double traffic = (double)(blocks * steps * ((BM[i] + BN[i]) * KT[i] * 2))"
             " / BW[i];",
             "    double t = compute > traffic ? compute : traffic;",
             "    if (i == 0 || t < best_t) { best = i; best_t = t; }",
             "  }",
             "  return best;",
             "}"]
    return "\n".join(lines)


def _rename(source: str, name: str, new: str) -> str:
    pat = re.compile(rf"\b{re.escape(name)}(_k\d+|_launch_config|_num_kernels)?\b")
    return pat.sub(lambda m: new + (m.group(1) or ""), source)


def multiversion_cu(compiled: list, syms: GemmSymbols, versions: list[CudaVersion]) -> str:
    """One ``.cu`` holding every version of ``compiled`` (CompiledKernels of one kernel for
    one CUDA target, in the order of ``versions``) and the wave-model dispatcher."""
    func = compiled[0].final_ir
    name = func.name
    header = ""
    bodies = []
    for i, ck in enumerate(compiled):
        src = ck.source
        at = src.find('extern "C"')
        if at < 0:
            raise PolycompInternalError(f"multi-version {name}: no extern \"C\" function")
        head = src[:at].split("\n", 1)[1]           # drop the "generated by" line
        if i == 0:
            header = head
        elif head != header:
            raise PolycompInternalError(f"multi-version {name}: version {i} has another "
                                        f"header than version 0")
        bodies.append(f"// version {i}: {versions[i].point.label()}\n" +
                      _rename(src[at:], name, f"{name}__v{i}"))
    params = [p.name for p in func.params]
    p_args = ", ".join(params)
    host = re.search(rf'extern "C" int {re.escape(name)}\(([^)]*)\)', compiled[0].source)
    if host is None:
        raise PolycompInternalError(f"multi-version {name}: no host launcher")
    sig = host.group(1)
    call_args = ", ".join(a.strip().split()[-1].lstrip("*") for a in sig.split(","))
    psig = ", ".join(f"int64_t {p}" for p in params)
    out = [f"// generated by polycomp: kernel {name}, {len(compiled)} versions "
           f"(wave-model dispatch)", header.rstrip("\n"), *bodies,
           'extern "C" ' + select_c(name, params, syms, versions), ""]
    out.append(f'extern "C" int {name}({sig}) {{')
    out.append(f"  switch ({name}__select({p_args})) {{")
    out += [f"  case {i}: return {name}__v{i}({call_args});" for i in range(len(compiled))]
    out.append("  default: return -1;\n  }\n}\n")
    out.append(f'extern "C" void {name}_launch_config({psig}, long long* cfg) {{')
    out.append(f"  switch ({name}__select({p_args})) {{")
    out += [f"  case {i}: {name}__v{i}_launch_config({p_args}, cfg); return;"
            for i in range(len(compiled))]
    out.append("  default: return;\n  }\n}")
    return "\n".join(out) + "\n"


class CudaMultiVersion:
    """Every version of a Tensor Core GEMM ``kernel`` on a CUDA ``target`` and the one
    ``.cu`` holding them (:attr:`source`)."""

    def __init__(self, kernel, target, row_buckets, cols: int, depth: int,
                 space: list[GpuPoint] | None = None, points: list[GpuPoint] | None = None):
        from polycomp.driver import compile_kernel
        from polycomp.hw.target import get_target
        t = get_target(target)
        if t.kind != "cuda":
            raise UsageError(f"CudaMultiVersion builds CUDA targets; {t.name} is not one")
        self.kernel, self.target = kernel, t
        self.versions = plan_cuda_versions(t, row_buckets, cols, depth, space, points)
        self.compiled = [compile_kernel(kernel, t, v.point.options()) for v in self.versions]
        self.func = self.compiled[0].final_ir
        self.symbols = gemm_symbols(self.func)
        self.source = multiversion_cu(self.compiled, self.symbols, self.versions)

    def select(self, **values: int) -> int:
        s = self.symbols
        return select(self.versions, int(values[s.rows]), int(values[s.cols]),
                      int(values[s.depth]))

    def simulate(self, *arrays, **params):
        """(outputs, version index) of the selected version in the GPU-semantics
        simulator."""
        from polycomp.hw.cuda.simulator import simulate
        from polycomp.shapes import infer_params
        f = self.func
        values = infer_params(f.params, f.inputs, list(arrays), params, outputs=f.outputs)
        i = self.select(**values)
        out, _ = simulate(self.compiled[i], *arrays, **params)
        return out, i

    def explain(self) -> str:
        s = self.symbols
        lines = [f"multi-version CUDA kernel {self.func.name} on {self.target.name}: "
                 f"{len(self.versions)} versions in one .cu",
                 f"rule: argmin_v max(T_v * ceil({s.depth}/k_v) * ceil(blocks_v / W_v), "
                 f"blocks_v * ceil({s.depth}/k_v) * (BM_v+BN_v) * k_v * 2 / BW), "
                 f"blocks_v = ceil({s.rows}/BM_v) * ceil({s.cols}/BN_v) (wave model + "
                 f"DRAM bound; first on ties)"]
        for i, v in enumerate(self.versions):
            lines.append(f"  v{i}: {v.point.label():26s} T_v={v.step_seconds * 1e9:8.3f} ns/k-step "
                         f"W_v={v.blocks_per_wave:4d}  chosen at {s.rows} in "
                         f"{list(v.buckets)}")
        return "\n".join(lines)


def model_records(kernel, target, shape: dict[str, int]) -> list:
    """``polycomp tune`` on a CUDA target without a GPU: one record of the analytic
    model's choice at ``shape`` (``seconds`` is the model's prediction, ``machine`` says
    so), for ``explain --records`` and multi-version plans."""
    from polycomp.driver import compile_kernel

    from .records import TuningRecord, kernel_hash, shape_bucket
    syms = gemm_symbols(compile_kernel(kernel, target, {}).final_ir)
    try:
        rows, cols, depth = (int(shape[x]) for x in (syms.rows, syms.cols, syms.depth))
    except KeyError as e:
        raise UsageError(f"--shape must bind {syms.rows}, {syms.cols} and {syms.depth} "
                         f"(missing {e})") from None
    sec, p = rank(target, rows, cols, depth, top=1)[0]
    return [TuningRecord(kernel_hash(kernel), target.name, shape_bucket(shape), p.options(),
                         sec, dict(shape), f"wave-model (not measured) sm_{target.cuda.sm}")]


def _point(config: dict) -> GpuPoint:
    tc = config["tc_tile"]
    return GpuPoint(tuple(tc["block"]), tuple(tc["warp"]), int(tc["k"]),   # type: ignore[arg-type]
                    int(tc["stages"]), bool(tc.get("swizzle", True)))


def explain_cuda_plan(kernel, target, records) -> str:
    """The CUDA plan for ``explain --records``: the versions are the distinct ``tc_tile``
    configs of this kernel's records on this target (``polycomp tune -t cuda`` writes the
    model's choice per shape), in order of their rows; the rule is the wave model."""
    from .records import kernel_hash
    mine = [r for r in records if r.kernel == kernel_hash(kernel) and r.target == target.name
            and "tc_tile" in r.config]
    if not mine:
        return f"no multi-version plan: no tc_tile records of this kernel on {target.name}"
    try:
        from polycomp.driver import compile_kernel
        syms = gemm_symbols(compile_kernel(kernel, target, {}).final_ir)
        mine.sort(key=lambda r: r.shape[syms.rows])
        points = list(dict.fromkeys(_point(r.config) for r in mine))
        last = mine[-1].shape
        return CudaMultiVersion(kernel, target, [], last[syms.cols], last[syms.depth],
                                points=points).explain()
    except (UsageError, KeyError, TypeError, ValueError) as e:
        return f"no multi-version plan: {e}"
