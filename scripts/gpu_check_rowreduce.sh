#!/bin/bash
# The row-reduction measurement of issue #26 on a machine with an NVIDIA GPU, in one go
# (docs/rowreduce.md, "Measuring on a GPU"). Needs python3 with numpy, cupy and torch
# (torch.compile: triton), and nvcc; run from the repository root with the bundle made
# beforehand on a machine with polycomp (no GPU needed there):
#   python scripts/gpu_bundle_rowreduce.py .gpubundle/rowreduce
#   POLYCOMP_GPU_BUNDLE=.gpubundle/rowreduce python -m pytest -q -n 2 \
#       tests/test_rowreduce_mapping.py -k "not nvcc"        # + the simulated cases
# then here: bash scripts/gpu_check_rowreduce.sh   (results in $OUT, default ./gpu_out)
# Every timed case runs the kernel, torch eager, torch.compile (default) and a copy of
# the same bytes in the same process; the table has ms, GB/s and the ratios.
OUT=${OUT:-gpu_out}
BUNDLE=${BUNDLE:-.gpubundle/rowreduce}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
export PYTHONUNBUFFERED=1
T0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)"
  nvcc --version | tail -1; } | tee "$OUT/device.txt"
timeout "${BUNDLE_S:-540}" python3 scripts/gpu_bundle_run.py "$BUNDLE" \
    --out "$OUT/rowreduce.jsonl" --jobs "$(nproc)" --repeat "${REPEAT:-20}" \
    > "$OUT/rowreduce_log.txt" 2>&1
echo "rc $? after $(( $(date +%s) - T0 )) s"
grep -E "^(device|built|cases):|^\|" "$OUT/rowreduce_log.txt"
grep -E '"status": "(fail|error)"' "$OUT/rowreduce.jsonl" | head -20 | cut -c1-600
