"""Time as it runs: each component's time from its exact FLOPs and bytes and the efficiency its
shape reaches on the device.

The roofline (``costmodel.runtime.roofline``) charges every operator the peak FLOP/s of one large
matmul and the bandwidth of one large copy; skinny decode matmuls, small GEMMs and elementwise
ops reach much less. Here, as in the per-operator models of Calculon (Isaev et al. 2023,
efficiency tables by operation size), LLMCompass (Zhang et al. 2024) and GenZ (Bambhaniya et
al. 2024), each component of a phase is timed on its own:

- a **matmul** component (its ``Cost.gemms``: count x (M x K) @ (K x N)) takes, per product,
  2MKN / (peak[dtype] x e_mm(M, N, K)), with e_mm the profile's matmul table; a training step
  adds the two backward products of each, dA = dC B^T (M x N @ N x K) and dB = A^T dC
  (K x M @ M x N), looked up at their own shapes; on a table by op size (``FlopsTable``,
  Calculon's form) or of one published point, no less than its bytes at the memory efficiency
  (the roofline's other side: the attention core's products, K = d_h, write or read a score
  matrix of B h S^2 elements and sit below the ridge point of every GPU; such a table does not
  know it). A table over shapes (what calibrate measures, M = 1 .. 1024: ``sees_bytes``)
  already holds what a skinny product's bytes cost, so no memory-table bound is added on it (it
  would charge the weights' stream again, at an elementwise add's efficiency); the physics
  floor below still holds under it;
- a **memory** component (norms, activations, softmax, residual adds, cache writes, lookups)
  moves its unfused bytes (from the analysis, so a change of dtype or byte convention reaches
  the time) at bandwidth x e_mem(bytes per op); its FLOPs are a few per element, below any
  device's ridge point, and enter only its physics floor (below);
- a training step writes every weight's gradient: a matmul's is the output of its dB product;
  any other weight (embedding tables, norm gains, biases) gets a dense gradient, zero-filled and
  then written (torch's ``embedding_dense_backward`` scatters into a V x d table of zeros):
  2 x params x p more bytes on that component;
- the token table's gradient in a training step comes from each lookup (one per stack: an
  encoder-decoder looks up twice) and, when the head is tied (Press & Wolf 2017), from the head's
  dB product; autograd sums the n contributions with n - 1 out-of-place adds, each reading two
  V x d tables and writing one: 3 x V x d x p more bytes per add on ``embedding/tokens``;
- an op whose output is freshly allocated pays the profile's ``first_touch`` cost for it
  (``efficiency.FirstTouchTable``: page faults of a block the CPU allocator maps anew, 0 on a GPU):
  each product's output (count x M x N x p per op, forward and backward), each dense weight
  gradient (params x p per layer: the token table's zero-filled gradient of each lookup) and each
  add's output. Elementwise ops' outputs are not charged: a ``Cost`` does not carry their size,
  and they are a few d-wide rows per token (below the CPU allocator's 32 MiB threshold at every
  shape of docs/time-cpu.md);
- **no component beats physics** (``physics_floor``, issue 21): whatever a table (or, later, a
  measured time) gives, a component of n ops takes at least max(its FLOPs / peak[dtype], its
  least bytes / bandwidth) + n x floor_s, the launch and dispatch floor of each op; n is the
  number of layers it spans (x 3 in a training step: forward, and the backward's two ops). Its
  least bytes: a product reads A and B and writes C once (its ``Row.bytes_unfused``: weights at
  the weights' width, cached keys and values at the cache's, 3x in a training step, exact for
  the two backward products); under flash attention the core's products keep the score matrix
  on chip, so QK^T moves Q and K and PV moves V and O, every key and value of the span (in
  decode the whole cache, at ``--kv-dtype``: ``on_chip``); a memory component its moved bytes;
  a component folded into another kernel (``Kernels.folds``) launches nothing, and its least
  bytes are its weights (a fused norm's gain, 3x in a training step). Its FLOPs are those the
  kernel executes (the unmasked pairs under flash; a folded step's elementwise FLOPs run beside
  its host's and are not counted, ``executed_flops``). ``roofline_s`` of each
  ``ComponentTime`` is that max, so its ``efficiency`` is at most 1; the phase's
  ``roofline_fused_s`` (the executed FLOPs against the fused bytes) is never above its time:
  the components' least bytes hold every fused byte (weights, cache read and written, the
  tokens in, the logits out) and their FLOPs the executed ones.
  The tables themselves are read on their time envelope (``costmodel.devices.efficiency``): a
  bigger op never takes less time than a smaller one.

**Overlap assumption**: ops run one after another (one stream, eager execution), so a phase's
time is the sum of its components' times; within one op, compute and memory traffic overlap
fully (the efficiency tables measure whole ops, so they include whatever the kernel overlaps).

Kernel assumptions (``Kernels``):
- ``flash_attention``: scores, scale, bias, mask, soft-cap, softmax and AV run as one kernel
  (Dao et al. 2022): the score matrix is never written, the elementwise steps cost nothing,
  and the two matmuls execute only the unmasked pairs (``flops_matmul_effective``); the kernel
  still reads Q, K, V and writes O once (the physics floor above, and on a table by op size the
  memory table's bound on those bytes);
- ``fused_softmax``: the 1/sqrt(d_h) scale and the causal mask fold into one softmax kernel that
  reads the scores once and writes the probabilities once (Megatron-LM's FusedScaleMaskSoftmax,
  the scale passed as the scores GEMM's alpha): the scale and mask components move no bytes;
- ``fused_bias_dropout_add``: a sub-block's output dropout and its residual add are one kernel
  (Megatron-LM's ``bias_dropout_add_fused_train``): the dropout's output never reaches memory,
  so the residual add moves only the residual stream it reads, a third of its unfused bytes;
- ``fused``: norms, activations, residual adds, RoPE, scales and dropout are fused into the
  neighbouring matmuls (their bytes never reach memory: the fused byte count's setting); the
  embedding lookup, KV-cache writes and the loss still move their bytes.

A profile without tables for the dtype falls back to the roofline, and the prediction says so.

Long because: the rule (``component_time``), the scalar ``Rates`` it runs over and the rates of the
checkpoint's widths (an FP8 checkpoint's bf16 head, ``runs_wide``; fp8-block's and nvfp4's linear
layers, ``block_rates``) are one model that ``timing_grid`` reads too; split, the parts import each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from costmodel import model
from costmodel.analysis import Analysis, held_wide
from costmodel.components.key import TOKEN_TABLE, Key, Role, SubBlock
from costmodel.devices.efficiency import Efficiency, FlopsTable, MatmulTable
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import ErrorBand, Lookup, Reads
from costmodel.phases import PHASES
from costmodel.precision import FP8, NVFP4, OWN_GEMM, TENSOR_SCALED, Widths
from costmodel.runtime.fused_attention import AttentionKernel, attention_kernel, fused_core, mla_bmm_read
from costmodel.runtime.fused_moe import experts_share, moe_read, widths_are_measured
from costmodel.runtime.roofline import roofline
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES

#: One flash-attention kernel runs the attention core (``components.key.ATTENTION_CORE``).
#: Leaves of the core the fused scale-mask-softmax kernel folds into the softmax.
SOFTMAX_FUSED = {"scale", "mask"}
#: Roles that move their bytes even when everything fusible is fused: the embedding lookups,
#: the KV-cache writes and the loss.
UNFUSIBLE = {Role.embedding, Role.kv_cache, Role.loss}


@dataclass(frozen=True)
class Kernels:
    """What the kernels are assumed to fuse."""

    flash_attention: bool = False
    fused: bool = False
    fused_softmax: bool = False
    fused_bias_dropout_add: bool = False

    def to_dict(self) -> dict[str, bool]:
        return {"flash_attention": self.flash_attention, "fused": self.fused,
                "fused_softmax": self.fused_softmax,
                "fused_bias_dropout_add": self.fused_bias_dropout_add}

    def share(self, key: Key, dropped: set[SubBlock]) -> float:
        """The share of a non-matmul component's unfused bytes that reaches memory (`dropped`:
        the sub-blocks with a dropout row, ``dropout_parents``)."""
        if self.folds(key):
            return 0.0
        if self.fused_bias_dropout_add and key.role is Role.residual and key.sub_block in dropped:
            return 1 / 3  # reads the residual stream; the dropout's output stays in registers
        return 1.0

    def folds(self, key: Key) -> bool:
        """Whether a non-matmul component's bytes never reach memory under these kernels."""
        if key.attention_core and (
                self.flash_attention or (self.fused_softmax and key.leaf in SOFTMAX_FUSED)):
            return True
        return self.fused and key.role not in UNFUSIBLE


