"""The table of bench/gpu_check.sh: predicted vs measured time and intensity, per spec and phase.

Each case is a bundled spec cut to its first N layers (so that it fits the device), a phase
and a shape. Predicted time is the roofline of the formulas on the calibrated profile:
max(FLOPs / peak, unfused bytes / bandwidth); the fused lower bound on bytes gives the
second, optimistic prediction. Measured time is the median of repeated runs (CUDA events on
a GPU). Intensity is matmul FLOPs per unfused byte, from the formulas and from the counters.
"""

from __future__ import annotations

import argparse
import datetime
import platform

import torch

from costmodel import catalog, units
from costmodel.hardware import load_hardware
from costmodel.measure.run import measure
from costmodel.spec import load_spec

# (spec, layers, phase, batch, seq, enc_seq); seq is the cached tokens in decode.
CASES = {
    "cuda": [
        ("gpt2-xl", None, "prefill", 8, 1024, None),
        ("gpt2-xl", None, "decode", 32, 1023, None),
        ("llama-3-8b", 8, "prefill", 1, 2048, None),
        ("llama-3-8b", 8, "decode", 16, 2047, None),
        ("llama-3-70b", 2, "prefill", 1, 2048, None),
        ("llama-3-70b", 2, "decode", 16, 4095, None),
        ("mistral-7b", 4, "prefill", 1, 4096, None),
        ("mistral-7b", 4, "decode", 16, 8191, None),
        ("gemma-2-9b", 4, "prefill", 1, 2048, None),
        ("gemma-2-9b", 4, "decode", 16, 4095, None),
        ("t5-11b", 4, "prefill", 4, 512, 512),
        ("t5-11b", 4, "decode", 32, 127, 512),
    ],
    "cpu": [
        ("gpt2-small", None, "prefill", 1, 256, None),
        ("gpt2-small", None, "decode", 4, 255, None),
        ("llama-2-7b", 1, "prefill", 1, 256, None),
        ("llama-2-7b", 1, "decode", 4, 511, None),
        ("mistral-7b", 1, "prefill", 1, 256, None),
        ("mistral-7b", 1, "decode", 4, 511, None),
        ("falcon-7b", 1, "prefill", 1, 256, None),
        ("falcon-7b", 1, "decode", 4, 255, None),
        ("t5-v1.1-xxl", 1, "prefill", 1, 128, 128),
        ("t5-v1.1-xxl", 1, "decode", 4, 63, 128),
    ],
}
DTYPE = {"cuda": "bf16", "cpu": "fp32"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=sorted(CASES))
    parser.add_argument("--hardware", default="local", help="the profile `costmodel calibrate` saved")
    parser.add_argument("--dtype", default=None, help="default: bf16 on cuda, fp32 on cpu")
    args = parser.parse_args()
    dtype = args.dtype or DTYPE[args.device]
    hw = load_hardware(args.hardware)
    name = torch.cuda.get_device_name() if args.device == "cuda" else f"{platform.machine()} CPU"
    print(f"## Predicted vs measured: {name}, {datetime.date.today().isoformat()}\n")
    print(f"torch {torch.__version__}, {dtype}, {torch.get_num_threads()} CPU threads; profile "
          f"`{hw.name}` ({hw.date}): peak {units.flops(hw.peak(dtype))}/s {dtype}, "
          f"bandwidth {hw.memory_bandwidth / 1e9:.3g} GB/s, ridge {hw.ridge(dtype):.3g} FLOP/B\n")
    print("| spec | layers | phase | B | seq | FLOPs | bytes | roofline | fused bound | measured "
          "| measured / roofline | FLOP/B formula | FLOP/B measured | achieved | bound |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for spec_name, layers, phase, batch, seq, enc_seq in CASES[args.device]:
        spec = load_spec(catalog.specs_dir() / f"{spec_name}.yaml")
        m = measure(spec, phase, batch=batch, seq=seq, enc_seq=enc_seq, dtype=dtype,
                    device=args.device, layers=layers, hardware=hw)
        total, r, t = m.analysis.total(), m.roofline, m.get("time").measured
        intensity = m.get("intensity")
        print(f"| {spec_name} | {layers or 'all'} | {phase} | {batch} | {seq} "
              f"| {units.flops(total.flops)} | {units.nbytes(total.bytes_unfused)} "
              f"| {units.seconds(r['time_s'])} | {units.seconds(r['time_fused_s'])} | {units.seconds(t)} "
              f"| {t / r['time_s']:.2f} | {intensity.formula:.3g} | {intensity.measured:.3g} "
              f"| {units.flops(total.flops / t)}/s | {r['bound']} |", flush=True)


if __name__ == "__main__":
    main()
