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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from costmodel import model
from costmodel.analysis import Row, analyze
from costmodel.parallel import device
from costmodel.parallel.cluster import Cluster
from costmodel.parallel.collectives import Collective, collective
from costmodel.parallel.layout import Layout, LayoutError, Recompute, check, experts, stage_layers
from costmodel.parallel.shard import shard_spec
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES, MASK_BYTES

ATTENTION_CORE = ("scores", "scale", "mask", "softmax", "av", "softcap", "position_bias")
REPLICATED = ("norm", "post_norm", "residual", "dropout")  # whole on every TP rank unless SP
FIRST_STAGE = ("embedding",)
LAST_STAGE = ("final_norm", "final_dropout", "head_scale", "lm_head", "logit_scale", "logit_softcap", "loss")


@dataclass(frozen=True)
class Overlap:
    """Which communication hides behind compute (each the most a perfect overlap would hide).

    The default is what Megatron-LM ran in Korthikanti et al. 2022 (NVIDIA/Megatron-LM of June
    2022, megatron/mpu/layers.py, ``LinearWithGradAccumulationAndAsyncCommunication``): in the
    backward of a column-parallel linear (QKV, the FFN's first), the all-reduce of the input
    gradient (the reduce-scatter under SP) is issued asynchronously and runs beside the weight-
    gradient GEMM, and SP's re-gather of the input beside the input-gradient GEMM
    (``tp_backward``); every other TP collective, the pipeline sends and the data-parallel
    reduction wait; ring attention hides its transfers behind the attention it feeds."""

    tp: bool = False  # every TP collective behind the layer's matmuls
    cp: bool = True  # ring attention's K/V transfers behind the attention core
    ep: bool = False  # expert all-to-all behind the layer's compute
    pp: bool = False  # pipeline sends behind the next micro-batch
    dp: bool = False  # gradient reduction behind the last micro-batch's backward
    tp_backward: bool = True  # Megatron-LM's asynchronous column-parallel backward collectives

    def to_dict(self) -> dict[str, bool]:
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "pp": self.pp, "dp": self.dp,
                "tp_backward": self.tp_backward}


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _group(path: str) -> str | None:
    """The layer group of a layer's component path (``layers[dense]/ffn/up`` -> ``dense``)."""
    top = path.split("/", 1)[0]
    return top[len("layers["):-1] if top.startswith("layers[") else None


def _stage(path: str) -> str:
    top = path.split("/", 1)[0]
    if top.startswith("layers"):
        return "layers"
    if top in FIRST_STAGE:
        return "first"
    return "last"


#: Row-parallel linears (Shoeybi et al. 2019): their input is already split; every other layer
#: matmul outside the attention core is column-parallel (Q, K, V; the FFN's up and gate).
ROW_PARALLEL = ("out", "down", "shared_down", "router")


def _column_parallel(path: str) -> str | None:
    """The column-parallel linear a layer's matmul row belongs to ("attention" for Q, K and V, one
    GEMM in Megatron-LM; "ffn" for the FFN's first), or None for a row-parallel one."""
    leaf = _leaf(path)
    if leaf in ROW_PARALLEL or leaf in ATTENTION_CORE:
        return None
    return "ffn" if "/ffn/" in path else "attention"


