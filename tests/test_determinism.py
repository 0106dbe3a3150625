"""Deterministic code generation: the emitted source is a function of the compile alone.

Every name a compile generates (vector accumulators, register tiles, shared buffers, ...)
must depend only on that compile: not on module-level counters, on what was compiled
before in the process, on ``id()`` / ``hash()`` values or on the iteration order of sets
(which changes with ``PYTHONHASHSEED`` from one process to the next).  Otherwise two
compiles of one kernel give different C or CUDA text and the gcc/nvcc caches miss.

For each target, a set of op-library kernels is compiled twice in this process (all of
them once, then all again, so a counter shared between kernels would show) and once in
a fresh interpreter with another hash seed, in the reverse order (so that nothing
compiled before can leak into a name); the three sources must be byte-identical.
The subprocess runs while this process compiles, to keep the test short.
"""
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from polycomp.driver import compile_kernel
from polycomp.frontend.ops import OPS

TARGETS = ("c", "cpu-avx2", "cpu-avx512", "cuda", "cuda-sm90")

# matmul (float32 and the tensor-core float16 path), conv, softmax, layernorm, row and
# column reductions, an elementwise op with erf, a transpose and a broadcast add
CASES = (("matmul", "float32"), ("matmul", "float16"), ("conv2d", "float32"),
         ("softmax", "float32"), ("layernorm", "float32"), ("reduce_sum_1", "float32"),
         ("reduce_max_0", "float32"), ("gelu", "float32"), ("transpose_021", "float32"),
         ("add_row", "float32"))

_CHILD = """
import hashlib, json, sys
from polycomp.driver import compile_kernel
from polycomp.frontend.ops import OPS
out = {}
for target, op, dtype in json.loads(sys.argv[1]):
    src = compile_kernel(OPS[op].kernel(dtype), target).source
    out[f"{target}/{op}/{dtype}"] = hashlib.sha256(src.encode()).hexdigest()
print(json.dumps(out))
"""


def _key(target, op, dtype):
    return f"{target}/{op}/{dtype}"


def _source(target, op, dtype) -> str:
    return compile_kernel(OPS[op].kernel(dtype), target).source


def _digest(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()


class _FreshProcess:
    """Compiles ``jobs`` in a fresh interpreter with another hash seed, started at once
    so that it runs while this process compiles; ``digests()`` waits for it."""

    def __init__(self, jobs):
        env = dict(os.environ, PYTHONHASHSEED="12345")
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(jobs)],
                                     env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._digests: dict | None = None

    def digests(self) -> dict:
        if self._digests is None:
            out, err = self.proc.communicate(timeout=900)
            assert self.proc.returncode == 0, err[-3000:]
            self._digests = json.loads(out.strip().splitlines()[-1])
        return self._digests

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture(scope="module")
def fresh_process():
    """Digests of every (target, op, dtype) of this module compiled in a fresh process."""
    fresh = _FreshProcess([(t, op, dt) for t in reversed(TARGETS) for op, dt in reversed(CASES)])
    yield fresh
    fresh.close()


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_two_compiles_and_a_fresh_process_give_the_same_source(target, fresh_process):
    first = {(op, dt): _source(target, op, dt) for op, dt in CASES}
    second = {(op, dt): _source(target, op, dt) for op, dt in CASES}
    changed = [f"{op}/{dt}" for op, dt in CASES if first[op, dt] != second[op, dt]]
    assert not changed, f"{target}: a second compile in one process differs: {changed}"
    fresh = fresh_process.digests()
    changed = [f"{op}/{dt}" for op, dt in CASES
               if _digest(first[op, dt]) != fresh[_key(target, op, dt)]]
    assert not changed, f"{target}: a compile in a fresh process differs: {changed}"


def test_generated_names_restart_with_each_compile():
    """The vector accumulators and micro-kernel tiles are numbered per function: after
    other kernels, a compile still names its first accumulator ``vacc1`` and its first
    register tile ``acc1``."""
    _source("cpu-avx512", "softmax", "float32")
    src = _source("cpu-avx512", "reduce_sum_1", "float32")
    assert "vacc1_v0" in src and "vacc2_" not in src
    _source("cpu-avx2", "matmul", "float32")
    src = _source("cpu-avx2", "matmul", "float32")
    # the product's two register tiles (full and partial, symbolic sizes), numbered from 1
    assert set(re.findall(r"\b(acc\d+)_v0\b", src)) == {"acc1", "acc2"} and "mk1_" in src
