"""Llama 4's text model (Meta 2025, "The Llama 4 herd"), as transformers' modeling_llama4.py builds
it (Llama4ForCausalLM; the multimodal llama4 wrapper is read through its text_config by the
importer): LLaMA's block with

- per layer, RoPE or none (no_rope_layers: 1 rotates; default every no_rope_layer_interval-th
  layer NoPE) and chunked or full attention (layer_types; default chunked on the RoPE layers when
  attention_chunk_size is set): Scout and Maverick have three chunked RoPE layers to one global
  NoPE layer, the spec's [chunked, chunked, chunked, global] with global_nope;
- Llama4TextMoe on the layers moe_layers lists (default every interleave_moe_layer_step-th:
  Maverick 1, 3, ..., 47), a dense MLP of intermediate_size_mlp on the others: one shared
  expert of intermediate_size beside num_local_experts routed ones of the same width; the
  router (no bias) takes the top-k logits through a sigmoid (scoring sigmoid, no
  renormalisation), and each chosen score scales its expert's input.

Not counted: use_qk_norm's L2 norm of q and k on the RoPE layers (Llama4TextL2Norm: no weights,
elementwise work only) and attn_temperature_tuning's position-dependent scale of the NoPE layers'
queries (elementwise). transformers' Llama4TextMoe runs every expert on every token (the
unchosen ones on inputs scaled by 0); the spec counts the routed work, top_k experts per token.
"""

from __future__ import annotations

from typing import Any

from costmodel.hf.families.llama import _attention_bias, _export_rope_decoder, _rope_trunk
from costmodel.hf.family import Family, register
from costmodel.hf.reader import (
    Config,
    _period,
    no_partial_rotary,
    read_activation,
    show,
)
from costmodel.spec import Block, LayerKind, Norm, NormPosition, Position, QKNorm, Scoring, Spec

_TYPES = {"chunked_attention": LayerKind.chunked, "full_attention": LayerKind.global_}
#: Read only by the sparse layers; cost-free when every layer is dense (moe_layers: []).
_EXPERT_KEYS = ("num_local_experts", "num_experts_per_tok", "intermediate_size")


def _llama4_text(c: Config, out: dict[str, Any]) -> None:
    _rope_trunk(c, out)
    no_partial_rotary(c)
    n = out["n_layers"]
    _attention_bias(c, out)  # q, k, v and o_proj; the MLPs and experts never
    activation = read_activation(c, "hidden_act", gated=True).value  # experts, shared expert, dense MLP
    _layers(c, out, n)
    _ffn(c, out, n, activation)


def _layers(c: Config, out: dict[str, Any], n: int) -> None:
    """Which layers rotate (no_rope_layers) and which attend within chunks (layer_types)."""
    rope = c.list("no_rope_layers")
    if rope:
        c.read.add("no_rope_layer_interval")
    else:  # None or [] (the released Scout config): Llama4TextConfig's default
        every = c.int("no_rope_layer_interval")
        rope = [int((i + 1) % (every or 1) != 0) for i in range(n)]
    if len(rope) < n or any(r not in (0, 1) for r in rope):  # True and False are 1 and 0
        raise c.error("no_rope_layers", f"should list 1 (RoPE) or 0 (NoPE) for each of the {n} layers "
                                        f"(got {show(rope)})")
    chunk = c.int("attention_chunk_size")
    types = c.list("layer_types")
    if types is None:
        types = ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope[:n]]
    if len(types) != n or any(t not in _TYPES for t in types):
        raise c.error("layer_types", f"should give chunked_attention or full_attention for each of the {n} "
                                     f"layers (got {show(types)})")
    kinds = [_TYPES[t] for t in types]
    if LayerKind.chunked in kinds and chunk is None:
        raise c.error("attention_chunk_size", "null, but layer_types has chunked_attention layers")
    if any(k is LayerKind.chunked and not r for k, r in zip(kinds, rope, strict=False)):
        raise c.error("no_rope_layers", "a chunked layer without RoPE is not supported (the spec's NoPE "
                                        "layers are its global ones: global_nope)")
    global_rope = {bool(r) for k, r in zip(kinds, rope, strict=False) if k is LayerKind.global_}
    if len(global_rope) > 1:
        raise c.error("no_rope_layers", "RoPE on some full-attention layers and not on others is not "
                                        "supported (global_nope takes positions off every global layer)")
    if global_rope == {False}:
        if LayerKind.chunked in kinds:
            out["global_nope"] = True
        else:
            out["position"] = Position.none.value  # no layer rotates
    pattern = kinds[:_period(kinds)]
    if LayerKind.chunked in pattern:
        out["attention_chunk"] = chunk
        out["layer_pattern"] = [k.value for k in pattern]


