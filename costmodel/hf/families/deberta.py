"""DeBERTa-v2 and v3 (model_type deberta-v2; He et al. 2021, 2023): BERT's post-LayerNorm layer
with disentangled attention (c2p and p2c, ``components.disentangled``) over a 2k x d relative
table normalised once per pass, k = position_buckets (or max_relative_positions); no absolute
positions (position_biased_input false) and no token types in v3. DebertaV2Model holds no pooler."""

from __future__ import annotations

from typing import Any

from costmodel.hf.families.bert import post_norm_encoder
from costmodel.hf.family import Family, register
from costmodel.hf.reader import Config, read_pooler_activation, show
from costmodel.spec import Head, NormPosition, Position, Spec


def _terms(c: Config) -> list[str]:
    value = c.get("pos_att_type")
    if value is None:
        return []
    if isinstance(value, str):  # the released configs write "p2c|c2p"
        value = [v.strip() for v in value.lower().split("|")]
    if not isinstance(value, list):
        raise c.error("pos_att_type", f"should be a list or a|b (got {show(value)})")
    return sorted(value)


def _deberta(c: Config, out: dict[str, Any]) -> None:
    post_norm_encoder(c, out)
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["head"] = Head.none.value
    # ContextPooler (DebertaV2ForSequenceClassification): dense, pooler_hidden_act (GELU)
    out["pooler_activation"] = read_pooler_activation(c, "pooler_hidden_act").value
    pooled = c.int("pooler_hidden_size")
    if pooled is not None and pooled != out["d_model"]:
        raise c.error("pooler_hidden_size", "a pooler wider or narrower than hidden_size is not modelled")
    width = c.int("embedding_size")
    if width is not None and width != out["d_model"]:
        raise c.error("embedding_size", "an embedding narrower than hidden_size (embed_proj) is not modelled")
    if c.has("attention_head_size") and c.get("attention_head_size") != out["head_dim"]:
        raise c.error("attention_head_size", f"heads other than hidden_size / heads = {out['head_dim']} "
                                             "are not modelled")
    c.read.add("attention_head_size")
    if c.int("conv_kernel_size", positive=False):
        raise c.error("conv_kernel_size", "the first layer's convolution (DeBERTa-v2 xlarge) is not modelled")
    absolute, relative = c.bool("position_biased_input"), c.bool("relative_attention")
    if absolute and relative:
        raise c.error("position_biased_input",
                      "absolute positions beside relative attention are not modelled")
    terms = _terms(c)
    if not relative:
        out["position"] = Position.learned.value if absolute else Position.none.value
        return
    out["position"] = Position.disentangled.value
    if terms != ["c2p", "p2c"]:
        raise c.error("pos_att_type", f"{show(c.data.get('pos_att_type'))}: disentangled attention is "
                                      "modelled with both c2p and p2c (every released v2 and v3 model)")
    c.require("share_att_key", True, "separate position projections (DeBERTa v1's) are not modelled")
    norm = c.str("norm_rel_ebd")
    if norm.replace(" ", "") != "layer_norm":
        raise c.error("norm_rel_ebd", f"{show(norm)}: the relative table is modelled with its LayerNorm")
    # Either may be -1 (or any value below 1): none (transformers' getattr defaults).
    buckets, span = _signed(c, "position_buckets"), _signed(c, "max_relative_positions")
    if buckets > 0:
        out["position_buckets"] = buckets
    if span >= 1:
        out["max_relative_positions"] = span


def _signed(c: Config, key: str) -> int:
    value = c.get(key)
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        raise c.error(key, f"should be an integer (-1: none; got {show(value)})")
    return value


def _export(spec: Spec) -> dict[str, Any]:
    relative = spec.position is Position.disentangled
    out: dict[str, Any] = {
        "vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
           "num_attention_heads": spec.n_heads, "intermediate_size": spec.d_ff,
           "hidden_act": spec.activation.value, "max_position_embeddings": spec.max_seq_len,
           "type_vocab_size": spec.token_types, "hidden_dropout_prob": spec.dropout,
           "attention_probs_dropout_prob": spec.attention_dropout_rate,
           "tie_word_embeddings": spec.tied_embeddings, "pooler_hidden_act": spec.pooler_activation.value,
           "position_biased_input": spec.position is Position.learned, "relative_attention": relative}
    if relative:
        out.update(pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
                   position_buckets=spec.position_buckets or -1,
                   max_relative_positions=spec.max_relative_positions or -1)
    return out


def _matches(spec: Spec) -> bool:
    return (spec.is_encoder and spec.norm_position is NormPosition.post and spec.embedding_norm
            and spec.head is Head.none and not spec.pooler_norm and spec.head_bias
            and spec.position in (Position.disentangled, Position.learned, Position.none))


register(Family(
    "deberta-v2", "DebertaV2Model", _deberta,
    dict(hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, type_vocab_size=0,
         tie_word_embeddings=True, is_decoder=False, relative_attention=False, position_biased_input=True,
         pos_att_type=None, share_att_key=False, norm_rel_ebd="none", position_buckets=-1,
         max_relative_positions=-1, embedding_size=None, conv_kernel_size=0, pooler_hidden_act="gelu",
         pooler_hidden_size=None),
    ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
     "max_position_embeddings"),
    {"layer_norm_eps": "a constant inside the norm",
     "pooler_dropout": "ContextPooler's dropout (a head's dropout is not counted)",
     "legacy": "the MLM head's layout",
     "is_decoder": "read: a causal DeBERTa is refused", "conv_act": "with conv_kernel_size (refused)",
     "conv_groups": "with conv_kernel_size (refused)", "classifier_dropout": "the classification head's"},
    export=_export, matches=_matches, encoder=True))
