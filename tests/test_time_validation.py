"""bench/time_validation.py end to end on a tiny shape set, through bench/gpu_check.sh's CPU path
(the GPU path is the same script with --device cuda)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the validation needs the [measure] extra (torch)")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_cpu_path_calibrates_and_writes_the_table(tmp_path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "COSTMODEL_HARDWARE_DIR": str(tmp_path / "hw"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "cpu", "--tiny", "--rounds", "1",
                           "--min-run", "0.01"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "gpu_check-cpu.md").read_text()
    assert table.strip() in done.stdout
    kernels = (tmp_path / "kernel_check-cpu.md").read_text()  # the kernel tables' path, tiny shapes
    assert kernels.strip() in done.stdout and "Kernel tables of h200 against cpu" in kernels
    assert [line.split("|")[1].split()[0] for line in kernels.splitlines() if line.startswith("| ")][1:] == [
        "gemm", "gemm", "attention", "attention"]
    rows = [line for line in table.splitlines() if line.startswith("| smoke-gpt2")]
    assert [r.split("|")[3].strip() for r in rows] == ["prefill", "decode", "train"]
    assert "Load average" in table and "Calibrated model: median |error|" in table
    assert (tmp_path / "hw" / "local.yaml").exists()  # the calibration the predictions used


@pytest.mark.slow
def test_the_validation_refuses_a_missing_gpu_in_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "time_validation.py"), "--device", "cuda"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["device: CUDA is not available here (torch "
                                                f"{torch.__version__})"]