@dataclass(frozen=True)
class ComponentTime:
    """One component's predicted time and what it was predicted from."""

    path: str
    kind: str  # "matmul", "memory", "attention" (a measured fused kernel), "fused" (folded into another)
    ops: int  # kernels it launches in this phase
    flops: int
    bytes: int
    time_s: float
    # Calibrated: max(FLOPs it executes / peak, least bytes it moves / bandwidth), the physics
    # floor (time_s >= roofline_s + ops x the launch floor); the roofline fallback: unfused bytes.
    roofline_s: float
    efficiency: float  # roofline_s / time_s (1: at the roof)
    first_touch_s: float = 0.0  # of time_s: writing freshly allocated outputs
    key: Key = field(default=None, repr=False)  # type: ignore[assignment]  # what it is (Row.key)

    def __post_init__(self) -> None:
        if self.key is None:
            object.__setattr__(self, "key", Key.total(self.path))


@dataclass(frozen=True)
class Prediction:
    """A phase's predicted time on a device, component by component, beside the roofline."""

    hardware: str
    dtype: str
    phase: str
    kernels: Kernels
    calibrated: bool  # False: the profile has no tables; times are the roofline
    rows: tuple[ComponentTime, ...]
    # max(F / peak, unfused bytes / bandwidth) of the whole phase, F the FLOPs the kernels
    # execute (``executed_flops``: flash attention skips the masked pairs)
    roofline_s: float
    roofline_fused_s: float  # the same against the fused lower bound on bytes: time_s is never below it
    note: str | None = None
    floor_s: float = field(default=0.0)
    # Op classes read off a measured table outside its grid (or at a configuration it lacks):
    # extrapolated by the kernel model (costmodel.devices.kernels).
    extrapolated: tuple[str, ...] = ()
    # op class -> its bands in the cross-validation (``devices.kernels.ErrorBand``): the measured
    # tables this prediction read, and how far another framework's measurements lay from them.
    errors: dict[str, tuple[ErrorBand, ...]] = field(default_factory=dict)

    @property
    def time_s(self) -> float:
        return sum(r.time_s for r in self.rows) if self.calibrated else self.roofline_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware, "dtype": self.dtype, "phase": self.phase,
            "calibrated": self.calibrated, "note": self.note, "kernels": self.kernels.to_dict(),
            "overlap": "serial: components add; compute and memory overlap within an op",
            "time_s": self.time_s, "roofline_s": self.roofline_s,
            "roofline_fused_s": self.roofline_fused_s, **Reads(self.errors, self.extrapolated).to_dict(),
            "components": [{"path": r.path, "kind": r.kind, "ops": r.ops, "flops": r.flops,
                            "bytes": r.bytes, "time_s": r.time_s, "roofline_s": r.roofline_s,
                            "efficiency": r.efficiency, "first_touch_s": r.first_touch_s} for r in self.rows],
        }


