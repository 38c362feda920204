"""costmodel.malloc.allocator: under ``cache`` a block freed and allocated again costs no page
faults; under ``system`` (glibc's default) a block past the mmap threshold is faulted in afresh
each time (minor faults from getrusage), which calibrate's first-touch table (under system) prices."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")

from typer.testing import CliRunner  # noqa: E402

from costmodel import catalog  # noqa: E402
from costmodel.cli import app  # noqa: E402
from costmodel.measure import MeasureError  # noqa: E402
from costmodel.measure.malloc import allocator, glibc  # noqa: E402
from costmodel.measure.run import measure  # noqa: E402
from tests.helpers import calibrated_profile  # noqa: E402

CPU = "cpu"
on_glibc = pytest.mark.skipif(glibc() is None, reason="mallopt is glibc's; this C library has none")

# Run in a new process: glibc's defaults hold only in a process that has not run under cache
# (this one has, once any CPU measurement test ran). Prints the minor page faults of four
# rounds of allocating, writing and freeing a 64 MiB block (past glibc's largest dynamic mmap
# threshold, 32 MiB), after three untimed rounds, under system then cache; and under system the
# first-touch table of calibrate at 1 and 256 MiB.
FRESH_PROCESS = """
import json, resource, torch
from costmodel.measure.malloc import allocator
from costmodel.measure.calibrate import first_touch_table
cpu, block = torch.device("cpu"), 64 * 2**20
def faults():
    for _ in range(3):
        torch.empty(block, dtype=torch.uint8).fill_(1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        torch.empty(block, dtype=torch.uint8).fill_(1)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
grid = {"fresh": [2**20, 2**28], "run_s": 0.05}
out = {}
for mode in ("system", "cache"):
    with allocator(mode, "cpu") as in_effect:
        out[mode] = {"in_effect": in_effect, "faults": faults()}
        if mode == "system":
            out[mode]["first_touch"] = first_touch_table(cpu, grid).s_per_byte
print(json.dumps(out))
"""


@pytest.mark.slow
@on_glibc
def test_cache_reuses_freed_blocks_and_system_faults_them_in_again() -> None:
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    system, cache = out["system"], out["cache"]
    assert system["in_effect"] == "system" and cache["in_effect"] == "cache"
    # every page of every fresh block faults: 4 x 16,384 of 4 KiB (4 x 32 even if each fault
    # mapped a 2 MiB transparent huge page); a reused block, none or a few
    assert system["faults"] >= 4 * 32 and cache["faults"] * 20 < system["faults"], out
    # calibrate's first-touch table sees it: a fresh 256 MiB fill costs more than a reused one
    # under system (page faults: 1.5-6e-10 s/B measured here)
    assert system["first_touch"][-1] > 0, out


@on_glibc
def test_system_after_cache_in_one_process_is_refused() -> None:
    with allocator("cache", CPU) as mode:
        assert mode == "cache"
    with pytest.raises(MeasureError, match="system after cache in one process"):
        with allocator("system", CPU):
            pass


def test_nothing_is_set_off_the_cpu_and_a_wrong_mode_is_refused() -> None:
    with allocator("system", "cuda") as mode:  # the CUDA caching allocator keeps blocks
        assert mode == "cache"
    with pytest.raises(MeasureError, match="allocator: 'arena'"):
        with allocator("arena", CPU):
            pass


@pytest.mark.slow
@on_glibc
def test_measure_times_under_the_profiles_allocator_and_says_when_it_differs() -> None:
    spec = catalog.load("gpt2-small")
    hw = calibrated_profile(("fp32",), realistic=True)
    hw = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"allocator": "cache"})})
    kw = dict(phase="prefill", seq=16, dtype="fp32", device="cpu", layers=1, repeats=1, warmup=0,
              count_bytes=False)
    same = measure(spec, hardware=hw, **kw)
    assert same.roofline["allocator"] == same.roofline["calibrated_allocator"] == "cache"
    from costmodel.report.measure import measurement_table

    assert not any("timed with the allocator" in n for n in measurement_table(same).notes)
    # a profile calibrated under system, timed here under cache (system is refused after cache)
    system = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"allocator": "system"})})
    other = measure(spec, hardware=system, allocator="cache", **kw)
    assert other.roofline["allocator"] == "cache" and other.roofline["calibrated_allocator"] == "system"
    assert any("timed with the allocator cache, calibrated with system" in n for n
               in measurement_table(other).notes)
    with pytest.raises(MeasureError, match="allocator: 'arena'"):
        measure(spec, hardware=hw, allocator="arena", **kw)


def test_a_wrong_allocator_on_the_command_line_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(app, ["calibrate", "--allocator", "arena"])
    assert result.exit_code == 2 and "arena" in result.output and "Traceback" not in result.output
