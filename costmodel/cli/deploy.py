"""`costmodel deploy`: the best deployment of N GPUs under latency targets, aggregated or (with
``--disaggregated``) prefill and decode pools apart. Parse, call ``costmodel.deploy.search`` (or
``costmodel.deploy.disagg.search_all``), render."""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from typing import Annotated, Optional

import typer

from costmodel import catalog
from costmodel.cli.app import (
    Dtype,
    DtypeOpt,
    Format,
    FormatOpt,
    GroupSizeOpt,
    KernelsOpt,
    KvDtypeOpt,
    MlaDeviceOpt,
    SpecArg,
    WeightsDtypeOpt,
    _user_errors,
    app,
    emit,
)
from costmodel.deploy import DEFAULT_BATCHES, DEFAULT_TOKENS
from costmodel.parallel.cluster import load_cluster
from costmodel.precision import DEFAULT_GROUP, Widths
from costmodel.report import deploy as report_deploy
from costmodel.report import files
from costmodel.report import tables as report
from costmodel.report.serving_figures import deploy_chart
from costmodel.runtime import kernels
from costmodel.runtime.serving import parse_batches


class ServingEngine(str, Enum):
    """``deploy.engine.ENGINES``' names (a literal here: the model imports numpy)."""

    vllm = "vllm"
    trtllm = "trtllm"


BATCHES = ",".join(map(str, DEFAULT_BATCHES))
LENGTHS = "a number (1024), a range lo..hi (uniform), or a histogram file (CSV length,weight or JSON)"


