#!/usr/bin/env bash
# Predicted (roofline) vs measured time and arithmetic intensity on this machine.
#
#   bench/gpu_check.sh            # an NVIDIA GPU: calibrate it, then time prefill and decode
#   bench/gpu_check.sh cpu        # the same on the CPU, with smaller cuts and shapes
#
# Calibrates the device (`costmodel calibrate`, saved as the `local` hardware profile), then
# measures prefill and decode of a few bundled specs, each cut with --layers to fit, and prints
# a markdown table on stdout. Needs `pip install -e '.[measure]'` with a torch build for the device.
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-cuda}
costmodel calibrate --device "$device" --name local
python bench/gpu_check.py --device "$device" --hardware local
