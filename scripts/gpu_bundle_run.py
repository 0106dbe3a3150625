#!/usr/bin/env python3
"""Run a GPU check bundle on a real GPU (see polycomp/hw/cuda/gpu_bundle.py).

Needs numpy, cupy and nvcc only — not polycomp — so it runs on a bare GPU machine::

    python3 scripts/gpu_bundle_run.py BUNDLE_DIR --out results.jsonl [--jobs 16]

For every distinct source it builds a shared library (host entry points) and a cubin
(kernels) with ``nvcc -arch=sm_<cc>`` (``-gencode=arch=compute_90a,code=sm_90a`` for the
sources of cases whose ``arch`` is ``90a``: target ``cuda-sm90a``); for every case it runs

* the **host path**: the ``.cu``'s own entry point ``<name>(params..., pointers...)``
  through ctypes on cupy arrays (its launch configuration, temporaries, dispatch), and,
  for multi-version sources, checks ``<name>__select`` picks the recorded version;
* the **kernel path**: each ``__global__`` kernel from the cubin with the recorded grid,
  block and dynamic shared memory, after checking the host's ``<name>_launch_config``
  computes the same geometry (kernels with TMA tensor maps get them from the source's
  ``<name>_tensormaps`` and are launched with ``cuLaunchKernel`` through ctypes);

and compares the outputs with the simulator's (``sim:``) or numpy's (``ref:``) arrays:
NaN and infinity positions must agree, finite values within a tolerance by dtype
(float32 ``1e-4``, float16 ``1e-2``, bfloat16 ``2e-2``, relative to the element and to
the output's largest magnitude), integers exactly.  Outputs start as NaN (or 0xAA
bytes), as in the simulator, so unwritten elements show.  Cases marked ``time`` are also
timed with CUDA events (kernel path, best and median of ``--repeat`` runs).  One JSON
line per case goes to ``--out`` as it finishes; a summary is printed at the end.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import numpy as np

TOL = {"float32": 1e-4, "float64": 1e-9, "float16": 1e-2, "bfloat16": 2e-2}
NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
      "bfloat16": np.uint16, "int8": np.int8, "int32": np.int32, "int64": np.int64,
      "bool": np.bool_}


def _softmax(t):
    e = np.exp(t - t.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


#: numpy references of the timed cases (inputs as float32, in argument order)
REFERENCES = {
    "matmul": lambda x, e: x[0] @ x[1],
    "bmm_chain": lambda x, e: (x[0].astype(np.float64) @ x[1]) @ x[2],
    "bmm_softmax_chain": lambda x, e: _softmax(x[0].astype(np.float64) @ x[1]) @ x[2],
    "attention": lambda x, e: _softmax((x[0].astype(_ref_dtype(x)) @ x[1])
                                       * float(e["scale"])) @ x[2],
}


def _erf(x):
    try:
        from scipy.special import erf
        return erf(x)
    except ImportError:                       # pragma: no cover - scipy is usually there
        import math
        return np.vectorize(math.erf)(x)


def _layernorm(x, g, b, eps):
    d = x - x.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + eps) * g + b


def _tiled_mask(x, mask):
    """``mask[i % S, c]`` for the rows ``i`` of ``x`` (BERT's additive attention mask)."""
    return np.tile(mask, (x.shape[0] // mask.shape[0], 1))


# row reductions and their stitched groups (scripts/gpu_bundle_rowreduce.py)
REFERENCES.update({
    "softmax": lambda x, e: _softmax(x[0].astype(np.float64)),
    "layernorm": lambda x, e: _layernorm(x[0].astype(np.float64), x[1], x[2],
                                         float(e.get("eps", 1e-5))),
    "row_sum": lambda x, e: x[0].astype(np.float64).sum(-1),
    "row_max": lambda x, e: x[0].max(-1),
    "bias_residual_layernorm": lambda x, e: _layernorm(
        x[0].astype(np.float64) + x[1] + x[2], x[3], x[4], float(e.get("eps", 1e-5))),
    "scale_mask_softmax": lambda x, e: _softmax(
        x[0].astype(np.float64) * float(e["scale"]) + _tiled_mask(x[0], x[1])),
    "bias_gelu": lambda x, e: (lambda y: 0.5 * y * (1.0 + _erf(y / np.sqrt(2.0))))(
        x[0].astype(np.float64) + x[1]),
})
_REF_CACHE: dict = {}


def _ref_dtype(x: list):
    """float64 references, float32 where the scores pass 2**26 elements (seconds, not
    minutes, on the GPU machine's CPU; still 1e-6 relative)."""
    scores = x[0].shape[:-1] + x[1].shape[-1:]
    return np.float32 if np.prod(scores) > 1 << 26 else np.float64


def reference(name: str, ins: list, extra: dict, key: tuple) -> np.ndarray:
    """``REFERENCES[name]``, computed once per (inputs' shapes and dtypes, seed, scale):
    the fused and unfused cases of one shape share it."""
    if key not in _REF_CACHE:
        _REF_CACHE.clear()
        _REF_CACHE[key] = REFERENCES[name](ins, extra)
    return _REF_CACHE[key]


def baseline(kind: str, dev_inputs: list, extra: dict, cp):
    """A library peer of a timed case on the same device, as a callable."""
    if kind == "cublas":
        a, b = dev_inputs
        return lambda: cp.matmul(a, b)
    if kind in ("torch_matmul", "torch_matmul_bf16"):   # cuBLAS through PyTorch, 16-bit out
        import torch
        a, b = (torch.from_dlpack(x) for x in dev_inputs)
        if kind == "torch_matmul_bf16":                 # bf16 travels as its uint16 bits
            a, b = (x.view(torch.bfloat16) for x in (a, b))
        return lambda: torch.matmul(a, b)
    if kind == "cupy_bmm_chain":
        x, y, z = dev_inputs
        return lambda: cp.matmul(cp.matmul(x, y), z)
    if kind in ("cupy_bmm_softmax_chain", "cupy_attention"):
        x, y, z = dev_inputs
        scale = float(extra.get("scale", 1.0))

        def run():
            t = cp.matmul(x, y)
            if kind == "cupy_attention":
                t *= scale
            t = cp.exp(t - t.max(-1, keepdims=True))
            t /= t.sum(-1, keepdims=True)
            return cp.matmul(t, z)
        return run
    if kind in ("torch_sdpa", "torch_sdpa_bf16"):     # FlashAttention-2 through PyTorch
        import torch
        q, kt, v = (torch.from_dlpack(x) for x in dev_inputs)
        if kind == "torch_sdpa_bf16":                  # bf16 travels as its uint16 bits
            q, kt, v = (x.view(torch.bfloat16) for x in (q, kt, v))
        k = kt.transpose(1, 2).contiguous()
        # 4-d [1, b*h, s, d]: PyTorch takes its flash / memory-efficient kernels only for
        # 4-d inputs (3-d ones go to the math path)
        q, k, v = (x.unsqueeze(0) for x in (q, k, v))
        scale = float(extra.get("scale", 1.0))
        f = torch.nn.functional.scaled_dot_product_attention
        return lambda: f(q, k, v, scale=scale)
    if kind.startswith(("torch_compile_", "torch_")):      # row reductions' torch peers
        return _torch_peer(kind, dev_inputs, extra)
    if kind == "copy":                 # a device-to-device copy moving the same bytes
        total = int(extra["bytes"])
        src = cp.empty(max(1, total // 8), dtype=cp.float32)
        src.fill(1.0)
        dst = cp.empty_like(src)
        return lambda: cp.copyto(dst, src)
    raise KeyError(kind)


def _torch_fn(ref: str, extra: dict):
    """The computation of timed case ``ref`` in torch (the same as REFERENCES[ref])."""
    import torch
    import torch.nn.functional as F
    eps = float(extra.get("eps", 1e-5))
    if ref == "softmax":
        return lambda x: torch.softmax(x, -1)
    if ref == "layernorm":
        return lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b, eps)
    if ref == "row_sum":
        return lambda x: x.sum(-1)
    if ref == "row_max":
        return lambda x: x.amax(-1)
    if ref == "bias_residual_layernorm":
        return lambda x, b, r, g, beta: F.layer_norm(x + b + r, x.shape[-1:], g, beta, eps)
    if ref == "scale_mask_softmax":
        scale = float(extra["scale"])

        def sms(x, mask):
            s = mask.shape[0]
            y = x.view(-1, s, s) * scale + mask
            return torch.softmax(y, -1).view(x.shape)
        return sms
    if ref == "bias_gelu":
        return lambda x, b: F.gelu(x + b)
    raise KeyError(ref)


def _torch_peer(kind: str, dev_inputs: list, extra: dict):
    import torch
    compiled = kind.startswith("torch_compile_")
    ref = kind[len("torch_compile_"):] if compiled else kind[len("torch_"):]
    fn = _torch_fn(ref, extra)
    if compiled:
        fn = torch.compile(fn)          # the default mode (inductor)
    ins = [torch.from_dlpack(x) for x in dev_inputs]
    return lambda: fn(*ins)


def case_bytes(m: dict) -> int:
    """Bytes of the case's arguments (inputs read, outputs written once each)."""
    size = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1,
            "int32": 4, "int64": 8, "bool": 1}
    return sum(int(np.prod(s["shape"])) * size[s["dtype"]] for s in m["args"])


def time_it(fn, cp, repeat: int) -> tuple[float, float]:
    fn()
    cp.cuda.runtime.deviceSynchronize()
    times = []
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(max(1, repeat)):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return min(times), float(np.median(times))


def source_archs(bundle: str) -> dict:
    """sha -> the architecture its cases ask for ("" for the device's own)."""
    out: dict = {}
    for path in glob.glob(os.path.join(bundle, "cases", "*.json")):
        with open(path) as f:
            m = json.load(f)
        sha = os.path.basename(m["source"])[:-3]
        if m.get("arch"):
            out[sha] = m["arch"]
    return out


def arch_flags(sm: str, arch: str) -> list:
    """nvcc flags for a source built on an sm_<sm> device (``arch``: what it needs)."""
    if arch and arch != sm:
        if not arch.startswith(sm):
            raise RuntimeError(f"the source needs sm_{arch}; this device is sm_{sm}")
        return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    return [f"-arch=sm_{sm}"]


def build(bundle: str, sm: str, jobs: int) -> dict:
    """Compile every source to build/<sha>.so and build/<sha>.cubin; return errors."""
    out = os.path.join(bundle, "build")
    os.makedirs(out, exist_ok=True)
    srcs = sorted(glob.glob(os.path.join(bundle, "src", "*.cu")))
    archs = source_archs(bundle)
    errors: dict = {}

    def one(src):
        sha = os.path.basename(src)[:-3]
        so, cubin = os.path.join(out, sha + ".so"), os.path.join(out, sha + ".cubin")
        try:
            flags = arch_flags(sm, archs.get(sha, ""))
        except RuntimeError as e:
            errors[sha] = str(e)
            return
        for cmd, dst in (
                (["nvcc", *flags, "-O3", "-shared", "-Xcompiler", "-fPIC",
                  "-o", so, src, "-lcudart"], so),
                (["nvcc", *flags, "-O3", "-cubin", "-o", cubin, src], cubin)):
            if os.path.exists(dst):
                continue
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                errors[sha] = r.stderr[-2000:]
                return
    t0 = time.time()
    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(one, srcs))
    print(f"built {len(srcs)} sources in {time.time() - t0:.1f} s "
          f"({len(errors)} failed)", flush=True)
    return errors


def as_float(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64)


def compare(got: np.ndarray, want: np.ndarray, dtype: str,
            tol: float | None = None) -> tuple[bool, str]:
    if got.size == want.size == 1:        # a 0-d buffer: () here, (1,) in the simulator
        got, want = got.reshape(1), want.reshape(1)
    if got.shape != want.shape:
        return False, f"shape {got.shape} vs {want.shape}"
    if dtype not in TOL:
        bad = int(np.count_nonzero(got != want))
        return bad == 0, f"{bad} elements differ"
    g, w = as_float(got, dtype), as_float(want, dtype)
    gn, wn = np.isnan(g), np.isnan(w)
    if not np.array_equal(gn, wn):
        return False, (f"NaN positions differ: gpu {int(gn.sum())}, expected {int(wn.sum())}"
                       f" (first at {np.argwhere(gn != wn)[0].tolist()})")
    gi, wi = np.isinf(g), np.isinf(w)
    if not np.array_equal(gi, wi) or not np.array_equal(g[gi], w[wi]):
        return False, "infinities differ"
    fin = ~(wn | wi)
    if not fin.any():
        return True, "no finite values"
    tol = TOL[dtype] if tol is None else tol
    scale = max(1.0, float(np.max(np.abs(w[fin]))))
    err = np.abs(g[fin] - w[fin])
    lim = tol * (np.abs(w[fin]) + scale)
    bad = int(np.count_nonzero(err > lim))
    return bad == 0, f"max abs err {float(err.max()):.3g} (scale {scale:.3g}), {bad} beyond"


class Case:
    def __init__(self, bundle: str, name: str):
        with open(os.path.join(bundle, "cases", name + ".json")) as f:
            self.m = json.load(f)
        self.arrays = dict(np.load(os.path.join(bundle, "cases", name + ".npz")))
        self.sha = os.path.basename(self.m["source"])[:-3]
        self.bundle = bundle
        extra = self.m.get("extra", {})
        if "gen" in extra:            # timed case: inputs drawn here, reference by numpy
            rng = np.random.default_rng(int(extra["gen"]))
            ins = []
            for spec in self.m["args"]:
                if spec["role"] == "input":
                    a = rng.standard_normal(spec["shape"], dtype=np.float32)
                    if spec["dtype"] == "bfloat16":
                        a = (a.view(np.uint32) >> 16).astype(np.uint16)
                    else:
                        a = a.astype(NP[spec["dtype"]])
                    self.arrays["in:" + spec["name"]] = a
                    ins.append(as_float(a, spec["dtype"]).astype(np.float32))
            outs = [s for s in self.m["args"] if s["role"] != "input"]
            key = (extra["ref"], extra["gen"], extra.get("scale"),
                   tuple((s["shape"] and tuple(s["shape"]), s["dtype"])
                         for s in self.m["args"] if s["role"] == "input"))
            if extra.get("ref_device"):     # computed on the GPU (large GEMMs): check()
                self.ref_pending = (outs[0], ins)
            else:
                ref = reference(extra["ref"], ins, extra, key)
                self.arrays["ref:" + outs[0]["name"]] = ref.astype(NP[outs[0]["dtype"]])

    def fresh(self, cp) -> dict:
        """Device arrays for the arguments and temporaries, as the simulator starts."""
        dev = {}
        for spec in self.m["args"] + self.m["temps"]:
            given = self.arrays.get("in:" + spec["name"])
            if given is not None:
                dev[spec["name"]] = cp.asarray(given)
                continue
            a = np.empty(spec["shape"], dtype=NP[spec["dtype"]])
            if spec["dtype"] in ("float32", "float64", "float16"):
                a.fill(np.nan)
            elif spec["dtype"] == "bfloat16":
                a.fill(0x7FC0)
            elif spec["dtype"] == "bool":
                a.fill(True)
            else:
                a.view(np.uint8).fill(0xAA)
            dev[spec["name"]] = cp.asarray(a)
        return dev

    ref_pending = None

    def device_reference(self, cp) -> None:
        """A ``matmul`` reference computed by cuBLAS in float32 (no TF32) from the
        case's inputs: large GEMMs whose numpy reference would take minutes."""
        spec, ins = self.ref_pending
        if self.m["extra"]["ref"] != "matmul":
            raise KeyError(f"no device reference for {self.m['extra']['ref']}")
        a, b = (cp.asarray(x, dtype=cp.float32) for x in ins)
        self.arrays["ref:" + spec["name"]] = cp.asnumpy(cp.matmul(a, b)).astype(
            NP[spec["dtype"]] if spec["dtype"] != "bfloat16" else np.float32)
        if spec["dtype"] == "bfloat16":     # compare() reads bfloat16 as uint16 bits
            r = self.arrays["ref:" + spec["name"]]
            self.arrays["ref:" + spec["name"]] = (r.view(np.uint32) >> 16).astype(np.uint16)
        self.ref_pending = None

    def check(self, dev, cp) -> list:
        if self.ref_pending is not None:
            self.device_reference(cp)
        res = []
        for spec in self.m["args"]:
            if spec["role"] == "input":
                continue
            want = self.arrays.get("ref:" + spec["name"])
            if want is None:
                want = self.arrays["sim:" + spec["name"]]
            tol = self.m.get("extra", {}).get("tol")
            ok, why = compare(cp.asnumpy(dev[spec["name"]]), want, spec["dtype"],
                              None if tol is None else float(tol))
            res.append((spec["name"], ok, why))
        return res


def run_host(case: Case, lib, cp) -> dict:
    m = case.m
    dev = case.fresh(cp)
    fn = getattr(lib, m["entry"])
    fn.restype = ctypes.c_int
    args = [ctypes.c_int64(v) for v in m["params"].values()] + \
        [ctypes.c_void_p(dev[s["name"]].data.ptr) for s in m["args"]]
    out: dict = {}
    sel = m.get("extra", {}).get("select")
    if sel:
        f = getattr(lib, sel)
        f.restype = ctypes.c_int64
        picked = f(*[ctypes.c_int64(v) for v in m["params"].values()])
        out["select"] = int(picked)
        out["select_ok"] = int(picked) == int(m["extra"]["version"])
    rc = fn(*args)
    cp.cuda.runtime.deviceSynchronize()
    out["rc"] = rc
    out["outputs"] = case.check(dev, cp) if rc == 0 else []
    out["ok"] = rc == 0 and all(ok for _n, ok, _w in out["outputs"]) and \
        out.get("select_ok", True)
    return out


_LIBCUDA = None


def _libcuda():
    global _LIBCUDA
    if _LIBCUDA is None:
        _LIBCUDA = ctypes.CDLL("libcuda.so.1")
        _LIBCUDA.cuLaunchKernel.restype = ctypes.c_int
    return _LIBCUDA


def _function_ptr(fn) -> int:
    """The CUfunction of a cupy RawModule function (a RawKernel: its ``kernel``)."""
    ptr = getattr(fn, "ptr", None)
    return int(ptr) if ptr is not None else int(fn.kernel.ptr)


def tensor_maps(case: Case, lib, dev) -> tuple:
    """(buffer, its address): the source's TMA tensor maps for ``dev``'s arrays, 128
    bytes each, 64-byte aligned (``<entry>_tensormaps``)."""
    m = case.m
    n = sum(k.get("tensormaps", 0) for k in m["kernels"])
    raw = ctypes.create_string_buffer(128 * n + 64)
    base = (ctypes.addressof(raw) + 63) // 64 * 64
    fn = getattr(lib, m["entry"] + "_tensormaps")
    fn.restype = ctypes.c_int
    args = [ctypes.c_int64(v) for v in m["params"].values()] + \
        [ctypes.c_void_p(dev[s["name"]].data.ptr) for s in m["args"]] + [ctypes.c_void_p(base)]
    rc = fn(*args)
    if rc != 0:
        raise RuntimeError(f"{m['entry']}_tensormaps returned {rc}")
    return raw, base


def kernel_launches(case: Case, module, cp, lib=None):
    m = case.m
    dev = case.fresh(cp)
    launches = []
    maps = None
    first_map = 0
    for k in m["kernels"]:
        fn = module.get_function(k["name"])
        if k["dynamic_shared"]:
            fn.max_dynamic_shared_size_bytes = k["dynamic_shared"]
        nmaps = k.get("tensormaps", 0)
        if nmaps:             # __grid_constant__ CUtensorMap parameters: cuLaunchKernel
            if maps is None:
                maps = tensor_maps(case, lib, dev)
            store = [ctypes.c_int64(m["params"][p]) for p in k["params"]] + \
                [ctypes.c_void_p(dev[b].data.ptr) for b in k["buffers"]]
            ptrs = [ctypes.cast(ctypes.pointer(x), ctypes.c_void_p) for x in store] + \
                [ctypes.c_void_p(maps[1] + 128 * (first_map + i)) for i in range(nmaps)]
            first_map += nmaps
            params = (ctypes.c_void_p * len(ptrs))(*ptrs)
            launches.append(("driver", fn, tuple(k["grid"]), tuple(k["block"]),
                             (store, params, maps), k["dynamic_shared"]))
            continue
        args = tuple([np.int64(m["params"][p]) for p in k["params"]] +
                     [dev[b] for b in k["buffers"]])
        launches.append(("cupy", fn, tuple(k["grid"]), tuple(k["block"]), args,
                         k["dynamic_shared"]))

    def run():
        for how, fn, grid, block, args, smem in launches:
            if min(grid) <= 0:
                continue
            if how == "cupy":
                fn(grid, block, args, shared_mem=smem)
                continue
            rc = _libcuda().cuLaunchKernel(
                ctypes.c_void_p(_function_ptr(fn)), *(ctypes.c_uint(x) for x in grid),
                *(ctypes.c_uint(x) for x in block), ctypes.c_uint(smem),
                ctypes.c_void_p(cp.cuda.get_current_stream().ptr), args[1], None)
            if rc != 0:
                raise RuntimeError(f"cuLaunchKernel({fn}) returned CUresult {rc}")
    return run, dev


def run_kernels(case: Case, lib, module, cp, repeat: int) -> dict:
    m = case.m
    n = len(m["kernels"])
    cfg = (ctypes.c_longlong * (6 * n))()
    lc = getattr(lib, m["entry"] + "_launch_config")
    lc(*[ctypes.c_int64(v) for v in m["params"].values()], cfg)
    geometry_ok = all(list(cfg[6 * i:6 * i + 3]) == k["grid"] and
                      list(cfg[6 * i + 3:6 * i + 6]) == k["block"]
                      for i, k in enumerate(m["kernels"]))
    run, dev = kernel_launches(case, module, cp, lib)
    run()
    cp.cuda.runtime.deviceSynchronize()
    out: dict = {"geometry_ok": geometry_ok, "outputs": case.check(dev, cp)}
    out["ok"] = geometry_ok and all(ok for _n, ok, _w in out["outputs"])
    extra = m.get("extra", {})
    if extra.get("time"):
        out["ms_best"], out["ms_median"] = time_it(run, cp, repeat)
        out["bytes"] = case_bytes(m)
        out["gbps"] = out["bytes"] / (out["ms_best"] * 1e6)
        if extra.get("baseline"):
            ins = [dev[s["name"]] for s in m["args"] if s["role"] == "input"]
            peers: dict = {}
            for kind in extra["baseline"].split(","):
                try:           # one peer failing (no torch, no triton) must not hide others
                    peer = baseline(kind, ins, dict(extra, bytes=out["bytes"]), cp)
                    peers[kind] = list(time_it(peer, cp, repeat))
                except Exception as e:  # noqa: BLE001
                    peers[kind] = f"{type(e).__name__}: {e}"[:300]
            out["peers"] = peers
            first = peers[extra["baseline"].split(",")[0]]
            if isinstance(first, list):
                out["peer_ms_best"], out["peer_ms_median"] = first
    return out


def print_peer_timings(rows: list) -> None:
    """Timed cases with several peers (row reductions): ours, each peer, the ratio
    (peer time / ours, > 1: ours is faster) and GB/s against the copy's."""
    print("| group | shape | variant | ms best | GB/s | copy GB/s | torch eager ms "
          "| torch.compile ms | eager/ours | compile/ours | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["extra"]["group"], r["extra"]["name"],
                                         r["extra"]["variant"])):
        k, e = r.get("kernels", {}), r["extra"]
        peers = k.get("peers", {})
        ours = k.get("ms_best", 0) or float("nan")

        def ms(kind, peers=peers):
            p = next((v for n, v in peers.items() if n.startswith(kind)), None)
            return p[0] if isinstance(p, list) else float("nan")
        eager = ms(f"torch_{e['ref']}")
        comp = ms("torch_compile_")
        copy = ms("copy")
        copy_gbps = k.get("bytes", 0) / (copy * 1e6) if copy == copy else float("nan")
        print(f"| {e['group']} | {e['name']} | {e['variant']} | {ours:.4f} "
              f"| {k.get('gbps', 0):.0f} | {copy_gbps:.0f} | {eager:.4f} | {comp:.4f} "
              f"| {eager / ours:.2f} | {comp / ours:.2f} | {r['status']} |")


def print_timings(path: str) -> None:
    """The timed cases as a table: kernel path best / median, the peer's, status."""
    rows = [json.loads(line) for line in open(path)]
    timed = [r for r in rows if r.get("extra", {}).get("time")]
    multi = [r for r in timed if "," in r["extra"].get("baseline", "")]
    timed = [r for r in timed if r not in multi]
    if multi:
        print_peer_timings(multi)
    if not timed:
        return
    print("| group | shape | variant | ms best | ms median | peer ms best | peer ms median "
          "| peer/ours (best) | TFLOP/s ours / peer | status |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(timed, key=lambda r: (r["extra"]["group"], r["extra"]["name"],
                                          r["extra"]["variant"])):
        k, e = r.get("kernels", {}), r["extra"]
        ours, peer = k.get("ms_best", 0), k.get("peer_ms_best", 0)
        ratio = f"{peer / ours:.2f}" if ours and peer else "-"
        flops = float(e.get("flops", 0))
        tf = f"{flops / ours / 1e9:.0f} / {flops / peer / 1e9:.0f}" if flops and ours and peer \
            else "-"
        print(f"| {e['group']} | {e['name']} | {e['variant']} | {ours:.4f} "
              f"| {k.get('ms_median', 0):.4f} | {peer:.4f} "
              f"| {k.get('peer_ms_median', 0):.4f} | {ratio} | {tf} | {r['status']} |")