def no_tables_note(hw: Hardware, dtype: str) -> str:
    return (f"{hw.name} has no efficiency tables for {dtype}: times are the roofline lower bound "
            "(run `costmodel calibrate` on the device for calibrated times)")


def dropout_parents(rows: Iterable[tuple[Key, Any]], moves: Callable[[Any], bool] = bool) -> set[SubBlock]:
    """The sub-blocks (``Key.sub_block``: ``layers/attention``) whose output has a dropout row
    that moves bytes: `rows` are (key, unfused bytes); the role is tested first (over arrays,
    `moves` is a pass)."""
    return {key.sub_block for key, moved in rows if key.role is Role.dropout and moves(moved)}


def layer_count(groups: dict[tuple[str, str | None], int], key: Key) -> int:
    """Layers a component spans: its group's count (``layers[local]/ffn/up``: L_local), else 1.
    `groups` is ``model.layer_groups(spec)``."""
    if key.layer and key.stack is not None:
        return groups.get((key.stack, key.group), 1)
    return 1


def runs_wide(hw: Hardware, dtype: str, widths: Widths) -> bool:
    """Whether the components an FP8 or NVFP4 checkpoint holds in bf16 (``analysis.held_wide``: the
    LM head, embedding, a router) run off `hw`'s bf16 tables: such a checkpoint's weights (fp8
    per-tensor or block-scaled, nvfp4) at ``--dtype fp8``, and bf16 tables to read (``predict``
    and ``step_grid`` alike)."""
    return dtype == FP8 and (widths.weights or dtype) in TENSOR_SCALED and hw.tables_for("bf16")


