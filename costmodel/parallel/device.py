"""What one GPU does with its share: the time and memory models the parallel step asks.

The parallel model asks the single-device models its questions only through this module
(docs/parallel.md, "Integration notes"):

- ``component_times(analysis, hw)``: seconds per component of one GPU's pass (a TP shard's
  analysis, phase ``train``: forward + backward), from the calibrated operator model
  (``costmodel.runtime.timing.predict``) on the device profile's efficiency tables, and what
  they read of its measured kernel tables (error bands, extrapolation);
- ``optimizer_seconds(params, recipe, hw)``: the optimizer step over `params` on one GPU;
- ``activations(spec, ...)``: bytes one GPU keeps for backward for one micro-batch, per layer and
  for the first and last stage, from the memory model (``costmodel.runtime.memory.activations``)
  of its TP shard, under SP and a recompute mode;
- ``ParameterBytes``: a training recipe's bytes per parameter (weights, gradients, optimizer
  states, and the optimizer step's traffic), built from the memory model's
  ``TrainingPrecision``.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel import model
from costmodel.analysis import Analysis, analyze
from costmodel.components.key import Key, Role
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import Reads
from costmodel.parallel.layout import Recompute
from costmodel.parallel.shard import shard_spec
from costmodel.runtime import memory
from costmodel.runtime.kernels import KERNELS
from costmodel.runtime.timing import Kernels, predict
from costmodel.spec import Spec


@dataclass(frozen=True)
class ParameterBytes:
    """A training recipe's bytes per parameter held by one replica (before ZeRO shards them), and
    the bytes per parameter the optimizer step moves: what the step asks of a
    ``memory.TrainingPrecision`` and its optimizer (``of``). The name is the recipe's, as
    ``train``'s JSON prints it (``recipe``)."""

    name: str
    weight_bytes: int
    grad_bytes: int
    optimizer_bytes: int  # master weights and optimizer states
    update_bytes: int

    @property
    def state_bytes(self) -> int:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes

    @classmethod
    def of(cls, name: str, p: memory.TrainingPrecision, update_bytes: int,
           optimizer: str = "adamw") -> ParameterBytes:
        """The bytes of precision `p` with `optimizer`'s states, and the update's traffic."""
        states = memory.optimizer_bytes(optimizer, 1, 0, p.states)
        return cls(name, p.weights, p.gradients, p.master + states, update_bytes)

    def label(self, dtype: str) -> str:
        """The recipe as a run at `dtype` holds it: ``bf16-mixed (Megatron)`` for a bf16 run (the
        name once said fp16-mixed whatever the dtype); fp8 matmuls keep 16-bit weights, bf16."""
        return f"{dtype if dtype in ('bf16', 'fp16') else 'bf16'}-mixed ({self.name})"


#: Megatron-LM's fp16 optimizer as it ran in Korthikanti et al. 2022 (NVIDIA/Megatron-LM of June
#: 2022, megatron/optimizer/optimizer.py, ``MixedPrecisionOptimizer.step``, and training.py):
#: fp16/bf16 weights, fp32 main gradients (Megatron accumulates in fp32: none of the memory
#: model's ``PRECISIONS`` has them, so it is declared here), fp32 master weights, Adam's m and v.
MEGATRON_PRECISION = memory.TrainingPrecision(
    "fp16-mixed (Megatron)", 2, 0, 4, 4, 4, 2,
    "fp16/bf16 weights, fp32 main gradients, master weights and Adam states")

#: Its update, pass by pass over every parameter: zero the fp32 gradient buffer (write 4); unscale
#: and check for inf/NaN in place (``_amp_foreach_non_finite_check_and_unscale_``: read 4, write
#: 4); the gradient's L2 norm for clipping (read 4; the rescale only runs when the norm exceeds
#: the limit); Adam (apex ``multi_tensor_adam``: read gradient, master, m, v, write master, m, v:
#: 28); copy the fp32 master into the fp16 weights (read 4, write 2). 50 bytes.
MEGATRON = ParameterBytes.of("Megatron", MEGATRON_PRECISION,
                             4 + (4 + 4) + 4 + (4 * 4 + 3 * 4) + (4 + 2))  # 18 bytes per parameter


def _zero() -> ParameterBytes:
    """The memory model's bf16-mixed AdamW (ZeRO's 2 + 2 + 12 bytes, Rajbhandari et al. 2020)."""
    p = memory.PRECISIONS["bf16-mixed"]
    states = memory.optimizer_bytes("adamw", 1, 0, p.states)
    # The update reads master, m, v and the gradient and writes master, m, v and the weight.
    return ParameterBytes.of("ZeRO", p, 2 * p.master + 2 * states + p.gradients + p.weights)


ZERO = _zero()

# --- time: the calibrated operator model (runtime.timing) -------------------------------------------

#: Megatron-LM's kernels in Korthikanti et al. 2022 (``runtime.kernels``' ``megatron-2022``): no
#: flash attention (the scores reach memory); the 1/sqrt(d_h) scale is the scores GEMM's alpha
#: (``torch.baddbmm``) and the causal mask and softmax one kernel (``FusedScaleMaskSoftmax``;
#: megatron/model/transformer.py, CoreAttention); the output dropout and residual add one kernel
#: (``bias_dropout_add_fused_train``, the default --bias-dropout-fusion); its other fusions
#: (bias-GeLU) join elementwise ops to each other, not to the matmuls: every other elementwise
#: component moves its unfused bytes. Table 5's check (``parallel.validation``) runs with it; a GPU's
#: default is ``flash`` (``runtime.kernels.default_kernels``).
MEGATRON_KERNELS = KERNELS["megatron-2022"]


