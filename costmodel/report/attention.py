"""Tables for `costmodel attention`, `formula --asymptotic`, `sweep` and `hardware`.

Cells are formatted text (three significant digits, units); JSON and CSV carry the raw numbers
from each row's ``to_dict``. Rendering is ``report``'s.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costmodel import units
from costmodel.devices.hardware import Hardware
from costmodel.report.tables import Table, device_note, kernel_notes  # re-exported
from costmodel.report.tables import records_csv as records_csv
from costmodel.studies.attention_variants import HeadsRow, LatentRow, WindowRow

if TYPE_CHECKING:  # sympy and numpy load only for the commands that use them
    from costmodel.studies.asymptotics import Result
    from costmodel.studies.sweep import Sweep


def _mark(label: str, own: bool) -> str:
    return f"{label} (spec)" if own else label


def latent_table(rows: Sequence[LatentRow]) -> Table:
    """Latent attention in its two conventions, phase by phase."""
    cells = [(r.phase, r.convention, units.flops(r.attention.flops_matmul),
              units.flops(r.attention.flops_matmul_effective), units.nbytes(r.attention.bytes_fused),
              units.flops(r.total.flops), units.nbytes(r.total.bytes_fused),
              units.intensity(r.total.flops / r.total.bytes_fused), units.nbytes(r.total.kv_cache))
             for r in rows]
    return Table(
        "Latent attention: naive and absorbed",
        ("phase", "convention", "attn matmul (dense)", "attn matmul (masked)", "attn bytes",
         "FLOPs total", "bytes fused", "intensity", "KV cache"),
        cells,
        ["naive: the cached latent re-expanded through kv_b into every head's keys and values at "
         "every pass (what transformers runs); absorbed: W_UK folded into the query and W_UV applied "
         "after AV, so the scores read the latent itself, 2*h*(2*r_kv + d_r) FLOPs per cached token "
         "(DeepSeek's inference kernels). Same weights, same cache; bytes are the fused lower bound."],
        numeric_from=2,
    )


def _contexts(rows: Sequence[Any]) -> str:
    """Each phase's own S and C, as the JSON shapes give them (decode caches seq, C = seq + 1)."""
    seen: dict[str, str] = {}
    for r in rows:
        if r.phase not in seen:
            sh = r.shape
            seen[r.phase] = (f"prefill S = C = {sh['C']:,}" if r.phase == "prefill"
                             else f"decode {sh['C'] - 1:,} cached, C = {sh['C']:,}")
    return "; ".join(seen.values())


def heads_table(rows: Sequence[HeadsRow], hw: Hardware, dtype: str, held: str = "") -> Table:
    """`held`: the weights' and the cache's widths where they are not `dtype`'s (``precision``)."""
    """One row per key/value-head variant and phase."""
    cells = []
    for r in rows:
        att = r.attention
        cells.append((
            _mark(r.variant, r.own), r.phase,
            units.nbytes(r.kv_per_token), units.nbytes(r.kv_cache),
            units.flops(att.flops), units.nbytes(att.bytes_fused),
            units.intensity(r.attention_roofline.intensity), r.attention_roofline.bound,
            units.seconds(r.attention_roofline.time_s), units.seconds(r.step_roofline.time_s),
            f"{r.fit.max_batch}" + (" (< B)" if r.fit.max_batch < r.shape["B"] else ""),
        ))
    prefill = next((r for r in rows if r.phase == "prefill"), rows[0])
    notes = [
        f"B={prefill.shape['B']}; {_contexts(rows)}. Attention = every attention "
        "sub-block (norm, q/k/v, scores, softmax, AV, out, residual) summed over layers; bytes are the "
        "fused lower bound (weights and KV cache once); time = max(FLOPs / peak, bytes / bandwidth).",
        "KV/token = one sequence's KV cache / C. step = the whole forward pass. max batch = largest B with "
        "weights + B x KV cache of one sequence <= device memory (activations, workspace and the "
        "framework's reserve left out); (< B): the batch asked for does not fit.",
        device_note(hw, dtype),
    ]
    return Table(
        f"Key/value heads: MHA, GQA, MQA on {hw.name}{held}",
        ("variant", "phase", "KV/token", "KV cache", "attn FLOPs", "attn bytes", "intensity",
         f"bound (ridge {hw.ridge(dtype):.3g})", "attn time", "step time", "max batch"),
        cells, notes, numeric_from=2,
    )


def windows_table(rows: Sequence[WindowRow], hw: Hardware, batch: int, held: str = "") -> Table:
    """One row per window variant and context length."""
    cells = [(
        _mark(r.variant, r.own), f"{r.context:,}", units.nbytes(r.kv_cache),
        units.flops(r.prefill.flops_matmul_effective), units.flops(r.prefill.flops_matmul),
        units.flops(r.decode.flops), units.nbytes(r.decode.bytes_fused),
        units.seconds(r.decode_roofline.time_s),
    ) for r in rows]
    notes = [f"batch {batch}. Attention sub-blocks only. KV cache after a decode step at context C (a local "
             "layer keeps a rolling window of w tokens). Prefill of C tokens: masked = the (query, key) "
             "pairs "
             "the causal and window masks allow, dense = the full S x span score matrices. Decode: one step "
             "attending C tokens; bytes fused, time on the roofline."]
    if len({r.variant for r in rows}) == 1:
        notes.append("The spec has no window: --window W adds an all-local variant.")
    return Table(
        f"Windows: cache and attention work as the context grows{held}",
        ("variant", "C", "KV cache", "prefill (masked)", "prefill (dense)",
         "decode FLOPs", "decode bytes", "decode time"),
        cells, notes, numeric_from=1,
    )


