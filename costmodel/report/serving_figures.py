"""The serving and attention figures: the report's sections (TTFT and TPOT against batch; KV cache
and decode intensity of MHA / GQA / MQA / MLA against context) and the `--plot` charts of
`inference`, `serve` and `deploy`, drawn by ``report.svg`` from the library's objects.

- Serving: ``runtime.serving.serve`` (what `costmodel inference` prints: TTFT, the mean TPOT,
  latency, tokens/s per device; docs/time.md, "Serving"), at batches 1 to 256.
- Attention: ``studies.attention_variants.heads_by_context``, the decode step of the variants
  `costmodel attention` compares, at each context the spec was trained to take.
- `serve --plot`: ``parallel.serve.decode`` per batch (TPOT, its compute and its communication);
  `deploy --plot`: ``deploy.search``'s deployments and Pareto front (docs/serving.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from costmodel import units
from costmodel.analysis import DEFAULT_SEQ
from costmodel.report import svg
from costmodel.report.section import Cell, Section

if TYPE_CHECKING:  # the deployment search and the parallel step load numpy: only for their plots
    from costmodel.deploy.search import Ranked, Search
    from costmodel.devices.hardware import Hardware
    from costmodel.parallel.serve import Decode
    from costmodel.runtime.serving import Serving
    from costmodel.spec import Spec
    from costmodel.studies.attention_variants import ContextRow

#: The report's serving curve: batch sizes 1 to 256, and `costmodel inference`'s output length.
BATCHES = tuple(2**i for i in range(9))
OUTPUT_TOKENS = 256

BATCH_AXIS = svg.Axis("batch (sequences, log)", fmt=lambda v: f"{v:,.0f}")
SECONDS_AXIS = svg.Axis("time (s, log)", "s")


def seconds_by_batch(title: str, lines: Sequence[tuple[str, Sequence[tuple[int, float]]]],
                     x_limits: Sequence[tuple[str, float]] = ()) -> str:
    """Times against batch size, one line each, on log axes (a time of 0, a TP1 group's
    communication, cannot sit on a log axis and is left out)."""
    series = [svg.Series(name, [(float(b), t) for b, t in pts if t > 0], line=True,
                         labels=[f"batch {b}" for b, t in pts if t > 0]) for name, pts in lines]
    return svg.xy(title, [s for s in series if s.points], BATCH_AXIS, SECONDS_AXIS, x_limits=x_limits)


def serving_run(spec: Spec, hw: Hardware, seq: int | None = None, dtype: str = "bf16") -> Serving:
    """`costmodel inference` at the report's batches: the prompt `seq` (default: 2048, or what the
    spec's context leaves after the output, as `inference` has it), 256 tokens out (fewer where the
    context ends), the device's default kernels."""
    from costmodel.runtime.serving import serve

    prompt = seq if seq is not None else max(1, min(DEFAULT_SEQ, spec.max_seq_len - OUTPUT_TOKENS))
    output = max(1, min(OUTPUT_TOKENS, spec.max_seq_len - prompt))
    return serve(spec, hw, prompt, output, BATCHES, dtype)


def _fits_limit(sv: Serving) -> list[tuple[str, float]]:
    """A dashed line between the last batch that fits in device memory and the first that does
    not (weights and the KV cache of the last step, ``serving.fits``), when both are drawn."""
    fit = [p.batch for p in sv.points if p.fits]
    past = [p.batch for p in sv.points if p.fits is False]
    if not fit or not past or max(fit) > min(past):
        return []
    return [(f"\u2190 weights + KV cache fit in {units.decimal_bytes(sv.hardware.memory_bytes)}",
             (max(fit) * min(past)) ** 0.5)]


