"""Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198), measured with Megatron-LM on DGX A100 80GB, seq 2048, vocab 51200, fp16: the
four models of Table 3 with their layouts, Table 5's seconds per iteration and Figure 1's GiB
per GPU, set beside this model's figures, with Megatron-LM's kernels of the time
(``--kernels megatron-2022``: no flash attention). The paper's numbers are typed here once, from the paper;
docs/parallel.md and tests/test_parallel_validation.py read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel import catalog
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.device import MEGATRON_KERNELS
from costmodel.parallel.layout import Layout, Recompute
from costmodel.parallel.step import Step, StepModel

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


if __name__ == "__main__":  # pragma: no cover
    print(markdown(compare_all()))
