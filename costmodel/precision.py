"""Inference precision beside the activations' dtype: the weights' (a float width, or int8/int4
weight-only quantisation with group scales) and the KV cache's.

One rule for every command: ``memory`` holds the weights and the cache at these widths, and
``analyze``/``inference`` read and write them at these widths (bytes, roofline and calibrated
time). Training runs at the activations' dtype (mixed precision is ``costmodel.runtime.memory``'s
recipe), so these are inference options.

- A float dtype holds every parameter at its width.
- int8 and int4 hold the matrices of the linear layers (``Cost.matrices``; the LM head excepted,
  as GPTQ, Frantar et al. 2023, and AWQ, Lin et al. 2024, leave it) at 8 or 4 bits, plus one
  fp16 scale per group of ``group_size`` weights of a component (128 by default, both papers'
  setting); embeddings, norms and biases stay at the activations' width.
- mxfp4 holds a mixture of experts' routed experts' matrices (``Key.routed_expert``) in OCP
  Microscaling FP4: 4-bit E2M1 elements and one 8-bit E8M0 scale shared by each block of 32, 4 +
  8/32 = 4.25 bits an element (Open Compute Project, OCP Microscaling Formats (MX) Specification
  v1.0, 2023, sections 5.1 and 5.3, Table 1: MXFP4, k = 32, scale E8M0). That is how gpt-oss's
  checkpoints hold them (config.json ``quantization_config`` {"quant_method": "mxfp4"}; the
  model card, arXiv:2508.10925, section 2.4: the MoE weights at 4.25 bits per parameter):
  attention, router, embeddings, head, norms and the experts' biases stay at the activations'
  width, and so does a model's shared experts. ``--group-size`` does not apply: MX fixes its block.
- The KV cache holds, is written and is read back at its own width; this pass's own keys and
  values are read at the activations' (``components.attention``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from costmodel.errors import AnalysisError
from costmodel.symbols import DTYPE_BYTES

if TYPE_CHECKING:  # precision loads no pydantic of its own
    from costmodel.spec import Spec

WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4")
SCALE_BYTES = 2  # an fp16 scale per quantisation group
DEFAULT_GROUP = 128
INT_BITS = {"int8": 8, "int4": 4}
#: OCP MX v1.0 (Table 1): the element bits, the block of elements sharing one scale, the scale's bytes.
MX_BITS = {"mxfp4": 4}
MX_BLOCK = 32
MX_SCALE_BYTES = 1  # E8M0
EXPERTS_ONLY = frozenset(MX_BITS)  # widths that hold the routed experts alone


def quantises(weights_dtype: str, *, lm_head: bool, routed_expert: bool) -> bool:
    """Whether `weights_dtype` holds a component's matrices below the activations' width: int8/int4
    every linear layer's but the LM head's, mxfp4 the routed experts' alone."""
    if weights_dtype in INT_BITS:
        return not lm_head
    return weights_dtype in MX_BITS and routed_expert


def weight_bytes_of(params: int, matrices: int, weights_dtype: str, p: int, group_size: int, *,
                    lm_head: bool = False, routed_expert: bool = False) -> int:
    """Bytes of one component's `params` weights, `matrices` of them linear layers' matrices
    (`lm_head`, `routed_expert`: what the component is, ``quantises``)."""
    if weights_dtype in DTYPE_BYTES:
        return params * DTYPE_BYTES[weights_dtype]
    quantised = matrices if quantises(weights_dtype, lm_head=lm_head, routed_expert=routed_expert) else 0
    if weights_dtype in MX_BITS:
        scales = -(-quantised // MX_BLOCK) * MX_SCALE_BYTES
        return quantised * MX_BITS[weights_dtype] // 8 + scales + (params - quantised) * p
    scales = -(-quantised // group_size) * SCALE_BYTES
    return quantised * INT_BITS[weights_dtype] // 8 + scales + (params - quantised) * p


@dataclass(frozen=True)
class Widths:
    """The widths of an inference pass: `weights` and `kv` default to the activations' dtype."""

    weights: str | None = None
    kv: str | None = None
    group_size: int = DEFAULT_GROUP

    def check(self, error: type[Exception] | None = None, spec: Spec | None = None) -> None:
        """One line naming the option, as the CLI spells it (an AnalysisError, or `error`); with
        `spec`, an experts-only width (mxfp4) asked of a model without routed experts too."""
        fail = error or AnalysisError
        if self.weights is not None and self.weights not in WEIGHT_DTYPES:
            raise fail(f"weights-dtype: unknown {self.weights!r}; expected one of {', '.join(WEIGHT_DTYPES)}")
        if self.kv is not None and self.kv not in DTYPE_BYTES:
            raise fail(f"kv-dtype: unknown {self.kv!r}; expected one of {', '.join(DTYPE_BYTES)}")
        if self.group_size < 1:
            raise fail(f"group-size: must be at least 1 (got {self.group_size})")
        if spec is not None and self.weights in EXPERTS_ONLY and spec.moe is None:
            raise fail(f"weights-dtype: {self.weights} holds a mixture of experts' routed experts (as "
                       f"gpt-oss's checkpoints); {spec.name[:60]} has none: use int4 or int8 for its "
                       "linear layers")

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``analysis.analyze`` that set these widths."""
        return {"weights_dtype": self.weights, "kv_dtype": self.kv, "group_size": self.group_size}

    def label(self, dtype: str) -> str:
        """' (int4 weights in groups of 128, fp8 KV cache)', ' (mxfp4 routed experts)' where a width is
        not `dtype`'s; else ''."""
        w, kv = self.weights or dtype, self.kv or dtype
        held = f"{w} routed experts" if w in EXPERTS_ONLY else f"{w} weights"
        parts = [held + (f" in groups of {self.group_size}" if w in INT_BITS else "")] * (w != dtype)
        parts += [f"{kv} KV cache"] * (kv != dtype)
        return f" ({', '.join(parts)})" if parts else ""

    def differs(self, dtype: str) -> bool:
        """Whether weights or cache are held at another width than `dtype`'s."""
        return (self.weights or dtype) != dtype or (self.kv or dtype) != dtype
