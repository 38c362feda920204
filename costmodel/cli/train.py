"""`costmodel train`, `plan`, `serve` and `clusters`: parse, call the parallel model, render."""

from __future__ import annotations

import time
from enum import Enum
from typing import Annotated, Optional

import typer

from costmodel import catalog, units
from costmodel.analysis import DEFAULT_SEQ, default_seq
from costmodel.cli.app import (
    ClusterOpt,
    Format,
    FormatOpt,
    GlobalBatchOpt,
    GpusOpt,
    GroupSizeOpt,
    KernelsName,
    KernelsOpt,
    KvDtypeOpt,
    MlaDeviceOpt,
    SpecArg,
    WeightsDtypeOpt,
    _user_errors,
    app,
    check_number,
    emit,
)
from costmodel.devices.kernels import Reads
from costmodel.parallel import device
from costmodel.parallel.cluster import cluster_paths, load_cluster
from costmodel.parallel.engine import ENGINES, Engine, Overlap
from costmodel.parallel.layout import Layout, LayoutError, Recompute, check
from costmodel.parallel.plan import plan
from costmodel.parallel.serve import decode
from costmodel.parallel.step import StepModel
from costmodel.precision import DEFAULT_GROUP, Widths
from costmodel.report import cluster as report_cluster
from costmodel.report import parallel as report_parallel
from costmodel.report import tables as report
from costmodel.report.files import plot_path, save_plot
from costmodel.runtime.kernels import KERNELS, is_default
from costmodel.runtime.kernels import to_dict as kernels_dict
from costmodel.runtime.serving import parse_batches
from costmodel.runtime.timing import Kernels
from costmodel.spec import Spec