@app.command("deploy")
def deploy_cmd(
    spec: SpecArg,
    cluster: Annotated[str, typer.Option("--cluster", help="A cluster profile: dgx-a100-80gb, dgx-h100, "
                                         "dgx-h200, gb200-nvl72, or a YAML file (`costmodel clusters`).")],
    gpus: Annotated[int, typer.Option("--gpus", "-n", help="GPUs in all: replicas x TP x EP.")],
    prompt: Annotated[str, typer.Option("--seq", "-s", help=f"Prompt tokens per request (ISL): {LENGTHS}.")],
    output: Annotated[str, typer.Option("--output-tokens",
                                        help=f"Generated tokens per request (OSL): {LENGTHS}.")],
    ttft: Annotated[Optional[float], typer.Option("--ttft", help="Target time to first token, seconds, at "
                                                  "--percentile.")] = None,
    tpot: Annotated[Optional[float], typer.Option("--tpot", help="Target time per output token, seconds, at "
                                                  "--percentile.")] = None,
    percentile: Annotated[int, typer.Option("--percentile", help="The percentile the targets hold at: 50, "
                                            "90 or 99.")] = 90,
    concurrency: Annotated[Optional[int], typer.Option(
        "--concurrency", help="Requests in flight across the deployment (closed loop). Default: each "
        "engine at its max batch (the max-throughput run).")] = None,
    rate: Annotated[Optional[float], typer.Option("--rate", help="Requests per second arriving "
                                                  "(open loop), instead of --concurrency.")] = None,
    batch: Annotated[str, typer.Option("--batch", "-b", help="The engine's max batch (sequences in flight "
                                       "per engine), a list searched over.")] = BATCHES,
    max_tokens: Annotated[str, typer.Option("--max-num-tokens", help="The engine's token budget per step "
                                            "(the chunked-prefill chunk), a list searched over.")
                          ] = ",".join(map(str, DEFAULT_TOKENS)),
    engine_name: Annotated[ServingEngine, typer.Option(
        "--engine", metavar="ENGINE", help="The serving framework, where it changes the model "
        "(docs/serving.md): vllm (pages of 16 tokens, 0.9 of the device, chunked prefill, its fp8-cache "
        "kernel as measured) or trtllm (TensorRT-LLM: pages of 32, 0.9 of the free memory, whole "
        "prompts, an fp8 cache read natively).")] = ServingEngine.vllm,
    block: Annotated[Optional[int], typer.Option("--block-size", help="KV-cache page, tokens. Default: the "
                                                 "--engine's (vLLM 16, TensorRT-LLM 32).")] = None,
    memory_fraction: Annotated[Optional[float], typer.Option(
        "--gpu-memory-utilization", help="Share of device memory the engine holds (of the memory left "
        "free for trtllm). Default: 0.9.")] = None,
    prefix_sharing: Annotated[float, typer.Option("--prefix-sharing", help="Share of each prompt found in "
                                                  "the prefix cache.")] = 0.0,
    disaggregated: Annotated[bool, typer.Option(
        "--disaggregated", help="Also search prefill and decode pools apart (xPyD: x prefill engines, y "
        "decode engines, each its own TP/EP), the KV cache sent between them over the cluster's link.")
    ] = False,
    redundant: Annotated[int, typer.Option(
        "--redundant-experts", help="Redundant expert slots (replicas of the hottest experts, DeepSeek's "
        "EPLB) beside the routed experts on the EP ranks: each holds at most ceil((E + R) / EP).")] = 0,
    price: Annotated[Optional[float], typer.Option("--price", help="Dollars per GPU-hour: the cost of a "
                                                   "million output tokens.")] = None,
    dtype: DtypeOpt = Dtype.bf16,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    kernel_names: KernelsOpt = None,
    mla: MlaDeviceOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Draw tokens/s per GPU against tokens/s per "
                                                "user, every deployment and the Pareto front, into this file "
                                                "(.svg, .png, .pdf).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Serving as deployed: every aggregated deployment (TP, EP, replicas, max batch, token budget)
    in the steady state of continuous batching with chunked prefill and paged KV, and with
    --disaggregated every xPyD split into prefill and decode pools, ranked by output tokens/s per
    GPU under TTFT and TPOT targets, with the Pareto front and the cost."""
    # The model imports numpy: loaded here, not with the CLI (`costmodel analyze` never loads it).
    from costmodel.deploy.disagg import search_all
    from costmodel.deploy.engine import ENGINES
    from costmodel.deploy.search import Targets, search
    from costmodel.deploy.workload import Workload, parse_lengths

    with _user_errors():
        if plot is not None:  # before the work: a bad file name is bad input, not an error after it
            files.plot_path(plot)
        s = catalog.load(spec)
        cl = load_cluster(cluster)
        workload = Workload(parse_lengths(prompt, "--seq"), parse_lengths(output, "--output-tokens"),
                            concurrency, rate)
        hw = cl.hardware
        chosen = kernels.resolve(kernel_names.value if kernel_names else None, hw, "serve")
        find = search_all if disaggregated else search
        preset = ENGINES[engine_name.value]
        engine = replace(preset, prefix_sharing=prefix_sharing,
                         block=preset.block if block is None else block,
                         memory_fraction=(preset.memory_fraction if memory_fraction is None
                                          else memory_fraction))
        r = find(s, cl, gpus, workload, engine,
                 parse_batches(batch, "--batch"), parse_batches(max_tokens, "--max-num-tokens"),
                 Targets(ttft, tpot, percentile), dtype.value, Widths(weights_dtype, kv_dtype, group_size),
                 kernels.KERNELS[chosen], mla.value if mla else None, price, redundant)
        written = files.save_plot(deploy_chart(r), plot) if plot is not None else None
    emit(fmt, lambda: report_deploy.deploy_tables(r), r.to_dict, r.spec,
         csv=lambda: report.records_csv([d.to_dict() for d in r.deployments]))
    if written:  # beside the table, JSON or CSV: on stderr, as every command says what it wrote
        typer.echo(f"wrote {written}", err=True)
    why = r.unmet()
    if why:  # printed in full; exit 1: nothing runs as asked
        typer.echo(f"error: {why}", err=True)
        raise typer.Exit(1)
