"""Binary checks of generated CUDA: nvcc cubins, ``ptxas -v`` resources, SASS opcodes.

No GPU is needed: ``nvcc -cubin`` compiles for any ``sm_XX`` and ``cuobjdump -sass``
disassembles the result.  ``cuobjdump`` comes from the CUDA toolkit or from the
``nvidia-cuda-cuobjdump`` wheel (a test dependency), found on ``PATH`` or in the
``nvidia`` namespace package.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass

from polycomp.errors import BuildError


def find_tool(name: str) -> str | None:
    """Path of a CUDA binary tool (``cuobjdump``, ``nvdisasm``), or None."""
    p = shutil.which(name)
    if p:
        return p
    try:
        import nvidia
        for root in list(nvidia.__path__):
            hits = glob.glob(os.path.join(root, "**", "bin", name), recursive=True)
            if hits:
                return hits[0]
    except ImportError:
        pass
    return None


@dataclass
class Resources:
    """``ptxas -v`` figures of one kernel."""
    kernel: str
    sm: int | None           # None: ptxas did not name the architecture
    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int


def compile_cubin(source: str, sm: int, tmpdir: str | None = None) -> tuple[bytes, list]:
    """(cubin, [Resources per kernel]) of ``source`` compiled with nvcc for ``sm_<sm>``."""
    with tempfile.TemporaryDirectory(dir=tmpdir) as tmp:
        cu, out = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.cubin")
        with open(cu, "w") as f:
            f.write(source)
        r = subprocess.run(["nvcc", f"-arch=sm_{sm}", "-cubin", "-O3", "-Xptxas", "-v",
                            "-o", out, cu], capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc -arch=sm_{sm} failed:\n{r.stderr[-4000:]}")
        with open(out, "rb") as f:
            return f.read(), parse_ptxas(r.stderr, sm)


def compile_archs(source: str, sms=(80, 90), tmpdir: str | None = None) -> dict:
    """``{sm: (SASS opcode counts, [Resources])}`` from one nvcc run building a fatbin
    with a cubin per ``sm_XX`` (one front-end pass, one ptxas run per architecture)."""
    with tempfile.TemporaryDirectory(dir=tmpdir) as tmp:
        cu, out = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.fatbin")
        with open(cu, "w") as f:
            f.write(source)
        gen = [x for sm in sms for x in ("-gencode", f"arch=compute_{sm},code=sm_{sm}")]
        r = subprocess.run(["nvcc", "-fatbin", "-O3", "-Xptxas", "-v", *gen, "-o", out, cu],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc {sms} failed:\n{r.stderr[-4000:]}")
        with open(out, "rb") as f:
            blob = f.read()
    res = {sm: [x for x in parse_ptxas(r.stderr, None) if x.sm == sm] for sm in sms}
    ops = sass_opcodes(blob, tmpdir, by_arch=True)
    return {sm: (ops.get(sm, Counter()), res[sm]) for sm in sms}


def parse_ptxas(text: str, sm: int | None) -> list:
    """Resources per kernel from ``ptxas -v`` output (``sm=None``: the architecture each
    entry names, ``for 'sm_XX'``)."""
    out, cur = [], None
    stack = spill_st = spill_ld = 0
    arch = sm
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'(?: for 'sm_(\d+)')?", line)
        if m:
            cur = m.group(1)
            if sm is None and m.group(2):
                arch = int(m.group(2))
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            stack, spill_st, spill_ld = (int(x) for x in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            smem = re.search(r"(\d+) bytes smem", line)
            out.append(Resources(cur, arch, int(m.group(1)), int(smem.group(1)) if smem else 0,
                                 stack, spill_st, spill_ld))
    return out


def sass_opcodes(cubin: bytes, tmpdir: str | None = None, by_arch: bool = False):
    """Opcode counts (``HMMA.16816.F32``, ``LDSM.16.M88.4``, ...) of a cubin's SASS
    (``by_arch``: ``{sm: counts}`` for a fatbin with several architectures)."""
    tool = find_tool("cuobjdump")
    if tool is None:
        raise BuildError("cuobjdump not found (install the nvidia-cuda-cuobjdump and "
                         "nvidia-cuda-nvdisasm wheels: pip install -e '.[test]')")
    with tempfile.TemporaryDirectory(dir=tmpdir) as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        env = dict(os.environ)
        nvdisasm = find_tool("nvdisasm")   # cuobjdump -sass runs nvdisasm
        if nvdisasm is not None:
            env["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + env.get("PATH", "")
            env.setdefault("NVDISASM_PATH", os.path.dirname(nvdisasm))
        r = subprocess.run([tool, "-sass", path], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise BuildError(f"cuobjdump failed: {r.stderr[-2000:]}")
    per: dict = {}
    ops = per.setdefault(0, Counter())
    for line in r.stdout.splitlines():
        a = re.search(r"arch = sm_(\d+)", line)
        if a:
            ops = per.setdefault(int(a.group(1)), Counter())
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(1)] += 1
    if by_arch:
        return {k: v for k, v in per.items() if k}
    total: Counter[str] = Counter()
    for v in per.values():
        total.update(v)
    return total


def has_opcode(ops: Counter, prefix: str) -> bool:
    return any(k == prefix or k.startswith(prefix + ".") for k in ops)
