"""BERT and RoBERTa: the encoder-only models of Devlin et al. 2019 and Liu et al. 2019, counted as
their AutoModel classes (BertModel, RobertaModel) hold them: embeddings (word, learned position,
token type, a LayerNorm), post-LayerNorm layers with biases everywhere, and BERT's pooler."""

from __future__ import annotations

from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import Config, fixed_head_dim, read_activation, read_dropout
from costmodel.spec import Head, Norm, NormPosition, PoolerActivation, Position, Spec


def encoder_sizes(c: Config, out: dict[str, Any]) -> None:
    """The sizes every encoder family names alike (BertConfig's names)."""
    out["architecture"] = "encoder"
    out["d_model"] = c.req_int("hidden_size")
    out["n_layers"] = c.req_int("num_hidden_layers")
    fixed_head_dim(c, out, "num_attention_heads")
    out["d_ff"] = c.req_int("intermediate_size")
    out["vocab_size"] = c.req_int("vocab_size")


def post_norm_encoder(c: Config, out: dict[str, Any]) -> None:
    """BERT's layer, as BERT, RoBERTa and DeBERTa build it: post-LayerNorm, biased linears, a
    two-matrix FFN, a LayerNorm over the embeddings, dropout on the outputs and probabilities."""
    encoder_sizes(c, out)
    out["norm"], out["norm_position"] = Norm.layernorm.value, NormPosition.post.value
    out["activation"] = read_activation(c, "hidden_act", gated=False).value
    out["bias"] = {"qkv": True, "attn_out": True, "ffn": True, "lm_head": True}  # the MLM decoder's bias
    out["embedding_norm"] = True
    out["tied_embeddings"] = c.bool("tie_word_embeddings")  # the MLM decoder (head: mlm)
    types = c.int("type_vocab_size", positive=False)
    if types:
        out["token_types"] = types
    read_dropout(c, out, "hidden_dropout_prob", "hidden_dropout_prob", "attention_probs_dropout_prob")
    c.require("is_decoder", False, "BERT as a causal decoder (BertLMHeadModel) is not modelled")


def _bert(c: Config, out: dict[str, Any], offset: int = 0) -> None:
    post_norm_encoder(c, out)
    out["position"] = Position.learned.value
    c.require("position_embedding_type", "absolute", "relative_key position embeddings are not modelled")
    rows = c.req_int("max_position_embeddings")
    if offset:  # RoBERTa numbers positions from padding_idx + 1: the first rows are never used
        if rows <= offset:
            raise c.error("max_position_embeddings", f"{rows} rows leave no position past the padding offset")
        out["max_seq_len"], out["position_offset"] = rows - offset, offset
    else:
        out["max_seq_len"] = rows
    out["head"] = Head.pooler.value  # BertModel(add_pooling_layer=True), RobertaModel likewise


def _roberta(c: Config, out: dict[str, Any]) -> None:
    """RobertaEmbeddings: position ids start at padding_idx + 1 (pad_token_id 1: 514 rows for 512
    tokens, Liu et al. 2019's released models)."""
    pad = c.int("pad_token_id", positive=False)
    _bert(c, out, offset=(pad or 0) + 1)


def export_bert(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
            "num_attention_heads": spec.n_heads, "intermediate_size": spec.d_ff,
            "hidden_act": spec.activation.value, "max_position_embeddings": spec.position_rows,
            "type_vocab_size": spec.token_types, "hidden_dropout_prob": spec.dropout,
            "attention_probs_dropout_prob": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _bert_like(spec: Spec) -> bool:
    return (spec.is_encoder and spec.position is Position.learned and spec.norm_position is NormPosition.post
            and spec.embedding_norm and spec.head is Head.pooler and not spec.activation.gated
            and spec.pooler_activation is PoolerActivation.tanh and not spec.pooler_norm and spec.head_bias)


_DEFAULTS = dict(hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 type_vocab_size=2,
                 tie_word_embeddings=True, is_decoder=False, position_embedding_type="absolute")
_IGNORED = {"layer_norm_eps": "a constant inside the norm", "gradient_checkpointing": "a training switch",
            "classifier_dropout": "the classification head's dropout rate (head: classification)",
            "is_decoder": "read: a causal BERT is refused"}
_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
          "max_position_embeddings")

register(Family("bert", "BertModel", _bert, {**_DEFAULTS, "pad_token_id": 0}, _SIZES, _IGNORED,
                export=export_bert, matches=lambda s: _bert_like(s) and s.position_offset == 0, encoder=True))
register(Family("roberta", "RobertaModel", _roberta, {**_DEFAULTS, "pad_token_id": 1}, _SIZES, _IGNORED,
                export=lambda s: {**export_bert(s), "pad_token_id": s.position_offset - 1},
                matches=lambda s: _bert_like(s) and s.position_offset > 0, encoder=True))
