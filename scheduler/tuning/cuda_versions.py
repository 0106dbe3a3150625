"""Multi-version CUDA GEMM kernels: several Tensor Core kernels in ONE ``.cu`` with a
host-side selection rule, the wave model (issue #12 item 4, GPU).

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
are integers (femtoseconds, ``int64``), so the Python evaluation
(:meth:`CudaMultiVersion.select`) and the C one (:func:`select_c`) agree exactly; tests
compile the C with gcc and compare both choices at every bucket boundary without a GPU.
The rule is coarser than the ranking model (no partial pipeline overlap, no
occupancy-dependent bandwidth share), so it can pick another version than the per-bucket
choice; ``polycomp bench tune --gpu-table`` lists both (docs/tuning.md).

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

import numpy as np

from polycomp import ir
from polycomp.errors import PolycompInternalError, UsageError

from .gpu_space import GpuPoint, blocks_per_sm, predict_seconds, rank


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


def select_c(name: str, params: list[str], syms: GemmSymbols,
             versions: list[CudaVersion]) -> str:
    """``int64_t <name>__select(int64_t <params>...)``: :func:`select` in plain C
    (``int64_t`` only)."""
    psig = ", ".join(f"int64_t {p}" for p in params)
    lines = [f"int64_t {name}__select({psig}) {{",
             *[f"  (void){p};" for p in params if p not in (syms.rows, syms.cols, syms.depth)],
             "  int64_t best = 0, best_t = 0;"]
    for i, v in enumerate(versions):
        bm, bn = v.point.block
        lines += [
            f"  {{ /* v{i}: {v.point.label()} */",
            f"    static const int64_t S[{len(v.share_fs)}] = "
            f"{{{', '.join(str(x) for x in v.share_fs)}}};",
            f"    int64_t blocks = (({syms.rows} + {bm - 1}) / {bm}) * "
            f"(({syms.cols} + {bn - 1}) / {bn});",
            f"    int64_t steps = ({syms.depth} + {v.point.k - 1}) / {v.point.k};",
            f"    int64_t q = blocks / {v.blocks_per_wave}, r = blocks % {v.blocks_per_wave};",
            f"    int64_t compute = steps * (q * S[{v.per_sm}] + S[(r + {v.sms - 1}) / {v.sms}]);",
            f"    int64_t traffic = blocks * steps * {v.bytes_per_step} * {v.fs_per_byte};",
            "    int64_t t = compute > traffic ? compute : traffic;",
            f"    if ({'1' if i == 0 else 't < best_t'}) {{ best = {i}; best_t = t; }}",
            "  }"]
    lines += ["  return best;", "}"]
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
        self._record_dispatch(arrays, values, out, i)
        return out, i

    def _record_dispatch(self, arrays, values: dict, out, version: int) -> None:
        """With a GPU check bundle being recorded (:mod:`polycomp.hw.cuda.gpu_bundle`),
        add this run as a case of the one-object ``.cu``: its host dispatcher must pick
        ``version`` and reproduce the simulator's output on a real GPU."""
        from polycomp.hw.cuda.codegen import split_kernels
        from polycomp.hw.cuda.gpu_bundle import bundle_dir, record_case
        root = bundle_dir()
        if root is None:
            return
        f = self.func
        outs = out if isinstance(out, tuple) else (out,)
        temps, _ = split_kernels(self.compiled[version].final_ir)
        record_case(self.source, f, [], temps, values,
                    {b.name: np.ascontiguousarray(a) for b, a in zip(f.inputs, arrays)},
                    {b.name: o for b, o in zip(f.outputs, outs)}, root,
                    target=self.target.name,
                    extra={"select": f"{f.name}__select", "version": str(version)})

    def explain(self) -> str:
        s = self.symbols
        lines = [f"multi-version CUDA kernel {self.func.name} on {self.target.name}: "
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
