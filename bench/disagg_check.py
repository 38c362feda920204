"""Disaggregated prefill and decode with wide EP, predicted beside published figures.

    python bench/disagg_check.py

The published figures: SGLang's "Deploying DeepSeek with PD Disaggregation and Large-scale
Expert Parallelism on 96 H100 GPUs" (LMSYS blog, 2025-05-05,
https://lmsys.org/blog/2025-05-05-large-scale-ep/; lm-sys/lm-sys.github.io
blog/2025-05-05-large-scale-ep.md @ 2db4e40), "Evaluation": DeepSeek-V3 on 8x H100 nodes over
InfiniBand, each phase measured alone with the other given unlimited resources:

- prefill, 4 nodes, EP32 (DP attention 32): 57,674 / 54,543 / 50,302 input tokens/s per node at
  prompts of 1K / 2K / 4K ("Profile Results": 16,384 tokens per device);
- decode, 9 nodes, EP72 (DP attention 72): 22,282 output tokens/s per node at 256 sequences per
  device and a 2,000-token cache.

Ours: the same pools on dgx-h100 (``deploy.disagg``: the prefill engine's capacity at a 16,384-
token budget, the decode engine's c / TPOT(c) at c = 256), fp8 throughout (DeepSeek-V3's
released weights are fp8; SGLang's GEMMs run DeepGEMM in fp8; the cache and attention run at
bf16 there, fp8 here: the measured tables are read at one dtype), TP1 x EP with 32 redundant
experts (the launch scripts of the reproduction set ``--ep-num-redundant-experts 32``: 288
slots, 9 a GPU at EP32, 4 at EP72); latent attention in its naive convention in prefill (the
latent expanded to per-head keys and values once per token: SGLang's DeepSeek model runs a
prefill without a cached prefix as multi-head attention) and absorbed in decode. Not
modelled: SGLang's two-batch overlap (the blog credits it with 27-35% in prefill and up to
25.5% in decode), DeepEP's kernels (our all-to-all is NCCL's table inside a node and the α-β
model across; every top_k copy sent, where DeepEP sends a token once per node), DeepGEMM (our
routed experts read vLLM's fused-MoE tables), the router's real imbalance (EPLB's residual).
docs/serving.md quotes the table this prints; tests/test_deploy_disagg.py holds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel import catalog
from costmodel.deploy.disagg import decode_tokens_per_s, engine_layout, prefill_side
from costmodel.deploy.experts import ExpertShard
from costmodel.deploy.search import ENGINE
from costmodel.deploy.workload import Workload, fixed
from costmodel.parallel.cluster import load_cluster
from costmodel.precision import Widths
from costmodel.runtime.kernels import KERNELS, default_kernels, default_mla

SOURCE = "LMSYS blog 2025-05-05 (SGLang, 96x H100), Evaluation"
REDUNDANT = 32
PREFILL_BUDGET = 16_384  # tokens per device ("Profile Results", prefill)


@dataclass(frozen=True)
class Cell:
    phase: str
    nodes: int
    ep: int
    prompt: int
    batch: int  # decode: sequences per device
    published: float  # tokens/s per node: input for prefill, output for decode

    @property
    def label(self) -> str:
        return (f"prefill EP{self.ep}, {self.prompt:,}-token prompts" if self.phase == "prefill"
                else f"decode EP{self.ep}, {self.batch} seqs/GPU at {self.prompt:,} cached")


CELLS = (
    Cell("prefill", 4, 32, 1000, 0, 57_674),
    Cell("prefill", 4, 32, 2000, 0, 54_543),
    Cell("prefill", 4, 32, 4000, 0, 50_302),
    Cell("decode", 9, 72, 2000, 256, 22_282),
)


def predict(cell: Cell) -> float:
    """Our tokens/s per node (8 GPUs) for `cell`'s pool."""
    spec, cluster = catalog.load("deepseek-v3"), load_cluster("dgx-h100")
    hw = cluster.hardware
    mla = "naive" if cell.phase == "prefill" else default_mla(hw)  # MLA as each phase runs it
    shard = ExpertShard(spec, 1, cell.ep, "fp8", Widths(), KERNELS[default_kernels(hw, "serve")], mla,
                        REDUNDANT)
    gpus = cell.nodes * cluster.gpus_per_node
    if cell.phase == "prefill":
        workload = Workload(fixed(cell.prompt), fixed(2))
        layout = engine_layout(shard, cluster, workload, ENGINE, (PREFILL_BUDGET,), (1,))
        side = prefill_side(layout, cluster, gpus, PREFILL_BUDGET, workload, ENGINE)
        return side.capacity * cell.prompt * cluster.gpus_per_node
    workload = Workload(fixed(cell.prompt), fixed(2))  # decode context = the prompt + 1
    layout = engine_layout(shard, cluster, workload, ENGINE, (cell.batch,), (cell.batch,))
    return decode_tokens_per_s(layout, cell.batch) * cluster.gpus_per_node


def rows() -> list[tuple[Cell, float, float]]:
    """(cell, predicted, error = predicted / published - 1)."""
    return [(c, p, p / c.published - 1) for c in CELLS for p in [predict(c)]]


def main() -> None:
    print(f"{'pool (DeepSeek-V3, 8x H100 nodes)':44} {'published/node':>14} {'ours/node':>10} {'error':>7}")
    for c, p, e in rows():
        print(f"{c.label:44} {c.published:>14,.0f} {p:>10,.0f} {e:>+7.1%}")
    print(f"source: {SOURCE}")


if __name__ == "__main__":
    main()
