"""Calibrated time model against runs: calibrate the device, then time each case and set the
prediction (``costmodel.runtime.timing``) and the roofline beside the measured median.

    python bench/time_validation.py                     # CPU: calibrate, 14 cases x 2 rounds
    python bench/time_validation.py --device cuda       # the GPU set (bench/gpu_check.sh)
    python bench/time_validation.py --tiny              # a tiny set, for the test

Each case is a bundled spec cut to its first N layers, a phase and a shape; none is a shape the
calibration measured (the calibration times single matmuls on a power-of-two grid and an add).
Measured: ``torch.utils.benchmark.Timer.blocked_autorange`` over the reference model's phase
(``costmodel.measure.run.phase_runner``), topped up to at least five timed runs where a run is
longer than the block time, median and inter-quartile range; the whole table is
run `--rounds` times, and the spread between rounds is reported. The load average (`uptime`)
is recorded before calibrating and after each round: on a shared machine it is most of the error.
Calibration and runs keep freed memory in the process (``--allocator cache``, the default:
``costmodel.measure.malloc``); ``--allocator system`` leaves glibc's default, under which a
training step's page faults are a third to two thirds of its time and vary run to run here.
Writes a markdown table to stdout (and to --out).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from costmodel import catalog, units
from costmodel.analysis import analyze
from costmodel.devices.hardware import Hardware, load_hardware, save_hardware
from costmodel.measure.calibrate import calibrate
from costmodel.measure.malloc import ALLOCATORS
from costmodel.measure.malloc import allocator as kept
from costmodel.measure.reference import build
from costmodel.measure.run import TORCH_DTYPES, keep_layers, phase_runner
from costmodel.runtime.timing import predict

# (spec, layers, phase, batch, seq, enc_seq); seq is the cached tokens in decode.
SMOKE = Path(__file__).resolve().parent / "data" / "smoke-gpt2.yaml"
CASES = {
    "cpu": [
        ("gpt2-small", 2, "prefill", 1, 96, None),
        ("gpt2-small", 2, "decode", 8, 383, None),
        ("gpt2-small", 2, "train", 1, 48, None),
        ("gpt2-xl", 1, "prefill", 1, 40, None),
        ("gpt2-xl", 2, "decode", 16, 255, None),
        ("gpt3-1.3b", 2, "prefill", 1, 40, None),
        ("gpt3-1.3b", 2, "decode", 4, 511, None),
        ("gpt3-1.3b", 1, "train", 1, 24, None),
        ("mistral-7b", 1, "prefill", 1, 64, None),
        ("mistral-7b", 1, "decode", 2, 300, None),
        ("mistral-7b", 1, "train", 1, 16, None),
        ("t5-v1.1-xxl", 1, "prefill", 1, 32, 48),
        ("t5-v1.1-xxl", 1, "decode", 4, 63, 128),
        ("falcon-7b", 1, "decode", 1, 1000, None),
    ],
    "cuda": [
        ("gpt2-xl", None, "prefill", 8, 1024, None),
        ("gpt2-xl", None, "decode", 32, 1023, None),
        ("gpt2-xl", 12, "train", 4, 1024, None),
        ("llama-3-8b", 8, "prefill", 1, 2048, None),
        ("llama-3-8b", 8, "decode", 16, 2047, None),
        ("llama-3-8b", 4, "train", 1, 2048, None),
        ("mistral-7b", 4, "prefill", 1, 4096, None),
        ("mistral-7b", 4, "decode", 16, 8191, None),
        ("qwen2-7b", 4, "prefill", 4, 1024, None),
        ("qwen2-7b", 4, "decode", 64, 1023, None),
        ("t5-11b", 4, "prefill", 4, 512, 512),
        ("t5-11b", 4, "decode", 32, 127, 512),
    ],
    "tiny": [  # a smoke test of the path: gpt2-small's layer, a small vocabulary (the file says why)
        (str(SMOKE), None, "prefill", 1, 32, None),
        (str(SMOKE), None, "decode", 2, 31, None),
        (str(SMOKE), None, "train", 1, 16, None),
    ],
}
DTYPE = {"cuda": "bf16", "cpu": "fp32"}
MIN_SAMPLES = 5  # timed runs per case and round, at least
TINY_GRID = {"M": [1, 16], "N": [64, 256], "K": [64, 256], "bytes": [2**12, 2**20], "run_s": 0.01}


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def run_case(case: tuple, device: str, dtype: str, hw: Hardware, min_run_s: float, allocator: str) -> dict:
    spec_name, layers, phase, batch, seq, enc_seq = case
    spec = catalog.load(spec_name)
    if layers is not None:
        spec = keep_layers(spec, layers)
    a = analyze(spec, phase, batch=batch, seq=seq, dtype=dtype, enc_seq=enc_seq)
    p = predict(a, hw)
    model = build(spec, device, TORCH_DTYPES[dtype])
    run = phase_runner(model, phase, a.shape)
    from torch.utils.benchmark import Timer

    dev = torch.device(device)
    with kept(allocator, dev.type):
        run()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        timer = Timer(stmt="run()", globals={"run": run}, num_threads=torch.get_num_threads())
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        times = list(timer.blocked_autorange(min_run_time=min_run_s).times)
        # A phase slower than min_run_s gets one block: one sample is no median (and under the
        # system allocator, the page-fault cost of a step's fresh gradients is sometimes 2-3x its
        # usual: mistral-7b train 1.94-2.04 s, twice 4-6 s, in eight runs of one process).
        while len(times) < MIN_SAMPLES:
            times.append(timer.timeit(1).median)
        # The share of the wall time spent in the OS kernel: on a CPU mostly page faults on fresh
        # blocks (under the system allocator; on a KVM guest with free-page reporting, their cost
        # varies run to run).
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - start
    kernel = (after.ru_stime - before.ru_stime) / wall
    del model, run
    return {"case": case, "predicted": p.time_s, "roofline": p.roofline_s, "median": statistics.median(times),
            "iqr": iqr(times), "runs": len(times), "kernel": kernel}


def table(device: str, dtype: str, hw: Hardware, rounds: list[list[dict]], loads: list[str],
          calibration_s: float) -> str:
    lines = []
    name = torch.cuda.get_device_name() if device == "cuda" else f"{platform.machine()} CPU"
    lines.append(f"## Calibrated time vs measured: {name}, {datetime.date.today().isoformat()}\n")
    allocator = hw.efficiency.allocator if hw.efficiency else None
    lines.append(f"torch {torch.__version__}, {dtype}, {torch.get_num_threads()} threads, allocator "
                 f"{allocator}; "
                 f"profile `{hw.name}` "
                 f"calibrated in {calibration_s:.0f} s: peak {units.flops(hw.peak(dtype))}/s, copy "
                 f"{hw.memory_bandwidth / 1e9:.3g} GB/s, floor "
                 f"{1e6 * (hw.efficiency.floor_s if hw.efficiency else 0):.1f} us. "
                 f"Load average (1, 5, 15 min): {'; '.join(loads)}.\n")
    lines.append("| spec | layers | phase | B | seq | measured (median, IQR) | between rounds | OS kernel "
                 "| predicted | error | roofline | roofline error |")
    lines.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    errors, roof_errors = [], []
    for i, first in enumerate(rounds[0]):
        spec_name, layers, phase, batch, seq, _ = first["case"]
        medians = [r[i]["median"] for r in rounds]
        measured = statistics.median(medians)
        spread = (max(medians) - min(medians)) / measured
        inner = statistics.median(r[i]["iqr"] / r[i]["median"] for r in rounds)
        kernel = statistics.median(r[i]["kernel"] for r in rounds)
        err = first["predicted"] / measured - 1
        roof = first["roofline"] / measured - 1
        errors.append(abs(err))
        roof_errors.append(abs(roof))
        lines.append(f"| {Path(spec_name).stem} | {layers or 'all'} | {phase} | {batch} | {seq} | "
                     f"{units.seconds(measured)} "
                     f"(IQR {100 * inner:.1f}%) | {100 * spread:.1f}% | {100 * kernel:.0f}% | "
                     f"{units.seconds(first['predicted'])} "
                     f"| {100 * err:+.1f}% | {units.seconds(first['roofline'])} | {100 * roof:+.1f}% |")
    lines.append("")
    lines.append(f"Calibrated model: median |error| {100 * statistics.median(errors):.1f}%, worst "
                 f"{100 * max(errors):.1f}%; roofline: median {100 * statistics.median(roof_errors):.1f}%, "
                 f"worst {100 * max(roof_errors):.1f}% ({len(errors)} cases, {len(rounds)} rounds; "
                 "error = predicted / median of the rounds' medians - 1; OS kernel: the process's "
                 "system time over the wall time of its timed runs, the rounds' median).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--hardware", default=None, help="use this profile instead of calibrating")
    parser.add_argument("--rounds", type=int, default=2, help="times the whole table is run")
    parser.add_argument("--min-run", type=float, default=None, help="seconds per blocked_autorange")
    parser.add_argument("--tiny", action="store_true", help="three tiny cases and a tiny grid")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument("--allocator", default="cache", choices=ALLOCATORS,
                        help="how freed CPU memory is treated, in calibration and runs alike "
                             "(costmodel.malloc; with --hardware, that profile's setting)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads for calibration and runs alike (default on the CPU: 1; "
                             "with more threads than free cores, OpenMP barriers stall)")
    args = parser.parse_args(argv)
    if args.threads or args.device == "cpu":
        torch.set_num_threads(args.threads or 1)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"device: CUDA is not available here (torch {torch.__version__})", file=sys.stderr)
        return 2
    dtype = DTYPE[args.device]
    loads = [f"before {load_average()}"]
    t0 = datetime.datetime.now()
    if args.hardware:
        hw = load_hardware(args.hardware)
        allocator = (hw.efficiency.allocator if hw.efficiency else None) or args.allocator
    else:
        hw = calibrate(args.device, (dtype,), repeats=5, grid=TINY_GRID if args.tiny else None,
                       allocator=args.allocator)
        allocator = args.allocator
        folder = Path(os.environ.get("COSTMODEL_HARDWARE_DIR") or tempfile.mkdtemp())
        save_hardware(hw, folder / "local.yaml")
    calibration_s = (datetime.datetime.now() - t0).total_seconds()
    cases = CASES["tiny" if args.tiny else args.device]
    min_run = args.min_run or (0.05 if args.tiny else 0.5)
    rounds = []
    for _ in range(args.rounds):
        results = []
        for c in cases:
            results.append(run_case(c, args.device, dtype, hw, min_run, allocator))
            r = results[-1]
            print(f"round {len(rounds) + 1}: {c}: measured {r['median']:.4g} s, predicted "
                  f"{r['predicted']:.4g} s",
                  file=sys.stderr, flush=True)
        rounds.append(results)
        loads.append(f"after round {len(rounds)} {load_average()}")
    text = table(args.device, dtype, hw, rounds, loads, calibration_s)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