def component_times(a: Analysis, hw: Hardware,
                    kernels: Kernels = MEGATRON_KERNELS) -> tuple[dict[Key, float], Reads]:
    """Seconds per component of `a`'s pass on `hw`: ``runtime.timing.predict`` (each matmul's
    forward and backward products at the profile's efficiency for their shapes, every other
    component's bytes at its memory efficiency; the roofline where the profile has no tables);
    and what those times read of the device's measured kernel tables (``devices.kernels.Reads``:
    the prediction's error bands and the op classes it extrapolated).

    A training pass keeps no KV cache: its ``kv_cache`` rows are left out."""
    p = predict(a, hw, kernels)
    secs = {r.key: r.time_s for r in p.rows if not (a.phase == "train" and r.key.role is Role.kv_cache)}
    return secs, Reads(p.errors, p.extrapolated)


def calibrated(hw: Hardware, dtype: str) -> bool:
    """Whether `hw` has efficiency tables for `dtype` (else the times are the roofline)."""
    return hw.tables_for(dtype)


def optimizer_seconds(params: float, recipe: ParameterBytes, hw: Hardware) -> float:
    """The Adam update is memory-bound: its bytes at the profile's memory efficiency for a
    transfer of that size (the bandwidth itself without tables)."""
    nbytes = params * recipe.update_bytes
    eff = hw.efficiency.memory(nbytes) if hw.efficiency is not None else 1.0
    return nbytes / (hw.memory_bandwidth * eff)


# --- memory: the memory model (runtime.memory) -----------------------------------------------------


@dataclass(frozen=True)
class Activations:
    """Bytes one GPU keeps for backward for one micro-batch (runtime.memory.activations of its
    TP shard): per layer of each layer group (a sparse layer keeps its routing and its experts'
    inputs, a dense one its FFN's), the first stage's embedding, the last stage's head and loss,
    and the tensors a stack's layers share (the causal mask, RoPE tables), kept once per GPU."""

    per_group: dict[str | None, float]
    first: float
    last: float
    shared: float
    per_layer: float  # the mean over every layer of the model


def activations(spec: Spec, micro_batch: int, seq: int, tp: int, sequence_parallel: bool,
                recompute: Recompute, flash: bool = False) -> Activations:
    """Activations of one micro-batch on one GPU, from the memory model's exact per-element counts
    (16-bit activations, 1-byte dropout masks as fused CUDA kernels keep them). Without `flash`
    each attention layer keeps its scores' softmax, dropout mask and dropped-out probabilities (B h
    S^2 elements each, Korthikanti et al. 2022's 5as/h); with it (Dao et al. 2022) the output and
    the fp32 log-sum-exp of each query row instead (``runtime.memory.activations``).

    Tensor parallel: the count of the TP shard (``shard.shard_spec``): heads, FFN width and
    vocabulary split, the norms, residuals and dropout between them whole on every rank
    (Korthikanti et al. 2022's sbh(10 + 24/t + 5as/(ht))). Sequence parallel splits those too:
    the layers keep 1/t of the unsplit model's activations (their sbh/t (34 + 5as/h)).
    The whole depth is counted (each group's rows hold its layers), then divided per layer.
    """
    counts = {g: n for (_, g), n in model.layer_groups(spec).items()}

    def count(s: Spec) -> dict[Key, int]:
        a = analyze(s, "train", batch=micro_batch, seq=seq, dtype="bf16")
        costs = model.tree(s, model.numeric_dims(s, dict(a.shape), 2, one_kernel=flash))
        run = memory.Run(recompute=recompute.value, flash=flash)
        return memory.activations(s, costs, dict(a.shape), 2, run)

    def split(acts: dict[Key, int], divide: float) -> Activations:
        groups = dict.fromkeys(counts, 0.0)
        shared = every = 0.0
        for key, n in acts.items():
            if key.layer:
                if key.role is Role.shared:  # the causal mask, RoPE's tables, the position bias
                    shared += n
                elif key.group in groups:
                    groups[key.group] += n
                else:  # the stack's, the same on every layer (full recompute's layer inputs)
                    every += n
        first = sum(n for key, n in acts.items() if key.first_stage)
        last = sum(n for key, n in acts.items() if not key.layer and not key.first_stage)
        layers = sum(counts.values())
        per_group = {g: (v / counts[g] + every / layers) / divide for g, v in groups.items()}
        mean = (sum(groups.values()) + every) / layers / divide
        return Activations(per_group, first / divide, last, shared, mean)

    if sequence_parallel and tp > 1:
        whole = split(count(spec), tp)  # everything in the layers split over t along the sequence
        head = split(count(shard_spec(spec, tp)), 1)  # the vocabulary-parallel head and loss
        return Activations(whole.per_group, whole.first, head.last, whole.shared, whole.per_layer)
    return split(count(shard_spec(spec, tp)), 1)


def activation_bytes_per_layer(
    spec: Spec, micro_batch: int, seq: int, tp: int, sequence_parallel: bool, recompute: Recompute,
    flash: bool = False,
) -> float:
    """Bytes one transformer layer keeps for backward on one GPU for one micro-batch."""
    return activations(spec, micro_batch, seq, tp, sequence_parallel, recompute, flash).per_layer
