"""Flash attention's time from the measured fused-attention tables (``devices.kernels``): which
table a pass's attention core reads, at which batch and sequence, and for the sweeps the same
lookup over numpy arrays. ``runtime.timing`` (one shape) and ``runtime.timing_grid`` (arrays)
read it through their ``Rates``. Absorbed latent attention's two per-head products (``kv_b``)
read a serving framework's measured ``mla_bmm`` tables where it has them (``mla_bmm_read``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from costmodel.analysis import Analysis
from costmodel.components.key import Key
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import MLA_BMM_OPS, Grid, KernelTables, MLABmmTable, framework_op
from costmodel.precision import EXPERTS_ONLY, OWN_GEMM
from costmodel.spec import Spec

if TYPE_CHECKING:  # numpy is the sweeps' (``grid_times``), never analyze's
    import numpy as np


def cache_is_measured(a: Analysis, hw: Hardware, flash: bool) -> bool:
    """Whether flash attention reads the cache off tables measured at its width (then no product
    reads the cache, and the GEMM tables still hold)."""
    if not flash or a.spec.mla is not None:
        return False
    if a.spec.is_encoder_decoder:  # cross-attention reads the encoder's cache through products
        return False
    kernel = attention_kernel(a, hw)
    return kernel is not None and any(t.kv_dtype == a.kv_dtype
                                      for t in kernel.tables.attention_tables.get(a.phase, ()))


@dataclass(frozen=True)
class AttentionKernel:
    """What the measured fused-attention tables need of a pass: the GPU's tables, the phase
    (prefill or decode: a training step has no measured backward) and the cache's dtype."""

    tables: KernelTables
    phase: Literal["prefill", "decode"]
    kv_dtype: str
    # routed experts held at their own width (mxfp4, fp8-block, nvfp4): the MoE table's
    experts_dtype: str | None = None


def attention_kernel(a: Analysis, hw: Hardware) -> AttentionKernel | None:
    tables = hw.kernel_tables()
    if tables is None or a.phase not in ("prefill", "decode"):
        return None
    experts = a.weights_dtype if a.weights_dtype in (*EXPERTS_ONLY, *OWN_GEMM) else None
    return AttentionKernel(tables, "prefill" if a.phase == "prefill" else "decode", a.kv_dtype, experts)


@dataclass(frozen=True)
class CoreRead:
    """Where a flash core reads a measured table: the core's seconds over its layers are the
    grid's time at `coords` x `factor`; `exact`: the configuration is the table's own; `op`: the
    op class read (``attention/decode``, ``mla/prefill``)."""

    grid: Grid
    coords: tuple[Any, ...]
    exact: bool
    factor: Any
    op: str


