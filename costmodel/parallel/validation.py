"""Published training runs set beside this model's steps: two sets of Megatron-LM runs on DGX
A100 80GB; on H100s Llama 3 405B's pre-training, MosaicML's MPT benchmarks and Megatron-Core's
weak scaling.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198), measured with Megatron-LM on DGX A100 80GB, seq 2048, vocab 51200, fp16: the
four models of Table 3 with their layouts, Table 5's seconds per iteration and Figure 1's GiB
per GPU, set beside this model's figures, with Megatron-LM's kernels of the time
(``--kernels megatron-2022``: no flash attention).

Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC21, arXiv:2104.04473), Table 1: ten GPT models of 1.7B to 1T parameters, their
achieved teraFLOP/s per GPU on up to 3072 A100s, run with ``--engine megatron-2021``. Their
layouts (micro-batch, interleaving, the DDP implementation) are the paper's own scripts,
NVIDIA/Megatron-LM@de7dc40 examples/sc21/run_table_1.sh: full recompute
(``--checkpoint-activations``), fp16, seq 2048, vocabulary 51200.

Dubey et al. 2024 ("The Llama 3 Herd of Models", arXiv:2407.21783), Table 4: Llama 3 405B's
pre-training on 8,192 and 16,384 H100 80GB GPUs, bf16, with its layouts and the achieved
TFLOP/s per GPU; section 3.3.2 for how it ran (an interleaved pipeline with one layer fewer on
the first and last stage, no activation checkpointing at 8K, FSDP outermost with its weights
prefetched and its gradients reduced asynchronously, asynchronous pipeline sends).

Megatron-LM's H100 weak-scaling table (NVIDIA/Megatron-LM README, ``images/model_table.png``,
added at f2e5db4, "New scaling figures on H100 GPUs", Megatron-Core r0.8.0): nine GPT models of
1.7B to 462B parameters on 48 to 6,144 H100s, bf16, seq 4096, vocabulary 131,072, every overlap
Megatron-Core has (``--engine megatron-core``), with the per-GPU teraFLOP/s achieved.

The papers' numbers are typed here once, from the papers and that script; docs/parallel.md and
tests/test_parallel_validation.py read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel import catalog
from costmodel.analysis import analyze
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.device import MEGATRON_KERNELS
from costmodel.parallel.engine import ENGINES, Overlap
from costmodel.parallel.layout import Layout, Recompute
from costmodel.parallel.step import Step, StepModel
from costmodel.spec import Spec, spec_from_dict

GiB = 2**30


@dataclass(frozen=True)
class Measured:
    spec: str
    tp: int
    pp: int
    gpus: int
    global_batch: int
    micro_batch: int
    interleave: int
    full_s: float  # Table 5: full recompute, seconds per iteration
    selective_sp_s: float  # Table 5: selective recompute + sequence parallel ("present work")
    params_optimizer_gib: float  # Figure 1: parameters + optimizer states, GiB per GPU
    activations_gib: float  # Figure 1: activations, no recompute and no SP
    activations_sp_selective_gib: float  # Figure 1: activations with SP + selective recompute


PAPER = (
    Measured("megatron-22b", 8, 1, 8, 4, 4, 1, 1.42, 1.10, 45.56, 59.25, 9.56),
    Measured("megatron-175b", 8, 8, 64, 64, 1, 3, 18.13, 13.75, 45.56, 66.84, 12.35),
    Measured("megatron-530b", 8, 35, 280, 280, 1, 3, 49.05, 37.83, 31.64, 114.02, 23.08),
    Measured("megatron-1t", 8, 64, 512, 512, 1, 1, 94.42, 71.49, 32.96, 131.25, 26.56),
)


@dataclass(frozen=True)
class Comparison:
    paper: Measured
    full: Step
    selective_sp: Step
    none: Step
    layers_params_optimizer_bytes: float  # the first stage's transformer layers only, as Figure 1 counts
    layers_activations_bytes: float  # the first stage's layers' activations, no recompute or SP
    layers_activations_sp_selective_bytes: float  # the same with SP + selective recompute

    def errors(self) -> dict[str, float]:
        """Relative error of ours against the paper, per figure."""
        p = self.paper
        return {
            "full_s": self.full.step_time_s / p.full_s - 1,
            "selective_sp_s": self.selective_sp.step_time_s / p.selective_sp_s - 1,
            "params_optimizer": self.layers_params_optimizer_bytes / GiB / p.params_optimizer_gib - 1,
            "activations": self.layers_activations_bytes / GiB / p.activations_gib - 1,
            "activations_sp_selective": self.layers_activations_sp_selective_bytes / GiB
            / p.activations_sp_selective_gib - 1,
        }


def compare(m: Measured, cluster: str = "dgx-a100-80gb") -> Comparison:
    # Megatron-LM as the paper ran it: the scores written and kept (no flash attention), fused
    # scale-mask-softmax and bias-dropout-add; not the flash attention a GPU's default assumes.
    model = StepModel(catalog.load(m.spec), load_cluster(cluster), seq=2048, dtype="fp16",
                      kernels=MEGATRON_KERNELS)
    dp = m.gpus // (m.tp * m.pp)

    def layout(sp: bool, rc: Recompute) -> Layout:
        return Layout(m.global_batch, m.micro_batch, m.tp, m.pp, dp, 1, 1, m.interleave, sp, rc, 0)

    none = model.step(layout(False, Recompute.none))
    mb = model.micro(m.tp, m.micro_batch, 1, False, Recompute.none)
    per_stage = (model.spec.n_layers or 0) // m.pp
    layers = per_stage * mb.layer_params * model.recipe.state_bytes
    # Figure 1 counts the layers of the first stage: p micro-batches in flight, x (1 + (p-1)/(pv)).
    in_flight = min(m.global_batch // (dp * m.micro_batch), m.pp) * (
        1 + (m.pp - 1) / (m.pp * m.interleave) if m.interleave > 1 else 1)

    def acts(sp: bool, rc: Recompute) -> float:
        return model._activations(m.tp, m.micro_batch, 2048, sp, rc).per_layer * per_stage * in_flight

    return Comparison(m, model.step(layout(False, Recompute.full)), model.step(layout(True,
                                                                                      Recompute.selective)),
                      none, layers, acts(False, Recompute.none), acts(True, Recompute.selective))


def compare_all() -> list[Comparison]:
    return [compare(m) for m in PAPER]


def markdown(comparisons: list[Comparison]) -> str:
    """The comparison tables docs/parallel.md shows: `python -m costmodel.parallel.validation`."""
    out = ["| model | layout | full recompute: paper | ours | error | selective + SP: paper | ours | error |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    errs: list[float] = []
    for c in comparisons:
        p, e = c.paper, c.errors()
        errs += [abs(e["full_s"]), abs(e["selective_sp_s"])]
        out.append(f"| {p.spec} | TP{p.tp} PP{p.pp} v{p.interleave}, {p.gpus} GPUs, G {p.global_batch}, b "
                   f"{p.micro_batch} "
                   f"| {p.full_s:.2f} s | {c.full.step_time_s:.2f} s | {100 * e['full_s']:+.1f}% "
                   f"| {p.selective_sp_s:.2f} s | {c.selective_sp.step_time_s:.2f} s | "
                   f"{100 * e['selective_sp_s']:+.1f}% |")
    out.append(f"\nTime: mean |error| {100 * sum(errs) / len(errs):.1f}%, worst {100 * max(errs):.1f}%.\n")
    out += ["| model | params + optimizer: paper | ours | error | activations: paper | ours | error "
            "| SP + selective: paper | ours | error |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    acts: list[float] = []
    for c in comparisons:
        p, e = c.paper, c.errors()
        acts += [abs(e["activations"]), abs(e["activations_sp_selective"])]
        out.append(f"| {p.spec} | {p.params_optimizer_gib:.2f} | {c.layers_params_optimizer_bytes / GiB:.2f} "
                   f"| {100 * e['params_optimizer']:+.2f}% | {p.activations_gib:.2f} | "
                   f"{c.layers_activations_bytes / GiB:.2f} "
                   f"| {100 * e['activations']:+.2f}% | {p.activations_sp_selective_gib:.2f} "
                   f"| {c.layers_activations_sp_selective_bytes / GiB:.2f} | "
                   f"{100 * e['activations_sp_selective']:+.2f}% |")
    out.append(f"\nActivations: mean |error| {100 * sum(acts) / len(acts):.2f}%, worst "
               f"{100 * max(acts):.2f}% (GiB per GPU, first stage).")
    return "\n".join(out)


@dataclass(frozen=True)
class Weak:
    """One row of Narayanan et al. 2021, Table 1, with its run's settings from
    examples/sc21/run_table_1.sh (NVIDIA/Megatron-LM@de7dc40)."""

    params_b: float  # Table 1: parameters, billions (the model's name)
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    micro_batch: int  # MBS
    interleave: int  # NLS / (PP x --num-layers-per-virtual-pipeline-stage); 1 without it
    torch_ddp: bool  # --DDP-impl torch: the gradient all-reduce overlaps the backward
    tflops: float  # Table 1: achieved teraFLOP/s per GPU

    def spec(self) -> Spec:
        """Megatron-LM's GPT at this size: pre-LayerNorm, a GeLU MLP of 4h, learned positions, tied
        embeddings, biases, dropout 0.1 (as ``specs/megatron-175b.yaml``)."""
        h = self.hidden
        return spec_from_dict({
            "name": f"megatron-gpt-{self.params_b:g}b", "family": "megatron-gpt", "year": 2021,
            "d_model": h, "n_layers": self.layers, "n_heads": self.heads, "d_ff": 4 * h,
            "vocab_size": VOCAB, "max_seq_len": SEQ, "norm": "layernorm", "norm_position": "pre",
            "activation": "gelu", "position": "learned", "bias": {"qkv": True, "attn_out": True, "ffn": True},
            "tied_embeddings": True, "dropout": 0.1})

    def paper_flops(self) -> float:
        """FLOPs per iteration as the paper counts them (section 5.1: 96 B s l h^2 (1 + s/6h +
        V/16lh), full recompute's extra forward included)."""
        s, l, h = SEQ, self.layers, self.hidden
        return 96 * self.global_batch * s * l * h * h * (1 + s / (6 * h) + VOCAB / (16 * l * h))

    @property
    def paper_s(self) -> float:
        """The iteration the achieved teraFLOP/s imply."""
        return self.paper_flops() / (self.tflops * 1e12 * self.gpus)


SEQ, VOCAB = 2048, 51200
NARAYANAN = (
    Weak(1.7, 24, 2304, 24, 1, 1, 32, 512, 16, 1, True, 137),
    Weak(3.6, 32, 3072, 30, 2, 1, 64, 512, 16, 1, True, 138),
    Weak(7.5, 32, 4096, 36, 4, 1, 128, 512, 16, 1, True, 142),
    Weak(18.4, 48, 6144, 40, 8, 1, 256, 1024, 8, 1, True, 135),
    Weak(39.1, 64, 8192, 48, 8, 2, 512, 1536, 4, 1, False, 138),
    Weak(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 2, 3, False, 140),
    Weak(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 2, 2, False, 148),
    Weak(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 1, 2, False, 155),
    Weak(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 1, 3, False, 163),
    Weak(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 1, 1, False, 163),
)


def weak_step(w: Weak, engine: str = "megatron-2021", cluster: str = "dgx-a100-80gb") -> Step:
    """The step of one Table 1 run on `engine`'s preset; ``--DDP-impl torch`` overlaps the gradient
    all-reduce with the backward (PyTorch DDP's buckets), the local DDP waits for it."""
    eng = ENGINES[engine]
    overlap = Overlap(**(eng.overlap.to_dict() | {"dp": True})) if w.torch_ddp else None
    model = StepModel(w.spec(), load_cluster(cluster), seq=SEQ, dtype="fp16", overlap=overlap, engine=eng)
    dp = w.gpus // (w.tp * w.pp)
    return model.step(Layout(w.global_batch, w.micro_batch, w.tp, w.pp, dp, 1, 1, w.interleave, False,
                             Recompute.full, 0))


def weak_markdown(engine: str = "megatron-2021") -> str:
    """Table 1 against this model: ``python -m costmodel.parallel.validation``."""
    out = ["| model | layout | GPUs | G, b | paper: TFLOP/s | s | ours: TFLOP/s | s | error (time) |",
           "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    errs: list[float] = []
    for w in NARAYANAN:
        st = weak_step(w, engine)
        ours = w.paper_flops() / st.step_time_s / w.gpus / 1e12
        err = st.step_time_s / w.paper_s - 1
        errs.append(err)
        ddp = ", torch DDP" if w.torch_ddp else ""
        out.append(f"| {w.params_b:g}B | TP{w.tp} PP{w.pp} v{w.interleave}{ddp} | {w.gpus} | "
                   f"{w.global_batch}, {w.micro_batch} | {w.tflops:g} | {w.paper_s:.2f} | {ours:.0f} | "
                   f"{st.step_time_s:.2f} | {100 * err:+.1f}% |")
    mean = sum(abs(e) for e in errs) / len(errs)
    out.append(f"\nTime ({engine}): mean |error| {100 * mean:.1f}%, worst {100 * max(map(abs, errs)):.1f}%.")
    return "\n".join(out)


@dataclass(frozen=True)
class Production:
    """One row of Dubey et al. 2024, Table 4 (Llama 3 405B on H100 80GB, bf16, 16M tokens a step)."""

    gpus: int
    tp: int
    cp: int
    pp: int
    dp: int
    seq: int
    batch_per_dp: int  # sequences per DP rank per step
    tflops: float  # Table 4: TFLOP/s per GPU
    mfu: float  # Table 4: BF16 MFU

    def layout(self) -> Layout:
        """The paper's layout as section 3.3.2 describes it: micro-batches of one sequence, an
        interleaved schedule of 8 chunks a device with the embedding and the head counted as a
        layer each (one layer fewer on the first and last stage), sequence parallel beside TP, no
        activation checkpointing; FSDP's gradients and optimizer states sharded over DP, its
        weights not ("for model shards we do not reshard after forward computation"): ZeRO-2."""
        return Layout(self.batch_per_dp * self.dp, 1, self.tp, self.pp, self.dp, self.cp, 1, 8, True,
                      Recompute.none, 2, True)

    def error(self, step: Step, flops: float) -> float:
        """Our step time against the one the paper's rate implies for `flops` a step (the dense
        count, ``Step.model_flops``, or ``causal_flops``)."""
        return step.step_time_s / (flops / (self.tflops * 1e12 * self.gpus)) - 1


LLAMA3 = (
    Production(8192, 8, 1, 16, 64, 8192, 32, 430, 0.43),
    Production(16384, 8, 1, 16, 128, 8192, 16, 400, 0.41),
    Production(16384, 8, 16, 16, 8, 131072, 16, 380, 0.38),
)
#: What section 3.3.2 says overlaps: FSDP (outermost) prefetches weights and reduces gradients
#: asynchronously, the pipeline's point-to-point sends are asynchronous; Megatron-LM's column-
#: parallel backward collectives as in every other step.
LLAMA3_OVERLAP = Overlap(dp=True, pp=True)


def production_step(r: Production, cluster: str = "dgx-h100") -> Step:
    """The step of one Table 4 row: llama-3.1-405b, bf16, the device's default kernels (flash)."""
    model = StepModel(catalog.load("llama-3.1-405b"), load_cluster(cluster), seq=r.seq, dtype="bf16",
                      overlap=LLAMA3_OVERLAP)
    return model.step(r.layout())


def causal_flops(step: Step) -> float:
    """The step's model FLOPs with the masked half of causal attention left out (``flops_matmul_effective``),
    the other convention a published TFLOP/s may use."""
    a = analyze(step.spec, "train", batch=1, seq=step.seq, dtype=step.dtype).total()
    return step.model_flops * (a.flops_matmul_effective + a.flops_other) / a.flops


def production_markdown() -> str:
    """Table 4 against this model: ``python -m costmodel.parallel.validation``."""
    out = ["| GPUs | layout | seq | paper: TFLOP/s | ours | error (time) | ours, causal | error (time) "
           "| memory/GPU |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in LLAMA3:
        st = production_step(r)
        dense, causal = st.model_flops, causal_flops(st)
        rate = st.step_time_s * r.gpus * 1e12  # FLOPs a step over it: TFLOP/s a GPU
        out.append(f"| {r.gpus:,} | TP{r.tp} CP{r.cp} PP{r.pp} DP{r.dp} v{r.layout().interleave}, "
                   f"{r.batch_per_dp} a DP rank | {r.seq:,} | {r.tflops:g} | {dense / rate:.0f} "
                   f"| {r.error(st, dense):+.1%} | {causal / rate:.0f} | {r.error(st, causal):+.1%} "
                   f"| {st.memory.total / GiB:.0f} GiB |")
    return "\n".join(out)


@dataclass(frozen=True)
class Foundry:
    """One row of MosaicML's MPT training benchmarks on H100 80GB, bf16 (mosaicml/llm-foundry,
    scripts/train/benchmarking/README.md at 061f2c7, "H100 80GB BF16"): one node's 8 GPUs (16
    for the 3B), Composer's FSDP FULL_SHARD (ZeRO-3), the model of scripts/train/yamls/pretrain/
    mpt-*.yaml (MPTConfig's defaults: biases, LayerNorm with bias, learned positions, tied
    embeddings, GeLU 4d, vocabulary 50,368, Triton flash attention)."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    seq: int
    gpus: int
    micro_batch: int
    global_batch: int
    checkpointing: bool
    num_params: int  # the table's NumParams (our exact count must equal it)
    tokens_per_gpu_s: float  # the table's Throughput (T/s/GPU)

    def spec(self) -> Spec:
        d = self.d_model
        return spec_from_dict({
            "name": f"mpt-{self.name}", "family": "mpt", "year": 2023, "d_model": d,
            "n_layers": self.n_layers, "n_heads": self.n_heads, "d_ff": 4 * d, "vocab_size": 50368,
            "max_seq_len": self.seq, "norm": "layernorm", "norm_position": "pre", "activation": "gelu",
            "position": "learned", "bias": {"qkv": True, "attn_out": True, "ffn": True, "norm": True},
            "tied_embeddings": True})

    def error(self, step: Step) -> float:
        """Our step time against the run's: its measured tokens/s a GPU over ours, less 1."""
        return self.tokens_per_gpu_s / self.ours(step) - 1

    def ours(self, step: Step) -> float:
        """Our tokens/s a GPU."""
        return step.tokens / step.step_time_s / self.gpus


#: The rows at 2,048 tokens without checkpointing on one node, and two with it.
FOUNDRY = (
    Foundry("1b", 2048, 24, 16, 2048, 8, 14, 112, False, 1315950592, 45455),
    Foundry("3b", 2560, 32, 20, 2048, 16, 10, 480, False, 2651837440, 24142),
    Foundry("7b", 4096, 32, 32, 2048, 8, 6, 48, False, 6658859008, 10643),
    Foundry("13b", 5120, 40, 40, 2048, 8, 2, 16, False, 12853954560, 4792),
    Foundry("7b", 4096, 32, 32, 4096, 8, 16, 256, True, 6667247616, 8611),
    Foundry("30b", 7168, 48, 56, 2048, 8, 3, 504, True, 29975214080, 2002),
)


def foundry_step(r: Foundry, cluster: str = "dgx-h100") -> Step:
    """One row's step: ZeRO-3 over the GPUs, its gradient traffic and weight gathers behind the
    compute (FSDP's prefetch, ``Overlap(dp=True)``), full recompute where it checkpoints."""
    model = StepModel(r.spec(), load_cluster(cluster), seq=r.seq, dtype="bf16", overlap=Overlap(dp=True))
    rc = Recompute.full if r.checkpointing else Recompute.none
    return model.step(Layout(r.global_batch, r.micro_batch, 1, 1, r.gpus, 1, 1, 1, False, rc, 3))


def foundry_markdown() -> str:
    """The MPT rows against this model: ``python -m costmodel.parallel.validation``."""
    out = ["| model | seq | GPUs | micro-batch | checkpointing | paper: tokens/s/GPU | ours | error (time) |",
           "|---|---:|---:|---:|---|---:|---:|---:|"]
    errs: list[float] = []
    for r in FOUNDRY:
        st = foundry_step(r)
        errs.append(r.error(st))
        out.append(f"| MPT-{r.name} | {r.seq:,} | {r.gpus} | {r.micro_batch} | "
                   f"{'yes' if r.checkpointing else 'no'} | {r.tokens_per_gpu_s:,.0f} | {r.ours(st):,.0f} "
                   f"| {errs[-1]:+.1%} |")
    out.append(f"\nTime: mean |error| {100 * sum(map(abs, errs)) / len(errs):.1f}%, "
               f"worst {100 * max(map(abs, errs)):.1f}%, every step too fast.")
    return "\n".join(out)


@dataclass(frozen=True)
class Scaling:
    """One row of Megatron-LM's H100 weak-scaling table (the module's docstring): the model, TP, PP,
    GPUs, the global batch and the per-GPU teraFLOP/s, as the table gives them. DP is 48 on every
    row. The README names the overlaps (``--overlap-grad-reduce --overlap-param-gather`` with the
    distributed optimizer they need, ``--tp-comm-overlap`` with the sequence parallelism it
    needs); it does not give the micro-batch, interleaving or recompute: one sequence, none and
    none are assumed (``layout``), and docs/parallel.md gives the figures at two sequences."""

    params_b: float  # the table's model size, billions
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    tflops: float  # the table's per-GPU teraFLOP/s

    def spec(self) -> Spec:
        """Megatron-LM's GPT with its defaults (pre-LayerNorm, a GeLU MLP of 4h, learned positions,
        biases) and untied embeddings: our exact count rounds to the table's size on every row
        (1.754B on the first, which the table calls 1.7B)."""
        h = self.hidden
        return spec_from_dict({
            "name": f"megatron-gpt-{self.params_b:g}b", "family": "megatron-gpt", "year": 2024,
            "d_model": h, "n_layers": self.layers, "n_heads": self.heads, "d_ff": 4 * h,
            "vocab_size": SCALING_VOCAB, "max_seq_len": SCALING_SEQ, "norm": "layernorm",
            "norm_position": "pre", "activation": "gelu", "position": "learned",
            "bias": {"qkv": True, "attn_out": True, "ffn": True, "norm": True}, "tied_embeddings": False})

    def paper_flops(self) -> float:
        """FLOPs a step as Megatron-LM counts them for its teraFLOP/s (megatron/training/training.py
        at f2e5db4, ``num_floating_point_operations``: 12 B s l h^2 (2 + s/h + 4 + V/2lh) for this
        GPT: the projections, the scores counted whole, the MLP, the logits)."""
        s, l, h, v = SCALING_SEQ, self.layers, self.hidden, SCALING_VOCAB
        return 12 * self.global_batch * s * l * h * h * (2 + s / h + 4 + v / (2 * l * h))

    @property
    def paper_s(self) -> float:
        """The step the table's teraFLOP/s imply."""
        return self.paper_flops() / (self.tflops * 1e12 * self.gpus)

    def layout(self, micro_batch: int = 1) -> Layout:
        dp = self.gpus // (self.tp * self.pp)
        return Layout(self.global_batch, micro_batch, self.tp, self.pp, dp, 1, 1, 1, self.tp > 1,
                      Recompute.none, 1)

    def error(self, step: Step) -> float:
        """Our step time against the one the table's rate implies."""
        return step.step_time_s / self.paper_s - 1


SCALING_SEQ, SCALING_VOCAB = 4096, 131072
MCORE = (
    Scaling(1.7, 16, 2048, 24, 1, 1, 48, 192, 408.8),
    Scaling(7.1, 32, 4096, 30, 2, 1, 96, 192, 465.9),
    Scaling(16, 48, 6144, 32, 4, 1, 192, 192, 489.1),
    Scaling(32, 56, 7168, 48, 8, 1, 384, 192, 459.6),
    Scaling(70, 64, 8192, 84, 8, 2, 768, 384, 419.7),
    Scaling(119, 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    Scaling(177, 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    Scaling(314, 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    Scaling(462, 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
)


def mcore_step(r: Scaling, micro_batch: int = 1, cluster: str = "dgx-h100") -> Step:
    """One row's step on ``--engine megatron-core`` (its overlaps, flash attention, fp32 gradients
    reduce-scattered to the distributed optimizer: ZeRO-1), bf16."""
    model = StepModel(r.spec(), load_cluster(cluster), seq=SCALING_SEQ, dtype="bf16",
                      engine=ENGINES["megatron-core"])
    return model.step(r.layout(micro_batch))


def mcore_markdown() -> str:
    """The weak-scaling rows against this model: ``python -m costmodel.parallel.validation``."""
    out = ["| model | layout | GPUs | batch | paper: TFLOP/s | s | ours: TFLOP/s | s | error (time) "
           "| exposed DP, bubble | error at micro-batch 2 |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    errs: list[float] = []
    for r in MCORE:
        st, st2 = mcore_step(r), mcore_step(r, 2)
        errs.append(r.error(st))
        b = st.breakdown
        ours = r.paper_flops() / st.step_time_s / r.gpus / 1e12
        out.append(f"| {r.params_b:g}B | TP{r.tp} PP{r.pp} DP{r.gpus // (r.tp * r.pp)} | {r.gpus:,} | "
                   f"{r.global_batch:,} | {r.tflops:g} | {r.paper_s:.2f} | {ours:.0f} | {st.step_time_s:.2f} "
                   f"| {errs[-1]:+.1%} | {b['dp_comm']:.2f} s, {b['pipeline_bubble']:.2f} s "
                   f"| {r.error(st2):+.1%} |")
    out.append(f"\nTime: mean |error| {100 * sum(map(abs, errs)) / len(errs):.1f}%, from "
               f"{100 * min(errs):+.1f}% to {100 * max(errs):+.1f}%.")
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(markdown(compare_all()))
    print()
    print(weak_markdown())
    print()
    print(production_markdown())
    print()
    print(foundry_markdown())
    print()
    print(mcore_markdown())
