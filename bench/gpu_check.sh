#!/usr/bin/env bash
# Calibrated time model vs measured time on this machine's device, in one call.
#
#   bench/gpu_check.sh                       # an NVIDIA GPU: calibrate (bf16 tables), time 12 cases x 2 rounds
#   bench/gpu_check.sh cpu                   # the CPU set (fp32), as in docs/measure.md
#   bench/gpu_check.sh cpu --tiny --rounds 1 # three tiny cases: a smoke test of the path
#
# Runs bench/time_validation.py: `costmodel calibrate`'s measurements (peaks, matmul and memory
# efficiency tables, the per-op floor; saved as the `local` profile in $COSTMODEL_HARDWARE_DIR,
# default a temporary folder), then each case's phase timed with torch.utils.benchmark, with the
# calibrated prediction and the roofline beside it. Writes the markdown table to stdout and to
# $OUT/gpu_check.md (or docs/gpu_check-<device>.md). Bounded: the whole call is killed after
# 470 s (under 8 minutes); on an H100-class GPU it takes about 2-3 minutes.
# Needs `pip install -e '.[measure]'` with a torch build for the device.
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-cuda}
shift || true
out="${OUT:-docs}/gpu_check-${device}.md"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 470 python bench/time_validation.py --device "$device" --out "$out" "$@"
echo "table written to $out" >&2
