"""Step times of MoE models on one GPU before and after the measured MoE and MLA tables
(specs/kernels/<gpu>/moe.json, mla.json; docs/gpu-time.md, "MoE and MLA in the time model").

*After*: ``predict`` as it runs (the routed experts read ``moe.json``, latent attention's core
``mla.json``). *Before*: the same with those two tables hidden (``KernelTables.moe_table`` and
``mla_table`` answering None), which is how the model timed them until they were added: the
experts as one dense product over every routed row on the GEMM table, the latent core as its
products. bf16, flash attention and fused kernels, DeepSeek-V3's latent attention absorbed.

    python bench/moe_mla_figures.py              # the table, markdown, to stdout
    python bench/moe_mla_figures.py --write      # and into docs/gpu-time.md, between its markers
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the package is the checkout's
    sys.path.insert(0, str(ROOT))

from costmodel import catalog  # noqa: E402
from costmodel.analysis import analyze  # noqa: E402
from costmodel.devices.hardware import load_hardware  # noqa: E402
from costmodel.devices.kernels import KernelTables  # noqa: E402
from costmodel.runtime.timing import Kernels, Prediction, predict  # noqa: E402

DOC = ROOT / "docs" / "gpu-time.md"
BEGIN, END = "<!-- moe-figures: begin -->", "<!-- moe-figures: end -->"
GPU = "h100-sxm"
MODELS = ("deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b")
STEPS = (("decode", 1, 2048), ("decode", 64, 2048), ("prefill", 1, 2048), ("prefill", 1, 8192))
KERNELS = Kernels(flash_attention=True, fused=True)


def step(name: str, phase: str, batch: int, seq: int, hidden: bool) -> Prediction:
    """One step's prediction; `hidden`: with the MoE and MLA tables answering None."""
    spec = catalog.load(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # past a spec's trained positions: not these steps
        a = analyze(spec, phase, batch=batch, seq=seq, **({"mla": "absorbed"} if spec.mla else {}))
    if not hidden:
        return predict(a, load_hardware(GPU), KERNELS)
    saved = KernelTables.moe_table, KernelTables.mla_table
    try:
        KernelTables.moe_table = KernelTables.mla_table = lambda *args: None  # type: ignore[method-assign,assignment]
        return predict(a, load_hardware(GPU), KERNELS)
    finally:
        KernelTables.moe_table, KernelTables.mla_table = saved  # type: ignore[method-assign]


def _ms(p: Prediction, part: str | None = None) -> float:
    rows: Any = p.rows
    if part == "experts":
        rows = [r for r in rows if r.key.part == "experts"]
    elif part == "core":
        rows = [r for r in rows if r.key.attention_core]
    return 1e3 * sum(r.time_s for r in rows)


def markdown() -> str:
    head = ["model", "step", "step before", "step after", "routed experts before", "after",
            "attention core before", "after", "tables read (extrapolated)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for name in MODELS:
        for phase, batch, seq in STEPS:
            b, a = step(name, phase, batch, seq, True), step(name, phase, batch, seq, False)
            read = sorted(op for op in a.errors if op.startswith(("moe", "mla")))
            ext = [op for op in a.extrapolated if op.startswith(("moe", "mla"))]
            lines.append("| " + " | ".join([
                name, f"{phase} {batch} x {seq}", f"{_ms(b):.2f} ms", f"{_ms(a):.2f} ms",
                f"{_ms(b, 'experts'):.2f} ms", f"{_ms(a, 'experts'):.2f} ms",
                f"{_ms(b, 'core'):.2f} ms", f"{_ms(a, 'core'):.2f} ms",
                ", ".join(read) + (f" ({', '.join(ext)})" if ext else "")]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    text = markdown()
    print(text, end="")
    if args.write:
        doc = DOC.read_text()
        head, rest = doc.split(BEGIN, 1)
        DOC.write_text(f"{head}{BEGIN}\n{text}{END}{rest.split(END, 1)[1]}")


if __name__ == "__main__":
    main(sys.argv[1:])
