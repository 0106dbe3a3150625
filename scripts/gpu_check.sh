#!/bin/bash
# One GPU check on a machine with an NVIDIA GPU, python3 with numpy/cupy/pytest, nvcc,
# run from the repository root (docs/simulator.md, "Checked against a real GPU"):
#   1. replay a GPU check bundle (default .gpubundle/bundle) against the simulator's
#      outputs and time its timed cases (scripts/gpu_bundle_run.py: numpy, cupy, nvcc);
#   2. install polycomp (wheels for islpy/pycparser may be put in .whl/ beforehand for a
#      machine without a package index) and run the tests marked gpu;
#   3. `polycomp bench gpu`.
# Results go to $OUT (default ./gpu_out). Step time limits: BUNDLE_S, PYTEST_S, BENCH_S.
OUT=${OUT:-gpu_out}
BUNDLE=${BUNDLE:-.gpubundle/bundle}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ -d "$BUNDLE" ]; then
  echo "== bundle"
  timeout "${BUNDLE_S:-240}" python3 scripts/gpu_bundle_run.py "$BUNDLE" \
      --out "$OUT/results.jsonl" --jobs "$(nproc)" --repeat 20 > "$OUT/bundle_log.txt" 2>&1
  echo "rc $?"; grep -E "^(device|built|cases):|^\|" "$OUT/bundle_log.txt"
fi
echo "== install $(( $(date +%s) - T0 )) s"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pc-site .whl/*.whl \
      > "$OUT/pip.log" 2>&1 && export PYTHONPATH=/tmp/pc-site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >> "$OUT/pip.log" 2>&1 \
    || { echo "install failed"; tail -20 "$OUT/pip.log"; exit 1; }
echo "== pytest -m gpu $(( $(date +%s) - T0 )) s"
timeout "${PYTEST_S:-300}" python3 -m pytest -v -n "$(nproc)" -p no:cacheprovider -m gpu \
    tests/test_gpu_launcher.py tests/test_chain_tc.py tests/test_gpu_ops.py \
    > "$OUT/pytest_gpu.txt" 2>&1
echo "rc $?"; grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest_gpu.txt" | tail -30
echo "== bench gpu $(( $(date +%s) - T0 )) s"
timeout "${BENCH_S:-120}" python3 -m polycomp.cli bench gpu --sizes 8,16,32 --repeat 20 \
    > "$OUT/bench_gpu.txt" 2>&1
echo "rc $?"; tail -8 "$OUT/bench_gpu.txt"
echo "== done $(( $(date +%s) - T0 )) s"
