"""What a run holds in device memory, per device, and whether it fits.

One formula per idea; the phase is a substitution, as everywhere else:

- **weights**: every parameter at the recipe's width (training), or at the weight dtype
  (inference: ``costmodel.precision``'s one rule for fp8, int8/int4 and mxfp4);
- **gradients**: one per parameter at the recipe's gradient width;
- **optimizer states** (training): AdamW's m and v (Loshchilov & Hutter 2019), SGD's momentum,
  8-bit Adam's two 1-byte states with an fp32 absmax per block of 2048 (Dettmers et al. 2022),
  Adafactor's factored second moment, rows + columns per matrix and no first moment (Shazeer &
  Stern 2018); plus the fp32 master weights of a mixed-precision recipe (Micikevicius et al.
  2018). AdamW under bf16-mixed is ZeRO's 2 + 2 + K with K = 12 (Rajbhandari et al. 2020);
- **ZeRO** over N_d data-parallel ranks: stage 1 shards the optimizer states (master weights
  included), stage 2 also the gradients, stage 3 also the weights; a rank holds the largest shard,
  ceil(n / N_d);
- **activations** kept for backward (training), per component, from the ``saved`` and
  ``mask_elements`` of the element formulas (``costmodel.cost``), with recompute ``none``,
  ``selective`` (the attention core, QK^T, softmax, dropout and AV, recomputed: Korthikanti et al.
  2022, "Reducing Activation Recomputation in Large Transformer Models") or ``full`` (every
  layer keeps its input only), and flash attention (Dao et al. 2022: the S x S scores are never
  kept; the output and the fp32 log-sum-exp of every query row are);
- **KV cache** (inference): the element formulas' cache, at the KV dtype;
- **peak of live activations** (inference): the largest live set of one pass (``live_peak``);
  latent attention's in its convention (``Run.mla``), its training naive (``mla_convention``).

Data parallel and ZeRO are modelled here (``Parallel``); a TP/PP layout's memory per GPU is
``costmodel.parallel.step``'s (``StepModel.stage_memory``: ``train``, ``plan``), refused here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from costmodel import model
from costmodel.analysis import AnalysisError, analyze, checkpoint_tensors
from costmodel.components import disentangled
from costmodel.components.key import Key, Role
from costmodel.components.mla import Convention
from costmodel.cost import Cost, Num
from costmodel.phases import PHASES
from costmodel.precision import DEFAULT_GROUP, Widths, tensor_scales, weight_bytes_of
from costmodel.spec import LayerKind, Position, Spec
from costmodel.symbols import DTYPE_BYTES, MASK_BYTES

FP32 = 4
ADAM8BIT_BLOCK = 2048  # bitsandbytes blockwise quantisation: one fp32 absmax per 2048 values


class MemoryConfigError(AnalysisError):
    """A memory request that cannot be answered as asked (a ZeRO stage without ranks, ...)."""


# --- recipes and optimizers ---------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingPrecision:
    """Bytes per parameter and per activation element of a training recipe.

    weights      the copy the forward reads
    extra        further per-parameter copies (fp8-mixed: the fp8 weights a Transformer Engine
                 layer caches beside its bf16 ones)
    gradients    one gradient per parameter
    master       fp32 master weights kept by the optimizer (0: none)
    states       width of each optimizer state element (Adam's m and v ...)
    activations  width of an activation element
    """

    name: str
    weights: int
    extra: int
    gradients: int
    master: int
    states: int
    activations: int
    note: str


PRECISIONS = {p.name: p for p in (
    TrainingPrecision("bf16-mixed", 2, 0, 2, FP32, FP32, 2,
                      "bf16 weights and gradients, fp32 master weights and optimizer states"),
    TrainingPrecision("bf16", 2, 0, 2, 0, 2, 2,
                      "everything bf16, optimizer states included (no master copy)"),
    TrainingPrecision("fp32", 4, 0, 4, 0, 4, 4, "everything fp32"),
    TrainingPrecision("fp8-mixed", 2, 1, 2, FP32, FP32, 2,
                      "bf16-mixed plus an fp8 copy of every weight for the fp8 matmuls; activations counted "
                      "at bf16 (fp8 copies of saved matmul inputs are not modelled)"),
)}

OPTIMIZERS = ("adamw", "sgd", "adam8bit", "adafactor")


def optimizer_bytes(optimizer: str, params: int, factored: int, width: int) -> int:
    """Optimizer-state bytes for `params` parameters (`factored`: Adafactor's row + column count)."""
    if optimizer == "adamw":
        return 2 * width * params  # m and v
    if optimizer == "sgd":
        return width * params  # momentum
    if optimizer == "adam8bit":
        return 2 * (params + FP32 * -(-params // ADAM8BIT_BLOCK))  # 1-byte m, v; fp32 absmax per block
    if optimizer == "adafactor":
        return width * factored  # factored second moment, beta1 = None
    raise MemoryConfigError(f"optimizer: unknown optimizer {optimizer!r}; expected one of "
                            f"{', '.join(OPTIMIZERS)}")


# --- the split ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parallel:
    """How a run is split across devices, and what one device therefore holds.

    dp                  data-parallel ranks N_d (ZeRO shards over them)
    zero                ZeRO stage 0-3 (Rajbhandari et al. 2020); FSDP full-shard is stage 3
    tp                  tensor-parallel size t (Shoeybi et al. 2019)
    pp                  pipeline-parallel stages
    sequence_parallel   Korthikanti et al. 2022's sequence parallelism (with tp)
    micro_batch         sequences per micro-batch (default: the whole batch)
    in_flight           micro-batches whose activations the first pipeline stage holds at once
                        (1F1B: pp)
    Only dp and zero are modelled here; tp, pp > 1 are refused (see ``StepModel.stage_memory``).
    """

    dp: int = 1
    zero: int = 0
    tp: int = 1
    pp: int = 1
    sequence_parallel: bool = False
    micro_batch: int | None = None
    in_flight: int = 1

    def check(self) -> None:
        if self.dp < 1:
            raise MemoryConfigError(f"dp: must be at least 1 (got {self.dp})")
        if self.zero not in (0, 1, 2, 3):
            raise MemoryConfigError(f"zero: stage must be 0, 1, 2 or 3 (got {self.zero})")
        if self.tp != 1 or self.pp != 1 or self.sequence_parallel or self.in_flight != 1:
            raise MemoryConfigError("tp/pp/sequence_parallel: only data parallel (--dp, --zero) is modelled "
                                    "yet")

    def shard(self, n: int, stage: int) -> int:
        """What one rank holds of `n` bytes sharded from ZeRO stage `stage` on."""
        return -(-n // self.dp) if self.zero >= stage else n


# --- configuration of a run -------------------------------------------------------------------


RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Run:
    """What a run keeps, besides the shape: the training recipe, or the inference dtypes.

    mask_bytes   bytes per dropout-mask element: 1 for a fused kernel's bool mask (CUDA's
                 native_dropout, Korthikanti et al.), the activation width for a composite one
                 (the reference model on CPU and meta)
    last_logits  prefill computes the logits of the last position only (serving stacks do)
    mla          the convention latent attention runs in at inference (``components.mla``):
                 naive or absorbed; training runs naive whatever it says (``mla_convention``)
    """

    optimizer: str = "adamw"
    precision: str = "bf16-mixed"
    recompute: str = "none"
    flash: bool = False
    mask_bytes: int = MASK_BYTES
    weights_dtype: str | None = None  # default: the activation dtype
    kv_dtype: str | None = None  # default: the activation dtype
    dtype: str = "bf16"  # inference activations
    group_size: int = DEFAULT_GROUP
    last_logits: bool = False
    mla: str = Convention.naive.value

    def check(self, spec: Spec) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise MemoryConfigError(
                f"optimizer: unknown optimizer {self.optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
        if self.precision not in PRECISIONS:
            raise MemoryConfigError(
                f"precision: unknown recipe {self.precision!r}; expected one of {', '.join(PRECISIONS)}")
        if self.recompute not in RECOMPUTE:
            raise MemoryConfigError(
                f"recompute: unknown mode {self.recompute!r}; expected one of {', '.join(RECOMPUTE)}")
        if not 0 <= self.mask_bytes <= 8:
            raise MemoryConfigError(f"mask_bytes: bytes per dropout-mask element must be 0 to 8 (1 for a "
                                    "fused kernel's bool mask, the activation width for a composite one; "
                                    f"got {self.mask_bytes})")
        Widths(self.weights_dtype, self.kv_dtype, self.group_size).check(MemoryConfigError, spec)
        if self.dtype not in DTYPE_BYTES:
            raise MemoryConfigError(f"dtype: unknown {self.dtype!r}; "
                                    f"expected one of {', '.join(DTYPE_BYTES)}")
        if self.mla not in Convention.__members__:
            raise MemoryConfigError(
                f"mla: unknown convention {self.mla!r}; expected one of {', '.join(Convention.__members__)}")


def mla_convention(spec: Spec, phase: str, mla: str) -> str | None:
    """The convention latent attention runs in for `phase` (None: the spec has none): `mla` in
    prefill and decode; naive in training, whatever `mla` says. Absorbing W_UK into the queries
    and W_UV into the output is an inference rewrite of trained weights (DeepSeek-V2, section
    2.1.2): training learns kv_b itself, and at S = C the naive pair costs less (2h(d_n + d_r +
    d_v) FLOPs against absorbed's 2h(2 r_kv + d_r)), so its activations are the naive pass's."""
    if spec.mla is None:
        return None
    return Convention.naive.value if PHASES[phase].training else mla


# --- the result ------------------------------------------------------------------------------


CATEGORIES = ("weights", "gradients", "optimizer", "activations", "kv_cache")


@dataclass(frozen=True)
class Item:
    """One line of the breakdown: a category, a component path (or a name), bytes per device;
    `key`: the component's (``components.key.Key``), None for a name (a ZeRO shard, the cache)."""

    category: str
    path: str
    bytes: int
    key: Key | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Memory:
    """What one device holds in one phase. Bytes are exact integers.

    peak: training, weights + gradients + optimizer + activations (all live at the end of the
    forward; backward frees activations as it fills gradients, so this bounds the step's
    high-water mark from above, less the framework's workspace); inference, weights + KV cache
    + the largest live set of activations of the pass.
    """

    spec: str
    phase: str
    batch: int
    seq: int
    shape: dict[str, int]
    run: Run
    parallel: Parallel
    items: tuple[Item, ...]
    peak_activations: int  # inference: the live peak of the pass; training: all saved
    notes: tuple[str, ...] = field(default=())
    mla: str | None = None  # latent attention's convention in these figures (None: no MLA)

    def total(self, category: str) -> int:
        return sum(i.bytes for i in self.items if i.category == category)

    @property
    def peak(self) -> int:
        held = sum(self.total(c) for c in CATEGORIES if c != "activations")
        return held + self.peak_activations

    def fits(self, memory_bytes: float) -> bool:
        return self.peak <= memory_bytes

    def to_dict(self, memory_bytes: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {c: self.total(c) for c in CATEGORIES}
        out["peak"] = self.peak
        out["peak_activations"] = self.peak_activations
        if memory_bytes is not None:
            out["device_bytes"] = int(memory_bytes)
            out["fits"] = self.fits(memory_bytes)
            out["headroom"] = int(memory_bytes) - self.peak  # negative: the shortfall
        out["by_component"] = [{"category": i.category, "path": i.path, "bytes": i.bytes} for i in self.items]
        return {
            "spec": self.spec, "phase": self.phase, "batch": self.batch, "seq": self.seq,
            **({"mla_convention": self.mla} if self.mla is not None else {}),
            "shape": dict(self.shape),
            "run": {"optimizer": self.run.optimizer, "precision": self.run.precision,
                    "recompute": self.run.recompute, "flash": self.run.flash,
                    "mask_bytes": self.run.mask_bytes,
                    "weights_dtype": self.run.weights_dtype or self.run.dtype,
                    "kv_dtype": self.run.kv_dtype or self.run.dtype, "dtype": self.run.dtype},
            "parallel": {"dp": self.parallel.dp, "zero": self.parallel.zero, "tp": self.parallel.tp,
                         "pp": self.parallel.pp},
            "memory": out,
            "notes": list(self.notes),
        }


# --- the formulas ----------------------------------------------------------------------------


def memory(spec: Spec, phase: str = "train", batch: int = 1, seq: int | None = None,
           enc_seq: int | None = None, run: Run | None = None, parallel: Parallel | None = None) -> Memory:
    """What one device holds for `phase` of `spec` at this batch and sequence length.

    `seq` is the prompt (prefill, train) or the cached tokens (decode), as in ``analyze``.
    """
    run = run or Run()
    parallel = parallel or Parallel()
    run.check(spec)
    parallel.check()
    if phase not in PHASES:
        raise MemoryConfigError(f"phase: unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    training = PHASES[phase].training
    p = PRECISIONS[run.precision].activations if training else DTYPE_BYTES[run.dtype]
    dtype = {2: "bf16", 4: "fp32", 1: "fp8"}[p]
    mla = mla_convention(spec, phase, run.mla)
    conv = mla or Convention.naive.value
    a = analyze(spec, phase, batch=batch, seq=seq, dtype=dtype, enc_seq=enc_seq, mla=conv)
    costs = model.tree(spec, model.numeric_dims(spec, dict(a.shape), p, conv, one_kernel=run.flash))
    if training:
        items, peak, notes = _training(spec, costs, dict(a.shape), p, run, parallel)
        if mla is not None and run.mla != mla:
            notes.append(f"latent attention: training runs the naive form; --mla {run.mla} applies to "
                         "prefill and decode only")
    else:
        items, peak, notes = _inference(spec, phase, costs, dict(a.shape), p, run, a.total().kv_cache, conv)
    return Memory(spec.name, phase, batch, a.seq, dict(a.shape), run, parallel, tuple(items), peak,
                  tuple(notes), mla)


def _training(spec: Spec, costs: dict[Key, Cost], shape: dict[str, int], p: int, run: Run,
              par: Parallel) -> tuple[list[Item], int, list[str]]:
    rec = PRECISIONS[run.precision]
    params = sum(int(c.params) for c in costs.values())
    factored = sum(int(c.factored) for c in costs.values())
    states = model_states(params, factored, run, par)
    items: list[Item] = []
    for category, stage, width in (("weights", 3, rec.weights + rec.extra), ("gradients", 2, rec.gradients)):
        if par.zero >= stage:  # one flat buffer, partitioned evenly (ZeRO, FSDP)
            items.append(Item(category, f"all parameters, ZeRO-{par.zero} shard of {par.dp}",
                              states[category]))
        else:
            items += [Item(category, key.path, int(c.params) * width, key)
                      for key, c in costs.items() if c.params]
    items.append(Item("optimizer", f"{run.optimizer} states", states["optimizer"] - states["master"]))
    if rec.master:
        items.append(Item("optimizer", "master weights (fp32)", states["master"]))
    acts = activations(spec, costs, shape, p, run)
    items += [Item("activations", key.path, n, key) for key, n in acts.items() if n]
    notes = [f"precision {rec.name}: {rec.note}"]
    if run.recompute == "selective":
        notes.append("selective recompute: the attention core (scores, softmax, dropout, AV) is "
                     "recomputed in backward (Korthikanti et al. 2022); Q, K, V are kept")
    return items, sum(acts.values()), notes


def model_states(params: int, factored: int, run: Run, par: Parallel) -> dict[str, int]:
    """Weights, gradients and optimizer states (master weights included, also given alone) of
    `params` parameters on one rank: ZeRO's (2 + 2 + K) x Psi for AdamW bf16-mixed (K = 12),
    each term divided by N_d from its stage on (Rajbhandari et al. 2020, section 5.1)."""
    rec = PRECISIONS[run.precision]
    states = optimizer_bytes(run.optimizer, params, factored, rec.states)
    master = par.shard(params * rec.master, 1)
    return {
        "weights": par.shard(params * (rec.weights + rec.extra), 3),
        "gradients": par.shard(params * rec.gradients, 2),
        "optimizer": par.shard(states, 1) + master,
        "master": master,
    }


def activations(spec: Spec, costs: dict[Key, Cost], shape: dict[str, int], p: int,
                run: Run) -> dict[Key, int]:
    """Bytes kept for backward, by component (``model.tree``'s keys; plus the tensors a stack's
    layers share, ``Role.shared``, and full recompute's layer inputs, ``Role.checkpoint``).

    none       every ``saved`` of the element formulas, and the dropout masks at ``mask_bytes``
    selective  less the attention core: the softmax output (and softcap's tanh), the dropped-out
               probabilities and their mask (Korthikanti et al. 2022, section 4.3)
    full       each layer keeps only its input, B*S*d*p (per-layer checkpointing, Chen et al.
               2016), and the stack's position bias if its layers add one; what lies outside
               the layers is kept as without recompute
    flash      instead of the S x span probabilities, each attention layer keeps its output
               (B*h*S*d_h*p) and the fp32 log-sum-exp of each query row (B*h*S*4); no mask;
               with selective recompute not even those: the core's forward runs again in the
               backward (Megatron-Core's selective recompute of ``core_attn`` over its fused
               attention kernel), from the Q, K and V its projections keep
    Shared by a stack's layers (kept once, not per layer): the causal mask (S x S bools, one per
    window kind; an encoder-only model's local layers only), RoPE's cos and sin tables (2*S*r*p),
    DeBERTa's table and bucket indices (``disentangled.kept_once``), and an encoder-decoder's
    encoder output, which every cross-attention's K and V read (B*S_e*d*p).
    """
    B, S, S_e, d = shape["B"], shape["S"], shape["S_e"], spec.d_model
    core_dropped = run.recompute == "selective" or run.flash
    attn_dropout = spec.attention_dropout_rate > 0
    # The softmax output of each attention sub-block (p x its score elements).
    probs_of = {key.sub_block: int(c.saved) for key, c in costs.items()
                if key.attention_core and key.leaf == "softmax"}
    out: dict[Key, int] = {}
    for key, c in costs.items():
        if run.recompute == "full" and key.layer:
            continue
        n = int(c.saved) + int(c.mask_elements) * run.mask_bytes
        probs = probs_of.get(key.sub_block, 0)  # p x scores of this attention sub-block (0: none)
        if core_dropped and probs:
            if key.leaf in ("softmax", "softcap"):  # the core's own outputs
                n = 0
            elif key.leaf == "av" and attn_dropout:
                n -= probs  # the dropped-out probabilities
            elif key.role is Role.dropout and attn_dropout:
                n -= probs // p * run.mask_bytes  # their mask
        out[key] = n
        if run.flash and run.recompute != "selective" and key.attention_core and key.leaf == "softmax":
            rows = probs // p // _span(shape, key)  # B x h x queries, times the layers
            out[replace(key, leaf="flash_output")] = rows * (spec.head_dim * p + FP32)
    groups = model.layer_groups(spec)
    stacks = [("encoder", S_e), ("decoder", S)] if spec.is_encoder_decoder else [("layers", S)]
    for stack, q_len in stacks:
        mine = [key for key in costs if key.stack == stack and key.layer]
        if spec.position is Position.disentangled:  # DeBERTa's table and bucket indices, once a stack
            for leaf, n in disentangled.kept_once(spec, q_len, p, run.recompute == "full").items():
                out[Key(leaf, Role.shared, stack, layer=True)] = n
        if run.recompute == "full":
            layers = sum(n for (s, _), n in groups.items() if s == stack)
            out[Key("inputs", Role.checkpoint, stack, layer=True)] = layers * B * q_len * d * p
            if any(key.attention_core and key.leaf == "position_bias" for key in mine):
                out[Key("position_bias", Role.shared, stack, layer=True)] = spec.n_heads * q_len * q_len * p
            continue
        # one mask per attention kind (a dense and a sparse group of one kind share theirs); an
        # encoder-only model masks only its local layers (ModernBERT's band)
        kinds = len([k for k in spec.kind_counts() if not spec.is_encoder or k is LayerKind.local])
        if stack != "encoder" and not run.flash and kinds:
            out[Key("causal_mask", Role.shared, stack, layer=True)] = kinds * q_len * q_len * MASK_BYTES
        if any(key.role is Role.position and key.leaf == "rope" for key in mine):
            out[Key("rope_tables", Role.shared, stack, layer=True)] = 2 * q_len * spec.rotary_dims * p
    if spec.is_encoder_decoder:
        encoder_output = Key("encoder_output", Role.shared, "decoder", layer=True, block="cross_attention")
        out[encoder_output] = B * S_e * d * p
    return out


def _span(shape: dict[str, int], key: Key) -> int:
    """Keys per query in a training pass: the decoder's own S, or the encoder's S_e."""
    return shape["S_e"] if key.stack == "encoder" or key.block == "cross_attention" else shape["S"]


def weight_bytes(costs: dict[Key, Cost], weights_dtype: str, p: int, group_size: int,
                 tensors: dict[Key, Cost]) -> dict[Key, int]:
    """Inference weights by component (``precision``'s rule; ``analysis.checkpoint_tensors``)."""
    return {k: weight_bytes_of(int(c.params), int(c.matrices), weights_dtype, p, group_size,
                               lm_head=k.is_lm_head, routed_expert=k.routed_expert, router=k.is_router,
                               **tensor_scales(int(c.matrices), tensors.get(k, c).gemms, weights_dtype))
            for k, c in costs.items() if c.params}


def _inference(spec: Spec, phase: str, costs: dict[Key, Cost], shape: dict[str, int], p: int, run: Run,
               kv_cache: int, mla: str) -> tuple[list[Item], int, list[str]]:
    held_as, naive = run.weights_dtype or run.dtype, Convention.naive.value
    tensors = checkpoint_tensors(spec, costs, held_as, mla,
                                 lambda: model.tree(spec, model.numeric_dims(spec, shape, p, naive)))
    held = weight_bytes(costs, held_as, p, run.group_size, tensors)
    items = [Item("weights", key.path, n, key) for key, n in held.items()]
    kv_p = DTYPE_BYTES[run.kv_dtype or run.dtype]
    items.append(Item("kv_cache", "kv_cache", kv_cache * kv_p // p))
    live = live_peak(spec, shape, p, run.flash, run.last_logits and phase == "prefill", mla)
    site = max(live, key=lambda k: live[k])
    items.append(Item("activations", f"live at the {site} peak", live[site]))
    others = ", ".join(f"{k} {n:,}" for k, n in live.items() if k != site)
    notes = [f"activations: the largest live set of one pass, at the {site}; the other sites: {others}"]
    if spec.mla is not None:
        notes.append(f"latent attention: {mla} (--mla naive|absorbed; the cached latent is the same in both)")
    return items, live[site], notes


def live_peak(spec: Spec, shape: dict[str, int], p: int, flash: bool, last_logits: bool,
              mla: str = Convention.naive.value) -> dict[str, int]:
    """The live activation bytes at the three sites where an inference pass peaks.

    Every site holds the residual stream x and the sub-block's normalised input (B*S*d each):
    attention  + Q, K, V of this pass (B*(h + 2k)*S*d_h) and, unless flash, the scores and the
               probabilities of one layer at once (2 x B*h*S*C)
    ffn        + the hidden activations (B*S*f, three tensors for a GLU: gate, up, product;
               two otherwise)
    lm_head    + the logits (B*S*V, or B*V when only the last position's are computed), one
               more copy for a logit scale (Cohere) and two more for a final soft-cap (Gemma 2:
               z / cap and tanh of it are live with the logits)

    Latent attention (``components.mla``, DeepSeek-V2 section 2.1) holds, in either convention,
    the queries (B*S*h*(d_n + d_r)) and, with RoPE, their rotated rotary part beside them
    (B*S*h*d_r: q_nope stays a view of the projection's output). Then, in `mla`:

    naive     the C cached latents re-expanded through kv_b (B*C*h*(d_n + d_v)), their keys with
              the rotary part (B*h*C*(d_n + d_r)) and their values (B*h*C*d_v), besides the
              scores: in decode, h*C*(2d_n + d_r + 2d_v) elements a sequence where MHA's formula
              would have a few per head (DeepSeek-V3 at C = 2048: 740.6 MB measured for 2
              sequences, not 2.4 MB)
    absorbed  the queries taken into the latent space through W_UK (B*S*h*r_kv), then the larger
              of two moments: forming the scores, the latent and the rotary products and their
              sum (3 x B*h*S*C, as DeepSeek's inference code adds two einsums); applying W_UV,
              the scores, the probabilities, AV's latent output (B*S*h*r_kv) and the values it
              makes (B*S*h*d_v). W_UV's matmul is batched over heads, so with B > 1 and S > 1
              AV's batch-major output is first copied head-major (B*S*h*r_kv more; one sequence
              or one query token is laid out alike both ways). With flash no score is held.
              No per-head key or value is ever made: the scores read the cached latent.
    """
    B, S, C = shape["B"], shape["S"], shape["C"]
    h, k, d_h = spec.n_heads, spec.n_kv_heads, spec.head_dim
    d, f, V = spec.d_model, spec.d_ff, spec.vocab_size
    stream = 2 * p * B * S * d
    scores = 0 if flash else 2 * p * B * h * S * C
    copies = 1 + (spec.logit_scale is not None) + 2 * (spec.final_softcap is not None)
    m = spec.mla
    if m is None:
        attention = p * B * (h + 2 * k) * S * d_h + scores
    else:
        d_n, d_r, d_v, r_kv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
        rotated = d_r if spec.position is Position.rope else 0
        queries = p * B * S * h * (d_n + d_r + rotated)
        if Convention(mla) is Convention.naive:
            attention = queries + p * B * h * C * ((d_n + d_v) + (d_n + d_r) + d_v) + scores
        else:
            one = p * B * h * S * C  # one tensor of scores
            forming = 0 if flash else 3 * one
            head_major = 2 if B > 1 and S > 1 else 1
            output = scores + p * B * S * h * (head_major * r_kv + d_v)
            attention = queries + p * B * S * h * r_kv + max(forming, output)
    return {
        "attention": stream + attention,
        "ffn": stream + (3 if spec.activation.gated else 2) * p * B * S * f,
        "lm_head": stream + copies * p * B * (1 if last_logits else S) * V,
    }


# --- conventions and fitting ---------------------------------------------------------------------


def korthikanti(s: Num, b: Num, h: Num, a: Num, t: Num = 1, sequence_parallel: bool = False,
                recompute: str = "none") -> Num:
    """Activation bytes per layer of Korthikanti et al. 2022 ("Reducing Activation Recomputation
    in Large Transformer Models"), Table 2: a GPT layer (LayerNorm, a 4h GeLU MLP, dropout with
    1-byte masks, 16-bit activations) of s tokens, micro-batch b, hidden h, a heads, tensor
    parallel t.

        no parallelism                   sbh(34 + 5as/h)
        tensor parallel                  sbh(10 + 24/t + 5as/(ht))
        tensor + sequence parallel       sbh/t (34 + 5as/h)
        tensor parallel, selective       sbh(10 + 24/t)
        tensor + sequence, selective     34 sbh/t
        full recompute                   2sbh
    It leaves out the LayerNorm statistics (fp32 mean and 1/std per row), the loss and the
    embeddings; our exact count follows the spec's own elements and shows theirs beside it.
    """
    if recompute == "full":
        return 2 * s * b * h
    scores = 0 if recompute == "selective" else 5 * a * s / h
    if sequence_parallel:
        return s * b * h * (34 + scores) / t
    return s * b * h * (10 + 24 / t + scores / t) if t != 1 else s * b * h * (34 + scores)


def fit(spec: Spec, phase: str, memory_bytes: float, over: str = "batch", batch: int = 1,
        seq: int | None = None, enc_seq: int | None = None, run: Run | None = None,
        parallel: Parallel | None = None, limit: int = 1 << 24) -> tuple[int, Memory | None]:
    """The largest batch (`over="batch"`) or sequence length (`over="seq"`) whose peak fits in
    `memory_bytes`, the other held at the value given, with the memory at that point (None and
    0 when not even 1 fits). Memory grows with either, so a doubling then bisection finds it;
    a sequence is capped at the spec's max_seq_len (less the new token in decode)."""
    if over not in ("batch", "seq"):
        raise MemoryConfigError(f"over: fit over batch or seq (got {over!r})")
    if over == "seq":  # no longer than the model's context
        limit = min(limit, spec.max_seq_len - (1 if phase == "decode" else 0))

    def at(n: int) -> Memory:
        if over == "batch":
            return memory(spec, phase, n, seq, enc_seq, run, parallel)
        return memory(spec, phase, batch, n, enc_seq, run, parallel)

    first = at(1)
    if not first.fits(memory_bytes):
        return 0, None
    lo, hi = 1, 2
    while hi <= limit and at(hi).fits(memory_bytes):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:  # lo fits, hi does not (or is past the limit)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at(mid).fits(memory_bytes) else (lo, mid)
    return lo, at(lo)


def fit_warning(spec: Spec, phase: str, batch: int, seq: int | None, enc_seq: int | None, dtype: str,
                device: str, memory_bytes: float, mla: str = Convention.naive.value,
                precision: Widths = Widths()) -> str | None:
    """One line when the shape does not fit on the device (None when it does), naming the
    shortfall. Training is counted with the default recipe (AdamW, bf16-mixed, no recompute, one
    device); inference with activations at `dtype`, weights and KV cache at `precision`'s widths
    (default `dtype`), latent attention in `mla` (training: naive, ``mla_convention``)."""
    from costmodel.units import decimal_bytes, nbytes

    if PHASES[phase].training:
        run = Run(mla=mla)
    else:
        run = Run(dtype=dtype, weights_dtype=precision.weights or dtype, kv_dtype=precision.kv,
                  group_size=precision.group_size, mla=mla)
    m = memory(spec, phase, batch, seq, enc_seq, run)
    if m.fits(memory_bytes):
        return None
    what = "AdamW bf16-mixed training" if phase == "train" else phase
    return (f"warning: {what} at B={batch}, seq={m.seq} needs {nbytes(m.peak)} per device, "
            f"{nbytes(m.peak - memory_bytes)} more than {device}'s {decimal_bytes(memory_bytes)} "
            f"(see `costmodel memory`)")
