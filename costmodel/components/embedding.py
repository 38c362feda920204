"""Token embeddings and the LM head (output projection to the vocabulary).

The input embedding is a gather of V x d rows: no FLOPs, and only the gathered rows are read.
Tied embeddings (Press & Wolf 2017, "Using the Output Embedding to Improve Language Models";
Vaswani et al. 2017, GPT-2, T5 1.0, Gemma) reuse that table as the LM head: V*d parameters
counted once, but the head still reads all of it. The head costs 2*B*S*d*V FLOPs, large when
V is large. Some models scale the embeddings by sqrt(d) (Vaswani et al. 2017, Gemma): one
multiply per element. Two more scalar multiplies sit around the head: T5 with a tied head
rescales the last hidden state by d^-1/2 before it (Raffel et al. 2020, as Mesh TensorFlow
implements it), and Cohere's models multiply the logits by a constant ``logit_scale``.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.components import stability
from costmodel.cost import Cost, Dims, Num, elementwise, linear
from costmodel.spec import Spec
from costmodel.symbols import ID_BYTES


def tokens(spec: Spec, dims: Dims, n_tokens: Num, owns_table: bool = True) -> Cost:
    """Look up `n_tokens` ids; `owns_table` is False for the second stack sharing the table."""
    rows = n_tokens * dims.d
    scale = rows if spec.embedding_scale else 0
    return Cost(
        params=dims.V * dims.d if owns_table else 0,
        factored=dims.V + dims.d if owns_table else 0,
        other=scale,
        bytes=dims.p * (2 * rows + 2 * scale) + ID_BYTES * n_tokens,
        weights_read=dims.p * rows,
        act_in=ID_BYTES * n_tokens,
        saved=ID_BYTES * n_tokens,  # the ids, for the table's gradient
    )


def lm_head(spec: Spec, dims: Dims, n_tokens: Num) -> Cost:
    """Logits for `n_tokens` positions; a tied head owns no parameters but reads the table."""
    head = linear(n_tokens, dims.d, dims.V, spec.bias.lm_head, dims.p)
    bias_params = dims.V if spec.bias.lm_head else 0
    return replace(
        head,
        params=bias_params if spec.tied_embeddings else head.params,
        matrices=0 if spec.tied_embeddings else head.matrices,
        factored=bias_params if spec.tied_embeddings else head.factored,
        act_out=dims.p * n_tokens * dims.V,
    )


def head_scale(dims: Dims, n_tokens: Num) -> Cost:
    """The last hidden state times d^-1/2 before the head: one multiply per element."""
    return elementwise(n_tokens * dims.d, 1, dims.p)


def logit_scale(dims: Dims, n_tokens: Num) -> Cost:
    """The logits times a constant: one multiply per element."""
    return elementwise(n_tokens * dims.V, 1, dims.p)


def logit_softcap(dims: Dims, n_tokens: Num) -> Cost:
    return stability.softcap(dims, n_tokens * dims.V)
