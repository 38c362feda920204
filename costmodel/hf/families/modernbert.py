"""ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer"): pre-LayerNorm without
biases, GeGLU, RoPE, local attention (a window of local_attention tokens, half on either side)
on all but every global_attn_every_n_layers-th layer, a final norm; ModernBertModel holds no
pooler (head: none); its classification head (ModernBertPredictionHead: dense, GELU, a norm) is
the spec's pooler with ``pooler_activation: gelu`` and ``pooler_norm``.

Its embedding LayerNorm stands in for the first layer's attention norm, which is an Identity
there: the spec counts it as that norm (embedding_norm false), the same parameters and work."""

from __future__ import annotations

from typing import Any

from costmodel.hf.families.bert import encoder_sizes
from costmodel.hf.family import Family, register
from costmodel.hf.reader import Config, read_activation, read_layer_pattern, read_pooler_activation
from costmodel.spec import Head, LayerKind, Norm, NormPosition, Position, Spec


def _modernbert(c: Config, out: dict[str, Any]) -> None:
    encoder_sizes(c, out)
    out["max_seq_len"] = c.req_int("max_position_embeddings")
    out["norm"], out["norm_position"] = Norm.layernorm.value, NormPosition.pre.value
    out["activation"] = read_activation(c, "hidden_activation", gated=True).value  # Wi: input and gate
    attention, mlp = c.bool("attention_bias"), c.bool("mlp_bias")
    out["bias"] = {"qkv": attention, "attn_out": attention, "ffn": mlp, "norm": c.bool("norm_bias"),
                   "lm_head": c.bool("decoder_bias")}
    out["position"] = Position.rope.value
    out["tied_embeddings"] = c.bool("tie_word_embeddings")
    out["head"] = Head.none.value
    # ModernBertPredictionHead (the masked-LM and classification heads'): dense (classifier_bias),
    # classifier_activation, a norm
    if c.bool("classifier_bias") != mlp:  # else the spec's default: the FFN's
        out["bias"]["head"] = c.bool("classifier_bias")
    out["pooler_activation"] = read_pooler_activation(c, "classifier_activation").value
    out["pooler_norm"] = True
    window = c.req_int("local_attention")
    types = c.list("layer_types")
    if types is None:
        every = c.int("global_attn_every_n_layers") or 1
        types = ["sliding_attention" if i % every else "full_attention" for i in range(out["n_layers"])]
    c.read.add("global_attn_every_n_layers")
    read_layer_pattern(c, out, types, window, "layer_types")
    for key in ("embedding_dropout", "attention_dropout", "mlp_dropout"):
        if c.rate(key):
            raise c.error(key, "ModernBERT's dropout sites are not modelled (the released models use none)")


def _export(spec: Spec) -> dict[str, Any]:
    kinds = spec.layer_kinds()
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
            "num_attention_heads": spec.n_heads, "intermediate_size": spec.d_ff,
            "max_position_embeddings": spec.max_seq_len, "attention_bias": spec.bias.qkv,
            "mlp_bias": spec.bias.ffn, "norm_bias": spec.norm_bias, "decoder_bias": spec.bias.lm_head,
            "tie_word_embeddings": spec.tied_embeddings, "local_attention": spec.window or 128,
            "classifier_activation": spec.pooler_activation.value, "classifier_bias": spec.head_bias,
            "layer_types": ["sliding_attention" if k is LayerKind.local else "full_attention" for k in kinds]}


def _matches(spec: Spec) -> bool:
    return (spec.is_encoder and spec.position is Position.rope and spec.norm_position is NormPosition.pre
            and spec.activation.value == "geglu" and not spec.embedding_norm and spec.head is Head.none
            and spec.pooler_norm)


register(Family(
    "modernbert", "ModernBertModel", _modernbert,
    dict(hidden_activation="gelu", norm_bias=False, attention_bias=False, mlp_bias=False, decoder_bias=True,
         tie_word_embeddings=True, local_attention=128, layer_types=None, global_attn_every_n_layers=3,
         embedding_dropout=0.0, attention_dropout=0.0, mlp_dropout=0.0, classifier_activation="gelu",
         classifier_bias=False),
    ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
     "max_position_embeddings"),
    {"norm_eps": "a constant inside the norm", "initializer_cutoff_factor": "initialisation only",
     "cls_token_id": "token ids", "classifier_pooling": "the classification head's pooling (not counted)",
     "classifier_dropout": "the classification head's dropout (not counted)",
     "deterministic_flash_attn": "a kernel setting", "sparse_prediction": "the MLM head's loss on masked "
     "tokens only (head: mlm counts every position)", "sparse_pred_ignore_index": "the same",
     "reference_compile": "torch.compile switch", "repad_logits_with_grad": "an unpadding switch",
     "global_rope_theta": "RoPE base", "local_rope_theta": "RoPE base"},
    export=_export, matches=_matches, encoder=True))
