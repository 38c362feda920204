"""GPT-style model types: LayerNorm, biased linears, a two-matrix FFN (gpt2, gptj, gpt_neox, opt, falcon)."""

from __future__ import annotations

from typing import Any

from costmodel.hf.family import Family, register
from costmodel.hf.reader import (
    Config,
    fixed_head_dim,
    no_partial_rotary,
    read_activation,
    read_dropout,
    read_rotary_fraction,
    read_tied,
)
from costmodel.spec import Block, Norm, NormPosition, Position, Spec


def gpt_sizes(c: Config, out: dict[str, Any], width: str, layers: str, heads: str, ffn: str,
               positions: str, null_ffn_is_4d: bool = True) -> None:
    """The sizes of the GPT-style types: head_dim is always width / heads; a null FFN width is 4d
    where the class says so (GPT-2's n_inner, Falcon's ffn_hidden_size), else an error."""
    out["d_model"] = c.req_int(width)
    out["n_layers"] = c.req_int(layers)
    fixed_head_dim(c, out, heads)
    out["d_ff"] = (c.int(ffn) or 4 * out["d_model"]) if null_ffn_is_4d else c.req_int(ffn)
    out["vocab_size"] = c.req_int("vocab_size")
    out["max_seq_len"] = c.req_int(positions)


def _gpt2(c: Config, out: dict[str, Any]) -> None:
    gpt_sizes(c, out, "n_embd", "n_layer", "n_head", "n_inner", "n_positions")
    out["norm"], out["position"] = Norm.layernorm.value, Position.learned.value
    out["activation"] = read_activation(c, "activation_function", gated=False).value
    out["bias"] = {"qkv": True, "attn_out": True, "ffn": True}  # every Conv1D has a bias
    read_tied(c, out)
    read_dropout(c, out, "resid_pdrop", "embd_pdrop", "attn_pdrop")
    c.require("scale_attn_weights", True, "scores without the 1/sqrt(d_h) scale are not modelled")
    c.require("scale_attn_by_inverse_layer_idx", False, "a second, per-layer score scale is not modelled")
    c.require("add_cross_attention", False, "cross-attention in a decoder-only model is not modelled")


def _gptj(c: Config, out: dict[str, Any]) -> None:
    gpt_sizes(c, out, "n_embd", "n_layer", "n_head", "n_inner", "n_positions")
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    out["activation"] = read_activation(c, "activation_function", gated=False).value
    out["block"], out["shared_norm"] = Block.parallel.value, True  # ln_1 feeds both branches
    out["bias"] = {"qkv": False, "attn_out": False, "ffn": True, "lm_head": True}
    rotary = c.int("rotary_dim")  # null: the whole head
    if rotary is not None and rotary != out["head_dim"]:
        out["rotary_fraction"] = rotary / out["head_dim"]
    read_tied(c, out)
    read_dropout(c, out, "resid_pdrop", "embd_pdrop", "attn_pdrop")