def block_rates(a: Analysis, hw: Hardware, attention: AttentionKernel | None) -> ScalarRates | None:
    """The rates a width with a GEMM table of its own (``precision.OWN_GEMM``) runs its quantised
    linear layers at: block-scaled fp8 (fp8-block) TensorRT-LLM's ``fp8_block`` table at the fp8
    peak, else per-tensor fp8's, said so among the op classes read past the tables; NVFP4 (nvfp4)
    its ``nvfp4`` table at the fp4 peak (``precision.PEAK_OF``). None for other widths or without
    a table (``nvfp4_note`` says what an nvfp4 pass reads then)."""
    eff = hw.efficiency
    width = a.weights_dtype
    if width not in OWN_GEMM or eff is None:
        return None
    table = next((d for d in (width, *OWN_GEMM[width]) if hw.tables_for(d)), None)
    if table is None:
        return None
    rates = ScalarRates(eff, hw.peak(table), hw.memory_bandwidth, table, attention)
    if table != width:
        rates.extrapolated.add(f"gemm/{width} (none measured: gemm/{table}, per-tensor)")
    return rates


def nvfp4_note(hw: Hardware, dtype: str) -> str:
    """What an nvfp4 pass on a GPU without an nvfp4 GEMM table reads: the roofline."""
    why = ("has no FP4 tensor cores (no fp4 peak in its profile)" if not hw.has_peak(NVFP4)
           else "has no measured nvfp4 GEMM table")
    return (f"{hw.name} {why}: nvfp4 weights are timed by the roofline at {dtype}'s peak with their "
            "4.5-bit bytes (as a weight-only kernel would read them); NVFP4 GEMMs run on Blackwell")


def physics_floor(flops: float, nbytes: float, peak: float, bandwidth: float) -> float:
    """The least time of any kernel doing `flops` and moving `nbytes`: its FLOPs at the device's
    peak, or its bytes at its full bandwidth, whichever is longer (the roofline of one op,
    Williams et al. 2009). ``component_time`` holds every component's time at or above it plus
    the launch floor of each op, whatever table (or measured time) gave the time."""
    return max(flops / peak, nbytes / bandwidth)


def gemm_time(count: float, M: float, K: float, N: float, peak: float,
              table: MatmulTable | FlopsTable, launches: float = 0) -> float:
    """count products of (M x K) @ (K x N) at the table's efficiency for the shape.

    With `launches` (the kernels they run in: a component's layers), the count / launches
    products of one launch are one batched kernel (an attention core's B x h per-head products
    are one bmm): its efficiency is the stacked GEMM's, ((count / launches) M x K) @ (K x N),
    not a lone product's. On a table measured per shape (launch overhead included) a lone
    decode product (M = 1, K = d_h) would pay a launch each, B x h times a layer."""
    if count == 0 or M == 0 or K == 0 or N == 0:
        return 0.0
    stacked = M * count / launches if launches else M
    return count * 2 * M * K * N / (peak * table(stacked, N, K))


def backward_gemms(count: int, M: int, K: int, N: int) -> tuple[tuple[int, int, int, int], ...]:
    """The forward product and its two backward products: dA = dC B^T, dB = A^T dC."""
    return ((count, M, K, N), (count, M, N, K), (count, K, M, N))


class Rates(Protocol):
    """What a device takes for the parts of a component, before the floor: ``ScalarRates`` for
    one shape (``predict``), ``timing_grid.GridRates`` for numpy arrays of shapes (sweeps). The
    rule that puts the parts together (``component_time``) is written once, over either."""

    floor_s: float
    table: MatmulTable | FlopsTable  # the dtype's matmul table

    def roof(self, flops: tuple[Any, ...], nbytes: Any) -> Any:
        """max(sum(flops) / peak, nbytes / bandwidth): no kernel does it faster (``physics_floor``)."""

    def at_least(self, t: Any, roof: Any, ops: int) -> Any:
        """max(t, roof + ops x floor_s): the physics floor under any table's time."""

    def gemm(self, count: Any, M: Any, K: Any, N: Any) -> Any:
        """Seconds of `count` products (M x K) @ (K x N) (0 when any is 0)."""

    def gemms(self, products: list[tuple[Any, Any, Any, Any]], launches: int) -> Any:
        """Seconds of the (count, M, K, N) products together, each run in `launches` batched
        kernels (``gemm_time``)."""

    def fused_attention(self, spec: Spec, key: Key, scores: tuple[Any, Any, Any, Any], layers: int,
                        ratio: Any) -> Any:
        """Seconds of a flash-attention core over its layers from the measured attention tables
        (``fused_core``), or None where no table applies (the products are timed instead)."""

    def moe(self, spec: Spec, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...], layers: int) -> Any:
        """Seconds of a routed-experts leaf over its layers off the MoE tables (``fused_moe``),
        or None where none applies (the products are timed instead)."""

    def mla_bmm(self, spec: Spec, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...], layers: int) -> Any:
        """Seconds of absorbed MLA's two per-head products (``kv_b``) over its layers off a
        framework's measured ``mla_bmm`` tables (``fused_attention.mla_bmm_read``), or None where
        none applies (the products are timed off the GEMM table instead)."""

    def memory(self, moved: Any, ops: int) -> Any:
        """Seconds to move `moved` bytes in `ops` equal ops (0 when nothing moves)."""

    def at_least_memory(self, t: Any, moved: Any, ops: int) -> Any:
        """max(t, memory(moved, ops))."""

    def first_touch(self, outputs: list[tuple[int, tuple[Any, ...]]]) -> Any:
        """Seconds of writing freshly allocated outputs, (ops, factors of one's bytes) pairs."""

    def maximum(self, a: Any, b: Any) -> Any: ...

    def scale(self, t: Any, num: Any, den: Any) -> Any:
        """t * num / den, and t where den is 0."""


