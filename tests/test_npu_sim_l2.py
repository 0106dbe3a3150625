"""The chip simulator's L2 between the cores and HBM (reuse distance per 512-byte
line: hit when the line was touched less than the L2's size of GM traffic ago), its
L2 bandwidth bound, and the scalar unit's issue cost (every instruction, flag, Let and
loop iteration)."""
import dataclasses

import numpy as np

from polycomp.driver import compile_kernel
from polycomp.frontend.ops import matmul_kernel, softmax_kernel
from polycomp.hw.npu import sim
from polycomp.hw.npu.backend import simulate
from polycomp.hw.npu.sim import GmTracker
from polycomp.hw.npu.target import npu_params


def test_l2_reuse_distance_hits_and_misses():
    gm = {"a": np.zeros(4096, np.float32), "b": np.zeros(1 << 16, np.float32)}
    t = GmTracker(gm, l2_bytes=64 * 1024, line=512)
    first = np.arange(1000)
    t.l2_access("a", first, False)                     # cold: 4000 B -> 8 lines missed
    assert t.read_miss == 8 * 512 and t.read_hit == 0
    t.l2_access("a", first, False)                     # again at once: every byte hits
    assert t.read_miss == 8 * 512 and t.read_hit == 4000
    t.l2_access("b", np.arange(20000), False)          # 80 000 B streamed: more than L2
    t.l2_access("a", first, False)                     # evicted: misses again
    assert t.read_miss == 8 * 512 * 2 + 157 * 512     # and the 157 lines of b it read
    t.l2_access("a", np.arange(4096), True)            # writes cross HBM once each
    t.l2_access("a", np.arange(4096), True)
    assert t.write_bytes == 4096 * 4
    assert t.hbm_bytes == t.read_miss + t.write_bytes


def test_long_rows_second_pass_hits_l2():
    """The long-row softmax reads x twice (two passes over GM); the second read of a
    tile's rows hits the L2, so HBM moves x once and the output once."""
    ck = compile_kernel(softmax_kernel(dtype="float16"), "npu-lite")
    x = np.random.default_rng(0).standard_normal((6, 3000)).astype(np.float16)
    _, rep = simulate(ck, x)
    assert rep.bytes["GM->UB"] >= 2 * x.nbytes               # two passes
    assert rep.hbm_bytes == 2 * x.nbytes                      # x in, softmax out
    assert rep.l2_hit_bytes >= x.nbytes


def test_matmul_operand_reuse_hits_l2_and_l2_bandwidth_bounds():
    ck = compile_kernel(matmul_kernel("float16"), "npu")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((512, 512)).astype(np.float16)
    b = rng.standard_normal((512, 512)).astype(np.float16)
    out, rep = simulate(ck, a, b)
    assert rep.bytes["GM->L1"] > 2 * (a.nbytes + b.nbytes)   # tiles re-read A and B
    assert rep.hbm_bytes == a.nbytes + b.nbytes + out.nbytes  # each crosses HBM once
    p = npu_params(ck.target)
    assert rep.l2_cycles == -(-rep.gm_bytes // p.l2_bytes_per_cycle)
    assert rep.cycles == max(rep.core_cycles, rep.hbm_cycles, rep.l2_cycles)


def test_scalar_issue_cost_counts(monkeypatch):
    ck = compile_kernel(softmax_kernel(dtype="float32"), "npu-lite")
    x = np.random.default_rng(2).standard_normal((40, 70)).astype(np.float32)
    _, base = simulate(ck, x)
    slow = dataclasses.replace(npu_params(ck.target), scalar_issue=100, scalar_op=100)
    monkeypatch.setattr(sim, "npu_params", lambda target: slow)
    _, rep = simulate(ck, x)
    per_core = sum(base.instructions.values()) // max(1, base.aiv)
    assert rep.cycles > base.cycles + 100 * per_core // 2