def fused_core(kernel: AttentionKernel | None, spec: Spec, key: Key, scores: tuple[Any, Any, Any, Any],
               layers: int, ratio: Any) -> CoreRead | None:
    """Where a flash-attention core reads the measured tables (``CoreRead``); None where no
    table applies (the products are timed instead).

    From the scores products (count, M, K, N) over `layers` layers, one per KV head with the
    group's g = h / k query heads stacked (M = g x S): batch = count / (layers x k), S = M / g;
    the table's time at (batch x work, seq) (``devices.kernels.read_attention``: a configuration
    not measured reads the nearest at the batch doing the same work). Decode (S = 1) reads a
    cache of N tokens: the table's seq is N (a local layer's window already bounds it). Prefill
    reads the causal table at S, scaled by the share of pairs computed (`ratio`, unmasked / all)
    over the causal share (S + 1) / 2S: 1 for a causal layer, the window's pairs for a local one.
    Latent attention reads the MLA tables (``mla_core``). Self-attention of a causal stack: no
    table for an encoder or cross-attention."""
    if kernel is None or key.block != "attention" or key.stack == "encoder":
        return None
    if spec.mla is not None:
        return mla_core(kernel, spec, scores, layers, ratio)
    found = kernel.tables.attention_table(kernel.phase, spec.n_heads, spec.n_kv_heads, spec.head_dim,
                                          kernel.kv_dtype)
    if found is None:
        return None
    table, work, exact = found
    count, M, _, N = scores
    batch, S = count / (layers * spec.n_kv_heads), M / (spec.n_heads // spec.n_kv_heads)
    op = f"attention/{kernel.phase}"
    if kernel.phase == "decode":
        return CoreRead(table.grid, (batch * work, N), exact, layers, op)
    return CoreRead(table.grid, (batch * work, S), exact, layers * ratio * (2 * S) / (S + 1), op)


def mla_core(kernel: AttentionKernel, spec: Spec, scores: tuple[Any, Any, Any, Any], layers: int,
             ratio: Any) -> CoreRead | None:
    """Latent attention's core off the MLA tables (``devices.kernels.KernelTables.mla``): the
    kernels serving stacks run (prefill: the causal pass over per-head keys of d_n + d_r and
    values of d_v; decode: absorbed, every head against the shared latent), whichever convention
    the analysis counts the products in; None where the phase has no table or the spec's latent
    sizes are not the tables' (DeepSeek-V3's). The scores products (count, M, K, N): absorbed
    (K = r_kv + d_r, or r_kv for AV's) stack the h heads' queries against one latent, count =
    layers x batch, M = h x S; naive ones are per head, count = layers x batch x h, M = S. The
    causal share as for ``fused_core``."""
    m = spec.mla
    assert m is not None
    sizes = (m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim)
    table = kernel.tables.mla_table(kernel.phase, kernel.kv_dtype)
    if table is None or kernel.tables.mla_dims(kernel.phase) != sizes:
        return None
    count, M, K, N = scores
    h = spec.n_heads
    absorbed = K in (m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank)
    batch, S = (count / layers, M / h) if absorbed else (count / (layers * h), M)
    exact = table.kv_dtype == kernel.kv_dtype
    op = framework_op(f"mla/{kernel.phase}", table.framework)
    if kernel.phase == "decode":
        return CoreRead(table.grid, (h, batch, N), exact, layers, op)
    return CoreRead(table.grid, (h, batch, S), exact, layers * ratio * (2 * S) / (S + 1), op)


@dataclass(frozen=True)
class BmmRead:
    """Where absorbed MLA's ``kv_b`` reads the measured products: its ``pre`` and ``post`` tables
    (one op class, ``mla_bmm/fp8@trtllm``), at `heads` heads on the GPU."""

    tables: tuple[MLABmmTable, ...]
    heads: int
    op: str

    def tokens(self, gemms: tuple[tuple[Any, Any, Any, Any], ...], layers: int) -> Any:
        """The tokens the products run over, from ``pre``'s (count, M, K, N): count = layers x
        batch x heads, M the query length."""
        count, M, _, _ = gemms[0]
        return count * M / (layers * self.heads)

    def times(self, tokens: Any, layers: int) -> Any:
        """Seconds of both products over `layers` at `tokens` (a number, or the sweeps' arrays)."""
        if getattr(tokens, "ndim", 0) == 0:  # a number, numpy's scalars too
            return sum(t.grid(self.heads, tokens).time_s for t in self.tables) * layers
        return sum(grid_times(t.grid, self.heads, tokens) for t in self.tables) * layers


def mla_bmm_read(kernel: AttentionKernel | None, spec: Spec, key: Key,
                 gemms: tuple[tuple[Any, Any, Any, Any], ...], dtype: str) -> BmmRead | None:
    """The measured products absorbed MLA's ``kv_b`` reads (``pre``: q_nope @ W_UK, d_n -> r_kv a
    head; ``post``: the latent output @ W_UV, r_kv -> d_v), at the width of its weights (`dtype`,
    the rates' it is timed at: fp8 for a per-tensor or block-scaled fp8 checkpoint, bf16 for bf16,
    as aiconfigurator's DeepSeek model takes the kv projection's), where a serving framework
    measured them (``mla_bmm.trtllm.json``: only its engine reads them); None elsewhere (the
    products are timed off the GEMM table): a training step, the naive convention (kv_b is then
    one linear), other latent sizes than the tables'. Prefill and decode alike: the tree counts
    the same two products over the pass's query tokens (a ``deploy`` step's body is a prefill
    of the step's tokens); TensorRT-LLM runs them in generation, its context phase expanding the
    latent as ``naive`` counts it."""
    m = spec.mla
    if kernel is None or m is None or key.leaf != "kv_b" or len(gemms) != 2:
        return None
    (_, _, k_pre, n_pre), (_, _, k_post, n_post) = gemms
    if (k_pre, n_pre, k_post, n_post) != (m.qk_nope_head_dim, m.kv_lora_rank, m.kv_lora_rank, m.v_head_dim):
        return None  # naive: one r_kv -> h (d_n + d_v) linear
    tables = tuple(t for op in MLA_BMM_OPS if (t := kernel.tables.mla_bmm_table(op, dtype)) is not None)
    sizes = (m.kv_lora_rank, m.qk_nope_head_dim, m.v_head_dim)
    if len(tables) != len(MLA_BMM_OPS) or any(t.dims != sizes for t in tables):
        return None
    return BmmRead(tables, spec.n_heads, tables[0].name)


def grid_times(grid: Grid, *x: Any) -> np.ndarray:
    """``Grid.__call__``'s seconds at arrays of coordinates (the same rule: log-log between grid
    points, held below, grown with the work above). numpy is imported here, for the sweeps:
    ``analyze`` never calls it."""
    import numpy as np

    scale: Any = 1.0
    corners = []
    for d, (axis, v) in enumerate(zip(grid.axes, x, strict=True)):
        v = np.asarray(v, dtype=float)
        over = v > axis[-1]
        if over.any():
            scale = scale * np.where(over, (v / axis[-1]) ** grid.growth[d], 1.0)
        v = np.clip(v, axis[0], axis[-1])
        if len(axis) == 1:
            corners.append((np.zeros(v.shape, dtype=np.intp), np.zeros(v.shape)))
            continue
        logs = np.asarray(grid.log_axes[d])
        i = np.minimum(np.searchsorted(axis, v, side="right") - 1, len(axis) - 2)
        corners.append((i, (np.log(v) - logs[i]) / (logs[i + 1] - logs[i])))
    log_t = np.asarray(grid.log_t)
    total: Any = 0.0
    for mask in range(1 << len(corners)):
        w: Any = 1.0
        flat: Any = 0
        for d, (i, t) in enumerate(corners):
            up = (mask >> d) & 1
            w = w * (t if up else 1 - t)
            flat = flat + (i + up) * grid.strides[d]
        total = total + w * log_t[flat]
    out: np.ndarray = np.exp(total) * scale
    return out
