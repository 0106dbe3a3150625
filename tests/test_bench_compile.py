"""`polycomp bench compile`: the compile-time suite runs end to end on two ops and its
JSON has one row per (op, dtype) with a time per target and the totals (timings are
reported, never asserted against a bound)."""
import json

import pytest

from polycomp import cli
from polycomp.benchmarks import compile_time as bench
from polycomp.frontend.ops import OPS


def test_json_structure(capsys):
    rc = cli.main(["bench", "compile", "--targets", "c,cuda", "--ops", "relu,softmax",
                   "--repeat", "2", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    res = json.loads(out)
    assert res["targets"] == ["c", "cuda"] and res["repeat"] == 2
    # float32 and the main (reduced-precision) dtype of each op, in op order
    assert [(r["op"], r["dtype"]) for r in res["rows"]] == [
        ("relu", "float32"), ("relu", "float16"), ("softmax", "float32"), ("softmax", "float16")]
    for r in res["rows"]:
        assert set(r["times"]) == {"c", "cuda"}
        for cell in r["times"].values():
            assert set(cell) == {"s"} and 0 < cell["s"] < 60
    for t in ("c", "cuda"):
        assert abs(res["total_s"][t] - sum(r["times"][t]["s"] for r in res["rows"])) < 1e-9


def test_table_and_dtype_selection():
    assert bench.kernel_dtypes(OPS["add_scalar_rhs"]) == ["float32"]
    assert bench.kernel_dtypes(OPS["attention"]) == ["float32", "bfloat16"]
    assert bench.kernel_dtypes(OPS["matmul"], "all") == list(OPS["matmul"].dtypes)
    result = {"targets": ["c"], "repeat": 3, "total_s": {"c": 0.5},
              "rows": [{"op": "relu", "dtype": "float32", "times": {"c": {"s": 0.25}}},
                       {"op": "relu", "dtype": "float16", "times": {"c": {"error": "X: y"}}}]}
    text = bench.format_table(result)
    assert "| relu | float32 | 0.250 |" in text and "| relu | float16 | error |" in text
    assert "| **total** | | 0.50 |" in text and "error: relu float16 c: X: y" in text


def test_unknown_target_is_a_clear_error():
    with pytest.raises(SystemExit, match="unknown target"):
        bench.main(["--targets", "nope", "--ops", "relu"])