def category(path: str) -> str:
    """Where a component's time is reported: a handful of groups a reader recognises."""
    leaf, stage = _leaf(path), _stage(path)
    if stage == "first":
        return "embedding"
    if stage == "last":
        if leaf in ("lm_head", "cross_entropy", "z_loss") or path.startswith("loss"):
            return "lm_head + loss"
        return "final norm"
    if leaf in REPLICATED:
        return "norms, residuals, dropout"
    if "/ffn/" in path:
        return "ffn"
    if leaf in ATTENTION_CORE or leaf in ("rope", "qk_norm", "sinks"):
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
class Memory:
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
    recipe: device.Recipe
    step_time_s: float
    breakdown: dict[str, float]  # critical-path seconds by part; sums to step_time_s
    compute_by_component: dict[str, float]
    collectives: tuple[tuple[Collective, float, float], ...]  # (call, calls per step, exposed seconds)
    memory: Memory
    memory_last: Memory
    model_flops: float
    hardware_flops: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    memory_middle: Memory | None = None  # the fullest middle stage, when the stages are unequal

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
    def per_gpu(self) -> Memory:
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
                                         "ranks": c.ranks, "link": c.link})
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
            "dtype": self.dtype, "layout": self.layout.to_dict(), "overlap": self.overlap.to_dict(),
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
            "fits": self.fits, "notes": list(self.notes),
        }
        if tokens is not None:
            t = self.train_time_s(tokens)
            data["train"] = {"tokens": tokens, "time_s": t, "days": t / 86400,
                             "gpu_hours": t * self.layout.gpus / 3600}
        return data


