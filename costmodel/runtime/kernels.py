"""Which kernels a count assumes, by name, and which a device runs by default: the one
vocabulary of ``--kernels`` in every command that times or holds a pass (``analyze --hardware``,
``inference``, ``serve``, ``memory``, ``fit``, ``train``, ``plan``).

Each name is a ``runtime.timing.Kernels`` (what each flag folds: that class's docstring):

- ``eager``: nothing fused, every op its own kernel and the attention scores written, read and
  kept (PyTorch eager, Hugging Face transformers' "eager" attention). The reference of
  ``costmodel measure`` and of every profile ``costmodel calibrate`` writes (it times torch
  eager ops), so the default there and without a device.
- ``flash``: the attention core as one kernel (Dao et al. 2022, "FlashAttention: Fast and
  Memory-Efficient Exact Attention with IO-Awareness"): the S x S scores are never written nor
  kept for backward (the output and the fp32 log-sum-exp of each query row are); every other
  component is one kernel that reads its inputs and writes its output once; in training the
  output dropout and the residual add are one kernel (fused bias-dropout-add). What GPU stacks
  run today: serving engines (vLLM, SGLang, TensorRT-LLM: FlashAttention / FlashInfer kernels,
  RMSNorm with the residual add, SiLU-and-multiply and RoPE each a kernel of their own, none of
  them fused into a GEMM) and training frameworks (Megatron-Core with Transformer Engine's fused
  attention and bias-dropout-add; torchtitan with PyTorch's flash SDPA). The default on a GPU
  profile, for serving and for training: Llama 3 405B's 8K layout on 80 GB H100s (Dubey et al.
  2024, "The Llama 3 Herd of Models", Table 4: TP 8, CP 1, PP 16) is out of reach once every
  layer keeps its 8192^2 scores (``parallel.step``; docs/parallel.md).
- ``fused``: ``flash``, and the norms, activations, residual adds, RoPE and scales fused into
  the neighbouring matmuls (their bytes never reach memory): the fused lower bound, which no
  stack reaches (the old ``--flash-attention --fused``).
- ``megatron-2022``: Megatron-LM as Korthikanti et al. 2022 ran it ("Reducing Activation
  Recomputation in Large Transformer Models"): no flash attention (the scores reach memory and
  are kept for backward), the scale and causal mask fused into the softmax
  (``FusedScaleMaskSoftmax``), the output dropout and residual add one kernel; its Table 5
  (``parallel.validation``) is reproduced with it.

Latent attention (MLA) has a default of its own on the same rule (``default_mla``): absorbed on
a GPU (W_UK and W_UV folded into query and output, as DeepSeek's FlashMLA kernels and the serving
engines' MLA backends decode), naive elsewhere (as transformers runs it).
"""

from __future__ import annotations

from typing import Any

from costmodel.analysis import AnalysisError
from costmodel.components.mla import Convention
from costmodel.devices.hardware import Hardware
from costmodel.runtime.timing import Kernels

#: The named kernel sets, in the order ``--kernels`` lists them.
KERNELS: dict[str, Kernels] = {
    "eager": Kernels(),
    "flash": Kernels(flash_attention=True, fused_bias_dropout_add=True),
    "fused": Kernels(flash_attention=True, fused=True, fused_bias_dropout_add=True),
    "megatron-2022": Kernels(flash_attention=False, fused=False, fused_softmax=True,
                             fused_bias_dropout_add=True),
}

#: What each name assumes, in a few words, for tables' notes.
DESCRIPTIONS = {
    "eager": "every op its own kernel, attention scores written and kept (PyTorch eager, HF)",
    "flash": "fused attention, scores never written nor kept (Dao et al. 2022), every other op one "
             "kernel (GPU serving and training stacks today)",
    "fused": "flash attention, and norms, activations and residuals fused into the matmuls (the fused "
             "lower bound)",
    "megatron-2022": "Megatron-LM of Korthikanti et al. 2022: scores written and kept, fused "
                     "scale-mask-softmax and bias-dropout-add",
}

#: Works whose reference is a torch eager run whatever the device.
EAGER_WORKS = ("measure",)


def on_gpu(hw: Hardware | None) -> bool:
    """Whether `hw` is a GPU as GPU stacks run it: a datasheet profile (bundled or the user's).
    A profile ``costmodel calibrate`` measured (``measured``) timed torch eager ops, on the CPU
    or a GPU, and is held against eager runs (``costmodel measure``); no profile is no device."""
    return hw is not None and not hw.measured


def default_kernels(hw: Hardware | None, work: str = "serve") -> str:
    """The kernels' name a `work` assumes on `hw` when none is asked for: ``flash`` on a GPU
    (``on_gpu``) for serving (``serve``: analyze's time, inference, serve) and for training
    (``train``: train, plan, memory); ``eager`` without a device, on a calibrated profile, and for
    ``measure`` (the PyTorch reference is eager)."""
    if work in EAGER_WORKS or not on_gpu(hw):
        return "eager"
    return "flash"


def default_mla(hw: Hardware | None) -> str:
    """Latent attention's convention at inference when none is asked for: absorbed on a GPU, naive
    elsewhere (``components.mla``)."""
    return Convention.absorbed.value if on_gpu(hw) else Convention.naive.value


def is_default(k: Kernels, hw: Hardware | None, work: str = "serve") -> bool:
    """Whether `k` is what `work` assumes on `hw` when none is asked for."""
    return k == KERNELS[default_kernels(hw, work)]


def resolve(name: str | None, hw: Hardware | None, work: str = "serve") -> str:
    """`name` checked (bad input in one line naming ``--kernels``), or the default on `hw`."""
    if name is None:
        return default_kernels(hw, work)
    if name not in KERNELS:
        raise AnalysisError(f"--kernels: unknown kernels {name!r}; expected one of {', '.join(KERNELS)}")
    return name


def name_of(k: Kernels) -> str | None:
    """The name of a kernel set, None for one no name covers."""
    return next((n for n, v in KERNELS.items() if v == k), None)


def to_dict(k: Kernels, default: bool | None = None) -> dict[str, Any]:
    """The kernels as every command's JSON says them: their name (None for an unnamed set), each
    flag, and whether the device chose them (`default`, when known)."""
    out: dict[str, Any] = {"name": name_of(k), **k.to_dict()}
    if default is not None:
        out["default"] = default
    return out


def note(k: Kernels, hw: Hardware | None = None, default: bool = False) -> str:
    """A table's line naming the kernels assumed, and whether the device chose them:
    ``kernels: flash, the default on h100-sxm (fused attention, ...); --kernels eager|...``."""
    name = name_of(k)
    what = DESCRIPTIONS[name] if name else ", ".join(f for f, on in k.to_dict().items() if on) or "none fused"
    chosen = (f", the default on {hw.name}" if hw is not None else ", the default") if default else ""
    return f"kernels: {name or 'as given'}{chosen} ({what}); --kernels {'|'.join(KERNELS)}"