class Quantities(Protocol):
    """What the rule reads of a component's phase numbers (an ``analysis.Row``), all its layers."""

    @property
    def flops_matmul(self) -> Any: ...
    @property
    def flops_matmul_effective(self) -> Any: ...
    @property
    def flops_other(self) -> Any: ...
    @property
    def bytes_unfused(self) -> Any: ...
    @property
    def params(self) -> Any: ...


@dataclass
class Part:
    """One component's time by the rule: its kind, kernels launched, seconds (first touch
    included, and apart), and for a memory component the bytes it moves (gradients included).
    Not frozen: frozen costs several us a Part (the grid makes one a component a call)."""

    kind: str  # "matmul", "memory", "attention" (a measured fused kernel), "fused" (folded into another)
    ops: int
    time_s: Any
    first_touch_s: Any = 0.0
    moved: Any = None
    roof_s: Any = 0.0  # max(FLOPs / peak, least bytes / bandwidth): time_s >= roof_s + ops x floor_s


def component_time(spec: Spec, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...], q: Quantities,
                   layers: int, training: bool,
                   kernels: Kernels, dropped: set[SubBlock], p: int, rates: Rates) -> Part:
    """One component's time on a calibrated profile, by the rule of the module docstring.

    `gemms` are its forward products over all its layers (``Cost.gemms``), `q` its phase
    numbers, `layers` the layers it spans, `dropped` the sub-blocks with a dropout row
    (``dropout_parents``), `p` bytes per element. A component that does nothing in the phase
    (no FLOPs, no bytes) takes no time, floor included: the caller skips it. What it reads of the
    key is ``grid_merge.rule_traits`` (sweeps time components equal in both once): keep the two in step.
    """
    flash = kernels.flash_attention and key.attention_core
    if flash and not training and key.leaf in ("scores", "av") and gemms:
        # One measured kernel runs the core (``fused_core``): half its time on each of its two
        # products' rows (equal FLOPs: QK^T and PV), each held to its own floor (Q and K, V and
        # O: the score matrix stays on chip); its launch counted once, on the scores row.
        c, M, K, N = gemms[0]
        scores = (c, M, K, N) if key.leaf == "scores" else (c, M, N, K)
        t_core = rates.fused_attention(spec, replace(key, leaf="scores"), scores, layers,
                                       scores_ratio(q, rates))
        if t_core is not None:
            ops = layers if key.leaf == "scores" else 0
            least = q.bytes_unfused - p * on_chip(key, gemms)
            roof = rates.roof((q.flops_matmul_effective, q.flops_other), least)
            return Part("attention", ops, rates.at_least(rates.scale(t_core, 1, 2), roof, ops), roof_s=roof)
    if key.part == "experts" and not training:
        t_moe = rates.moe(spec, key, gemms, layers)
        if t_moe is not None:  # the grouped-GEMM kernel's measured time (``fused_moe``)
            if not gemms:  # the activation runs inside it, its FLOPs on the vector units
                roof = rates.roof((q.flops_other,), 0)
                return Part("fused", 0, rates.at_least(0.0, roof, 0), moved=0, roof_s=roof)
            roof = rates.roof((q.flops_matmul, q.flops_other), q.bytes_unfused)
            return Part("matmul", layers, rates.at_least(t_moe, roof, layers), roof_s=roof)
    if key.leaf == "kv_b" and not training:
        t_bmm = rates.mla_bmm(spec, key, gemms, layers)
        if t_bmm is not None:  # absorbed MLA's pre and post products, measured (``mla_bmm_read``)
            # One launch floor a layer, as the products' GEMM reading counts kv_b: two would sit
            # above TensorRT-LLM's own bf16 pair at 128 heads x 128 tokens on an H200 (18.7 us
            # measured; its bytes at full bandwidth 15.7 us, each floor 2.4 us).
            roof = rates.roof((q.flops_matmul, q.flops_other), q.bytes_unfused)
            return Part("matmul", layers, rates.at_least(t_bmm, roof, layers), roof_s=roof)
    if gemms:
        run = [g for c in gemms for g in (backward_gemms(*c) if training else (c,))]
        t = rates.gemms(run, layers)
        flops, least = q.flops_matmul, q.bytes_unfused  # a product reads A and B, writes C once
        if flash:  # only the unmasked pairs are executed; the score matrix stays on chip
            t = rates.scale(t, q.flops_matmul_effective, q.flops_matmul)
            flops = q.flops_matmul_effective
            least = least - (3 if training else 1) * p * on_chip(key, gemms)
        ops = layers * len(run) // len(gemms)
        if not rates.table.sees_bytes:  # a table by op size knows no bytes: the memory table's
            t = rates.at_least_memory(t, least, ops)
        roof = rates.roof((flops, q.flops_other), least)
        fresh = rates.first_touch(gemm_outputs(run, layers, p))
        return Part("matmul", ops, _plus(rates.at_least(t, roof, ops), fresh), fresh, roof_s=roof)
    share = kernels.share(key, dropped)
    if share == 0:  # folded into its host kernel, which still reads its weights (a norm's gain)
        if not q.params:
            return Part("fused", 0, 0.0)
        weights = (3 if training else 1) * p * q.params  # read, and in training read and written
        roof = rates.roof((), weights)
        return Part("fused", 0, rates.at_least(0.0, roof, 0), moved=weights, roof_s=roof)
    moved = q.bytes_unfused if share == 1 else share * q.bytes_unfused  # (over arrays, a pass saved)
    ops = layers * (3 if training else 1)
    outputs: list[tuple[int, tuple[Any, ...]]] = []
    if training:
        extra_ops, extra_bytes, outputs = weight_gradients(spec, key, q.params, layers, p)
        ops, moved = ops + extra_ops, moved + extra_bytes
    fresh = rates.first_touch(outputs)
    roof = rates.roof((q.flops_other,), moved)
    t = rates.at_least(rates.memory(moved, ops), roof, ops)
    return Part("memory", ops, _plus(t, fresh), fresh, moved, roof)