class StepModel:
    """Steps of one spec on one cluster at one sequence length; caches each shard's analysis."""

    def __init__(self, spec: Spec, cluster: Cluster, seq: int = 2048, dtype: str = "bf16",
                 recipe: device.Recipe = device.MEGATRON, overlap: Overlap = Overlap()) -> None:
        self.spec, self.cluster, self.seq, self.dtype = spec, cluster, seq, dtype
        self.recipe, self.overlap = recipe, overlap
        self.hw = cluster.hardware
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
        self._stage_groups: dict[tuple[int, int], tuple[dict[str | None, int], ...]] = {}

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
        secs = device.component_seconds(a, self.hw)
        counts = self.counts
        last_cat: dict[str, float] = {}
        first_flops = last_flops = 0.0
        first_params = last_params = 0
        softmax = {r.path.rsplit("/", 1)[0]: r.bytes_unfused for r in a.rows if _leaf(r.path) == "softmax"}
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
            stage, leaf = _stage(r.path), _leaf(r.path)
            t, f = secs.get(r.path, 0.0), float(r.flops)
            if stage != "layers":
                if stage == "first":
                    first_flops += f
                    first_params += r.params
                else:
                    last_flops += f
                    last_params += r.params
                    last_cat[category(r.path)] = last_cat.get(category(r.path), 0.0) + t
                continue
            g = acc[_group(r.path)]
            g["params"] += r.params
            if "/ffn/experts/" in r.path:
                g["experts"] += r.params
            in_core = leaf in ATTENTION_CORE
            if leaf == "dropout" and r.path.rsplit("/", 1)[0] in softmax:
                # The attention sub-block's dropout row holds two dropouts: of the probabilities
                # (B h S^2 elements, already split over the heads, recomputed with the core in
                # selective recompute: Megatron-LM's checkpointed CoreAttention ends with it) and
                # of the output (B S d, split by SP). The softmax row's bytes (2p per score)
                # give the score elements; a dropout moves 2p + 1 bytes per element.
                score_elements = softmax[r.path.rsplit("/", 1)[0]] / (2 * self.act_bytes)
                probs = score_elements * (2 * self.act_bytes + MASK_BYTES)
                share = min(1.0, probs / r.bytes_unfused) if self.spec.attention_dropout_rate > 0 else 0.0
                add(g, "attention core", t * share * cp, f * share * cp, True)
                t, f = t * (1 - share), f * (1 - share)
                in_core = False
            if sp and leaf in REPLICATED:  # sequence parallel splits them along the sequence
                t, f = t / tp, f / tp
            if in_core:  # ring attention: local queries against every key
                t, f = t * cp, f * cp
            add(g, category(r.path), t, f, in_core)
            if r.flops_matmul and not in_core:
                g["mm"] += t
                group = _column_parallel(r.path)
                if group:
                    g["column"][group] = g["column"].get(group, 0.0) + t
        first_s = sum(secs.get(r.path, 0.0) for r in a.rows if _stage(r.path) == "first")
        embedding_table = next((r.params for r in a.rows if r.path == "embedding/tokens"), 0)
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
                          last_flops, first_params, last_params, embedding_table)

    def stage_groups(self, pp: int, interleave: int = 1) -> tuple[dict[str | None, int], ...]:
        """Layers of each group on each of `pp` pipeline devices: contiguous stages of
        ``stage_layers``, or with v chunks per device, chunks j*p + i of L/(p v) layers on device i
        (Narayanan et al. 2021's interleaved schedule). Counted, never listed."""
        key = (pp, interleave)
        cached = self._stage_groups.get(key)
        if cached is None:
            L = self.spec.n_layers or 0
            if interleave > 1:
                c = L // (pp * interleave)
                ranges = [[((j * pp + i) * c, (j * pp + i + 1) * c) for j in range(interleave)]
                          for i in range(pp)]
            else:
                bounds = [0]
                for n in stage_layers(L, pp):
                    bounds.append(bounds[-1] + n)
                ranges = [[(bounds[i], bounds[i + 1])] for i in range(pp)]
            cached = self._stage_groups[key] = tuple(self._groups_in(r) for r in ranges)
        return cached

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
             memory: tuple[Memory, Memory] | None = None) -> Step:
        """The step of `layout` (checked first, unless the caller has; its `memory` too)."""
        if not checked:
            check(layout, self.spec, seq=self.seq)
        spec, lo, ov = self.spec, layout, self.overlap
        call = self.collective
        t, p, v, m, cp = lo.tp, lo.pp, lo.interleave, lo.micro_batches, lo.cp
        sp, rc = lo.sequence_parallel, lo.recompute
        s_local = self.seq // cp
        mb = self.micro(t, lo.micro_batch, cp, sp, rc)
        L = spec.n_layers or 0
        x = lo.micro_batch * s_local * spec.d_model * self.act_bytes  # b*s*h activations, in bytes
        calls: list[tuple[Collective, float, float]] = []
        notes: list[str] = []

        # Tensor parallel (Shoeybi et al. 2019), per layer: the two row-parallel linears all-reduce
        # their output forward (again in full recompute's replay), the two column-parallel ones
        # the gradient of their input backward. Under sequence parallelism (Korthikanti et al.)
        # each forward all-reduce is a reduce-scatter, each column-parallel input an all-gather
        # (forward, and again backward: Megatron-LM does not keep the gathered input), the
        # backward of each reduce-scatter an all-gather, each input gradient a reduce-scatter.
        # Which of them run beside a GEMM: ``Overlap.tp_backward`` (the column-parallel
        # backward's, each beside its own linear's weight- or input-gradient GEMM, a third of
        # the linear's forward + backward time) and ``Overlap.tp`` (all, behind the matmuls).
        replays = 2 if rc is Recompute.full else 1
        ag, rs = call("all_gather", "tp", t, x), call("reduce_scatter", "tp", t, x)
        ar = call("all_reduce", "tp", t, x)
        # (collective, calls per layer, of which asynchronous in the column-parallel backward)
        if sp:
            tp_layer = [(ag, 2 * replays + 2 + 2, 2), (rs, 2 * replays + 2, 2)]
        else:
            tp_layer = [(ar, 2 * replays + 2, 2)]
        tp_s = sum(c.time_s * n for c, n, _ in tp_layer)

        # Context parallel (ring attention): cp - 1 passes of the local K and V forward, of K, V
        # and their gradients backward.
        k_local = max(1, spec.n_kv_heads // t)
        kv = 2 * lo.micro_batch * s_local * k_local * spec.head_dim * self.act_bytes
        cp_call = call("p2p", "cp", 2 if cp > 1 else 1, kv, stride=t)
        n_cp = 3 * (cp - 1)
        cp_s = n_cp * cp_call.time_s

        # Expert parallel: dispatch and combine all-to-all forward, and again backward, of the
        # top_k copies of each token this rank routes (Lepikhin et al. 2020), in sparse layers.
        moe = self.experts
        ep_s = 0.0
        ep_call = None
        if moe and lo.ep > 1:
            tokens_out = moe[1] * x / (t if sp else 1)
            ep_call = call("all_to_all", "ep", lo.ep, tokens_out, stride=t * cp)
            ep_s = 4 * ep_call.time_s

        # Per layer of each group: its compute and what of its communication is exposed.
        tp_exposed: dict[str | None, float] = {}
        async_exposed: dict[str | None, dict[str, float]] = {}
        cp_exposed: dict[str | None, float] = {}
        ep_exposed: dict[str | None, float] = {}
        t_layer: dict[str | None, float] = {}
        for g, w in mb.groups.items():
            column = w.column_linear_s if t > 1 else ()
            sync_s = sum(c.time_s * (n - (k if ov.tp_backward else 0)) for c, n, k in tp_layer)
            hidden: dict[str, float] = {}
            if ov.tp_backward:
                for c, _, _ in tp_layer:  # one call per column-parallel linear, beside a third of it
                    hidden[c.kind] = sum(max(0.0, c.time_s - lin / 3) for lin in column) + \
                        c.time_s * max(0, 2 - len(column))
            async_exposed[g] = hidden
            tp_exposed[g] = max(0.0, tp_s - w.matmul_s) if ov.tp else sync_s + sum(hidden.values())
            cp_exposed[g] = max(0.0, cp_s - w.core_s) if ov.cp else cp_s
            ep_g = ep_s if w.sparse else 0.0
            ep_exposed[g] = max(0.0, ep_g - sum(w.seconds.values())) if ov.ep else ep_g
            t_layer[g] = w.compute_s + tp_exposed[g] + cp_exposed[g] + ep_exposed[g]

        # The vocabulary-parallel embedding all-reduces its output; the head all-reduces the
        # gradient of its input (all-gather and reduce-scatter under SP).
        emb_call = call("reduce_scatter" if sp else "all_reduce", "tp", t, x)
        head_calls = [call("all_gather", "tp", t, x), call("reduce_scatter", "tp", t, x)] if sp \
            else [call("all_reduce", "tp", t, x)]
        first_extra = mb.first_s + emb_call.time_s
        last_extra = mb.last_s + sum(c.time_s for c in head_calls)
        stages = stage_layers(L, p)
        on_device = self.stage_groups(p, v)
        t_stages = [sum(n * t_layer[g] for g, n in on_device[i].items())
                    + (first_extra if i == 0 else 0.0) + (last_extra if i == p - 1 else 0.0)
                    for i in range(p)]
        slow = max(range(p), key=lambda i: (t_stages[i], -i))  # the slowest stage sets the pace
        t_max, t_mean = t_stages[slow], sum(t_stages) / p
        bubble = (p - 1) / v * t_mean

        # Pipeline sends: each device sends its activations forward and gradients back, per chunk
        # per micro-batch, split over the TP ranks (Narayanan et al.'s scatter/gather); without
        # SP the receiving TP ranks all-gather the pieces over NVLink (Megatron-LM of June 2022,
        # megatron/p2p_communication.py: gather_split_1d_tensor after each receive; under SP the
        # tensor is already split along the sequence and is not gathered).
        pp_call = call("p2p", "pp", 2 if p > 1 else 1, x / t, stride=t * cp * lo.dp)
        n_pp = 2 * v * m if p > 1 else 0
        pp_gather = call("all_gather", "tp", t, x) if p > 1 and t > 1 and not sp else None
        pp_s = n_pp * (pp_call.time_s + (pp_gather.time_s if pp_gather else 0.0))
        pp_exposed = 0.0 if ov.pp else pp_s

        # Data parallel: the gradients of this rank's parameters over DP x CP ranks; the routed
        # experts' over the DP x CP / EP ranks that hold the same experts (Megatron-Core's
        # expert-data-parallel group, EP innermost within DP).
        held = [self._stage_params(lo, mb, i) for i in range(p)]
        dense_gpu, expert_gpu = max(h[0] for h in held), max(h[1] for h in held)
        n_dp = lo.dp * cp
        n_edp = n_dp // lo.ep
        per_step: list[Collective] = []
        per_micro: list[Collective] = []
        for group, ranks, n_params, stride in (("dp", n_dp, dense_gpu, t),
                                               ("edp", n_edp, expert_gpu, t * lo.ep)):
            if not n_params or ranks <= 1:
                continue
            grads, weights = n_params * self.recipe.grad_bytes, n_params * self.recipe.weight_bytes
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
        dp_step_s = sum(c.time_s for c in per_step)
        dp_micro_s = sum(c.time_s for c in per_micro)
        backward = t_max * 2 / 3
        if ov.dp:
            dp_exposed = max(0.0, dp_step_s - backward) + m * max(0.0, dp_micro_s - t_max)
        else:
            dp_exposed = dp_step_s + m * dp_micro_s
        # Tied embeddings on different stages: the first and last stage sum their gradients.
        tie_s = 0.0
        if p > 1 and spec.tied_embeddings:
            tie = call("all_reduce", "pp", 2, mb.embedding_table * self.recipe.grad_bytes,
                             stride=t * cp * lo.dp * (p - 1))
            tie_s = tie.time_s
            calls.append((tie, 1, tie_s))

        shard, expert_shard = (n_dp, n_edp) if lo.zero >= 1 else (1, 1)
        opt_s = device.optimizer_seconds(dense_gpu / shard + expert_gpu / expert_shard, self.recipe, self.hw)

        # --- what happens per step, on the critical path --------------------------------------
        has_first, has_last = slow == 0, slow == p - 1
        slow_groups = on_device[slow]
        layers_on_slow = stages[slow]
        compute: dict[str, float] = {}
        for g, n in slow_groups.items():
            for cat, sec in mb.groups[g].seconds.items():
                compute[cat] = compute.get(cat, 0.0) + m * n * sec
        recompute = sum(n * mb.groups[g].recompute_s for g, n in slow_groups.items())
        if recompute:
            compute["recompute"] = m * recompute
        if has_first:
            compute["embedding"] = m * mb.first_s
        if has_last:
            for cat, sec in mb.last_by_category.items():
                compute[cat] = compute.get(cat, 0.0) + m * sec

        def on_slow(per_layer: dict[str | None, float]) -> float:
            return m * sum(n * per_layer[g] for g, n in slow_groups.items())

        tp_edge = ((emb_call.time_s if has_first else 0.0)
                   + (sum(c.time_s for c in head_calls) if has_last else 0.0))
        breakdown = {
            "compute": sum(compute.values()),
            "tp_comm": on_slow(tp_exposed) + m * tp_edge,
            "cp_comm": on_slow(cp_exposed),
            "ep_comm": on_slow(ep_exposed),
            "pipeline_bubble": bubble,
            "pp_comm": pp_exposed,
            "dp_comm": dp_exposed,
            "embedding_sync": tie_s,
            "optimizer": opt_s,
        }
        step_time = sum(breakdown.values())

        for c, n, k in tp_layer:
            if ov.tp:
                exposed = {g: c.time_s * n * (tp_exposed[g] / tp_s if tp_s else 0.0) for g in slow_groups}
            else:
                exposed = {g: c.time_s * (n - (k if ov.tp_backward else 0))
                           + async_exposed[g].get(c.kind, 0.0) for g in slow_groups}
            calls.append((c, m * layers_on_slow * n, on_slow(exposed)))
        if has_first:
            calls.append((emb_call, m, m * emb_call.time_s))
        if has_last:
            for c in head_calls:
                calls.append((c, m, m * c.time_s))
        if cp > 1:
            calls.append((cp_call, m * layers_on_slow * n_cp, on_slow(cp_exposed)))
        if ep_call is not None:
            sparse_on_slow = sum(n for g, n in slow_groups.items() if mb.groups[g].sparse)
            calls.append((ep_call, m * sparse_on_slow * 4, on_slow(ep_exposed)))
        if p > 1:
            calls.append((pp_call, n_pp, 0.0 if ov.pp else n_pp * pp_call.time_s))
            if pp_gather is not None:
                calls.append((pp_gather, n_pp, 0.0 if ov.pp else n_pp * pp_gather.time_s))
        if per_step or per_micro:
            total_dp = dp_step_s + m * dp_micro_s
            for c in per_step:
                calls.append((c, 1, dp_exposed * c.time_s / total_dp if total_dp else 0))
            for c in per_micro:
                calls.append((c, m, dp_exposed * m * c.time_s / total_dp if total_dp else 0))

        mem_first, mem_last = memory or self.memory(lo, mb)
        mem_middle = None
        if len(set(stages)) > 1 and p > 2:  # a middle stage with an extra layer may hold the most
            mem_middle = max((self.stage_memory(lo, i, mb) for i in range(1, p - 1)),
                             key=lambda mem: mem.total)
        if len(set(stages)) > 1:
            notes.append("pipeline stages of " + "/".join(map(str, stages))
                         + f" layers; stage {slow} sets the pace")
        full = self._flops_per_sequence * lo.global_batch
        rec_full = self._recompute_per_sequence[rc] * lo.global_batch
        if not device.calibrated(self.hw, self.dtype):
            notes.append(f"{self.hw.name} has no efficiency tables for {self.dtype}: compute times are "
                         "the roofline lower bound")
        if ov.tp or ov.dp or ov.pp or ov.ep:
            notes.append("overlap: " + ", ".join(k for k, on in ov.to_dict().items() if on))
        return Step(spec, self.cluster, lo, self.seq, self.dtype, ov, self.recipe, step_time, breakdown,
                    compute, tuple(calls), mem_first, mem_last, full, full + rec_full, tuple(notes),
                    mem_middle)

    def memory(self, layout: Layout, mb: MicroBatch | None = None) -> tuple[Memory, Memory]:
        """What a GPU of the first and of the last pipeline stage holds. With equal stages these
        are the fullest two; ``stage_memory`` gives any stage's."""
        return self.stage_memory(layout, 0, mb), self.stage_memory(layout, layout.pp - 1, mb)

    def stage_memory(self, layout: Layout, stage: int, mb: MicroBatch | None = None) -> Memory:
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
        groups = self.stage_groups(p, v)[stage]
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

        return Memory(
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
        for g, n in self.stage_groups(p, lo.interleave)[stage].items():
            w = mb.groups[g]
            dense += n * (w.params - w.expert_params)
            routed += n * w.expert_params // lo.ep
        if stage == 0:
            dense += mb.first_params
        if stage == p - 1:
            dense += mb.last_params + (mb.embedding_table if p > 1 and self.spec.tied_embeddings else 0)
        return dense, routed

    def params_per_gpu(self, layout: Layout) -> int:
        """Parameters one GPU of the fullest stage holds (before ZeRO shards them)."""
        mb = self.micro(layout.tp, layout.micro_batch, layout.cp, layout.sequence_parallel, layout.recompute)
        return max(sum(self._stage_params(layout, mb, i)) for i in range(layout.pp))

    def _activations(self, tp: int, b: int, s: int, sp: bool, rc: Recompute) -> device.Activations:
        key = (tp, b, s, sp, rc)
        acts = self._acts.get(key)
        if acts is None:
            acts = self._acts[key] = device.activations(self.spec, b, s, tp, sp, rc)
        return acts

    def _recompute_flops(self, rc: Recompute) -> float:
        """FLOPs recomputed per sequence (whole model): a forward of the layers (full), or of the
        attention core (selective)."""
        if rc is Recompute.none:
            return 0.0
        rows: list[Row] = [r for r in self._full.rows if _stage(r.path) == "layers"]
        if rc is Recompute.selective:
            rows = [r for r in rows if _leaf(r.path) in ATTENTION_CORE]
        return sum(r.flops for r in rows) / 3
