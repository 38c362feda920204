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
- The KV cache holds, is written and is read back at its own width; this pass's own keys and
  values are read at the activations' (``components.attention``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.errors import AnalysisError
from costmodel.symbols import DTYPE_BYTES

WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")
SCALE_BYTES = 2  # an fp16 scale per quantisation group
DEFAULT_GROUP = 128
INT_BITS = {"int8": 8, "int4": 4}


def weight_bytes_of(path: str, params: int, matrices: int, weights_dtype: str, p: int,
                    group_size: int) -> int:
    """Bytes of one component's `params` weights, `matrices` of them linear layers' matrices."""
    if weights_dtype in DTYPE_BYTES:
        return params * DTYPE_BYTES[weights_dtype]
    quantised = matrices if path != "lm_head" else 0
    scales = -(-quantised // group_size) * SCALE_BYTES
    return quantised * INT_BITS[weights_dtype] // 8 + scales + (params - quantised) * p


@dataclass(frozen=True)
class Widths:
    """The widths of an inference pass: `weights` and `kv` default to the activations' dtype."""

    weights: str | None = None
    kv: str | None = None
    group_size: int = DEFAULT_GROUP

    def check(self, error: type[Exception] | None = None) -> None:
        """One line naming the option, as the CLI spells it (an AnalysisError, or `error`)."""
        fail = error or AnalysisError
        if self.weights is not None and self.weights not in WEIGHT_DTYPES:
            raise fail(f"weights-dtype: unknown {self.weights!r}; expected one of {', '.join(WEIGHT_DTYPES)}")
        if self.kv is not None and self.kv not in DTYPE_BYTES:
            raise fail(f"kv-dtype: unknown {self.kv!r}; expected one of {', '.join(DTYPE_BYTES)}")
        if self.group_size < 1:
            raise fail(f"group-size: must be at least 1 (got {self.group_size})")

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``analysis.analyze`` that set these widths."""
        return {"weights_dtype": self.weights, "kv_dtype": self.kv, "group_size": self.group_size}

    def label(self, dtype: str) -> str:
        """' (int4 weights in groups of 128, fp8 KV cache)' where a width is not `dtype`'s; else ''."""
        w, kv = self.weights or dtype, self.kv or dtype
        parts = [f"{w} weights" + (f" in groups of {self.group_size}" if w in INT_BITS else "")] * (w
                                                                                                    != dtype)
        parts += [f"{kv} KV cache"] * (kv != dtype)
        return f" ({', '.join(parts)})" if parts else ""

    def differs(self, dtype: str) -> bool:
        """Whether weights or cache are held at another width than `dtype`'s."""
        return (self.weights or dtype) != dtype or (self.kv or dtype) != dtype
