"""A parallel layout: how N GPUs split a training step, and the checks that it can run.

    N = TP x PP x DP x CP     (Megatron-LM's ranks, innermost first: tensor, context, data, pipeline)

- tensor (Shoeybi et al. 2019, "Megatron-LM"): heads and the FFN width split over TP ranks;
- sequence parallel (Korthikanti et al. 2022): the norms, dropout and residuals between them
  split along the sequence over the same TP ranks;
- pipeline (Narayanan et al. 2021): layers split into PP stages (v interleaved chunks per device),
  the embedding and the head optionally counted as a layer each in that split (``edge_chunks``);
- data (with ZeRO stages 1-3, Rajbhandari et al. 2020; FSDP is stage 3): replicas over DP ranks;
- context (ring attention, Liu et al. 2023): the sequence split over CP ranks;
- expert (GShard, Lepikhin et al. 2020): experts split over EP ranks carved out of DP x CP.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Any

from costmodel.spec import MoEFFN, Spec, SpecError


class LayoutError(SpecError):
    """A layout that cannot run: one line naming the option."""


class Recompute(str, Enum):
    none = "none"
    selective = "selective"  # the attention core (Korthikanti et al. 2022)
    full = "full"  # every layer from its input (Chen et al. 2016)


@dataclass(frozen=True)
class Layout:
    global_batch: int  # sequences per step
    micro_batch: int = 1
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    interleave: int = 1  # v: model chunks per pipeline device
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.none
    zero: int = 0
    #: The embedding and the head (with the loss) count as one layer each when the layers are
    #: split into stages or chunks: Megatron-Core's --account-for-embedding-in-pipeline-split and
    #: --account-for-loss-in-pipeline-split. Llama 3 405B's 126 layers on PP 16 with v 8: 128
    #: chunks of one, the first the embedding, the last the head (Dubey et al. 2024, section
    #: 3.3.2: one layer fewer on the first and the last stage).
    edge_chunks: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """m: micro-batches per DP rank per step."""
        return self.global_batch // (self.dp * self.micro_batch)

    def with_(self, **changes: Any) -> Layout:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"recompute": self.recompute.value, "gpus": self.gpus,
                               "micro_batches": self.micro_batches}

    def label(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}", f"DP{self.dp}"]
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.interleave > 1:
            parts.append(f"v{self.interleave}")
        if self.edge_chunks:
            parts.append("edges")
        parts.append(f"mb{self.micro_batch}")
        if self.sequence_parallel:
            parts.append("SP")
        if self.recompute is not Recompute.none:
            parts.append(f"rc-{self.recompute.value}")
        if self.zero:
            parts.append(f"ZeRO-{self.zero}")
        return " ".join(parts)


def stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers on each of `pp` pipeline stages, first to last. Equal when pp divides them;
    otherwise the r = layers mod pp extra layers go to the middle stages, nearest the middle
    first, and to the last and first stage only when there are more extras than middle stages:
    the first and last already carry the embedding and the head, and the first stage keeps the
    most micro-batches in flight. (Megatron-LM of 2022 refused a PP that does not divide the
    layers, megatron/mpu/initialize.py; Megatron-Core takes the first and last stage's counts as
    --decoder-first/last-pipeline-num-layers and splits the rest evenly; this split is automatic.)"""
    base, extra = divmod(layers, pp)
    counts = [base] * pp
    middle = sorted(range(1, pp - 1), key=lambda i: (abs(2 * i - (pp - 1)), i))
    for i in (middle + [pp - 1, 0])[:extra]:
        counts[i] += 1
    return tuple(counts)


def experts(spec: Spec) -> tuple[int, int] | None:
    """(routed experts E, top_k) of a mixture-of-experts spec (``ffn: {kind: moe}``), None for a
    dense one."""
    if isinstance(spec.ffn, MoEFFN):
        return spec.ffn.n_experts, spec.ffn.top_k
    return None


