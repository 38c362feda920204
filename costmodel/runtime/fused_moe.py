"""A mixture of experts' routed experts timed off the measured MoE tables (``devices.kernels``,
``moe.json``): serving stacks run them as grouped GEMMs (vLLM's ``fused_experts``: the gate and
up products of every expert in one kernel, the activation, the down products in another, the
weighted sum over top_k), not as one dense product over every routed row, which is how the
tree's ``Cost.gemms`` states their FLOPs (``components.moe.expert_linear``).

``runtime.timing`` (one shape) and ``runtime.timing_grid`` (arrays) read it through their
``Rates``: a layer's measured time at its tokens, split over the three products (equal FLOPs:
d x f_e, d x f_e, f_e x d per row), the activation folded into it; each product still held to
its physics floor. Where no table applies (a training step, a capacity factor, ungated experts,
a dtype not measured, no MoE tables) the products are timed as before. Routed experts held at
their own width (mxfp4, ``costmodel.precision``) read the table measured at it (TensorRT-LLM's
``w4a16_mxfp4``: ``moe/mxfp4@trtllm``); block-scaled fp8 experts (fp8-block) TensorRT-LLM's
``fp8_block`` (``moe/fp8-block@trtllm``), and where a GPU or framework has none, the per-tensor fp8
table, said so (``MoERead.fallback``, among the op classes read past the tables); NVFP4 experts
(nvfp4) TensorRT-LLM's ``nvfp4`` (``moe/nvfp4@trtllm``), where none the products off the nvfp4 GEMM
table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.analysis import Analysis
from costmodel.components.key import Key
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import Grid, moe_scaling
from costmodel.precision import EXPERTS_ONLY, OWN_GEMM
from costmodel.runtime.fused_attention import AttentionKernel, attention_kernel, cache_is_measured
from costmodel.spec import Spec

#: The products of a gated expert FFN (SwiGLU: the kernels measured): gate, up, down.
PRODUCTS = ("gate", "up", "down")


@dataclass(frozen=True)
class MoERead:
    """Where a spec's routed experts read the MoE table: the tokens axis, the factors on the
    tokens and on the time (``devices.kernels.moe_scaling``), the experts' top_k, and whether the
    configuration is the table's own."""

    grid: Grid
    per_token: float
    per_time: float
    topk: int
    exact: bool
    op: str  # "moe/bf16"; "moe/fp8@trtllm" off a framework's own table
    fallback: str | None = None  # what a width without a table of its own read instead, in words


def moe_read(kernel: AttentionKernel | None, spec: Spec, key: Key, dtype: str) -> MoERead | None:
    """The MoE table a routed-experts leaf reads, None where none applies (the products are timed
    instead): a prefill or decode pass (`kernel` is None in training), a dropless MoE with gated
    experts, a measured table at `dtype` (fp16 reads bf16's)."""
    cfg = spec.moe
    if (kernel is None or cfg is None or key.part != "experts" or cfg.capacity_factor is not None
            or not cfg.activation.gated):
        return None
    d, f, E, K = spec.d_model, cfg.d_ff_expert, cfg.n_experts, cfg.top_k
    want = kernel.experts_dtype or dtype
    table = kernel.tables.moe_table(want, d, f, E, K)
    fallback = None
    # a width measured nowhere here reads the table its GEMMs fall back to (``precision.OWN_GEMM``:
    # block-scaled fp8's experts per-tensor fp8's), said so
    for instead in OWN_GEMM.get(want, ()) if table is None else ():
        table = kernel.tables.moe_table(instead, d, f, E, K)
        if table is not None:
            fallback = f"moe/{want} (none measured: {table.op}, per-tensor)"
            break
    if table is None:
        return None
    per_token, per_time = moe_scaling(table, d, f, E, K)
    return MoERead(table.grid, per_token, per_time, K, table.exact(d, f, E, K), table.op, fallback)


def widths_are_measured(a: Analysis, hw: Hardware, flash: bool) -> bool:
    """Whether each width other than the activations' is read off a table measured at it, so
    that the GEMM tables (measured at the activations' width) still time everything else: the
    cache by flash attention's tables (``fused_attention.cache_is_measured``), experts-only
    weights (mxfp4) by a MoE table at their width that the routed experts read, block-scaled fp8
    weights by the fp8-block GEMM table (or per-tensor fp8's, said so: ``timing.block_rates``),
    NVFP4 weights by the nvfp4 GEMM table."""
    dtype = a.dtype
    if a.weights_dtype in OWN_GEMM:
        if not any(hw.tables_for(d) for d in (a.weights_dtype, *OWN_GEMM[a.weights_dtype])):
            return False
    elif a.weights_dtype != dtype:
        kernel = attention_kernel(a, hw)
        leaf = next((r.key for r in a.rows if r.key.routed_expert), None)
        if a.weights_dtype not in EXPERTS_ONLY or leaf is None or not moe_read(kernel, a.spec, leaf, dtype):
            return False
    return a.kv_dtype == dtype or cache_is_measured(a, hw, flash)


def experts_share(read: MoERead, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...],
                  layers: int) -> tuple[Any, Any] | None:
    """(tokens to read the table at, the layers' factor on a layer's time) of one expert leaf: a
    product's third of the measured time (its rows M = tokens x top_k); None for the activation,
    which runs inside the measured kernel."""
    if key.leaf not in PRODUCTS or not gemms:
        return None
    _, M, _, _ = gemms[0]
    return M / read.topk * read.per_token, layers * read.per_time / len(PRODUCTS)