class TrainDtype(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"


class RecipeName(str, Enum):
    megatron = "megatron"
    zero = "zero"


class EngineName(str, Enum):
    megatron_2021 = "megatron-2021"
    megatron_2022 = "megatron-2022"
    megatron_core = "megatron-core"
    deepspeed = "deepspeed"


class OverlapName(str, Enum):
    tp = "tp"
    cp = "cp"
    ep = "ep"
    pp = "pp"
    dp = "dp"
    tp_backward = "tp-backward"
    none = "none"


RECIPES = {"megatron": device.MEGATRON, "zero": device.ZERO}
TrainSeqOpt = Annotated[Optional[int], typer.Option("--seq", "-s", min=1,
                                                    help="Tokens per sequence. Default: 2048, or max_seq_len "
                                                         "if shorter.")]
TrainDtypeOpt = Annotated[TrainDtype, typer.Option("--dtype", metavar="DTYPE",
                                                   help="Compute dtype of the matmuls: bf16, fp16, fp8.")]
RecipeOpt = Annotated[Optional[RecipeName], typer.Option(
    "--recipe", metavar="RECIPE", help="megatron: fp16/bf16 weights, fp32 gradients, fp32 master + Adam "
    "(18 B/param); zero: bf16 gradients (16 B/param). Default: megatron, or the --engine's.")]
EngineOpt = Annotated[Optional[EngineName], typer.Option(
    "--engine", metavar="ENGINE", help="The framework that runs the step, where it changes it (its "
    "overlaps, pipeline schedule and sends, kernels, recipe, and the layouts it can run; docs/parallel.md): "
    "megatron-2021 (Narayanan et al. 2021: every TP all-reduce exposed, no SP, fp16 gradients), "
    "megatron-2022 (Korthikanti et al. 2022), megatron-core (TP, DP and interleaved PP communication "
    "overlapped, flash), deepspeed (PipelineEngine: 1F1B, no interleaving, whole-tensor sends, ZeRO <= 1 "
    "with PP). --overlap, --kernels and --recipe override its choices. Default: none (Megatron-LM of 2022's "
    "overlaps, flash kernels, every layout).")]
OverlapOpt = Annotated[Optional[list[OverlapName]], typer.Option(
    "--overlap", metavar="KIND", help="Communication that hides behind compute (repeatable): tp, cp, ep, pp, "
    "dp, tp-backward, or none. Default: what Megatron-LM ran in Korthikanti et al. 2022: tp-backward (the "
    "column-parallel linears' backward collectives beside their GEMMs) and cp.")]


def _overlap(names: list[OverlapName] | None) -> Overlap | None:
    """``--overlap``'s set, None when not given (the engine's, or ``Overlap()``)."""
    if not names:
        return None
    chosen = {n.value for n in names} - {"none"}
    return Overlap(**{k.replace("-", "_"): k in chosen for k in ("tp", "cp", "ep", "pp", "dp",
                                                                 "tp-backward")})


def _kernels(name: KernelsName | None) -> Kernels | None:
    """``--kernels``' set, None for the cluster's default (``runtime.kernels``: flash on GPUs)."""
    return KERNELS[name.value] if name is not None else None


def _engine(name: EngineName | None) -> Engine | None:
    return ENGINES[name.value] if name is not None else None


def _recipe(name: RecipeName | None) -> device.ParameterBytes | None:
    return RECIPES[name.value] if name is not None else None


def _seq(spec: Spec, seq: int | None) -> int:
    return seq if seq is not None else default_seq(spec, "train")


@app.command("train")
def train_cmd(
    spec: SpecArg,
    cluster: ClusterOpt,
    gpus: GpusOpt,
    global_batch: GlobalBatchOpt,
    micro_batch: Annotated[int, typer.Option("--micro-batch", "-m", help="Sequences per micro-batch.")] = 1,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel stages.")] = 1,
    dp: Annotated[Optional[int], typer.Option(
        "--dp", help="Data-parallel size. Default: N / (TP x PP x CP).")] = None,
    cp: Annotated[int, typer.Option("--cp", help="Context-parallel size (ring attention).")] = 1,
    ep: Annotated[int, typer.Option(
        "--ep", help="Expert-parallel size (mixture-of-experts specs), within DP x CP.")] = 1,
    interleave: Annotated[int, typer.Option("--interleave", "-v",
                                            help="Model chunks per pipeline device (interleaved 1F1B).")] = 1,
    edge_chunks: Annotated[bool, typer.Option(
        "--edge-chunks", help="Count the embedding and the head as one layer each when splitting the "
        "layers into stages or chunks (Megatron-Core's --account-for-embedding/loss-in-pipeline-split): "
        "Llama 3 405B's 126 layers on PP 16 x v 8.")] = False,
    recompute: Annotated[Recompute, typer.Option("--recompute", metavar="MODE",
                                                 help="Activation recomputation: none, selective (the "
                                                      "attention core), full.")] = Recompute.none,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", "--sp",
                                                    help="Split norms, dropout and residuals along the "
                                                         "sequence over the TP ranks.")] = False,
    zero: Annotated[int, typer.Option(
        "--zero", help="ZeRO stage over the data-parallel ranks: 0, 1, 2 or 3 (FSDP).")] = 0,
    tokens: Annotated[Optional[float], typer.Option("--tokens",
                                                    help="Training tokens D: prints the time and GPU-hours "
                                                         "to train on them (e.g. 3e11).")] = None,
    seq: TrainSeqOpt = None,
    dtype: TrainDtypeOpt = TrainDtype.bf16,
    recipe: RecipeOpt = None,
    engine: EngineOpt = None,
    overlap: OverlapOpt = None,
    kernel_names: KernelsOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Draw the step as a waterfall (compute by "
                                                "component, each collective, the bubble) into this file "
                                                "(.svg, .png, .pdf).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """One training step on a parallel layout: where its time goes (compute by component, each
    collective, the pipeline bubble), MFU and HFU, tokens/s, and the memory per GPU."""
    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            plot_path(plot)
        check_number("--tokens", tokens, 1e18)  # a quintillion tokens: 60x the largest training sets
        s = catalog.load(spec)
        cl = load_cluster(cluster)
        if gpus < 1:
            raise LayoutError(f"--gpus: must be at least 1 (got {gpus})")
        if dp is None:
            inner = tp * pp * cp
            if inner < 1 or gpus % inner:
                # The spec's own limits (heads, layers) first: they name the option to change.
                check(Layout(global_batch, micro_batch, tp, pp, 1, cp, 1, interleave), s)
                raise LayoutError(f"--gpus: {gpus} GPUs are not a multiple of TP {tp} x PP {pp} x CP {cp} = "
                                  f"{inner}")
            dp = gpus // inner
        layout = Layout(global_batch, micro_batch, tp, pp, dp, cp, ep, interleave, sequence_parallel,
                        recompute, zero, edge_chunks)
        check(layout, s, gpus, _seq(s, seq))
        model = StepModel(s, cl, _seq(s, seq), dtype.value, _recipe(recipe), _overlap(overlap),
                          _kernels(kernel_names), _engine(engine))
        step = model.step(layout)
        written = save_plot(report_cluster.waterfall_section(step).chart, plot) if plot is not None else None
    emit(fmt, lambda: [report_parallel.summary_table(step, tokens), report_parallel.breakdown_table(step),
                       report_parallel.collectives_table(step), report_parallel.memory_table(step)],
         lambda: step.to_dict(tokens), s)
    if written:  # beside the table, JSON or CSV: on stderr, as every command says what it wrote
        typer.echo(f"wrote {written}", err=True)
    if not step.fits:  # printed in full, so the user sees where the memory goes; exit 1: it cannot run
        typer.echo(f"error: {step.layout.label()} does not fit: {units.decimal_bytes(step.per_gpu.total)} "
                   f"a GPU ({step.per_gpu.stage} stage) on {units.decimal_bytes(cl.hardware.memory_bytes)} "
                   "GPUs", err=True)
        raise typer.Exit(1)


@app.command("plan")
def plan_cmd(
    spec: SpecArg,
    cluster: ClusterOpt,
    gpus: GpusOpt,
    global_batch: GlobalBatchOpt,
    seq: TrainSeqOpt = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Layouts to show.")] = 10,
    max_micro_batch: Annotated[int, typer.Option("--max-micro-batch", min=1,
                                                 help="Largest micro-batch tried.")] = 16,
    cp: Annotated[Optional[list[int]], typer.Option("--cp",
                                                    help="Context-parallel sizes to try (repeatable). "
                                                         "Default: 1.")] = None,
    dtype: TrainDtypeOpt = TrainDtype.bf16,
    recipe: RecipeOpt = None,
    engine: EngineOpt = None,
    overlap: OverlapOpt = None,
    kernel_names: KernelsOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Draw the layouts searched, step time "
                                                "against memory per GPU, into this file (.svg, .png, "
                                                ".pdf); those that do not fit are stepped too.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Search every valid layout (TP, PP, DP, EP, micro-batch, interleave, recompute, SP, ZeRO),
    drop those that do not fit, and rank the rest by step time."""
    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            plot_path(plot)
        s = catalog.load(spec)
        cl = load_cluster(cluster)
        if gpus < 1 or global_batch < 1:
            raise LayoutError(f"--gpus and --global-batch: must be at least 1 (got {gpus}, {global_batch})")
        model = StepModel(s, cl, _seq(s, seq), dtype.value, _recipe(recipe), _overlap(overlap),
                          _kernels(kernel_names), _engine(engine))
        start = time.perf_counter()
        result = plan(model, gpus, global_batch, unfit=plot is not None, cps=tuple(cp or (1,)),
                      max_micro_batch=max_micro_batch)
        elapsed = time.perf_counter() - start
        written = None
        if plot is not None and (result.ranked or result.unfit):
            written = save_plot(report_cluster.layouts_section(result, top).chart, plot)
    why = (f"no layout of {s.name} fits on {gpus} GPUs of {cl.name} ({result.considered} valid layouts, all "
           f"over {units.decimal_bytes(cl.hardware.memory_bytes)})" if result.considered else
           f"no valid layout of {s.name} on {gpus} GPUs with global batch {global_batch} (the GPUs, heads, "
           "layers and batch divide into none)")
    if fmt is Format.table and not result.ranked:
        typer.echo(why)
    else:
        emit(fmt, lambda: [report_parallel.plan_table(result, top, elapsed)], lambda: {
            "spec": s.name, "cluster": cl.name, "gpus": gpus, "global_batch": global_batch, "seq": model.seq,
            "engine": model.engine.name if model.engine else None,
            "kernels": kernels_dict(model.kernels, is_default(model.kernels, cl.hardware, "train")),
            "considered": result.considered, "dropped": result.dropped, "fitting": len(result.ranked),
            "seconds": elapsed, **Reads.union(result.ranked[:top]).to_dict(),
            "layouts": [st.to_dict() for st in result.ranked[:top]]}, s)
    if written:  # beside the table, JSON or CSV: on stderr, as every command says what it wrote
        typer.echo(f"wrote {written}", err=True)
    if not result.ranked:  # said in every format; exit 1: nothing can run
        typer.echo(f"error: {why}", err=True)
        raise typer.Exit(1)


@app.command("serve")
def serve_cmd(
    spec: SpecArg,
    cluster: ClusterOpt,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")] = 8,
    ep: Annotated[int, typer.Option("--ep", help="Expert-parallel size (mixture-of-experts specs).")] = 1,
    batch: Annotated[str, typer.Option("--batch", "-b",
                                       help="Sequences decoding together; a list such as 1,8,64.")] = "1",
    context: Annotated[Optional[int], typer.Option(
        "--seq", "-s", help="Tokens already cached per sequence. Default: 2048, or one less than the "
        "spec's context if shorter (the new token's position must be one it has).")] = None,
    dtype: Annotated[TrainDtype, typer.Option(
        "--dtype", metavar="DTYPE", help="Weights, activations and KV cache dtype: bf16, fp16, fp8.")
    ] = TrainDtype.bf16,
    mla: MlaDeviceOpt = None,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    kernel_names: KernelsOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Draw TPOT, its compute and its "
                                                "communication against batch into this file (.svg, .png, "
                                                ".pdf).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Decode at scale: per-token communication, time per output token (TPOT) and memory per GPU
    of TP (and EP) ranks. With --ep, the GPUs are EP attention replicas of TP ranks each, the
    batch split over the replicas and the routed experts over the EP ranks."""
    from costmodel.report import files

    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            files.plot_path(plot)
        s = catalog.load(spec)
        cl = load_cluster(cluster)
        batches = parse_batches(batch, "--batch")
        widths = Widths(weights_dtype, kv_dtype, group_size)
        if context is None:  # 2048 cached, or one less than the spec's positions: the new token needs one
            context = min(DEFAULT_SEQ, s.max_seq_len - 1)
        results = [decode(s, cl, tp, b, context, ep, dtype.value, mla.value if mla else None, widths,
                          _kernels(kernel_names)) for b in batches]
        if plot is not None:
            from costmodel.report.serving_figures import decode_chart

            written = files.save_plot(decode_chart(results), plot)
    emit(fmt, lambda: [report_parallel.decode_table(results)],
         lambda: {"spec": s.name, "cluster": cl.name, **Reads.union(results).to_dict(),
                  "results": [d.to_dict() for d in results]}, s)
    if plot is not None:  # beside the table, JSON or CSV: on stderr, as every command says what it wrote
        typer.echo(f"wrote {written}", err=True)
    if not any(d.fits for d in results):  # printed in full; exit 1: no batch asked for can run
        where = f"TP{tp}" + (f" EP{ep}" if ep and ep > 1 else "")
        typer.echo(f"error: {s.name} does not fit on {where} {cl.hardware.name}s at any batch asked for "
                   "(memory/GPU above)", err=True)
        raise typer.Exit(1)


@app.command("clusters")
def clusters_cmd(fmt: FormatOpt = Format.table) -> None:
    """The cluster profiles: bundled ones and those in the user folder."""
    with _user_errors():
        found = [load_cluster(str(p)) for p in cluster_paths().values()]
    rows = [(c.name, c.device, str(c.gpus_per_node), units.bandwidth(c.intra_node.bandwidth),
             units.bandwidth(c.intra_node.bus_bandwidth), units.bandwidth(c.inter_node.bandwidth),
             units.bandwidth(c.inter_node.bus_bandwidth)) for c in found]
    table = report.Table("Clusters", ("cluster", "device", "GPUs/node", "NVLink", "busbw", "network/GPU",
                                      "busbw"),
                         rows,
                         ("per GPU per direction; busbw: what NCCL reaches (nccl-tests), sources in each "
                          "profile",),
                         numeric_from=2)
    emit(fmt, [table], lambda: [c.model_dump() for c in found], "Cluster profiles")
