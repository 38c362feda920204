"""Tables for `train`, `plan` and `serve`: built from the parallel model's results, nothing computed."""

from __future__ import annotations

from collections.abc import Sequence

from costmodel import units
from costmodel.parallel.checked import step_check
from costmodel.parallel.plan import Plan
from costmodel.parallel.serve import Decode
from costmodel.parallel.step import Step
from costmodel.report.tables import Table, kernel_notes
from costmodel.runtime import kernels

BREAKDOWN_LABELS = {
    "compute": "compute", "tp_comm": "tensor-parallel comm", "cp_comm": "context-parallel comm",
    "ep_comm": "expert-parallel comm", "pipeline_bubble": "pipeline bubble", "pp_comm": "pipeline sends",
    "dp_comm": "data-parallel comm", "embedding_sync": "tied-embedding gradient sync",
    "optimizer": "optimizer step",
}


def _kernels(s: Step) -> str:
    """The kernels a step assumes, and whether they are its GPUs' default (``runtime.kernels``)."""
    hw = s.cluster.hardware
    return kernels.note(s.kernels, hw, kernels.is_default(s.kernels, hw, "train"))


def summary_table(s: Step, tokens: float | None = None) -> Table:
    lo = s.layout
    rows = [
        ("layout", lo.label()),
        ("GPUs", f"{lo.gpus} on {s.cluster.name} ({s.cluster.hardware.name})"),
        ("batch",
         f"{lo.global_batch} x {s.seq} tokens; {lo.micro_batches} micro-batch"
         f"{'es' if lo.micro_batches != 1 else ''} of {lo.micro_batch} per DP rank"),
        ("step time", units.seconds(s.step_time_s)),
        ("tokens/s", f"{s.tokens_per_s:,.0f}"),
        ("MFU", f"{100 * s.mfu:.1f}%"),
        ("HFU", f"{100 * s.hfu:.1f}%"),
        ("model FLOPs per step", units.flops(s.model_flops)),
    ]
    if tokens is not None:
        t = s.train_time_s(tokens)
        rows.append((f"{units.count(tokens)} tokens",
                     f"{t / 86400:.3g} days, {t * lo.gpus / 3600:,.0f} GPU-hours"))
    # Only the groups this layout has: "overlapped: cp" with CP 1 named an overlap of nothing.
    present = {"tp": lo.tp > 1, "tp_backward": lo.tp > 1, "cp": lo.cp > 1, "ep": lo.ep > 1, "pp": lo.pp > 1,
               "dp": lo.dp * lo.cp > 1}
    overlapped = [k for k, on in s.overlap.to_dict().items() if on and present[k]]
    notes = [f"{s.dtype}, {s.recipe.label(s.dtype)}; MFU and HFU after Chowdhery et al. 2022 (exact model "
             "FLOPs; HFU adds the recomputed forward)",
             "overlapped: " + (", ".join(overlapped) or "nothing"),
             _kernels(s),
             *(n for n in s.notes if not n.startswith("overlap")),
             *kernel_notes([s]), *_step_checks([s])]
    return Table("Training step", ("", "value"), rows, notes, numeric_from=2, essential=(0, 1))


def _step_checks(steps: Sequence[Step]) -> list[str]:
    """How far this device's whole steps stood from published runs (``parallel.checked``), or that
    none of its steps was checked."""
    out = []
    for device in dict.fromkeys(s.cluster.hardware.name for s in steps):
        check = step_check(device)
        out.append(check.note(device) if check
                   else f"no whole step on {device} checked against a published run")
    return out


def breakdown_table(s: Step) -> Table:
    rows = []
    for key, sec in s.breakdown.items():
        if not sec:
            continue
        rows.append((BREAKDOWN_LABELS.get(key, key), units.seconds(sec), units.percent(sec, s.step_time_s)))
        if key == "compute":
            for cat, c in sorted(s.compute_by_component.items(), key=lambda kv: -kv[1]):
                rows.append((f"  {cat}", units.seconds(c), units.percent(c, s.step_time_s)))
    rows.append(("total", units.seconds(s.step_time_s), "100.0%"))
    return Table("Where the step goes (critical path of the slowest pipeline stage)", ("part", "time",
                                                                                       "share"),
                 rows, ("compute time from the device model (docs/parallel.md, Integration notes)",),
                 essential=(0, 1, 2))


