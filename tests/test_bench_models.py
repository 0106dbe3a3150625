"""`polycomp bench models`: the summary's ratios, the markdown table, the case
selection (the models themselves are run by the benchmark, not by the tests: minutes
each on a shared host)."""
import pytest

from polycomp import cli
from polycomp.benchmarks import models as bench


def test_summary_ratios_are_eager_and_inductor_over_polycomp():
    r = bench.Row("bert-2", 2, eager_ms=[30.0, 20.0, 25.0], polycomp_ms=[10.0, 12.0, 11.0],
                  inductor_ms=[], max_rel_err=1e-7).summary()
    assert r["eager_best_ms"] == 20.0 and r["eager_median_ms"] == 25.0
    assert r["polycomp_best_ms"] == 10.0 and r["polycomp_median_ms"] == 11.0
    assert r["speedup_vs_eager_best"] == pytest.approx(2.0)
    assert r["speedup_vs_eager_median"] == pytest.approx(25 / 11)
    assert r["inductor_best_ms"] is None and r["speedup_vs_inductor_median"] is None
    table = bench.table([r])
    assert table.splitlines()[2].startswith("| bert-2 | 2 | 20.0 / 25.0 | 10.0 / 11.0 | - / - |")
    assert "2.00x / 2.27x" in table


def test_unknown_case_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "models", "--only", "resnet9000"])
    assert e.value.code == 2
    assert "unknown case(s) resnet9000" in capsys.readouterr().err


def test_cases_cover_the_issue_table():
    names = {c.name: c for c in bench.CASES}
    assert {(c.model, c.layers, c.batch) for c in names.values()} >= {
        ("bert", 2, 1), ("bert", 12, 1), ("bert", 2, 8), ("gpt2", 2, 1), ("vit", 2, 1)}
    assert set(bench.QUICK) <= set(names)


def test_prepack_and_cpu_time_ratios_are_other_over_polycomp():
    r = bench.Row("bert-2", 1, eager_ms=[30.0], polycomp_ms=[10.0, 20.0, 12.0],
                  unpacked_ms=[15.0, 13.0, 18.0], eager_cpu_ms=[40.0, 44.0],
                  polycomp_cpu_ms=[10.0, 11.0], unpacked_cpu_ms=[12.0, 13.0],
                  inductor_cpu_ms=[16.0, 17.0], max_rel_err=0.0).summary()
    assert r["prepack_gain_best"] == pytest.approx(13 / 10)
    assert r["prepack_gain_median"] == pytest.approx(15 / 12)
    assert r["cpu_vs_eager_best"] == pytest.approx(4.0)
    assert r["cpu_vs_inductor_median"] == pytest.approx(16.5 / 10.5)
    assert r["prepack_cpu_gain_median"] == pytest.approx(12.5 / 10.5)
    line = bench.table([r]).splitlines()[2]
    assert line.endswith("| 4.00x / 4.00x | 1.60x / 1.57x | 1.30x / 1.25x | 1.20x / 1.19x |")
