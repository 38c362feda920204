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
from typing import Any

from costmodel.components import stability
from costmodel.components.element import Alternative, Choose, Element, Symbol, toggle
from costmodel.cost import Cost, Dims, Num, elementwise, linear, runs
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
        bytes_unfused=dims.p * (2 * rows + 2 * scale) + ID_BYTES * n_tokens,
        weights_read=dims.p * rows,
        act_in=ID_BYTES * n_tokens,
        saved=ID_BYTES * n_tokens,  # the ids, for the table's gradient
    )


def token_types(dims: Dims, n_tokens: Num) -> Cost:
    """BERT's segment embeddings (Devlin et al. 2019, 3.2): a row of a small table (n_types x d)
    gathered for every token and added to the sum; unfused, the gather reads the ids and writes
    the rows, the add reads two tensors and writes one."""
    rows = n_tokens * dims.d
    table = dims.n_types * dims.d
    return Cost(
        params=table,
        factored=dims.n_types + dims.d,
        other=rows,
        bytes_unfused=dims.p * 5 * rows + ID_BYTES * n_tokens,
        weights_read=dims.p * table * runs(n_tokens),
        act_in=ID_BYTES * n_tokens,
        saved=ID_BYTES * n_tokens,  # the type ids, for the table's gradient
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


# --- the elements -----------------------------------------------------------------------------

#: Command R7B's logit_scale (specs/command-r7b.yaml, from its config.json).
COMMAND_R_LOGIT_SCALE = 0.25


def label(spec: Spec) -> str:
    """The embeddings as compare shows them: "tied, x sqrt(d)"."""
    return ("tied" if spec.tied_embeddings else "untied") + (", x sqrt(d)" if spec.embedding_scale else "")


def _sample(choose: Choose, data: dict[str, Any]) -> None:
    data.update(vocab_size=choose(range(3, 41)), tied_embeddings=choose([True, False]),
                embedding_scale=choose([True, False]))


def _logit_scale_swaps(spec: Spec, window: int) -> list[Alternative]:
    if spec.logit_scale is not None:
        return [(f"{spec.logit_scale:g} -> none", {"logit_scale": None})]
    return [(f"none -> {COMMAND_R_LOGIT_SCALE:g} (Command R7B)", {"logit_scale": COMMAND_R_LOGIT_SCALE})]


def _sample_logit_scale(choose: Choose, data: dict[str, Any]) -> None:
    if choose([True, False]) and data.get("architecture") != "encoder":
        data["logit_scale"] = 0.25


def _sample_extras(choose: Choose, data: dict[str, Any]) -> None:
    if data.get("architecture") == "encoder-decoder":  # one table for two stacks: not modelled
        return
    data.update(token_types=choose([0, 0, 1, 2]), embedding_norm=choose([True, False]))


def _extras_swaps(spec: Spec, window: int) -> list[Alternative]:
    if spec.is_encoder_decoder:
        return []
    norm = "norm -> none" if spec.embedding_norm else "none -> norm"
    types = [("token types 2 -> none" if spec.token_types else "none -> 2 token types (BERT)",
              {"token_types": None if spec.token_types else 2})]
    return [(f"embedding {norm}", {"embedding_norm": not spec.embedding_norm}), *types]


def _extras(spec: Spec) -> str | None:
    parts = ([f"{spec.token_types} token types"] if spec.token_types else []) + (
        ["embedding norm"] if spec.embedding_norm else [])
    return " · ".join(parts) or None


ELEMENTS = (
    Element(
        "embeddings", ("vocab_size", "tied_embeddings", "embedding_scale"),
        describe=lambda s: f"V={s.vocab_size} · {label(s)}",
        choices=(("embeddings", label),),
        swaps=lambda s, w: [] if s.is_encoder and s.head.value != "mlm" else [
            ("tied -> untied" if s.tied_embeddings else "untied -> tied",
             {"tied_embeddings": not s.tied_embeddings})],
        sample=_sample,
        symbols={"V": Symbol("vocabulary size", lambda s: s.vocab_size)},
    ),
    Element(
        "segments and embedding norm", ("token_types", "embedding_norm"),
        describe=_extras,
        choices=(("token types", lambda s: s.token_types), ("embedding norm", lambda s: s.embedding_norm)),
        swaps=_extras_swaps, sample=_sample_extras,
        symbols={"n_types": Symbol("token types (BERT's segments, type_vocab_size)",
                                   lambda s: s.token_types or None)},
    ),
    Element(
        "head scale", ("head_scale",),
        describe=lambda s: "head scale d^-1/2" if s.head_scale else None,
        choices=(("head scale", lambda s: "d^-1/2" if s.head_scale else "none"),),
        swaps=toggle("head_scale", on="d^-1/2", off="none"),
        sample=lambda choose, data: data.update(
            head_scale=choose([True, False]) and data.get("architecture") != "encoder"),
    ),
    Element(
        "logit scale", ("logit_scale",),
        describe=lambda s: None if s.logit_scale is None else f"logit scale {s.logit_scale:g}",
        choices=(("logit scale", lambda s: s.logit_scale),),
        swaps=_logit_scale_swaps, sample=_sample_logit_scale,
    ),
)
