"""T5: the encoder-decoder with relative position buckets."""

from __future__ import annotations

from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import (
    GELU,
    SILU,
    Config,
    show,
)
from costmodel.spec import Activation, Norm, Position, Spec


def _t5(c: Config, out: dict[str, Any]) -> None:
    out["architecture"] = "encoder-decoder"
    c.require("is_encoder_decoder", True, "T5's encoder-only and decoder-only uses are not modelled")
    out["d_model"] = c.req_int("d_model")
    out["n_encoder_layers"] = c.req_int("num_layers")
    out["n_decoder_layers"] = c.int("num_decoder_layers") or out["n_encoder_layers"]
    out["n_heads"] = c.req_int("num_heads")
    out["head_dim"] = c.req_int("d_kv")  # inner_dim = num_heads * d_kv, whatever d_model is
    out["d_ff"] = c.req_int("d_ff")
    out["vocab_size"] = c.req_int("vocab_size")
    # Relative positions set no hard limit; 512 is T5's pre-training input length (Raffel et al.).
    out["max_seq_len"] = c.req_int("n_positions")  # not a T5Config field: read by this tool only
    out["norm"] = Norm.rmsnorm.value  # T5LayerNorm: scale only, no mean, no bias
    out["position"] = Position.t5_relative.value
    out["relative_buckets"] = c.req_int("relative_attention_num_buckets")
    proj = c.str("feed_forward_proj")
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise c.error("feed_forward_proj", f"{show(proj)} should be ACT or gated-ACT")
    act = {**dict.fromkeys(GELU, "gelu"), "relu": "relu", **dict.fromkeys(SILU, "silu")}.get(parts[-1])
    gated = len(parts) == 2
    names = {("relu", False): "relu", ("gelu", False): "gelu", ("relu", True): "reglu",
             ("gelu", True): "geglu", ("silu", True): "swiglu"}
    key = (act or "", gated)
    if key not in names:
        raise c.error("feed_forward_proj",
                      f"{show(proj)} is not supported (relu, gelu, gated-relu, gated-gelu, gated-silu)")
    out["activation"] = names[key]
    out["bias"] = False
    # transformers 4 ties the LM head to the shared embedding only with tie_word_embeddings, and
    # then scales the decoder output by d_model^-1/2 first (Mesh TensorFlow's T5 does the same).
    tied = c.bool("tie_word_embeddings")
    out["tied_embeddings"] = out["head_scale"] = tied
    # transformers 5 writes scale_decoder_outputs (= tie_word_embeddings) into the configs it saves.
    if c.has("scale_decoder_outputs") and c.bool("scale_decoder_outputs") != tied:
        c.problems.append("scale_decoder_outputs: differs from tie_word_embeddings; a scaled untied head (or "
                          "an "
                          "unscaled tied one) is not modelled")
    if c.get("tie_encoder_decoder"):
        raise c.error("tie_encoder_decoder", "encoder and decoder sharing their weights is not modelled")
    # One rate for every dropout site of T5: embeddings, attention probabilities, sub-block
    # outputs, the FFN hidden activations and each stack's final-norm output.
    rate = c.rate("dropout_rate")
    if rate:
        out.update(dropout=rate, ffn_dropout=rate, final_dropout=rate)
    c.read.update(("dense_act_fn", "is_gated_act"))  # derived from feed_forward_proj by T5Config




def _export_t5(spec: Spec) -> dict[str, Any]:
    proj = {Activation.relu: "relu", Activation.gelu: "gelu", Activation.reglu: "gated-relu",
            Activation.geglu: "gated-gelu", Activation.swiglu: "gated-silu"}[spec.activation]
    return {"vocab_size": spec.vocab_size, "d_model": spec.d_model, "d_kv": spec.head_dim, "d_ff": spec.d_ff,
            "num_layers": spec.n_encoder_layers, "num_decoder_layers": spec.n_decoder_layers,
            "num_heads": spec.n_heads, "relative_attention_num_buckets": spec.relative_buckets,
            "dropout_rate": spec.dropout, "feed_forward_proj": proj, "is_encoder_decoder": True,
            "tie_word_embeddings": spec.tied_embeddings, "n_positions": spec.max_seq_len}


register(Family("t5", "T5ForConditionalGeneration", _t5,
                dict(num_decoder_layers=None, relative_attention_num_buckets=32, dropout_rate=0.1,
                     feed_forward_proj="relu", is_encoder_decoder=True, tie_word_embeddings=True,
                     tie_encoder_decoder=False, n_positions=512),
                ("d_model", "d_kv", "d_ff", "num_layers", "num_heads", "vocab_size"),
                {"output_past": "the old name of use_cache"}, export=_export_t5,
                matches=lambda spec: spec.is_encoder_decoder))