def _plus(t: Any, fresh: Any) -> Any:  # (a number 0 added to an array is a pass over it)
    return t if isinstance(fresh, (int, float)) and not fresh else t + fresh


def on_chip(key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...]) -> Any:
    """Elements of a flash-attention product's operand that never reaches memory (Dao et al.
    2022): the scores' output, count x M x N of QK^T, and AV's input probabilities, count x M x K
    of PV. What the fused kernel moves is then Q and K, and V and O: the keys and values it reads
    are the span's, the cached ones at the cache's width, as the analysis counts them."""
    if key.leaf == "scores":
        return sum(c * M * N for c, M, K, N in gemms)
    if key.leaf == "av":
        return sum(c * M * K for c, M, K, N in gemms)
    return 0


class ScalarRates:
    """``Rates`` at one shape, from a profile's tables (Python numbers; no numpy)."""

    def __init__(self, eff: Efficiency, peak: float, bandwidth: float, dtype: str,
                 attention: AttentionKernel | None = None) -> None:
        self.eff, self.peak, self.bandwidth, self.floor_s = eff, peak, bandwidth, eff.floor_s
        self.table, self.dtype = eff.matmul[dtype], dtype
        self.attention = attention
        self.extrapolated: set[str] = set()  # op classes read outside what was measured
        self.used: set[str] = set()  # measured attention, MLA and MoE tables read (their error bands apply)

    def gemm(self, count: Any, M: Any, K: Any, N: Any, launches: int = 0) -> float:
        if isinstance(self.table, MatmulTable) and count and not self.table.inside(
                M * count / launches if launches else M, N, K):
            self.extrapolated.add("gemm")
        return gemm_time(count, M, K, N, self.peak, self.table, launches)

    def gemms(self, products: list[tuple[Any, Any, Any, Any]], launches: int) -> float:
        return sum(self.gemm(*g, launches) for g in products)

    def fused_attention(self, spec: Spec, key: Key, scores: tuple[Any, Any, Any, Any], layers: int,
                        ratio: Any) -> Any:
        core = fused_core(self.attention, spec, key, scores, layers, ratio)
        return None if core is None else self._read(core.op, core.exact, core.grid(*core.coords)) * (
            core.factor)

    def moe(self, spec: Spec, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...], layers: int) -> Any:
        read = moe_read(self.attention, spec, key, self.dtype)
        if read is not None and read.fallback:
            self.extrapolated.add(read.fallback)
        share = None if read is None else experts_share(read, key, gemms, layers)
        if read is None or share is None:  # no table; or the activation, inside the kernel
            return None if read is None else 0.0
        return self._read(read.op, read.exact, read.grid(share[0])) * share[1]

    def mla_bmm(self, spec: Spec, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...], layers: int) -> Any:
        read = mla_bmm_read(self.attention, spec, key, gemms, self.dtype)
        if read is None:
            return None
        tokens = read.tokens(gemms, layers)
        return sum(self._read(read.op, True, t.grid(read.heads, tokens)) for t in read.tables) * layers

    def _read(self, op: str, exact: bool, got: Lookup) -> float:  # noted as read, or extrapolated
        self.used.add(op)
        if not (exact and got.inside):
            self.extrapolated.add(op)
        return got.time_s

    def memory(self, moved: Any, ops: int) -> float:
        per_op = moved / ops
        return moved / (self.bandwidth * self.eff.memory(per_op)) if per_op else 0.0

    def roof(self, flops: tuple[Any, ...], nbytes: Any) -> float:
        return physics_floor(sum(flops), nbytes, self.peak, self.bandwidth)

    def at_least(self, t: Any, roof: Any, ops: int) -> Any:
        return max(t, roof + ops * self.floor_s)

    def at_least_memory(self, t: Any, moved: Any, ops: int) -> Any:
        return max(t, self.memory(moved, ops))

    def first_touch(self, outputs: list[tuple[int, tuple[Any, ...]]]) -> float:
        return first_touch_s(self.eff, outputs)

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return max(a, b)

    @staticmethod
    def scale(t: Any, num: Any, den: Any) -> Any:
        return t * (num / den) if den else t


