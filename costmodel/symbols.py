"""The alphabet every formula is written in (../shared/DESIGN.md, "Symbols"), and byte widths.

Each symbol is declared once, here, with the assumptions sympy needs to keep expressions
simple (all sizes are positive integers). Formulas never build symbols from strings.
"""

from __future__ import annotations

import sympy

_size = dict(integer=True, positive=True)

# Shape of the pass (the phase binds these).
B = sympy.Symbol("B", **_size)  # batch size
S = sympy.Symbol("S", **_size)  # tokens processed in this pass (1 in decode)
C = sympy.Symbol("C", **_size)  # context attended to (S in prefill/train, cached + 1 in decode)
# Encoder side of an encoder-decoder: tokens encoded in this pass (0 in decode, when the
# encoder output is already cached) and encoder tokens the decoder cross-attends to.
S_e = sympy.Symbol("S_e", integer=True, nonnegative=True)
C_e = sympy.Symbol("C_e", **_size)

# Shape of the model (the spec binds these).
d = sympy.Symbol("d", **_size)  # model width, d_model
h = sympy.Symbol("h", **_size)  # query heads
k = sympy.Symbol("k", **_size)  # key/value heads (k = h: MHA, k = 1: MQA)
d_h = sympy.Symbol("d_h", **_size)  # head dimension
f = sympy.Symbol("f", **_size)  # FFN hidden width, d_ff
V = sympy.Symbol("V", **_size)  # vocabulary size
w = sympy.Symbol("w", **_size)  # sliding-window length
r = sympy.Symbol("r", **_size)  # rotary dimensions per head (d_h, or a fraction of it)
n_pos = sympy.Symbol("n_pos", **_size)  # rows of a learned position table (max_seq_len)
n_buckets = sympy.Symbol("n_buckets", **_size)  # T5 relative-position buckets
p = sympy.Symbol("p", **_size)  # bytes per element of weights and activations

#: Token ids are int64 in every reference implementation (torch.long).
ID_BYTES = 8
#: A boolean mask element (attention masks, dropout masks) is one byte.
MASK_BYTES = 1

#: Bytes per element for each dtype the CLI accepts.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def layer_count(stack: str, group: str | None) -> sympy.Symbol:
    """The symbol counting the layers of one group of one stack.

    A decoder-only model with one kind of layer has plain ``L``; an encoder-decoder has
    ``L_enc`` and ``L_dec``; a local/global pattern splits a stack into ``L_local`` and
    ``L_global`` (``L_dec_local`` ... in an encoder-decoder).
    """
    parts = ["L"]
    if stack != "layers":
        parts.append({"encoder": "enc", "decoder": "dec"}[stack])
    if group is not None:
        parts.append(group)
    return sympy.Symbol("_".join(parts), **_size)