def _ffn(c: Config, out: dict[str, Any], n: int, activation: str) -> None:
    """Llama4TextMoe on moe_layers (default every interleave_moe_layer_step-th layer), a dense
    MLP of intermediate_size_mlp on the others."""
    step = c.int("interleave_moe_layer_step")
    listed = c.list("moe_layers")
    if listed is not None and not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
        raise c.error("moe_layers", f"should list layer indices (got {show(listed)})")
    dense_width = c.req_int("intermediate_size_mlp")  # a size: stated even where every layer is sparse
    rule = list(range((step or 1) - 1, n, step or 1))
    sparse = rule if listed is None else sorted({i for i in listed if 0 <= i
                                                 < n})  # `layer_idx in moe_layers`
    if not sparse:  # every FFN dense: the expert fields build nothing
        c.read.update(_EXPERT_KEYS)
        out["ffn"] = {"kind": "dense", "activation": activation, "d_ff": dense_width}
        return
    ffn: dict[str, Any] = {
        "kind": "moe", "activation": activation, "n_experts": c.req_int("num_local_experts"),
        "top_k": c.req_int("num_experts_per_tok"), "d_ff_expert": c.req_int("intermediate_size"),
        "n_shared_experts": 1,  # Llama4TextMLP of intermediate_size beside the routed experts
        "scoring": Scoring.sigmoid.value,
    }
    if len(sparse) < n:
        ffn["d_ff"] = dense_width
        if sparse == rule:
            ffn["moe_every"] = step
        else:
            ffn["moe_layers"] = sparse
    out["ffn"] = ffn


# --- export ---------------------------------------------------------------------------------


def _export(spec: Spec) -> dict[str, Any]:
    moe = spec.moe
    kinds = spec.layer_kinds()
    out = _export_rope_decoder(spec)
    nope = spec.position is Position.none
    out.update({
        "attention_bias": spec.bias.qkv, "attention_chunk_size": spec.attention_chunk,
        "layer_types": ["chunked_attention" if k is LayerKind.chunked else "full_attention" for k in kinds],
        "no_rope_layers": [0 if nope or (k is LayerKind.global_ and spec.global_nope) else 1 for k in kinds],
        "use_qk_norm": False,
    })
    if moe is None:
        out.update(moe_layers=[], intermediate_size_mlp=spec.d_ff)
        return out
    out.update(num_local_experts=moe.n_experts, num_experts_per_tok=moe.top_k,
               intermediate_size=moe.d_ff_expert)
    sparse = spec.sparse_layers()
    # a required size, read by no layer if all sparse
    out["intermediate_size_mlp"] = moe.d_ff or moe.d_ff_expert
    if moe.moe_layers is None and moe.first_k_dense == 0:
        out["interleave_moe_layer_step"] = moe.moe_every
    else:
        out["moe_layers"] = [i for i, s in enumerate(sparse) if s]
    return out


def _matches(spec: Spec) -> bool:
    """LLaMA's block (pre-RMSNorm, RoPE or none, no window) with Llama 4's sparse FFN, or a
    dense one with chunked attention (the llama family has no chunks)."""
    if (spec.is_encoder_decoder or spec.mla is not None or spec.window is not None or spec.attention_sinks
            or spec.norm is not Norm.rmsnorm or spec.norm_position is not NormPosition.pre
            or spec.block is not Block.serial or spec.qk_norm is not QKNorm.none
            or spec.position not in (Position.rope, Position.none) or not spec.activation.gated):
        return False
    moe = spec.moe
    if moe is None:
        return spec.attention_chunk is not None
    return (moe.scoring is Scoring.sigmoid and moe.n_shared_experts == 1 and not moe.norm_topk
            and moe.d_ff_shared in (None, moe.d_ff_expert) and not moe.shared_expert_gate
            and not moe.router_bias and not moe.expert_bias and moe.router_dtype is None and moe.aux_loss
            == 0)


SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "intermediate_size_mlp",
         "vocab_size", "max_position_embeddings", "num_local_experts", "num_experts_per_tok")
_NO_BALANCE_LOSS = "Llama4ForCausalLM adds no load-balancing loss to its loss, whatever it says"
_NOT_COUNTED = "not counted: "

register(Family(
    "llama4_text", "Llama4ForCausalLM", _llama4_text,
    dict(num_key_value_heads=8, head_dim=128, hidden_act="silu", tie_word_embeddings=False,
         attention_dropout=0.0,
         attention_bias=False, moe_layers=None, interleave_moe_layer_step=1, no_rope_layers=None,
         no_rope_layer_interval=4, attention_chunk_size=8192, layer_types=None),
    SIZES,
    {
        "use_qk_norm": _NOT_COUNTED
        + "an L2 norm of q and k on the RoPE layers without weights (Llama4TextL2Norm): "
                       "no parameters, elementwise work only",
        **dict.fromkeys(("attn_temperature_tuning", "floor_scale", "attn_scale"),
                        _NOT_COUNTED
                        + "a position-dependent scale of the NoPE layers' queries: elementwise work only"),
        **dict.fromkeys(("output_router_logits", "router_aux_loss_coef"), _NO_BALANCE_LOSS),
        "router_jitter_noise": "Llama4Router applies no jitter, whatever it says",
        "for_llm_compressor": "a flag of Meta's released configs that no transformers class reads",
    },
    export=_export, matches=_matches,
))