def predict(a: Analysis, hw: Hardware, kernels: Kernels = Kernels()) -> Prediction:
    """The calibrated time of `a`'s phase on `hw` (the roofline when `hw` has no tables)."""
    dtype, total = a.dtype, a.total()
    peak, bw = hw.peak(dtype), hw.memory_bandwidth
    flops = executed_flops(a, kernels)
    line = roofline(flops, total.bytes_unfused, hw, dtype)
    fused_line = roofline(flops, total.bytes_fused, hw, dtype)
    training = PHASES[a.phase].training
    calibrated = hw.tables_for(dtype)
    eff = hw.efficiency
    note = None if calibrated else no_tables_note(hw, dtype)
    if (calibrated and a.precision.differs(dtype) and eff is not None and eff.matmul[dtype].sees_bytes
            and not widths_are_measured(a, hw, kernels.flash_attention)):
        # A table over shapes timed its products with weights and cache at the dtype's width:
        # it cannot say what int4 weights or an fp8 cache save (a table by op size, which the
        # bytes' bound completes, can). A width is timed where a table measured at it reads
        # it: the cache by flash attention's, mxfp4 experts by the MoE table's; no product does.
        calibrated = False
        note = (nvfp4_note(hw, dtype) if a.weights_dtype == NVFP4 and not hw.tables_for(NVFP4) else
                f"{hw.name}'s matmul table was measured with {dtype} weights and cache: with "
                f"{a.weights_dtype} weights and a {a.kv_dtype} cache, times are the roofline lower bound")
    rates = (ScalarRates(eff, peak, bw, dtype, attention_kernel(a, hw)) if calibrated and eff is not None
             else None)
    wide = (ScalarRates(eff, hw.peak("bf16"), bw, "bf16")
            if rates is not None and eff is not None and runs_wide(hw, dtype, a.precision) else None)
    block = block_rates(a, hw, rates.attention) if rates is not None else None
    # The gemm shapes of the analysis's own pass: latent attention's convention changes kv_b's.
    costs = model.tree(a.spec, model.numeric_dims(a.spec, a.shape, a.bytes_per_element, a.mla, a.routing))
    rows = []
    groups = model.layer_groups(a.spec)
    dropped = dropout_parents((r.key, r.bytes_unfused) for r in a.rows)  # dropout runs in training only
    for row in a.rows:
        if row.flops == 0 and row.bytes_unfused == 0:
            continue
        cost = costs[row.key]
        layers = layer_count(groups, row.key)
        lower = max(row.flops / peak, row.bytes_unfused / bw)
        if rates is None:
            rows.append(ComponentTime(row.path, "matmul" if cost.gemms else "memory", layers,
                                      row.flops, row.bytes_unfused, lower, lower, 1.0, key=row.key))
            continue
        at = wide if wide is not None and held_wide(row.key) else rates
        if block is not None and cost.matrices and not held_wide(row.key):
            at = block  # a block-scaled or NVFP4 checkpoint's quantised linear layers
        part = component_time(a.spec, row.key, cost.gemms, row, layers, training, kernels, dropped,
                              DTYPE_BYTES[at.dtype] if at is wide else a.bytes_per_element, at)
        t, roof = part.time_s, part.roof_s
        if part.kind == "fused":
            rows.append(ComponentTime(row.path, "fused", 0, row.flops, part.moved or 0, t, roof, 1.0,
                                      key=row.key))
            continue
        rows.append(ComponentTime(row.path, part.kind, part.ops, row.flops,
                                  part.moved if part.kind == "memory" else row.bytes_unfused, t, roof,
                                  roof / t if t else 1.0, part.first_touch_s, row.key))
    return Prediction(
        hardware=hw.name, dtype=dtype, phase=a.phase, kernels=kernels, calibrated=calibrated,
        rows=tuple(rows), roofline_s=line.time_s, roofline_fused_s=fused_line.time_s,
        note=note,
        floor_s=eff.floor_s if eff is not None else 0.0,
        extrapolated=tuple(sorted(set().union(*(r.extrapolated for r in (rates, block) if r is not None)))),
        errors=tables.bands([dtype, *(["bf16"] if wide is not None else []),
                             *([block.dtype] if block is not None else [])],
                            set().union(*(r.used for r in (rates, block) if r is not None)))
        if (tables := hw.kernel_tables()) is not None else {},
    )


