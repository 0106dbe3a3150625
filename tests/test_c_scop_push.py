"""``scop-push`` (scheduler/cpu/scop_push.py): integer max/min updates of one element
reordered so that a finished element pushes its contribution along a row (nussinov's
``t[i][j] = max(t[i][j], t[i][k] + t[k+1][j])`` with ``j`` innermost).

Checked against the same C built by ``gcc -O0``: bitwise (integers, sums that wrap);
the golden tree; the isl check against the memory dependences minus the relaxed
pairs (and that the model's own relations are reversed, which is why the pass needs
them); the debug legality check after every pass; what is refused.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from test_c_scop_schedule import KERNELS, TARGET, gcc_o0, kernel, run_gcc

from polycomp.driver import compile_kernel
from polycomp.frontend.c_reader import load_c_kernels
from polycomp.scheduler.common.tree import violated_dependences
from polycomp.scheduler.cpu.scop_push import (
    ScopPushPass,
    match_push,
    required_dependences,
)
from polycomp.scheduler.cpu.scop_stages import ScopStages
from polycomp.state import CompileState


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, 4, size=n).astype(np.int8)
    t = rng.integers(-5, 40, size=(n, n)).astype(np.int32)
    t.flat[::5] = 2**31 - 3          # t[i][k] + t[k+1][j] wraps (int32, -fwrapv)
    t.flat[3::11] = -2**31 + 2
    return seq, t


#: the default (tiled wavefront, tiles of 128: 300 rows are three tile rows with a
#: partial one) and, without ``parallel``, the plain push order
SHAPES = {"wavefront": {}, "push": {"parallel": False}}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def compiled(request):
    """The kernel compiled with ``debug=True`` (the legality check after every pass)
    and loaded."""
    ck = compile_kernel(kernel("nussinov_like"), TARGET, SHAPES[request.param], debug=True)
    return ck, ck.backend.load(ck)


@pytest.mark.parametrize("n", [1, 2, 3, 41, 300])
def test_push_order_matches_gcc_o0_bitwise(n, compiled, tmp_path_factory):
    seq, t = _data(n, seed=n)
    ref = run_gcc("nussinov_like", gcc_o0("nussinov_like", tmp_path_factory), {"n": n},
                  {"seq": seq, "t": t})["t"]
    got = compiled[1](seq, t.copy(), n=n)
    got = got[0] if isinstance(got, tuple) else got
    assert np.array_equal(got, ref)


NOTES = {
    "wavefront": "128x128 tiles by wavefronts (parallel), the products between tiles rows "
                 "pushed",
    "push": "rows pushed, S_4's reduction iterator outside its unit-stride loop"}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_golden_tree(shape, goldens):
    import islpy as isl
    model = kernel("nussinov_like").polyhedral_model()
    ctx = CompileState(model, TARGET, SHAPES[shape])
    sched = model.initial_schedule
    out = ScopPushPass().run(sched, ctx)
    for suffix, tree in (("in", sched), ("out", out)):
        again = isl.Schedule.read_from_str(model.ctx, tree.to_str())

        def same(text, again=again):
            return again.plain_is_equal(isl.Schedule.read_from_str(model.ctx, text))
        expected = goldens.expected(
            f"test_c_scop_push/nussinov_like.{shape}.scop-push.{suffix}.isl",
            tree.to_str(), same)
        assert same(expected), tree.to_str()
    assert out.get_domain().is_equal(sched.get_domain())
    stages = ScopStages.of(sched, ctx)
    (stage, _m), = list(stages.matched(match_push))
    required, relaxed = required_dependences(stages, stage)
    # legal for the memory dependences without the commuting pairs ...
    assert violated_dependences(out, required).is_empty()
    # ... while the C order's own output/flow chain of t[i][j] is reversed (the cells
    # now run after U's updates of their element)
    bad = violated_dependences(out, model.dependences)
    assert not bad.is_empty() and bad.is_subset(relaxed)
    assert ctx.notes["scop-push"] == [
        f"max reduction into t (S_0+S_1+S_2+S_3+S_4): {NOTES[shape]}"]


def test_debug_check_takes_the_relaxed_pairs(compiled):
    """``debug=True`` re-checks every pass (the fixture's compile): with the pass's
    required dependences in place of the relaxed pairs, the compile goes through; no
    later pass rewrites the stage (their checks see the model's reversed pairs)."""
    notes = compiled[0].notes
    assert len(notes["scop-push"]) == 1
    assert not any("index-set split:" in x for x in notes.get("scop-split", []))
    assert "scop-tile" not in notes and "scop-interleave" not in notes


def _variant(old: str, new: str):
    text = (KERNELS / "nussinov_like.c").read_text()
    assert old in text
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "nussinov_like.c"
        p.write_text(text.replace(old, new))
        k, = load_c_kernels(str(p))
        return k.polyhedral_model()


@pytest.mark.parametrize("old,new,why", [
    ("int t[n][n]", "double t[n][n]", "not an integer max/min update"),
    ("t[i][k] + t[k + 1][j]", "t[i][k] + t[k + 1][j] + t[i][j]",
     "not an integer max/min update"),
    ("t[i][k] + t[k + 1][j]", "t[i][k] + t[j][k + 1]", "not unit-stride"),
    ("best(t[i][j], t[i][k] + t[k + 1][j])", "t[i][j] + t[i][k] + t[k + 1][j]",
     "not an integer max/min update"),
], ids=["float", "reads-own", "column-inner", "sum"])
def test_refused(old, new, why):
    model = _variant(old, new)
    ctx = CompileState(model, TARGET, {})
    stages = ScopStages.of(model.initial_schedule, ctx)
    reasons = [match_push(st.group) for st in stages]
    assert all(isinstance(r, str) for r in reasons) and any(why in r for r in reasons), \
        reasons