def collectives_table(s: Step) -> Table:
    rows = []
    for key, e in s.by_collective().items():
        per_call = e["bytes_sent"] / e["calls"] if e["calls"] else 0
        rows.append((key, str(e["ranks"]), e["link"].replace("_", "-"), e["basis"], f"{e['calls']:,.0f}",
                     units.nbytes(per_call), units.seconds(e["time_s"]), units.seconds(e["exposed_s"])))
    return Table("Collectives per step (one GPU of the slowest stage)",
                 ("group/kind", "ranks", "link", "time from", "calls", "sent per call", "time", "exposed"),
                 rows,
                 ("inside a node: NCCL as measured on the device (specs/kernels/), by GPU count and message "
                  "size; otherwise ring algorithms, time = latency + bytes sent / bus bandwidth of the "
                  "slowest link the group spans (docs/parallel.md)",),
                 numeric_from=1, essential=(0, 6, 7), drop_first=(3, 2, 1, 4))  # the times stay


def memory_table(s: Step) -> Table:
    stages = [s.memory, *([s.memory_middle] if s.memory_middle else []), s.memory_last]
    parts = (("weights", "weights"), ("gradients", "gradients"), ("optimizer states", "optimizer"),
             ("activations", "activations"), ("recompute working set", "recompute_working_set"))
    rows = [(label, *(units.nbytes(getattr(m, f)) for m in stages)) for label, f in parts]
    rows.append(("total", *(units.nbytes(m.total) for m in stages)))
    dev = s.cluster.hardware.memory_bytes
    verdict = "fits" if s.fits else f"DOES NOT FIT: {units.nbytes(s.per_gpu.total - dev)} over"
    heads = ("first stage", *([f"{s.memory_middle.stage} (fullest middle)"] if s.memory_middle else []),
             "last stage")
    return Table("Memory per GPU", ("", *heads), rows, (f"device {units.decimal_bytes(dev)}: {verdict}",),
                 essential=tuple(range(1 + len(heads))))


def plan_table(p: Plan, top: int, seconds: float) -> Table:
    rows = []
    for i, s in enumerate(p.ranked[:top], 1):
        rows.append((str(i), s.layout.label(), units.seconds(s.step_time_s), f"{100 * s.mfu:.1f}%",
                     f"{s.tokens_per_s:,.0f}", units.nbytes(s.per_gpu.total),
                     units.seconds(s.breakdown["pipeline_bubble"]),
                     units.seconds(s.breakdown["tp_comm"] + s.breakdown["dp_comm"] + s.breakdown["pp_comm"])))
    notes = (f"{p.considered:,} valid layouts evaluated in {seconds:.2f} s; {p.dropped:,} do not fit; "
             f"{len(p.ranked):,} ranked by step time",
             *(_kernels(s) for s in p.ranked[:1]),
             *(n for s in p.ranked[:1] for n in s.notes if n.startswith("engine: ")),
             "layout: edges = the embedding and the head counted as a layer each in the pipeline split "
             "(--edge-chunks)",
             *kernel_notes(p.ranked[:top]), *_step_checks(p.ranked[:1]))
    return Table("Best layouts", ("#", "layout", "step", "MFU", "tokens/s", "memory/GPU", "bubble", "comm"),
                 rows, notes, numeric_from=2, essential=(0, 1, 2, 5), drop_first=(7, 6, 4, 3))


def decode_table(ds: Sequence[Decode]) -> Table:
    rows = []
    for d in ds:
        rows.append((str(d.batch), str(d.context), units.seconds(d.compute_s), units.seconds(d.comm_s),
                     units.seconds(d.tpot_s), f"{d.tokens_per_s:,.1f}", units.nbytes(d.comm_bytes),
                     units.nbytes(d.memory_bytes), "yes" if d.fits else "NO"))
    d0 = ds[0]
    return Table(
        f"Decode on TP{d0.tp}" + (f" x EP{d0.ep}" if d0.ep > 1 else "") + f" ({d0.cluster.name})"
        + d0.widths.label(d0.dtype),
        ("batch", "context", "compute", "comm", "TPOT", "tokens/s", "sent/GPU/step", "memory/GPU", "fits"),
        rows,
        ("TPOT = compute of one rank's shard + its all-reduces (and expert all-to-alls), nothing overlapped",
         f"tokens/s: output tokens per second of the whole batch on the {d0.tp * d0.ep} GPUs of the group "
         f"(TP{d0.tp}" + (f" x EP{d0.ep}" if d0.ep > 1 else "") + "), not per GPU",
         kernels.note(d0.kernels, d0.cluster.hardware, kernels.is_default(d0.kernels, d0.cluster.hardware)),
         *([f"latent attention: {d0.mla} (--mla naive|absorbed)"] if d0.spec.mla is not None else []),
         *([] if d0.cluster.hardware.tables_for(d0.dtype) else
           [f"{d0.cluster.hardware.name} has no efficiency tables for {d0.dtype}: compute is the "
            "roofline lower bound"]),
         *kernel_notes(ds)),
        numeric_from=0, essential=(0, 4, 5, 7, 8), drop_first=(6, 3, 2, 1))  # batch, TPOT, tokens/s, fits