def check(layout: Layout, spec: Spec, gpus: int | None = None, seq: int | None = None) -> None:
    """Raise LayoutError naming the first option that makes `layout` impossible for `spec`."""
    t, p, v = layout.tp, layout.pp, layout.interleave
    for name, value in (("--tp", t), ("--pp", p), ("--dp", layout.dp), ("--cp", layout.cp), ("--ep",
                                                                                             layout.ep),
                        ("--micro-batch", layout.micro_batch), ("--global-batch", layout.global_batch),
                        ("--interleave", v)):
        if value < 1:
            raise LayoutError(f"{name}: must be at least 1 (got {value})")
    if gpus is not None and gpus != layout.gpus:
        raise LayoutError(
            f"--gpus: {gpus} GPUs but TP {t} x PP {p} x DP {layout.dp} x CP {layout.cp} = {layout.gpus}"
        )
    if spec.is_encoder_decoder:
        raise LayoutError(f"{spec.name}: parallel layouts are modelled for decoder-only specs")
    if spec.n_heads % t:
        raise LayoutError(f"--tp: {t} does not divide the {spec.n_heads} attention heads of {spec.name}")
    k = spec.n_kv_heads
    if k % t and t % k:
        raise LayoutError(
            f"--tp: {t} neither divides the {k} key/value heads of {spec.name} nor is a multiple of them"
        )
    if spec.d_ff % t:
        raise LayoutError(f"--tp: {t} does not divide the FFN width {spec.d_ff} of {spec.name}")
    layers = spec.n_layers or 0
    units = layers + 2 if layout.edge_chunks else layers  # the embedding and the head as layers
    edges = " and its embedding and head" if layout.edge_chunks else ""
    if layout.edge_chunks and p == 1:
        raise LayoutError("--edge-chunks: places the embedding and the head in the pipeline split; needs "
                          "--pp > 1")
    if p > layers:
        raise LayoutError(f"--pp: {p} stages for the {layers} layers of {spec.name}; at most one stage per "
                          "layer")
    if v > 1:
        if p == 1:
            raise LayoutError("--interleave: needs pipeline parallelism (--pp > 1)")
        if units % (p * v):
            raise LayoutError(
                f"--interleave: {v} chunks x PP {p} does not divide the {layers} layers of {spec.name}{edges}"
                + ("" if layout.edge_chunks or (layers + 2) % (p * v) else
                   f" ({layers} + 2 do: --edge-chunks)")
            )
    if layout.global_batch % layout.dp:
        raise LayoutError(f"--global-batch: {layout.global_batch} is not divisible by DP {layout.dp}")
    per_rank = layout.global_batch // layout.dp
    if per_rank % layout.micro_batch:
        raise LayoutError(
            f"--micro-batch: {layout.micro_batch} does not divide the {per_rank} sequences per DP rank "
            f"(global batch {layout.global_batch} / DP {layout.dp})"
        )
    if v > 1 and layout.micro_batches % p:
        raise LayoutError(
            f"--interleave: the interleaved schedule needs the {layout.micro_batches} micro-batches per "
            f"DP rank to be a multiple of PP {p}"
        )
    if layout.sequence_parallel and t == 1:
        raise LayoutError("--sequence-parallel: splits activations over the tensor-parallel ranks; needs "
                          "--tp > 1")
    if layout.zero not in (0, 1, 2, 3):
        raise LayoutError(f"--zero: stage {layout.zero}; expected 0, 1, 2 or 3")
    if seq is not None and layout.cp > 1 and seq % (2 * layout.cp):
        raise LayoutError(
            f"--cp: ring attention splits the sequence into 2 x CP = {2 * layout.cp} chunks; {seq} is not "
            "divisible"
        )
    moe = experts(spec)
    if layout.ep > 1:
        if moe is None:
            raise LayoutError(f"--ep: {spec.name} has no experts to split")
        if moe[0] % layout.ep:
            raise LayoutError(f"--ep: {layout.ep} does not divide the {moe[0]} experts of {spec.name}")
        if (layout.dp * layout.cp) % layout.ep:
            raise LayoutError(
                f"--ep: {layout.ep} expert-parallel ranks are carved out of DP x CP = "
                f"{layout.dp * layout.cp}; "
                "it must divide them"
            )