def _gpt_neox(c: Config, out: dict[str, Any]) -> None:
    gpt_sizes(c, out, "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "max_position_embeddings", null_ffn_is_4d=False)
    out["norm"], out["position"] = Norm.layernorm.value, Position.rope.value
    out["activation"] = read_activation(c, "hidden_act", gated=False).value
    b = c.bool("attention_bias")
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": True}  # dense_h_to_4h, dense_4h_to_h always biased
    fraction = read_rotary_fraction(c, "rotary_pct")
    if fraction != 1.0:
        out["rotary_fraction"] = fraction
    if c.bool("use_parallel_residual"):  # x + attn(ln1(x)) + mlp(ln2(x)): two norms
        out["block"], out["shared_norm"] = Block.parallel.value, False
    read_tied(c, out)
    read_dropout(c, out, "hidden_dropout", "hidden_dropout", "attention_dropout")


def _opt(c: Config, out: dict[str, Any]) -> None:
    gpt_sizes(c, out, "hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim",
               "max_position_embeddings", null_ffn_is_4d=False)
    out["position_offset"] = 2  # OPTLearnedPositionalEmbedding keeps 2 rows past the context
    out["norm"], out["position"] = Norm.layernorm.value, Position.learned.value
    out["activation"] = read_activation(c, "activation_function", gated=False).value
    b = c.bool("enable_bias")
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": b}
    proj = c.int("word_embed_proj_dim")
    if proj is not None and proj != out["d_model"]:
        raise c.error("word_embed_proj_dim", f"{proj} != hidden_size {out['d_model']}: the project_in and "
                                             "project_out matrices around the stack are not modelled")
    if c.bool("do_layer_norm_before"):
        if c.bool("_remove_final_layer_norm"):
            raise c.error("_remove_final_layer_norm",
                          "a pre-norm stack without its final norm is not modelled")
    else:  # OPT-350m: norm(x + F(x)), no final norm
        out["norm_position"] = NormPosition.post.value
        c.read.add("_remove_final_layer_norm")
    c.require("layer_norm_elementwise_affine", True, "norms without gain and bias are not modelled")
    if c.rate("activation_dropout") > 0:  # earlier OPT code dropped out the FFN hidden activations
        out["ffn_dropout"] = c.rate("activation_dropout")
    if c.rate("layerdrop") > 0:
        raise c.error("layerdrop", "randomly skipped layers in training are not modelled")
    read_tied(c, out)
    read_dropout(c, out, "dropout", None, "attention_dropout")  # no dropout on the embeddings


def _falcon(c: Config, out: dict[str, Any]) -> None:
    # Old falcon configs name the width n_embed.
    gpt_sizes(c, out, "n_embed" if c.has("n_embed") else "hidden_size", "num_hidden_layers",
               "num_attention_heads", "ffn_hidden_size", "max_position_embeddings")
    c.read.add("hidden_size")
    h = out["n_heads"]
    out["norm"] = Norm.layernorm.value
    out["activation"] = read_activation(c, "activation", gated=False).value
    b = c.bool("bias")  # query_key_value, dense, dense_h_to_4h, dense_4h_to_h; never lm_head
    out["bias"] = {"qkv": b, "attn_out": b, "ffn": b}
    out["position"] = Position.alibi.value if c.bool("alibi") else Position.rope.value
    if out["position"] == Position.rope.value:
        no_partial_rotary(c)
    new, parallel = c.bool("new_decoder_architecture"), c.bool("parallel_attn")
    multi_query = c.bool("multi_query")
    kv = c.int("num_kv_heads") or h
    norms = c.int("num_ln_in_parallel_attn")
    if new:  # Falcon 40B/180B: GQA with num_kv_heads, always parallel
        if not parallel:
            raise c.error("parallel_attn",
                          "false with new_decoder_architecture builds norms its forward never uses")
        out["n_kv_heads"] = kv
        out["block"], out["shared_norm"] = Block.parallel.value, (norms or 2) == 1
    else:
        out["n_kv_heads"] = 1 if multi_query else h
        if parallel:  # one input_layernorm feeds both branches
            out["block"], out["shared_norm"] = Block.parallel.value, True
    if out["n_heads"] % out["n_kv_heads"]:
        raise c.error("num_kv_heads", f"{h} heads are not a multiple of {out['n_kv_heads']}")
    read_tied(c, out)
    hidden, attention = c.rate("hidden_dropout"), c.rate("attention_dropout")
    if hidden or attention:  # applied once to the summed branches, or to the attention residual
        raise c.error("hidden_dropout" if hidden else "attention_dropout",
                      "Falcon's dropout sites differ from the spec's (one per branch); set it to 0.0 to "
                      "import")




# --- export ---------------------------------------------------------------------------------


def _export_gpt2(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "n_positions": spec.max_seq_len, "n_embd": spec.d_model,
            "n_layer": spec.n_layers, "n_head": spec.n_heads, "n_inner": spec.d_ff,
            "activation_function": "gelu_new", "resid_pdrop": spec.dropout,
            "embd_pdrop": spec.embedding_dropout_rate, "attn_pdrop": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _export_gptj(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "n_positions": spec.max_seq_len, "n_embd": spec.d_model,
            "n_layer": spec.n_layers, "n_head": spec.n_heads, "n_inner": spec.d_ff,
            "rotary_dim": spec.rotary_dims, "activation_function": "gelu_new", "resid_pdrop": spec.dropout,
            "embd_pdrop": spec.embedding_dropout_rate, "attn_pdrop": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _export_gpt_neox(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
            "num_attention_heads": spec.n_heads, "intermediate_size": spec.d_ff, "hidden_act": "gelu",
            "max_position_embeddings": spec.max_seq_len, "rotary_pct": spec.rotary_fraction,
            "use_parallel_residual": spec.block is Block.parallel, "attention_bias": spec.bias.qkv,
            "hidden_dropout": spec.dropout, "attention_dropout": spec.attention_dropout_rate,
            "tie_word_embeddings": spec.tied_embeddings}


def _export_opt(spec: Spec) -> dict[str, Any]:
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
            "ffn_dim": spec.d_ff, "num_attention_heads": spec.n_heads,
            "max_position_embeddings": spec.max_seq_len,
            "do_layer_norm_before": spec.norm_position is not NormPosition.post,
            "activation_function": spec.activation.value, "enable_bias": spec.bias.qkv,
            "dropout": spec.dropout, "attention_dropout": spec.attention_dropout_rate,
            "activation_dropout": spec.ffn_dropout, "tie_word_embeddings": spec.tied_embeddings}


def _export_falcon(spec: Spec) -> dict[str, Any]:
    gqa = 1 < spec.n_kv_heads < spec.n_heads or not spec.shared_norm
    out = {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": spec.n_layers,
           "num_attention_heads": spec.n_heads, "max_position_embeddings": spec.max_seq_len,
           "ffn_hidden_size": spec.d_ff, "activation": spec.activation.value, "bias": spec.bias.qkv,
           "hidden_dropout": spec.dropout, "attention_dropout": spec.attention_dropout_rate,
           "alibi": spec.position is Position.alibi, "parallel_attn": spec.block is Block.parallel,
           "new_decoder_architecture": gqa, "multi_query": spec.n_kv_heads == 1,
           "tie_word_embeddings": spec.tied_embeddings}
    if gqa:
        out.update(num_kv_heads=spec.n_kv_heads, num_ln_in_parallel_attn=1 if spec.shared_norm else 2)
    return out


# --- the families --------------------------------------------------------------------------------

OLD_GPT2_KEYS = {
    "n_ctx": "an old alias transformers does not read (n_positions sizes the table)",
    **dict.fromkeys(("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                     "summary_first_dropout", "summary_last_dropout"),
                    "settings of GPT2DoubleHeadsModel's classification head, not of the LM head"),
}
_GPT2_SIZES = ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions")
_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "max_position_embeddings")


def _layernorm(spec: Spec) -> bool:
    return not spec.is_encoder_decoder and spec.norm is Norm.layernorm


def _learned(spec: Spec) -> bool:
    return not spec.is_encoder_decoder and spec.position is Position.learned


register(Family("gpt2", "GPT2LMHeadModel", _gpt2,
                dict(n_inner=None, activation_function="gelu_new", resid_pdrop=0.1, embd_pdrop=0.1,
                     attn_pdrop=0.1,
                     scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
                     add_cross_attention=False,
                     tie_word_embeddings=True),
                _GPT2_SIZES, OLD_GPT2_KEYS, export=_export_gpt2, matches=_learned))
register(Family("gptj", "GPTJForCausalLM", _gptj,
                dict(rotary_dim=64, n_inner=None, activation_function="gelu_new", resid_pdrop=0.0,
                     embd_pdrop=0.0,
                     attn_pdrop=0.0, tie_word_embeddings=False),
                _GPT2_SIZES, {**OLD_GPT2_KEYS, "rotary": "not read by transformers (rotary_dim is)",
                              "scale_attn_weights": "not read by GPT-J, which always scales the scores"},
                export=_export_gptj, matches=_layernorm))
register(Family("gpt_neox", "GPTNeoXForCausalLM", _gpt_neox,
                dict(hidden_act="gelu", attention_dropout=0.0, hidden_dropout=0.0, tie_word_embeddings=False,
                     use_parallel_residual=True, attention_bias=True, rotary_pct=0.25),
                (*_SIZES, "intermediate_size"),
                dict.fromkeys(("attention_probs_dropout_prob", "hidden_dropout_prob"),
                              "early Pythia names transformers' GPT-NeoX does not read"),
                export=_export_gpt_neox, matches=_layernorm))
register(Family("opt", "OPTForCausalLM", _opt,
                dict(do_layer_norm_before=True, _remove_final_layer_norm=False, word_embed_proj_dim=None,
                     dropout=0.1,
                     attention_dropout=0.0, activation_function="relu", layerdrop=0.0, activation_dropout=0.0,
                     enable_bias=True, layer_norm_elementwise_affine=True, tie_word_embeddings=True),
                (*_SIZES, "ffn_dim"), export=_export_opt, matches=_learned))
register(Family("falcon", "FalconForCausalLM", _falcon,
                dict(num_ln_in_parallel_attn=None, hidden_dropout=0.0, attention_dropout=0.0,
                     num_kv_heads=None,
                     alibi=False, new_decoder_architecture=False, multi_query=True, parallel_attn=True,
                     bias=False,
                     ffn_hidden_size=None, activation="gelu", tie_word_embeddings=True),
                _SIZES,
                {"apply_residual_connection_post_layernorm":
                 "a BLOOM flag transformers' Falcon does not read"},
                export=_export_falcon, matches=_layernorm, unreadable_on_export=("hidden_dropout",
                                                                                 "attention_dropout")))
