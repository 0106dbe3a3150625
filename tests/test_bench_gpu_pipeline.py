"""`polycomp bench gpu_pipeline` runs end to end: the tiled kernel's promotion boxes come
from the typed compile state, and its figures beat the baseline's."""
import json

from polycomp.benchmarks import gpu_pipeline


def test_gpu_pipeline_report(capsys):
    assert gpu_pipeline.main(["--size", "16", "--report-size", "64", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    tiled, base = rep["kernels"]["tiled"], rep["kernels"]["baseline"]
    assert tiled["max_abs_error"] < 1e-4 and base["max_abs_error"] < 1e-4
    assert tiled["ptxas"]["shared_bytes"] > 0 and base["ptxas"]["shared_bytes"] == 0
    # 64x16 A tile + 16x64 B tile per 64x64x16 block of work
    assert tiled["footprint_bytes_per_flop_at_report_size"] == 0.0625
    assert tiled["simulated_bytes_loaded_per_flop"] < base["simulated_bytes_loaded_per_flop"]