def dry_run(args) -> int:
    """Build for sm_90 and load every case (manifest, arrays, expected outputs)."""
    errors = {} if args.no_build else build(args.bundle, "90", args.jobs)
    names = sorted(os.path.basename(p)[:-5]
                   for p in glob.glob(os.path.join(args.bundle, "cases", "*.json")))
    bad = 0
    for name in names:
        case = Case(args.bundle, name)
        for spec in case.m["args"]:
            if spec["role"] != "input" and case.ref_pending is None:   # (else on the GPU)
                want = case.arrays.get("ref:" + spec["name"],
                                       case.arrays.get("sim:" + spec["name"]))
                ok, why = compare(want, want, spec["dtype"])
                bad += not ok
        if case.sha in errors:
            bad += 1
            print(name, errors[case.sha][-500:])
    print(f"dry run: {len(names)} cases, {len(errors)} build errors, {bad} problems")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--out", default="gpu_results.jsonl")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--only", default="", help="substring of case names to run")
    ap.add_argument("--dry", action="store_true",
                    help="no GPU: build for sm_90 and check every case loads")
    ap.add_argument("--no-build", action="store_true", help="with --dry: load cases only")
    args = ap.parse_args(argv)
    if args.dry:
        return dry_run(args)
    import cupy as cp
    major, minor = cp.cuda.Device(0).compute_capability[0], cp.cuda.Device(0).compute_capability[1:]
    sm = f"{major}{minor}"
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()} sm_{sm}",
          flush=True)
    build_errors = build(args.bundle, sm, args.jobs)
    names = sorted(os.path.basename(p)[:-5]
                   for p in glob.glob(os.path.join(args.bundle, "cases", "*.json")))
    names = [n for n in names if args.only in n]
    libs: dict = {}
    mods: dict = {}
    counts = {"pass": 0, "fail": 0, "error": 0}
    failures = []
    with open(args.out, "w") as out:
        for name in names:
            rec: dict = {"case": name}
            try:
                case = Case(args.bundle, name)
                rec["test"] = case.m.get("test", "")
                rec["extra"] = case.m.get("extra", {})
                if case.sha in build_errors:
                    raise RuntimeError("nvcc: " + build_errors[case.sha])
                base = os.path.join(args.bundle, "build", case.sha)
                if case.sha not in libs:
                    libs[case.sha] = ctypes.CDLL(base + ".so")
                    mods[case.sha] = cp.RawModule(path=base + ".cubin")
                rec["host"] = run_host(case, libs[case.sha], cp)
                ok = rec["host"]["ok"]
                if case.m["kernels"]:
                    rec["kernels"] = run_kernels(case, libs[case.sha], mods[case.sha], cp,
                                                 args.repeat)
                    ok = ok and rec["kernels"]["ok"]
                rec["status"] = "pass" if ok else "fail"
            except Exception as e:  # record and go on: one broken case must not hide others
                rec["status"] = "error"
                rec["error"] = f"{type(e).__name__}: {e}"[-1500:]
                rec["trace"] = traceback.format_exc()[-1500:]
            counts[rec["status"]] += 1
            if rec["status"] != "pass":
                failures.append(rec)
            out.write(json.dumps(rec, default=str) + "\n")
            out.flush()
    print(f"cases: {len(names)}; " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print_timings(args.out)
    for rec in failures[:40]:
        print(json.dumps(rec, default=str)[:600])
    return 0 if counts["fail"] == counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