def serving_section(sv: Serving) -> Section:
    """TTFT and the mean TPOT against batch (log-log), with latency and tokens/s in the table."""
    rows: list[tuple[Cell, ...]] = []
    for p in sv.points:
        tpot: tuple[Cell, ...] = () if p.tpot_s is None else (p.tpot_s,)
        rows.append((p.batch, p.ttft_s, *tpot, p.latency_s, p.tokens_per_s,
                     {True: "yes", False: "no", None: "-"}[p.fits]))
    lines = [("TTFT", [(p.batch, p.ttft_s) for p in sv.points])]
    if all(p.tpot_s is not None for p in sv.points):
        lines.append(("TPOT (mean)", [(p.batch, p.tpot_s or 0.0) for p in sv.points]))
    where = f"{sv.spec.name} on {sv.hardware.name}"
    chart = seconds_by_batch(f"TTFT and TPOT against batch: {where}, prompt {sv.prompt:,}, "
                             f"{sv.output:,} out", lines, _fits_limit(sv))
    with_tpot = len(lines) == 2
    return Section(
        "serving", f"Serving: TTFT and TPOT against batch on {sv.hardware.name}", chart,
        ("batch", "TTFT", *(("TPOT (mean)",) if with_tpot else ()), "latency", "tokens/s per device",
         "fits"), rows,
        (f"runtime.serving (costmodel inference {sv.spec.name} --hardware {sv.hardware.name} --seq "
         f"{sv.prompt} --output-tokens {sv.output} --batch {','.join(map(str, BATCHES))}): prompt "
         f"{sv.prompt:,} tokens, {sv.output:,} generated, {sv.dtype}; TTFT is one prefill of the batch (the "
         "logits of the last position only), TPOT the mean decode step over the output, latency TTFT + "
         "(output - 1) x TPOT, tokens/s = batch x output / latency. Predicted, not measured: "
         + ("calibrated by the device's tables" if sv.calibrated else sv.note or "the roofline")
         + " (docs/time.md).",
         "fits: weights and the KV cache at the last step within the device's memory (activations not "
         "counted)." + (f" {sv.unrunnable()}." if sv.unrunnable() else "")),
        fmt=("count", "s", *(("s",) if with_tpot else ()), "s", "decimal", ""))


def tradeoff_chart(sv: Serving) -> str:
    """`inference --plot`: end-to-end latency against tokens/s per device, one point per batch size
    (named beside it), on log axes: what a larger batch buys in throughput and costs in latency."""
    pts = [(p.tokens_per_s, p.latency_s) for p in sv.points]
    series = svg.Series("batch sizes", pts, line=True, labels=[f"B={p.batch}" for p in sv.points],
                        annotate=True)
    return svg.xy(f"Latency against throughput: {sv.spec.name} on {sv.hardware.name}, prompt {sv.prompt:,}, "
                  f"{sv.output:,} out, {sv.dtype}", [series],
                  svg.Axis("output throughput per device (tokens/s, log)", "tok/s"),
                  svg.Axis("end-to-end latency (s, log)", "s"))


def decode_chart(ds: Sequence[Decode]) -> str:
    """`serve --plot`: TPOT against batch, and its two parts (one rank's compute, the collectives),
    of decode on TP (and EP) ranks; nothing overlapped, as `serve` has it."""
    d0 = ds[0]
    where = f"TP{d0.tp}" + (f" x EP{d0.ep}" if d0.ep > 1 else "")
    lines = [("TPOT", [(d.batch, d.tpot_s) for d in ds]), ("compute", [(d.batch, d.compute_s) for d in ds]),
             ("communication", [(d.batch, d.comm_s) for d in ds])]
    past = [d.batch for d in ds if not d.fits]
    fit = [d.batch for d in ds if d.fits]
    limit = ([(f"\u2190 fits in {units.decimal_bytes(d0.cluster.hardware.memory_bytes)} per GPU",
               (max(fit) * min(past)) ** 0.5)] if fit and past and max(fit) < min(past) else [])
    return seconds_by_batch(f"Time per output token against batch: {d0.spec.name} on {where} "
                            f"{d0.cluster.hardware.name}, {d0.context:,} cached", lines, limit)


def deploy_chart(r: Search) -> str:
    """`deploy --plot`: output tokens/s per GPU against tokens/s per user, every deployment in a
    steady state (those meeting the targets apart from the others) and the Pareto front joined,
    on log axes."""
    ok = [d for d in r.deployments if d.stable]
    targets = r.targets.ttft is not None or r.targets.tpot is not None

    def series(name: str, ds: Sequence[Ranked], line: bool = False) -> svg.Series:
        return svg.Series(name, [(d.tokens_per_s_per_user, d.tokens_per_s_per_gpu) for d in ds], line=line,
                          labels=[f"{d.label} B{d.max_batch} T{d.max_tokens}" for d in ds])

    parts = ([series("meets the targets", [d for d in ok if d.meets]),
              series("misses them", [d for d in ok if not d.meets])] if targets
             else [series("deployments", ok)])
    parts.append(series("Pareto front", r.front, line=True))
    t = r.targets
    goal = ", ".join([*([f"TTFT \u2264 {units.seconds(t.ttft)}"] if t.ttft is not None else []),
                      *([f"TPOT \u2264 {units.seconds(t.tpot)}"] if t.tpot is not None else [])])
    return svg.xy(f"Throughput against interactivity: {r.spec.name} on {r.gpus} {r.cluster.hardware.name}"
                  + (f" ({goal} at p{t.percentile})" if targets else ""),
                  [s for s in parts if s.points],
                  svg.Axis("output throughput per user (tokens/s, log)", "tok/s"),
                  svg.Axis("output throughput per GPU (tokens/s, log)", "tok/s"))