def executed_flops(a: Analysis, kernels: Kernels) -> int:
    """The phase's FLOPs as the kernels run them, those ``component_time`` holds each kernel to:
    flash attention executes only the unmasked pairs of the core's products
    (``flops_matmul_effective``), and the elementwise FLOPs of a step folded into another kernel
    (flash's softmax, a fused norm: a few per element, on the vector units beside the host's
    matmul or bytes) are not counted."""
    flops = a.total().flops
    for r in a.rows:
        if kernels.flash_attention and r.key.attention_core:
            flops -= r.flops_matmul - r.flops_matmul_effective
        if not r.flops_matmul and kernels.folds(r.key):
            flops -= r.flops_other
    return flops


def scores_ratio(q: Quantities, rates: Rates) -> Any:
    """The share of the score matrix a flash kernel computes (unmasked pairs / all pairs; 1
    where there are none)."""
    return rates.scale(1.0, q.flops_matmul_effective, q.flops_matmul)


def gradient_bytes(params: Any, p: int) -> Any:
    """A non-matmul weight's gradient in a training step: zero-filled, then written."""
    return 2 * params * p


def table_gradients(spec: Spec) -> tuple[int, int]:
    """(lookups, adds): the token table's gradient contributions from lookups (one per stack),
    and the out-of-place adds that autograd sums all contributions with (a tied head adds one)."""
    lookups = 2 if spec.is_encoder_decoder else 1
    return lookups, lookups + int(spec.tied_head) - 1


def weight_gradients(spec: Spec, key: Key, params: Any, layers: int,
                     p: int) -> tuple[int, Any, list[tuple[int, tuple[Any, ...]]]]:
    """A memory component's training-step extras: (ops, bytes, fresh outputs as (ops, factors
    of one's bytes)). Its weights' dense gradients, one per layer; for the token table one per
    lookup, then the adds that sum them with a tied head's."""
    if key != TOKEN_TABLE:
        return 0, gradient_bytes(params, p), [(layers, (params / layers, p))]
    lookups, adds = table_gradients(spec)
    table = params * p
    return adds, lookups * gradient_bytes(params, p) + 3 * adds * table, [(lookups + adds, (params, p))]


def gemm_outputs(gemms: Iterable[tuple[Any, Any, Any, Any]], layers: int,
                 p: int) -> list[tuple[int, tuple[Any, ...]]]:
    """(ops, factors of one op's output bytes) of each product: a layer's batch of
    count / layers products of M x N (the factors, not their product: the grid shares the
    lookups of outputs that differ by a number only)."""
    return [(layers, (count / layers, M, N, p)) for count, M, K, N in gemms]


def first_touch_s(eff: Efficiency, outputs: Iterable[tuple[int, tuple[Any, ...]]]) -> float:
    """Seconds of writing freshly allocated outputs ((ops, factors of one's bytes) pairs) on
    `eff`'s device."""
    table = eff.first_touch
    return 0.0 if table is None else sum(n * table(math.prod(factors)) for n, factors in outputs if n)
