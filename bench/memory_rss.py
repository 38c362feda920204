"""Resident memory of a real CPU prefill and training step beside the memory formula.

Each case runs in a fresh interpreter, in fp32: the model is built and initialised, inputs (and the KV
cache for prefill) made, the pass runs once to warm up (code pages, thread-pool buffers), what was
freed is handed back (malloc_trim), the peak RSS is
reset (``/proc/self/clear_refs``), and the high-water mark (VmHWM) after the pass less the
RSS before it is read. The growth is what the pass itself took from the
operating system; the formula's figure for the same pass is set beside it:

- prefill: the live activation peak (``memory(...).peak_activations``);
- train (forward, loss, backward; no optimizer step): activations kept for backward plus the
  gradients, the sum being an upper bound on the pass's high-water mark.

    python bench/memory_rss.py
"""

from __future__ import annotations

import json
import subprocess
import sys

CASES = [
    ("gpt2-small", "prefill", 2, 128),
    ("gpt2-small", "train", 2, 128),
    ("llama-shaped", "prefill", 2, 128),
    ("llama-shaped", "train", 2, 128),
]

# A LLaMA-shaped decoder small enough for the shared machine (GQA, SwiGLU, RMSNorm, RoPE).
LLAMA_SHAPED = dict(name="llama-shaped", d_model=1024, n_layers=4, n_heads=16, n_kv_heads=4,
                    d_ff=2816, vocab_size=32000, max_seq_len=2048, norm="rmsnorm",
                    activation="swiglu", position="rope")

CHILD = r"""
import ctypes, json, sys, torch
from costmodel import catalog
from costmodel.spec import spec_from_dict
from costmodel.measure.reference import build
from costmodel.measure.run import phase_runner
from costmodel.analysis import analyze
name, phase = sys.argv[1], sys.argv[2]
B, S, llama = int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
torch.set_num_threads(2)
spec = spec_from_dict(llama) if name == "llama-shaped" else catalog.load(name)
model = build(spec, "cpu", torch.float32)  # fp32: CPU bf16 backward is very slow
shape = analyze(spec, phase, batch=B, seq=S).shape
run = phase_runner(model, phase, dict(shape))
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))
run()  # warm-up: pages in the kernels' code and the thread pools' buffers, not counted
if phase == "train":
    model.zero_grad(set_to_none=True)
ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand what was freed back to the OS
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
before = status("VmRSS")
run()
growth = status("VmHWM") - before
print(json.dumps({"growth": growth, "before": before}))
"""


def main() -> None:
    from costmodel import catalog
    from costmodel.runtime.memory import Run, memory
    from costmodel.spec import spec_from_dict

    print(f"{'spec':14} {'phase':8} {'B':>2} {'S':>4} {'measured growth':>16} {'formula':>14} {'ratio':>6}")
    for name, phase, B, S in CASES:
        out = subprocess.run([sys.executable, "-c", CHILD, name, phase, str(B), str(S),
                              json.dumps(LLAMA_SHAPED)],
                             capture_output=True, text=True, check=True)
        growth = json.loads(out.stdout.strip().splitlines()[-1])["growth"]
        spec = spec_from_dict(LLAMA_SHAPED) if name == "llama-shaped" else catalog.load(name)
        if phase == "train":
            m = memory(spec, "train", B, S, run=Run(mask_bytes=4, precision="fp32"))
            formula = m.total("activations") + m.total("gradients")
        else:
            formula = memory(spec, phase, B, S, run=Run(dtype="fp32")).peak_activations
        print(f"{name:14} {phase:8} {B:>2} {S:>4} {growth:>16,} {formula:>14,} {growth / formula:>6.2f}")


if __name__ == "__main__":
    main()