# --- attention variants against context ---------------------------------------------------------


def _variant(r: ContextRow) -> str:
    return f"{r.variant} (spec)" if r.own else r.variant


def _by_variant(rows: Sequence[ContextRow], value: str) -> list[svg.Series]:
    names = list(dict.fromkeys(_variant(r) for r in rows))
    return [svg.Series(n, [(float(r.context), float(getattr(r, value))) for r in rows if _variant(r) == n],
                       line=True, labels=[f"{n}, C={r.context:,}" for r in rows if _variant(r) == n],
                       dashed="absorbed" in n) for n in names]


CONTEXT_AXIS = svg.Axis("context C (tokens attended by the decode step, log)", fmt=lambda v: f"{v:,.0f}")


def attention_sections(spec: Spec, batch: int = 1, dtype: str = "bf16", hw: Hardware | None = None
                       ) -> list[Section]:
    """The key/value-head variants' decode step against context: KV cache, and the attention's
    arithmetic intensity (under the device's ridge, memory-bound). None for an encoder."""
    from costmodel.studies.attention_variants import heads_by_context

    if spec.is_encoder:
        return []
    rows = heads_by_context(spec, batch, dtype=dtype)
    source = (f"studies.attention_variants (the variants of costmodel attention {spec.name}: MHA, the spec's "
              "own k, MQA; a latent spec in both conventions beside MHA, GQA and MQA of its heads), batch "
              f"{batch}, {dtype}; context C: the decode step attends to C tokens, C - 1 cached, up to the "
              "spec's max_seq_len.")
    mem = [(f"{hw.name} memory {units.decimal_bytes(hw.memory_bytes)}", float(hw.memory_bytes))] if hw else []
    kv = Section(
        "attention-kv", "Attention variants: KV cache against context",
        svg.xy(f"KV cache against context: {spec.name}, batch {batch}, {dtype}",
               _by_variant(rows, "kv_cache"), CONTEXT_AXIS, svg.Axis("KV cache (bytes, log)", "B"),
               y_limits=mem),
        ("variant", "context", "KV cache", "KV per token"),
        [(_variant(r), r.context, r.kv_cache, r.kv_cache / (batch * r.context)) for r in rows],
        (source, "KV cache: the whole batch's after the step; per token: one sequence's over C."),
        fmt=("", "count", "bytes", "bytes"))
    ridge = [(f"{hw.name} ridge {hw.ridge(dtype):.3g} FLOP/B", hw.ridge(dtype))] if hw else []
    intensity = Section(
        "attention-intensity", "Attention variants: decode arithmetic intensity against context",
        svg.xy(f"Decode attention intensity against context: {spec.name}, batch {batch}, {dtype}",
               _by_variant(rows, "intensity"), CONTEXT_AXIS,
               svg.Axis("attention FLOPs / fused bytes (FLOP/B, log)", "FLOP/B"), y_limits=ridge),
        ("variant", "context", "attention FLOPs", "attention bytes (fused)", "intensity"),
        [(_variant(r), r.context, r.attention.flops, r.attention.bytes_fused, r.intensity) for r in rows],
        (source, "Attention: every attention sub-block of the step (norm, q/k/v, scores, softmax, AV, out, "
         "residual) summed over layers, as costmodel attention's table has it; bytes: the fused lower bound "
         "(weights and KV cache read once). Below the device's ridge a kernel is memory-bound."),
        fmt=("", "count", "flops", "bytes", "intensity"))
    return [kv, intensity]


def sections(spec: Spec, hw: Hardware | None, batch: int = 1, seq: int | None = None,
             dtype: str = "bf16") -> list[Section]:
    """What the report adds from this module: the attention variants (a model that decodes), and
    with a device the serving curve."""
    out = attention_sections(spec, batch, dtype, hw)
    if hw is not None and not spec.is_encoder:
        out.append(serving_section(serving_run(spec, hw, seq, dtype)))
    return out
