"""Every registered operator's emitted ``.cu`` compiles with ``nvcc -arch=sm_80 -cubin``.

All operators in float32, plus float64 / float16 / bfloat16 / int8 / int32 variants of
representative ones.  ``-Xptxas -v`` resource figures (registers, shared memory, spills)
of every ``__global__`` kernel are printed (run with ``-s`` to see them; they are also
attached as junit properties) and the test asserts ptxas reported them for each kernel.
"""
import re
import subprocess

import pytest
from ops_helpers import compiled, op_params

from polycomp.frontend.ops import OPS

EXTRA = [("matmul", "float16"), ("matmul", "int8"), ("matmul", "float64"),
         ("conv2d_s2_p1", "float16"), ("softmax", "float16"), ("layernorm", "bfloat16"),
         ("reduce_sum_1", "int8"), ("mlp_gelu", "float16")]
#: left out: the isl AST of the promoted attention schedule takes over a minute to
#: generate today (reported to the scheduler's owner)
SLOW = {"attention"}
CASES = [(name, "float32") for name in OPS if name not in SLOW] + EXTRA

_ENTRY = re.compile(r"Compiling entry function '(\w+)' for 'sm_80'")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_resources(log: str) -> dict:
    """{kernel: {"registers", "smem", "spill_stores", "spill_loads"}} from ``ptxas -v``."""
    out, current, spills = {}, None, (0, 0)
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current, spills = m.group(1), (0, 0)
            continue
        m = _SPILL.search(line)
        if m and current:
            spills = (int(m.group(1)), int(m.group(2)))
            continue
        m = _USED.search(line)
        if m and current:
            out[current] = {"registers": int(m.group(1)), "smem": int(m.group(2) or 0),
                            "spill_stores": spills[0], "spill_loads": spills[1]}
            current = None
    return out


@pytest.mark.nvcc
@pytest.mark.parametrize("name,dtype", op_params(CASES))
def test_op_cuda_compiles_for_sm80(name, dtype, tmp_path, record_property):
    ck = compiled(name, dtype, "cuda")
    kernels = re.findall(r"__global__ void(?: __launch_bounds__\(\d+\))? (\w+)\(", ck.source)
    assert kernels, "no __global__ kernel emitted"
    cu = tmp_path / f"{ck.name}.cu"
    cu.write_text(ck.source)
    r = subprocess.run(["nvcc", "-arch=sm_80", "-cubin", "-Xptxas", "-v",
                        "-o", str(tmp_path / f"{ck.name}.cubin"), str(cu)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"nvcc failed on {cu.name}:\n{r.stderr[-4000:]}"
    assert (tmp_path / f"{ck.name}.cubin").stat().st_size > 0
    res = ptxas_resources(r.stdout + r.stderr)
    assert set(kernels) <= set(res), \
        f"ptxas -v gave no resource line for {sorted(set(kernels) - set(res))}"
    for k in kernels:
        f = res[k]
        print(f"ptxas {name}[{dtype}] {k}: {f['registers']} registers, {f['smem']} bytes smem, "
              f"spill {f['spill_stores']}/{f['spill_loads']} bytes")
        record_property(f"{k}.registers", f["registers"])
        record_property(f"{k}.smem", f["smem"])
        assert f["registers"] > 0


def test_ptxas_parser_reads_shared_memory_and_spills():
    log = ("ptxas info    : Compiling entry function 'k0' for 'sm_80'\n"
           "ptxas info    : Function properties for k0\n"
           "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, "
           "400 bytes cmem[0]\n")
    assert ptxas_resources(log) == {"k0": {"registers": 40, "smem": 2048, "spill_stores": 4,
                                           "spill_loads": 12}}
