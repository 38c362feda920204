"""`costmodel deploy`'s tables: the ranked deployments, the Pareto front, the closest ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from costmodel import units
from costmodel.report.tables import Table, kernel_notes
from costmodel.runtime import kernels

if TYPE_CHECKING:  # the model imports numpy; the CLI loads it only when `deploy` runs
    from costmodel.deploy.search import Ranked, Search



def _s(x: float) -> str:
    return units.seconds(x) if x != float("inf") else "overloaded"


def _rows(ds: Sequence[Ranked], q: int, price: bool, mode: bool) -> list[tuple[str, ...]]:
    rows = []
    for i, d in enumerate(ds, 1):
        rows.append((str(i), *([d.mode] * mode), d.label, str(d.max_batch), str(d.max_tokens),
                     f"{d.running:,.0f}",
                     _s(d.ttft[q]), _s(d.tpot[q]), f"{d.tokens_per_s_per_gpu:,.0f}",
                     f"{d.tokens_per_s_per_user:,.1f}",
                     *([f"${d.cost_per_million:,.3f}" if d.cost_per_million is not None else "-"] * price)))
    return rows


def _columns(q: int, price: bool, mode: bool) -> tuple[str, ...]:
    return ("#", *(["mode"] * mode), "layout", "max batch", "max tokens", "running", f"TTFT p{q}",
            f"TPOT p{q}", "tok/s/GPU", "tok/s/user", *(["$/M tokens"] * price))


# At 80 columns: the layout, its latencies against the targets and its throughputs (and price)
# stay; the engine's limits (running, max tokens, max batch) go first.
def _priority(mode: bool) -> dict[str, Any]:
    m = int(mode)  # the mode column sits after "#"
    return {"essential": (0, *range(1, 2 + m), *(i + m for i in (5, 6, 7, 8, 9))),
            "drop_first": tuple(i + m for i in (4, 3, 2))}


def deploy_tables(r: Search) -> list[Table]:
    q = r.targets.percentile
    price = r.price is not None
    mode = len(r.modes) > 1
    meeting = r.meeting
    shown = r.shown
    title = (f"Deployments of {r.gpus} {r.cluster.hardware.name} ({r.cluster.name}) meeting the targets, "
             "best first" if meeting else "No deployment meets the targets: the closest")
    w = r.workload
    notes = [
        f"prompt {w.prompt.label} tokens (mean {w.prompt.mean:,.0f}), output {w.output.label} (mean "
        f"{w.output.mean:,.0f}); {w.arrival}; {r.dtype}{r.widths.label(r.dtype)}",
        "layout: TP x EP GPUs per replica, x replicas; running: requests in flight per engine (at most "
        "max batch and what the KV pages hold)",
        f"TTFT and TPOT at p{q}; tok/s/GPU: output tokens per second per GPU; tok/s/user: 1 / mean TPOT",
        f"engine: pages of {r.engine.block} tokens, {r.engine.memory_fraction:g} of device memory, "
        "continuous batching with chunked prefill (docs/serving.md)",
        f"{len(meeting)} of {len(r.deployments)} fitting deployments meet the targets ({r.evaluated} timed)",
        kernels.note(r.kernels, r.cluster.hardware, kernels.is_default(r.kernels, r.cluster.hardware)),
        *kernel_notes([r.reads()]),
    ]
    if len(meeting) > len(shown):
        notes.append(f"the best {len(shown)} shown; --format json for all {len(meeting)}")
    if not r.calibrated:
        notes.append(f"{r.cluster.hardware.name}: no measured tables at these widths: step times are the "
                     "roofline of each component")
    if r.skipped:
        notes.append("not run: " + "; ".join(r.skipped[:3]) + ("; ..." if len(r.skipped) > 3 else ""))
    if mode:
        notes.insert(2, "disaggregated xPyD: x prefill engines (P: their layout, budget) and y decode "
                     "engines (D: their layout, max batch); max batch, max tokens: the decode pool's, the "
                     "prefill pool's; running: per decode engine; TTFT includes the KV transfer")
    if r.redundant:
        notes.append(f"{r.redundant} redundant expert slots beside the routed experts (EPLB): the slowest "
                     "EP rank sets the step (docs/serving.md, wide EP)")
    n = 2 + mode
    ranked = Table(title, _columns(q, price, mode), _rows(shown, q, price, mode), notes, numeric_from=n,
                   **_priority(mode))
    front = Table("Pareto front: tokens/s per GPU against tokens/s per user", _columns(q, price, mode),
                  _rows(r.front, q, price, mode), ("no other deployment has more of both",), numeric_from=n,
                  **_priority(mode))
    return [ranked, front]