def shazeer_table(spec_name: str, results: Sequence[Result]) -> Table:
    """Shazeer's three results beside ours, quantity by quantity."""
    from costmodel.studies.asymptotics import ASSUMPTIONS_TEXT

    def tick(ok: bool) -> str:
        return "yes" if ok else "NO"

    rows = []
    for r in results:
        rows += [
            (r.case.name, "FLOPs", str(r.flops.kept), f"Theta({r.case.flops})", tick(r.flops_match)),
            ("", "memory", str(r.memory.kept), f"Theta({r.case.memory})", tick(r.memory_match)),
            ("", "memory / FLOPs", str(r.ratio), f"O({r.case.ratio})", tick(r.ratio_match)),
        ]
    notes = [
        f"One attention layer of {spec_name} (full attention), d_h = d/h (Shazeer's k), one layer, sizes in "
        "elements; memory = every tensor each op reads and writes (our unfused bytes). Batched: a prefill "
        "of n tokens (S = C = n). Incremental: a decode step summed over C = 1..n. B sequences (his b).",
        f"Leading terms: those no other term bounds as B, n, d, h grow with {ASSUMPTIONS_TEXT}; "
        "our memory/FLOPs must be O(his bound) term by term. Shazeer 2019, sections 2.4.1, 2.4.2, 3.1.",
    ]
    return Table(f"Shazeer (2019) from our formulas: {spec_name}",
                 ("case", "quantity", "ours (leading terms)", "Shazeer 2019", "match"), rows, notes,
                 numeric_from=99)


def _value(x: float, unit: str) -> str:
    if unit == "B":
        return units.nbytes(x)
    if unit == "s":
        return units.seconds(x)
    return units.number(x)


def sweep_table(sw: Sweep) -> Table:
    """One row per point of the swept axes, one column per variant and phase."""
    first = sw.series[0]
    rows = []
    for i, s in enumerate(first.seq):
        for j, b in enumerate(first.batch):
            keys = [str(v) for a, v in (("seq", s), ("batch", b)) if a in sw.swept]
            rows.append((*keys, *(_value(x.values[i, j], sw.unit) for x in sw.series)))
    fixed = fixed_text(sw)
    notes = [f"{sw.quantity} ({sw.unit}) of {sw.component or 'the whole model'}, "
             f"{sw.dtype}{sw.widths.label(sw.dtype)}"
             + (f"; fixed {fixed}" if fixed else "")
             + ("; seq = prompt (prefill) or tokens cached (decode)" if "seq" in sw.swept else "")]
    if sw.quantity == "roofline" or sw.timed.startswith("roofline"):
        notes.append(device_note(sw.hardware, sw.dtype))
    if sw.quantity == "time":
        notes += time_notes(sw)
    return Table(f"{sw.spec}: {sw.quantity}", (*[a for a in ("seq", "batch") if a in sw.swept],
                                               *(x.label for x in sw.series)),
                 rows, notes, numeric_from=0)


def time_notes(sw: Sweep) -> list[str]:
    """How a swept time was had: the calibrated model on the device's measured tables (the
    kernels assumed, and the error bands of what the largest point read), or the roofline and why."""
    from costmodel.runtime import kernels

    assert sw.kernels is not None
    if sw.timed != "calibrated":
        return [f"time: {sw.timed}"]
    default = kernels.is_default(sw.kernels, sw.hardware)
    tables = ("measured kernel tables (docs/gpu-time.md)" if sw.hardware.kernel_tables() is not None
              else "efficiency tables (its profile's source; no measured kernel tables)")
    return [f"time: the calibrated model (costmodel.runtime.timing) on {sw.hardware.name}'s {tables}, "
            "as `analyze --hardware` and `inference` time one point",
            kernels.note(sw.kernels, sw.hardware, default), *kernel_notes([sw.reads])]


def fixed_text(sw: Sweep) -> str:
    """The axes held fixed: ``batch=1``, or per phase when they differ (``prefill seq=2048,
    decode seq=2047``)."""
    by_phase = {x.phase: x.fixed(sw.swept) for x in sw.series}
    if len(set(by_phase.values())) == 1:
        return next(iter(by_phase.values()))
    return ", ".join(f"{phase} {text}" for phase, text in by_phase.items())


def sweep_csv(sw: Sweep) -> str:
    """seq, batch, variant, kv_heads, phase, value: one line per point, raw floats."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("seq", "batch", "variant", "kv_heads", "phase", sw.quantity))
    for x in sw.series:
        for i, s in enumerate(x.seq):
            for j, b in enumerate(x.batch):
                w.writerow((s, b, x.variant, x.kv_heads, x.phase, repr(float(x.values[i, j]))))
    return buf.getvalue()


def hardware_table(profiles: Iterable[tuple[Hardware, str]], dtype: str, user_folder: Path) -> Table:
    """Every profile found: bundled, and the user folder's (`costmodel calibrate` writes `local`)."""
    rows = []
    for hw, where in profiles:
        has = dtype in hw.peak_flops
        figures = "measured" if hw.measured else "datasheet" + (", kernel tables" if hw.kernels else "")
        rows.append((hw.name, where, figures,
                     f"{units.flops(hw.peak(dtype))}/s" if has else "-",
                     units.bandwidth(hw.memory_bandwidth), units.decimal_bytes(hw.memory_bytes),
                     f"{hw.ridge(dtype):.3g}" if has else "-", hw.description or ""))
    return Table("Hardware profiles", ("name", "from", "figures", f"peak {dtype} (dense)", "bandwidth",
                                       "memory", "ridge FLOP/B", "device"), rows,
                 ("--hardware NAME takes any of these names, or a YAML file. User profiles (`costmodel "
                  f"calibrate` writes `local`) live in {user_folder} ($COSTMODEL_HARDWARE_DIR) and take "
                  "precedence over a bundled profile of the same name.",), numeric_from=3)
