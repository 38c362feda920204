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
# $OUT/gpu_check.md (or docs/gpu_check-<device>.md). Then bench/kernel_check.py: the bundled
# measured kernel tables (specs/kernels/$KERNELS, default h200) against GEMMs and flash attention
# timed here. Bounded: the calls are killed after 470 s and 240 s; on an H100-class GPU the
# whole takes about 3-4 minutes.
# Needs `pip install -e '.[measure]'` with a torch build for the device.
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-cuda}
shift || true
out="${OUT:-docs}/gpu_check-${device}.md"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 470 python bench/time_validation.py --device "$device" --out "$out" "$@"
echo "table written to $out" >&2
# The bundled kernel tables of the GPU this is (issue 21): GEMMs and flash attention measured here
# beside the table's lookup. KERNELS names the folder (default: h200, the device lent to this
# project); on the CPU the tiny shapes check only that the path runs.
kernels_out="${OUT:-docs}/kernel_check-${device}.md"
if [ "$device" = cpu ]; then
  timeout 120 python bench/kernel_check.py --device cpu --gpu "${KERNELS:-h200}" --tiny --out "$kernels_out"
else
  timeout 240 python bench/kernel_check.py --device "$device" --gpu "${KERNELS:-h200}" --out "$kernels_out"
fi
echo "kernel table check written to $kernels_out" >&2
