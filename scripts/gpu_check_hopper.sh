#!/bin/bash
# The sm_90a check on an H100/H200 (issue #25), one prepared script from the repository
# root (docs/tensor_cores.md, "sm_90a: measured"). Needs python3 with numpy, cupy and
# torch, and nvcc; not polycomp. Prepare the bundle here first (no GPU needed):
#
#   rm -rf .gpubundle/hopper
#   POLYCOMP_GPU_BUNDLE=.gpubundle/hopper .venv/bin/python -m pytest -q -p no:cacheprovider \
#       tests/test_hopper_gemm.py -k "not nvcc and not compile_time"
#   .venv/bin/python scripts/gpu_bundle_bench.py .gpubundle/hopper --set hopper
#
# then run this script there with .gpubundle/hopper carried. It replays every simulated
# sm_90a case (TMA + wgmma kernels built for sm_90a, host entry point and kernel path,
# against the simulator's outputs) and the timed GEMM cases (polycomp's kernel path and
# torch.matmul in the same process, CUDA events, best and median of 20), then prints the
# table. Results go to $OUT (default ./gpu_out). BUNDLE_S bounds the run (seconds).
OUT=${OUT:-gpu_out}
BUNDLE=${BUNDLE:-.gpubundle/hopper}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
export PYTHONUNBUFFERED=1
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
    | tee "$OUT/device.txt"
nvcc --version | tail -1 | tee -a "$OUT/device.txt"
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)" \
    | tee -a "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"
if [ ! -d "$BUNDLE" ]; then echo "no bundle at $BUNDLE"; exit 1; fi
echo "== bundle $(ls "$BUNDLE"/cases/*.json | wc -l) cases, $(ls "$BUNDLE"/src | wc -l) sources"
timeout "${BUNDLE_S:-480}" python3 scripts/gpu_bundle_run.py "$BUNDLE" \
    --out "$OUT/hopper.jsonl" --jobs "$(nproc)" --repeat 20 > "$OUT/hopper_log.txt" 2>&1
echo "rc $?"
grep -E "^(device|built|cases):" "$OUT/hopper_log.txt"
# the table from the results written so far (also when the run hit BUNDLE_S)
python3 -c "import sys; sys.path.insert(0, 'scripts'); import gpu_bundle_run as r; \
r.print_timings('$OUT/hopper.jsonl')" > "$OUT/hopper_table.md"
cat "$OUT/hopper_table.md"
grep -E '"status": "(fail|error)"' "$OUT/hopper.jsonl" | head -20 | cut -c1-600
echo "== done $(( $(date +%s) - T0 )) s"
