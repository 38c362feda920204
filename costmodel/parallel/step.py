"""One training step on a layout: per-GPU compute, every collective, the pipeline bubble, memory.

The step, for m micro-batches per DP rank on p pipeline stages with v chunks per device
(Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", 1F1B and interleaved schedules):

    step = m * t_stage(slowest) + (p - 1)/v * t_stage(mean)     the pipeline, bubble included
         + exposed point-to-point + exposed data-parallel traffic + optimizer step

where t_stage is one micro-batch's forward and backward through one device's layers, with its
exposed tensor-, context- and expert-parallel communication. What overlaps is an option
(``Overlap``); the default is what Megatron-LM did in Korthikanti et al. 2022: nothing
overlaps but ring attention, which hides its transfers behind the attention it feeds.

A GPU's share of the work comes from the exact formulas: a tensor-parallel rank runs the spec
with its heads, key/value heads, FFN width and vocabulary split over t (``shard_spec``; the
norms, residuals and dropout stay whole unless sequence parallelism splits them too), and its
seconds and bytes come from the single-device models in ``device``.

In the code: one collector per parallelism (``tensor_parallel`` ... ``optimizer_step``, each its
exposed seconds and its collectives), composed by ``StepModel.step``; a micro-batch's work per
layer group (``StepModel.micro``) and each stage's memory (``StepModel.stage_memory``).

Long because: the step's types (``Overlap``, ``LayerWork``, ``MicroBatch``, ``StageMemory``,
``Step``), the collectors that read them and the model that composes them are one unit that
changes together; the seam, if it is cut, is the collectors (``Pace`` to ``compute_on``) into a
module of their own, with the types they read moved beneath both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from costmodel import model
from costmodel.analysis import Row, analyze
from costmodel.components.key import TOKEN_TABLE, Key, Role
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import ErrorBand, Reads
from costmodel.parallel import device
from costmodel.parallel.checked import step_check
from costmodel.parallel.cluster import Cluster
from costmodel.parallel.collectives import Collective, collective, weakest
from costmodel.parallel.collectives import reads as collective_reads
from costmodel.parallel.engine import Engine, Overlap
from costmodel.parallel.layout import Layout, LayoutError, Recompute, check, experts, stage_layers
from costmodel.parallel.shard import shard_spec
from costmodel.runtime.kernels import KERNELS, default_kernels, is_default
from costmodel.runtime.kernels import to_dict as kernels_dict
from costmodel.runtime.timing import Kernels
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES, MASK_BYTES

#: A layer's leaves on the whole hidden state around its sub-blocks (the block's norms, residual
#: adds and output dropout): whole on every TP rank unless SP. The attention core is
#: ``Key.attention_core`` (``components.key.ATTENTION_CORE``).
REPLICATED = ("norm", "post_norm", "residual", "dropout")
#: Reported with the attention core: the positions and norms applied to Q and K, and the sinks.
BESIDE_CORE = ("rope", "qk_norm", "sinks")


def _stage(key: Key) -> str:
    """Where a component runs in a pipeline: in the ``layers``, on the ``first`` stage (the
    embedding) or on the ``last`` (the stack's own final norm and bias, the head, the loss)."""
    if key.layer:
        return "layers"
    if key.first_stage:
        return "first"
    return "last"


#: Row-parallel linears (Shoeybi et al. 2019): their input is already split; every other layer
#: matmul outside the attention core is column-parallel (Q, K, V; the FFN's up and gate).
ROW_PARALLEL = ("out", "down", "shared_down", "router")


def _column_parallel(key: Key) -> str | None:
    """The column-parallel linear a layer's matmul row belongs to ("attention" for Q, K and V, one
    GEMM in Megatron-LM; "ffn" for the FFN's first), or None for a row-parallel one."""
    if key.leaf in ROW_PARALLEL or key.attention_core:
        return None
    return "ffn" if key.block == "ffn" else "attention"


def category(key: Key) -> str:
    """Where a component's time is reported: a handful of groups a reader recognises."""
    stage = _stage(key)
    if stage == "first":
        return "embedding"
    if stage == "last":
        # the head (an LM head, its scales and caps; an encoder's pooler or task head) and the loss
        return "lm_head + loss" if key.role in (Role.head, Role.loss) else "final norm"
    if key.leaf in REPLICATED:
        return "norms, residuals, dropout"
    if key.block == "ffn":
        return "ffn"
    if key.attention_core or key.leaf in BESIDE_CORE:
        return "attention core"
    return "attention projections"


@dataclass(frozen=True)
class LayerWork:
    """One layer of one layer group (``model.layer_groups``: a dense and a sparse layer of a
    mixture of experts differ, as do local and global attention) on one GPU for one micro-batch."""

    seconds: dict[str, float]  # category -> seconds (forward + backward)
    matmul_s: float
    column_linear_s: tuple[float, ...]  # each column-parallel linear's matmuls, forward + backward
    core_s: float  # the attention core
    recompute_s: float
    flops: float
    recompute_flops: float
    params: int  # this TP rank's, every routed expert included
    expert_params: int  # of which the routed experts' (split over the EP ranks)
    sparse: bool  # a mixture-of-experts layer (its tokens cross the EP all-to-alls)

    @property
    def compute_s(self) -> float:
        return sum(self.seconds.values()) + self.recompute_s


@dataclass(frozen=True)
class MicroBatch:
    """One GPU's work for one micro-batch: per layer of each group, and the first and last stage
    extras."""

    groups: dict[str | None, LayerWork]
    counts: dict[str | None, int]  # layers of each group in the whole model
    first_s: float
    last_s: float
    last_by_category: dict[str, float]
    first_flops: float
    last_flops: float
    first_params: int
    last_params: int
    embedding_table: int  # the word-embedding rows this rank holds (tied copy on the last stage)
    reads: Reads = Reads()  # what its times read of the measured kernel tables (bands, extrapolation)

    def _mean(self, value: Callable[[LayerWork], float]) -> float:
        n = sum(self.counts.values())
        return sum(c * value(self.groups[g]) for g, c in self.counts.items()) / n if n else 0.0

    # The mean layer: what a model of one kind of layer (every dense spec) has on every layer.
    @property
    def layer_s(self) -> dict[str, float]:
        n = sum(self.counts.values())
        out: dict[str, float] = {}
        for g, count in self.counts.items():
            for c, sec in self.groups[g].seconds.items():
                out[c] = out.get(c, 0.0) + count * sec / n
        return out

    @property
    def recompute_s(self) -> float:
        return self._mean(lambda w: w.recompute_s)

    @property
    def layer_params(self) -> float:
        return self._mean(lambda w: w.params)


@dataclass(frozen=True)
class StageMemory:
    """What one GPU of one pipeline stage holds during the step, in bytes (``StepModel.stage_memory``);
    ``runtime.memory.Memory`` is one device's holdings outside a parallel layout."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    recompute_working_set: float
    stage: str

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.recompute_working_set

    def to_dict(self) -> dict[str, Any]:
        """Bytes as whole numbers; the total is the sum of the parts as printed."""
        parts = {k: round(getattr(self, k)) for k in ("weights", "gradients", "optimizer", "activations",
                                                      "recompute_working_set")}
        return parts | {"total": sum(parts.values()), "stage": self.stage}


@dataclass(frozen=True)
class Step:
    """One training step: where its time goes, what each GPU holds, and the rates."""

    spec: Spec
    cluster: Cluster
    layout: Layout
    seq: int
    dtype: str
    overlap: Overlap
    recipe: device.ParameterBytes
    step_time_s: float
    breakdown: dict[str, float]  # critical-path seconds by part; sums to step_time_s
    compute_by_component: dict[str, float]
    collectives: tuple[tuple[Collective, float, float], ...]  # (call, calls per step, exposed seconds)
    memory: StageMemory
    memory_last: StageMemory
    model_flops: float
    hardware_flops: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    memory_middle: StageMemory | None = None  # the fullest middle stage, when the stages are unequal
    kernels: Kernels = KERNELS["megatron-2022"]  # what the time and the activations assume
    engine: str | None = None  # the framework's preset (``engine.ENGINES``), None for none
    compute_reads: Reads = Reads()  # what the compute read of the measured kernel tables (MicroBatch)
    #: the ``breakdown`` key each of ``collectives`` is exposed under, in order ("tp_comm", "pp_comm",
    #: ...): the pipeline's all-gather runs on the TP group but is the pipeline's, its sends' time
    parts: tuple[str, ...] = ()

    @property
    def reads(self) -> Reads:
        """What the step's time read of the device's measured tables, its compute and its
        collectives (``devices.kernels.Reads``): the error bands and the op classes extrapolated.
        Worked out when asked: ``plan`` builds thousands of steps and shows ten."""
        return Reads.union([self.compute_reads,
                            collective_reads(self.cluster, (c for c, _, _ in self.collectives))])

    @property
    def errors(self) -> Mapping[str, tuple[ErrorBand, ...]]:
        return self.reads.errors

    @property
    def extrapolated(self) -> tuple[str, ...]:
        return self.reads.extrapolated

    @property
    def tokens(self) -> int:
        return self.layout.global_batch * self.seq

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_time_s

    @property
    def peak(self) -> float:
        return self.cluster.hardware.peak(self.dtype) * self.layout.gpus

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation (Chowdhery et al. 2022): the model's FLOPs (no recompute) per
        second over the peak of every GPU."""
        return self.model_flops / self.step_time_s / self.peak

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: recomputed work counted too."""
        return self.hardware_flops / self.step_time_s / self.peak

    @property
    def per_gpu(self) -> StageMemory:
        """The fullest pipeline stage (the first or the last, unless the stages are unequal)."""
        stages = [self.memory, self.memory_last] + ([self.memory_middle] if self.memory_middle else [])
        return max(stages, key=lambda m: m.total)

    @property
    def fits(self) -> bool:
        return self.per_gpu.total <= self.cluster.hardware.memory_bytes

    def by_collective(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for c, calls, exposed in self.collectives:
            key = f"{c.group}/{c.kind}"
            entry = out.setdefault(key, {"calls": 0.0, "bytes_sent": 0.0, "time_s": 0.0, "exposed_s": 0.0,
                                         "ranks": c.ranks, "link": c.link, "basis": c.basis})
            entry["basis"] = weakest(entry["basis"], c.basis)
            entry["calls"] += calls
            entry["bytes_sent"] += calls * c.bytes_sent
            entry["time_s"] += calls * c.time_s
            entry["exposed_s"] += exposed
        return out

    def train_time_s(self, tokens: float) -> float:
        return tokens / self.tokens_per_s

    def to_dict(self, tokens: float | None = None) -> dict[str, Any]:
        hw = self.cluster.hardware
        data: dict[str, Any] = {
            "spec": self.spec.name, "cluster": self.cluster.name, "device": hw.name, "seq": self.seq,
            "dtype": self.dtype, "layout": self.layout.to_dict(), "engine": self.engine,
            "overlap": self.overlap.to_dict(),
            "kernels": kernels_dict(self.kernels, is_default(self.kernels, hw, "train")),
            "recipe": self.recipe.label(self.dtype),
            "step_time_s": self.step_time_s, "breakdown_s": dict(self.breakdown),
            "compute": {"by_component_s": dict(self.compute_by_component)},
            "comm": {"by_collective": self.by_collective()},
            "mfu": self.mfu, "hfu": self.hfu, "tokens_per_step": self.tokens,
            "tokens_per_s": self.tokens_per_s,
            "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
            "memory": {"per_gpu": self.per_gpu.to_dict(), "first_stage": self.memory.to_dict(),
                       "last_stage": self.memory_last.to_dict(), "device_bytes": int(hw.memory_bytes)}
                      | ({"middle_stage": self.memory_middle.to_dict()} if self.memory_middle else {}),
            "fits": self.fits, "notes": list(self.notes), **self.reads.to_dict(),
            "checked_against": sc.to_dict() if (sc := step_check(hw.name)) else None,
        }
        if tokens is not None:
            t = self.train_time_s(tokens)
            data["train"] = {"tokens": tokens, "time_s": t, "days": t / 86400,
                             "gpu_hours": t * self.layout.gpus / 3600}
        return data


# --- one collector per parallelism ---------------------------------------------------------------
# Each parallelism's communication in one step, as torchtitan gives each its own module: the
# seconds it exposes (per layer of each layer group, for those inside the layers) and its
# collectives as (call, calls per step, exposed seconds). ``StepModel.step`` composes them.

#: (collective, calls per step, exposed seconds)
Calls = list[tuple[Collective, float, float]]
#: seconds per layer of each layer group
PerLayer = dict[str | None, float]
#: ``StepModel.collective``: (kind, group, ranks, size, stride) -> the call on this cluster
CallOn = Callable[..., Collective]


@dataclass(frozen=True)
class Pace:
    """The pipeline stage that sets the pace (the slowest): its layers of each group, the step's
    micro-batches, and whether it holds the embedding (first) or the head (last)."""

    stage: int
    groups: dict[str | None, int]
    layers: int
    micro_batches: int
    first: bool
    last: bool

    def on(self, per_layer: PerLayer) -> float:
        """`per_layer`'s seconds over this stage's layers and the step's micro-batches."""
        return self.micro_batches * sum(n * per_layer[g] for g, n in self.groups.items())


@dataclass(frozen=True)
class TensorParallel:
    """Tensor parallel (Shoeybi et al. 2019), per layer: the two row-parallel linears all-reduce
    their output forward (again in full recompute's replay), the two column-parallel ones the
    gradient of their input backward. Under sequence parallelism (Korthikanti et al.) each
    forward all-reduce is a reduce-scatter, each column-parallel input an all-gather (forward,
    and again backward: Megatron-LM does not keep the gathered input), the backward of each
    reduce-scatter an all-gather, each input gradient a reduce-scatter. Which of them run beside
    a GEMM: ``Overlap.tp_backward`` (the column-parallel backward's, each beside its own linear's
    weight- or input-gradient GEMM, a third of the linear's forward + backward time) and
    ``Overlap.tp`` (all, behind the matmuls). The vocabulary-parallel embedding all-reduces its
    output; the head all-reduces the gradient of its input (all-gather and reduce-scatter under
    SP)."""

    layer: tuple[tuple[Collective, int, int], ...]  # (call, per layer, of which asynchronous)
    exposed: PerLayer
    hidden: dict[str | None, dict[str, float]]  # of the asynchronous calls, exposed, by kind
    embedding: Collective
    head: tuple[Collective, ...]
    overlap: Overlap

    @property
    def layer_s(self) -> float:
        """Every TP collective of one layer, exposed or not."""
        return sum(c.time_s * n for c, n, _ in self.layer)

    @property
    def first_s(self) -> float:
        return self.embedding.time_s

    @property
    def last_s(self) -> float:
        return sum(c.time_s for c in self.head)

    def seconds(self, pace: Pace) -> float:
        """Exposed on the pacing stage: its layers', and the embedding's and head's it holds."""
        edge = (self.first_s if pace.first else 0.0) + (self.last_s if pace.last else 0.0)
        return pace.on(self.exposed) + pace.micro_batches * edge

    def calls(self, pace: Pace) -> Calls:
        ov, m = self.overlap, pace.micro_batches
        out: Calls = []
        for c, n, k in self.layer:
            if ov.tp:
                tp_s = self.layer_s
                exposed = {g: c.time_s * n * (self.exposed[g] / tp_s if tp_s else 0.0) for g in pace.groups}
            else:
                exposed = {g: c.time_s * (n - (k if ov.tp_backward else 0)) + self.hidden[g].get(c.kind, 0.0)
                           for g in pace.groups}
            out.append((c, m * pace.layers * n, pace.on(exposed)))
        if pace.first:
            out.append((self.embedding, m, m * self.embedding.time_s))
        if pace.last:
            for c in self.head:
                out.append((c, m, m * c.time_s))
        return out


def tensor_parallel(lo: Layout, mb: MicroBatch, call: CallOn, x: float, ov: Overlap) -> TensorParallel:
    """`x`: one micro-batch's b*s*h activations, in bytes."""
    t, sp = lo.tp, lo.sequence_parallel
    replays = 2 if lo.recompute is Recompute.full else 1
    ag, rs = call("all_gather", "tp", t, x), call("reduce_scatter", "tp", t, x)
    ar = call("all_reduce", "tp", t, x)
    # (call, calls per layer, of which asynchronous in the column-parallel backward)
    layer: tuple[tuple[Collective, int, int], ...]
    if sp:
        layer = ((ag, 2 * replays + 2 + 2, 2), (rs, 2 * replays + 2, 2))
    else:
        layer = ((ar, 2 * replays + 2, 2),)
    tp_s = sum(c.time_s * n for c, n, _ in layer)
    exposed: PerLayer = {}
    hidden_by: dict[str | None, dict[str, float]] = {}
    for g, w in mb.groups.items():
        column = w.column_linear_s if t > 1 else ()
        sync_s = sum(c.time_s * (n - (k if ov.tp_backward else 0)) for c, n, k in layer)
        hidden: dict[str, float] = {}
        if ov.tp_backward:
            for c, _, _ in layer:  # one call per column-parallel linear, beside a third of it
                hidden[c.kind] = sum(max(0.0, c.time_s - lin / 3) for lin in column) + \
                                c.time_s * max(0, 2 - len(column))
        hidden_by[g] = hidden
        exposed[g] = max(0.0, tp_s - w.matmul_s) if ov.tp else sync_s + sum(hidden.values())
    embedding = call("reduce_scatter" if sp else "all_reduce", "tp", t, x)
    head = (call("all_gather", "tp", t, x), call("reduce_scatter", "tp", t, x)) if sp \
        else (call("all_reduce", "tp", t, x),)
    return TensorParallel(layer, exposed, hidden_by, embedding, head, ov)


@dataclass(frozen=True)
class ContextParallel:
    """Context parallel (ring attention): cp - 1 passes of the local K and V forward, of K, V and
    their gradients backward, per layer; hidden behind the attention core with ``Overlap.cp``."""

    ranks: int
    send: Collective
    sends: int  # per layer
    exposed: PerLayer

    def seconds(self, pace: Pace) -> float:
        return pace.on(self.exposed)

    def calls(self, pace: Pace) -> Calls:
        if self.ranks <= 1:
            return []
        return [(self.send, pace.micro_batches * pace.layers * self.sends, pace.on(self.exposed))]


def context_parallel(lo: Layout, spec: Spec, mb: MicroBatch, call: CallOn, s_local: int, act_bytes: int,
                     ov: Overlap) -> ContextParallel:
    t, cp = lo.tp, lo.cp
    k_local = max(1, spec.n_kv_heads // t)
    kv = 2 * lo.micro_batch * s_local * k_local * spec.head_dim * act_bytes
    send = call("p2p", "cp", 2 if cp > 1 else 1, kv, stride=t)
    sends = 3 * (cp - 1)
    cp_s = sends * send.time_s
    exposed = {g: max(0.0, cp_s - w.core_s) if ov.cp else cp_s for g, w in mb.groups.items()}
    return ContextParallel(cp, send, sends, exposed)


@dataclass(frozen=True)
class ExpertParallel:
    """Expert parallel: dispatch and combine all-to-all forward, and again backward, of the top_k
    copies of each token this rank routes (Lepikhin et al. 2020), in sparse layers only."""

    all_to_all: Collective | None  # None: no EP
    exposed: PerLayer
    sparse: dict[str | None, bool]

    def seconds(self, pace: Pace) -> float:
        return pace.on(self.exposed)

    def calls(self, pace: Pace) -> Calls:
        if self.all_to_all is None:
            return []
        sparse_layers = sum(n for g, n in pace.groups.items() if self.sparse[g])
        return [(self.all_to_all, pace.micro_batches * sparse_layers * 4, pace.on(self.exposed))]


def expert_parallel(lo: Layout, mb: MicroBatch, moe: tuple[int, int] | None, call: CallOn, x: float,
                    ov: Overlap) -> ExpertParallel:
    """`moe`: (experts, top_k) of a sparse spec (``layout.experts``), None for a dense one."""
    ep_s = 0.0
    a2a = None
    if moe and lo.ep > 1:
        tokens_out = moe[1] * x / (lo.tp if lo.sequence_parallel else 1)
        a2a = call("all_to_all", "ep", lo.ep, tokens_out, stride=lo.tp * lo.cp)
        ep_s = 4 * a2a.time_s
    exposed: PerLayer = {}
    for g, w in mb.groups.items():
        ep_g = ep_s if w.sparse else 0.0
        exposed[g] = max(0.0, ep_g - sum(w.seconds.values())) if ov.ep else ep_g
    return ExpertParallel(a2a, exposed, {g: w.sparse for g, w in mb.groups.items()})


@dataclass(frozen=True)
class Pipeline:
    """The 1F1B schedule over p stages of v chunks each (Narayanan et al. 2021): each stage's
    time per micro-batch, the slowest that sets the pace, the bubble of (p - 1)/v mean stages;
    and the point-to-point sends. Each device sends its activations forward and gradients back,
    per chunk per micro-batch, split over the TP ranks (Narayanan et al.'s scatter/gather);
    without SP the receiving TP ranks all-gather the pieces over NVLink (Megatron-LM of June
    2022, megatron/p2p_communication.py: gather_split_1d_tensor after each receive; under SP the
    tensor is already split along the sequence and is not gathered)."""

    stage_s: tuple[float, ...]  # one micro-batch's forward and backward on each stage
    slow: int
    bubble: float
    send: Collective
    sends: int  # per step
    gather: Collective | None
    overlap: Overlap

    @property
    def slow_s(self) -> float:
        return self.stage_s[self.slow]

    @property
    def exposed_s(self) -> float:
        pp_s = self.sends * (self.send.time_s + (self.gather.time_s if self.gather else 0.0))
        return 0.0 if self.overlap.pp else pp_s

    def calls(self) -> Calls:
        if len(self.stage_s) <= 1:
            return []
        ov, n = self.overlap, self.sends
        out: Calls = [(self.send, n, 0.0 if ov.pp else n * self.send.time_s)]
        if self.gather is not None:
            out.append((self.gather, n, 0.0 if ov.pp else n * self.gather.time_s))
        return out


def pipeline(lo: Layout, on_device: tuple[dict[str | None, int], ...], t_layer: PerLayer, first_s: float,
             last_s: float, call: CallOn, x: float, ov: Overlap, scatter_gather: bool = True) -> Pipeline:
    """`scatter_gather`: each TP rank sends its 1/t piece and the receivers all-gather it (Narayanan
    et al. 2021, section 4.1); without it (DeepSpeed's PipelineEngine) every TP rank sends the whole
    tensor. `on_device`: layers of each group on each device (``StepModel.stage_groups``); `t_layer`:
    each group's layer, its exposed communication included; `first_s`, `last_s`: the first and
    last stage's extra seconds (embedding, head and loss)."""
    t, p, v, m = lo.tp, lo.pp, lo.interleave, lo.micro_batches
    stage_s = [sum(n * t_layer[g] for g, n in on_device[i].items())
               + (first_s if i == 0 else 0.0) + (last_s if i == p - 1 else 0.0) for i in range(p)]
    slow = max(range(p), key=lambda i: (stage_s[i], -i))  # the slowest stage sets the pace
    bubble = (p - 1) / v * (sum(stage_s) / p)
    piece = x / t if scatter_gather or lo.sequence_parallel else x
    send = call("p2p", "pp", 2 if p > 1 else 1, piece, stride=t * lo.cp * lo.dp)
    sends = 2 * v * m if p > 1 else 0
    gather = call("all_gather", "tp", t, x) if (p > 1 and t > 1 and not lo.sequence_parallel
                                               and scatter_gather) else None
    return Pipeline(tuple(stage_s), slow, bubble, send, sends, gather, ov)


@dataclass(frozen=True)
class DataParallel:
    """Data parallel with ZeRO (Rajbhandari et al. 2020): the gradients of this rank's parameters
    over the DP x CP ranks ("dp"); the routed experts' over the DP x CP / EP ranks that hold the
    same experts ("edp", Megatron-Core's expert-data-parallel group, EP innermost within DP).
    Stage 0 all-reduces the gradients once a step; 1 reduce-scatters them and all-gathers the
    updated weights; 2 reduce-scatters per micro-batch; 3 also gathers the weights forward and
    backward of every micro-batch. ``Overlap.dp`` hides the per-step calls behind the last
    micro-batch's backward, the per-micro-batch ones behind the next."""

    per_step: tuple[Collective, ...]
    per_micro: tuple[Collective, ...]
    exposed_s: float
    micro_batches: int

    def calls(self) -> Calls:
        if not (self.per_step or self.per_micro):
            return []
        m = self.micro_batches
        total = sum(c.time_s for c in self.per_step) + m * sum(c.time_s for c in self.per_micro)
        out: Calls = [(c, 1, self.exposed_s * c.time_s / total if total else 0) for c in self.per_step]
        out += [(c, m, self.exposed_s * m * c.time_s / total if total else 0) for c in self.per_micro]
        return out


def data_parallel(lo: Layout, dense: int, routed: int, recipe: device.ParameterBytes, call: CallOn,
                  slow_s: float, ov: Overlap) -> DataParallel:
    """`dense`, `routed`: the parameters of the fullest stage's GPU (``StepModel._stage_params``);
    `slow_s`: the pacing stage's micro-batch."""
    t, m = lo.tp, lo.micro_batches
    n_dp = lo.dp * lo.cp
    per_step: list[Collective] = []
    per_micro: list[Collective] = []
    for group, ranks, n_params, stride in (("dp", n_dp, dense, t), ("edp", n_dp // lo.ep, routed, t * lo.ep)):
        if not n_params or ranks <= 1:
            continue
        grads, weights = n_params * recipe.grad_bytes, n_params * recipe.weight_bytes
        if lo.zero == 0:
            per_step.append(call("all_reduce", group, ranks, grads, stride))
        elif lo.zero == 1:
            per_step += [call("reduce_scatter", group, ranks, grads, stride),
                         call("all_gather", group, ranks, weights, stride)]
        elif lo.zero == 2:
            per_micro.append(call("reduce_scatter", group, ranks, grads, stride))
            per_step.append(call("all_gather", group, ranks, weights, stride))
        else:
            per_micro += [call("all_gather", group, ranks, weights, stride)] * 2
            per_micro.append(call("reduce_scatter", group, ranks, grads, stride))
    step_s = sum(c.time_s for c in per_step)
    micro_s = sum(c.time_s for c in per_micro)
    backward = slow_s * 2 / 3
    if ov.dp:
        exposed = max(0.0, step_s - backward) + m * max(0.0, micro_s - slow_s)
    else:
        exposed = step_s + m * micro_s
    return DataParallel(tuple(per_step), tuple(per_micro), exposed, m)


def embedding_sync(lo: Layout, spec: Spec, mb: MicroBatch, recipe: device.ParameterBytes,
                   call: CallOn) -> Calls:
    """Tied embeddings on different stages: the first and last stage sum their gradients."""
    if lo.pp <= 1 or not spec.tied_head:
        return []
    tie = call("all_reduce", "pp", 2, mb.embedding_table * recipe.grad_bytes,
               stride=lo.tp * lo.cp * lo.dp * (lo.pp - 1))
    return [(tie, 1, tie.time_s)]


def optimizer_step(lo: Layout, dense: int, routed: int, recipe: device.ParameterBytes, hw: Hardware) -> float:
    """The optimizer's update of the fullest stage's parameters, ZeRO-sharded from stage 1 on (the
    routed experts' over the expert-data-parallel ranks)."""
    n_dp = lo.dp * lo.cp
    shard, expert_shard = (n_dp, n_dp // lo.ep) if lo.zero >= 1 else (1, 1)
    return device.optimizer_seconds(dense / shard + routed / expert_shard, recipe, hw)


def compute_on(pace: Pace, mb: MicroBatch) -> dict[str, float]:
    """The pacing stage's compute over the step's micro-batches, by category."""
    m = pace.micro_batches
    compute: dict[str, float] = {}
    for g, n in pace.groups.items():
        for cat, sec in mb.groups[g].seconds.items():
            compute[cat] = compute.get(cat, 0.0) + m * n * sec
    recompute = sum(n * mb.groups[g].recompute_s for g, n in pace.groups.items())
    if recompute:
        compute["recompute"] = m * recompute
    if pace.first:
        compute["embedding"] = m * mb.first_s
    if pace.last:
        for cat, sec in mb.last_by_category.items():
            compute[cat] = compute.get(cat, 0.0) + m * sec
    return compute


class StepModel:
    """Steps of one spec on one cluster at one sequence length; caches each shard's analysis."""

    def __init__(self, spec: Spec, cluster: Cluster, seq: int = 2048, dtype: str = "bf16",
                 recipe: device.ParameterBytes | None = None, overlap: Overlap | None = None,
                 kernels: Kernels | None = None, engine: Engine | None = None) -> None:
        """`kernels`: what the compute and the activations assume (``runtime.kernels``); default,
        what the cluster's GPUs run today: flash attention (``flash``). Korthikanti et al. 2022's
        Megatron-LM is ``KERNELS["megatron-2022"]`` (``device.MEGATRON_KERNELS``). `engine`: a
        framework's preset (``engine.ENGINES``), whose overlaps, kernels and recipe stand where
        `overlap`, `kernels` and `recipe` are not given, and whose limits ``check`` applies.
        Without one: ``Overlap()``, flash, ``device.MEGATRON``."""
        self.spec, self.cluster, self.seq, self.dtype = spec, cluster, seq, dtype
        self.engine = engine
        self.recipe = recipe or (engine.recipe if engine else device.MEGATRON)
        self._explicit_overlap = overlap
        self.overlap = overlap or (engine.overlap if engine else Overlap())
        self.hw = cluster.hardware
        if kernels is None and engine is not None:
            kernels = KERNELS[engine.kernels]
        self.kernels = kernels if kernels is not None else KERNELS[default_kernels(self.hw, "train")]
        self.hw.peak(dtype)
        self.act_bytes = DTYPE_BYTES[dtype]
        self._micro: dict[tuple[int, int, int, bool, Recompute], MicroBatch] = {}
        self._calls: dict[tuple[str, str, int, float, int], Collective] = {}
        self._acts: dict[tuple[int, int, int, bool, Recompute], device.Activations] = {}
        self._full = analyze(spec, "train", batch=1, seq=seq, dtype=dtype)
        self._flops_per_sequence = float(self._full.total().flops)
        self._recompute_per_sequence = {rc: self._recompute_flops(rc) for rc in Recompute}
        self.experts = experts(spec)
        if spec.is_encoder_decoder:
            raise LayoutError(f"{spec.name}: parallel layouts are modelled for decoder-only specs")
        # Layer groups (model.layer_groups): their counts and (attention kind, sparse FFN?).
        self.counts = {g: n for (_, g), n in model.layer_groups(spec).items()}
        self.kinds = {g: model.group_kinds(spec, g) for g in self.counts}
        self._stage_groups: dict[tuple[int, int, bool], tuple[dict[str | None, int], ...]] = {}

    def collective(self, kind: str, group: str, ranks: int, size: float, stride: int = 1) -> Collective:
        """``collectives.collective`` on this cluster, remembered: layouts share most calls."""
        key = (kind, group, ranks, size, stride)
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = collective(self.cluster, kind, group, ranks, size, stride)
        return call

    # --- one micro-batch on one GPU -------------------------------------------------------------

    def micro(self, tp: int, b: int, cp: int, sp: bool, recompute: Recompute) -> MicroBatch:
        key = (tp, b, cp, sp, recompute)
        if key not in self._micro:
            self._micro[key] = self._micro_batch(*key)
        return self._micro[key]

    def _micro_batch(self, tp: int, b: int, cp: int, sp: bool, recompute: Recompute) -> MicroBatch:
        # The whole depth, not one period of the pattern: a mixture of experts whose first layers
        # are dense (DeepSeek's first_k_dense) or whose sparse layers skip (moe_every) has groups
        # that one period would miss. Each group's rows hold its count of layers.
        shard = shard_spec(self.spec, tp)
        a = analyze(shard, "train", batch=b, seq=self.seq // cp, dtype=self.dtype)
        secs, reads = device.component_times(a, self.hw, self.kernels)
        flash = self.kernels.flash_attention
        counts = self.counts
        last_cat: dict[str, float] = {}
        first_flops = last_flops = 0.0
        first_params = last_params = 0
        softmax = {r.key.sub_block: r.bytes_unfused for r in a.rows
                   if r.key.attention_core and r.key.leaf == "softmax"}
        acc: dict[str | None, dict[str, Any]] = {
            g: {"seconds": {}, "mm": 0.0, "column": {}, "core": 0.0, "rec": 0.0, "flops": 0.0,
                "rec_flops": 0.0, "params": 0, "experts": 0} for g in counts}

        def add(g: dict[str, Any], cat: str, t: float, f: float, in_core: bool) -> None:
            g["seconds"][cat] = g["seconds"].get(cat, 0.0) + t
            g["flops"] += f
            if in_core:
                g["core"] += t
            if recompute is Recompute.full or (recompute is Recompute.selective and in_core):
                g["rec"] += t / 3  # the forward again (a training row is forward + 2 x forward)
                g["rec_flops"] += f / 3

        for r in a.rows:
            key = r.key
            stage = _stage(key)
            t, f = secs.get(key, 0.0), float(r.flops)
            if stage != "layers":
                if stage == "first":
                    first_flops += f
                    first_params += r.params
                else:
                    last_flops += f
                    last_params += r.params
                    last_cat[category(key)] = last_cat.get(category(key), 0.0) + t
                continue
            g = acc[key.group]
            g["params"] += r.params
            if key.routed_expert:
                g["experts"] += r.params
            in_core = key.attention_core
            if key.role is Role.dropout and key.sub_block in softmax:
                # The attention sub-block's dropout row holds two dropouts: of the probabilities
                # (B h S^2 elements, already split over the heads, recomputed with the core in
                # selective recompute: Megatron-LM's checkpointed CoreAttention ends with it) and
                # of the output (B S d, split by SP). The softmax row's bytes (2p per score)
                # give the score elements; a dropout moves 2p + 1 bytes per element.
                # Flash attention drops the probabilities inside its kernel: no bytes, no time.
                probs = softmax[key.sub_block] / (2 * self.act_bytes) * (2 * self.act_bytes + MASK_BYTES)
                share = min(1.0, probs / r.bytes_unfused) if self.spec.attention_dropout_rate > 0 else 0.0
                if not flash:
                    add(g, "attention core", t * share * cp, f * share * cp, True)
                t, f = t * (1 - share), f * (1 - share)
                in_core = False
            if sp and key.leaf in REPLICATED:  # sequence parallel splits them along the sequence
                t, f = t / tp, f / tp
            if in_core:  # ring attention: local queries against every key
                t, f = t * cp, f * cp
            add(g, category(key), t, f, in_core)
            if r.flops_matmul and not in_core:
                g["mm"] += t
                group = _column_parallel(key)
                if group:
                    g["column"][group] = g["column"].get(group, 0.0) + t
        first_s = sum(secs.get(r.key, 0.0) for r in a.rows if r.key.first_stage)
        embedding_table = next((r.params for r in a.rows if r.key == TOKEN_TABLE), 0)
        sparse = {name: kinds[1] for name, kinds in self.kinds.items()}
        groups = {}
        for name, g in acc.items():
            n = counts[name]
            groups[name] = LayerWork(
                {c: v / n for c, v in g["seconds"].items()}, g["mm"] / n,
                tuple(v / n for v in g["column"].values()),
                g["core"] / n, g["rec"] / n, g["flops"] / n, g["rec_flops"] / n, g["params"] // n,
                g["experts"] // n, sparse[name])
        return MicroBatch(groups, dict(counts), first_s, sum(last_cat.values()), last_cat, first_flops,
                          last_flops, first_params, last_params, embedding_table, reads)

    def stage_groups(self, pp: int, interleave: int = 1,
                     edges: bool = False) -> tuple[dict[str | None, int], ...]:
        """Layers of each group on each of `pp` pipeline devices: contiguous stages of
        ``stage_layers``, or with v chunks per device, chunks j*p + i of L/(p v) layers on device i
        (Narayanan et al. 2021's interleaved schedule). With `edges` (``Layout.edge_chunks``) the
        split is of L + 2 units, the embedding the first and the head the last: a chunk holds the
        layers among its units (the first and the last chunk one fewer). The embedding stays on
        device 0 and the head on device p - 1 either way. Counted, never listed."""
        key = (pp, interleave, edges)
        cached = self._stage_groups.get(key)
        if cached is None:
            L = self.spec.n_layers or 0
            units = L + 2 if edges else L
            shift = 1 if edges else 0  # unit u is layer u - 1 when unit 0 is the embedding

            def layers_of(lo: int, hi: int) -> tuple[int, int]:
                return min(L, max(0, lo - shift)), min(L, max(0, hi - shift))

            if interleave > 1:
                c = units // (pp * interleave)
                ranges = [[layers_of((j * pp + i) * c, (j * pp + i + 1) * c) for j in range(interleave)]
                          for i in range(pp)]
            else:
                bounds = [0]
                for n in stage_layers(units, pp):
                    bounds.append(bounds[-1] + n)
                ranges = [[layers_of(bounds[i], bounds[i + 1])] for i in range(pp)]
            cached = self._stage_groups[key] = tuple(self._groups_in(r) for r in ranges)
        return cached

    def stage_counts(self, layout: Layout) -> tuple[int, ...]:
        """Layers on each pipeline device of `layout`, first to last."""
        return tuple(sum(g.values()) for g in self.stage_groups(layout.pp, layout.interleave,
                                                                 layout.edge_chunks))

    def _groups_in(self, ranges: list[tuple[int, int]]) -> dict[str | None, int]:
        out = dict.fromkeys(self.counts, 0)
        for lo, hi in ranges:
            upper, lower = self._prefix_counts(hi), self._prefix_counts(lo)
            for name in out:
                out[name] += upper.get(name, 0) - lower.get(name, 0)
        return out

    def _prefix_counts(self, n: int) -> dict[str | None, int]:
        """Layers of each group among the first `n` (the spec's own rule, on a spec cut to n)."""
        if n <= 0:
            return {}
        by_kinds = {kinds: name for name, kinds in self.kinds.items()}
        cut = self.spec.model_copy(update={"n_layers": n})
        return {by_kinds[key]: c for key, c in cut.layer_group_counts().items()}

    # --- the step ------------------------------------------------------------------------------

    def step(self, layout: Layout, checked: bool = False,
             memory: tuple[StageMemory, StageMemory] | None = None) -> Step:
        """The step of `layout` (checked first, unless the caller has; its `memory` too): one
        collector per parallelism (``tensor_parallel``, ``context_parallel``, ``expert_parallel``,
        ``pipeline``, ``data_parallel``, ``embedding_sync``, ``optimizer_step``), composed."""
        if not checked:
            self.check(layout)
        spec, lo, ov, call = self.spec, layout, self.overlap_on(layout), self.collective
        p, m = lo.pp, lo.micro_batches
        s_local = self.seq // lo.cp
        mb = self.micro(lo.tp, lo.micro_batch, lo.cp, lo.sequence_parallel, lo.recompute)
        x = lo.micro_batch * s_local * spec.d_model * self.act_bytes  # b*s*h activations, in bytes

        # Inside every layer: each group's compute and what of its communication is exposed.
        tp = tensor_parallel(lo, mb, call, x, ov)
        cp = context_parallel(lo, spec, mb, call, s_local, self.act_bytes, ov)
        ep = expert_parallel(lo, mb, self.experts, call, x, ov)
        t_layer = {g: w.compute_s + tp.exposed[g] + cp.exposed[g] + ep.exposed[g]
                   for g, w in mb.groups.items()}

        # Across the stages, and over the data-parallel ranks of the fullest stage's parameters.
        on_device = self.stage_groups(p, lo.interleave, lo.edge_chunks)
        pipe = pipeline(lo, on_device, t_layer, mb.first_s + tp.first_s, mb.last_s + tp.last_s, call, x, ov,
                        self.engine.scatter_gather if self.engine else True)
        stages = self.stage_counts(lo)
        pace = Pace(pipe.slow, on_device[pipe.slow], stages[pipe.slow], m, pipe.slow == 0, pipe.slow == p - 1)
        held = [self._stage_params(lo, mb, i) for i in range(p)]
        dense, routed = max(h[0] for h in held), max(h[1] for h in held)
        dp = data_parallel(lo, dense, routed, self.recipe, call, pipe.slow_s, ov)
        tie = embedding_sync(lo, spec, mb, self.recipe, call)

        compute = compute_on(pace, mb)
        breakdown = {
            "compute": sum(compute.values()),
            "tp_comm": tp.seconds(pace),
            "cp_comm": cp.seconds(pace),
            "ep_comm": ep.seconds(pace),
            "pipeline_bubble": pipe.bubble,
            "pp_comm": pipe.exposed_s,
            "dp_comm": dp.exposed_s,
            "embedding_sync": tie[0][2] if tie else 0.0,
            "optimizer": optimizer_step(lo, dense, routed, self.recipe, self.hw),
        }
        by_part = (("embedding_sync", tie), ("tp_comm", tp.calls(pace)), ("cp_comm", cp.calls(pace)),
                   ("ep_comm", ep.calls(pace)), ("pp_comm", pipe.calls()), ("dp_comm", dp.calls()))
        calls = [c for _, cs in by_part for c in cs]

        mem_first, mem_last = memory or self.memory(lo, mb)
        mem_middle = None
        if len(set(stages)) > 1 and p > 2:  # a middle stage with an extra layer may hold the most
            # Of middle stages holding the same layers, the first holds the most (more micro-batches
            # in flight, the same parameters): one candidate per distinct set of layers.
            first_of: dict[tuple[tuple[str | None, int], ...], int] = {}
            for i in range(1, p - 1):
                first_of.setdefault(tuple(on_device[i].items()), i)
            mem_middle = max((self.stage_memory(lo, i, mb) for i in first_of.values()),
                             key=lambda mem: mem.total)
        full = self._flops_per_sequence * lo.global_batch
        rec_full = self._recompute_per_sequence[lo.recompute] * lo.global_batch
        return Step(spec, self.cluster, lo, self.seq, self.dtype, ov, self.recipe, sum(breakdown.values()),
                    breakdown, compute, tuple(calls), mem_first, mem_last, full, full + rec_full,
                    self._notes(stages, pipe.slow, ov), mem_middle, self.kernels,
                    self.engine.name if self.engine else None, mb.reads,
                    tuple(part for part, cs in by_part for _ in cs))

    def overlap_on(self, layout: Layout) -> Overlap:
        """What overlaps on `layout`: the explicit ``overlap``, else the engine's on it (Megatron-Core
        overlaps the pipeline sends only in the interleaved schedule), else ``Overlap()``."""
        if self._explicit_overlap is None and self.engine is not None:
            return self.engine.overlap_on(layout)
        return self.overlap

    def check(self, layout: Layout) -> None:
        """``layout.check`` on this spec, then the engine's limits (``Engine.check``). Selective
        recompute under flash attention runs the fused core's forward again and keeps none of its
        output (``runtime.memory.activations``)."""
        check(layout, self.spec, seq=self.seq)
        if self.engine is not None:
            self.engine.check(layout, self.spec)

    def _notes(self, stages: tuple[int, ...], slow: int, ov: Overlap) -> tuple[str, ...]:
        notes: list[str] = []
        if len(set(stages)) > 1:
            notes.append("pipeline stages of " + "/".join(map(str, stages))
                         + f" layers; stage {slow} sets the pace")
        if not device.calibrated(self.hw, self.dtype):
            notes.append(f"{self.hw.name} has no efficiency tables for {self.dtype}: compute times are "
                         "the roofline lower bound")
        if self.engine is not None:
            notes.append(f"engine: {self.engine.name} ({self.engine.summary})")
        if ov.tp or ov.dp or ov.pp or ov.ep:
            notes.append("overlap: " + ", ".join(k for k, on in ov.to_dict().items() if on))
        return tuple(notes)

    def memory(self, layout: Layout, mb: MicroBatch | None = None) -> tuple[StageMemory, StageMemory]:
        """What a GPU of the first and of the last pipeline stage holds. With equal stages these
        are the fullest two; ``stage_memory`` gives any stage's."""
        return self.stage_memory(layout, 0, mb), self.stage_memory(layout, layout.pp - 1, mb)

    def stage_memory(self, layout: Layout, stage: int, mb: MicroBatch | None = None) -> StageMemory:
        """What a GPU of pipeline stage `stage` holds (Korthikanti et al. 2022, section 4.2.3: in
        1F1B stage i keeps p - i micro-batches in flight, the first p, times 1 + (p - 1)/(p v)
        when interleaved, the last one), its layers' and its share of the embedding and head.
        Routed experts: E/EP of them per GPU, their states sharded by ZeRO over the DP x CP / EP
        ranks that hold the same experts."""
        lo = layout
        t, p, v, m, cp = lo.tp, lo.pp, lo.interleave, lo.micro_batches, lo.cp
        sp, rc = lo.sequence_parallel, lo.recompute
        s_local = self.seq // cp
        mb = mb or self.micro(t, lo.micro_batch, cp, sp, rc)
        groups = self.stage_groups(p, v, lo.edge_chunks)[stage]
        n_dp = lo.dp * cp
        n_edp = n_dp // lo.ep
        acts = self._activations(t, lo.micro_batch, s_local, sp, rc)
        first, last = stage == 0, stage == p - 1
        in_flight = min(m, p - stage)
        interleave = 1 + (p - 1) / (p * v) if v > 1 and first else 1.0
        layers = sum(n * acts.per_group[g] for g, n in groups.items())
        activations = (layers * interleave + (acts.first if first else 0.0)) * in_flight \
            + (acts.last * in_flight if last else 0.0) + acts.shared
        working = 0.0
        if rc is Recompute.full:  # the layer being recomputed holds what it would without recompute
            plain = self._activations(t, lo.micro_batch, s_local, sp, Recompute.none).per_group
            working = max((plain[g] for g, n in groups.items() if n), default=0.0)
        dense, routed = self._stage_params(lo, mb, stage)
        r = self.recipe

        def held(width: int, zero: int) -> float:
            return (dense * width / (n_dp if lo.zero >= zero else 1)
                    + routed * width / (n_edp if lo.zero >= zero else 1))

        return StageMemory(
            weights=held(r.weight_bytes, 3), gradients=held(r.grad_bytes, 2),
            optimizer=held(r.optimizer_bytes, 1),
            activations=activations, recompute_working_set=working,
            stage="first" if first else "last" if last else f"stage {stage}",
        )

    def _stage_params(self, lo: Layout, mb: MicroBatch, stage: int) -> tuple[int, int]:
        """Parameters on one GPU of `stage`, as (dense, routed experts): its layers' TP shard with
        E/EP of each sparse layer's experts, the embedding on the first, the final norm and head
        on the last (with the tied embedding's copy when the two differ)."""
        p = lo.pp
        dense = routed = 0
        for g, n in self.stage_groups(p, lo.interleave, lo.edge_chunks)[stage].items():
            w = mb.groups[g]
            dense += n * (w.params - w.expert_params)
            routed += n * w.expert_params // lo.ep
        if stage == 0:
            dense += mb.first_params
        if stage == p - 1:
            dense += mb.last_params + (mb.embedding_table if p > 1 and self.spec.tied_head else 0)
        return dense, routed

    def params_per_gpu(self, layout: Layout) -> int:
        """Parameters one GPU of the fullest stage holds (before ZeRO shards them)."""
        mb = self.micro(layout.tp, layout.micro_batch, layout.cp, layout.sequence_parallel, layout.recompute)
        return max(sum(self._stage_params(layout, mb, i)) for i in range(layout.pp))

    def _activations(self, tp: int, b: int, s: int, sp: bool, rc: Recompute) -> device.Activations:
        key = (tp, b, s, sp, rc)
        acts = self._acts.get(key)
        if acts is None:
            acts = self._acts[key] = device.activations(self.spec, b, s, tp, sp, rc,
                                                        self.kernels.flash_attention)
        return acts

    def _recompute_flops(self, rc: Recompute) -> float:
        """FLOPs recomputed per sequence (whole model): a forward of the layers (full), or of the
        attention core (selective)."""
        if rc is Recompute.none:
            return 0.0
        rows: list[Row] = [r for r in self._full.rows if r.key.layer]
        if rc is Recompute.selective:
            rows = [r for r in rows if r.key.attention_core]
        return sum(r.flops for r in rows) / 3
