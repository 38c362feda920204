"""An independent oracle for the sparse FFN: transformers' own MoE blocks on the meta device.

For each MoE model type transformers implements, a small config is built with
``experts_implementation="batched_mm"`` (the default grouped_mm is invisible to
FlopCounterMode and the eager loop cannot run on meta), and the sparse block of its last layer
is counted: its parameters (sum of numel) and its matmul FLOPs over T tokens must equal
``costmodel.components.moe`` for the fields each model's config sets. batched_mm runs one
(token, expert) product per assignment, so its FLOPs do not depend on which experts the router
picks.

Llama 4 is the exception that the count exposes: transformers' Llama4TextMoe runs every
expert on every token (the scores zero the unchosen ones), E/K times the routed work.
"""

from __future__ import annotations

import copy

import pytest

from costmodel.components import moe
from costmodel.spec import MoEFFN

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0, CPU build)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
transformers.logging.set_verbosity_error()

D = 64
BASE = dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=4, vocab_size=300, max_position_embeddings=128)
MLA = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)

# model type -> (config, the same sparse FFN as our fields)
CASES = {
    "mixtral": (dict(BASE, intermediate_size=96, num_local_experts=8, num_experts_per_tok=2, num_key_value_heads=2),
                dict(n_experts=8, top_k=2, d_ff_expert=96, norm_topk=True)),
    "qwen2_moe": (dict(BASE, intermediate_size=100, moe_intermediate_size=48, shared_expert_intermediate_size=80,
                       num_experts=8, num_experts_per_tok=2),
                  dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=1, d_ff_shared=80,
                       shared_expert_gate=True)),
    "qwen3_moe": (dict(BASE, intermediate_size=100, moe_intermediate_size=48, num_experts=16, num_experts_per_tok=4,
                       head_dim=32),
                  dict(n_experts=16, top_k=4, d_ff_expert=48, norm_topk=True)),
    "olmoe": (dict(BASE, intermediate_size=48, num_experts=8, num_experts_per_tok=3),
              dict(n_experts=8, top_k=3, d_ff_expert=48)),
    "deepseek_v2": (dict(BASE, **MLA, intermediate_size=100, moe_intermediate_size=48, n_routed_experts=8,
                         num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1, q_lora_rank=None),
                    dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=2, router_dtype="fp32")),
    "deepseek_v3": (dict(BASE, **MLA, intermediate_size=100, moe_intermediate_size=48, n_routed_experts=8,
                         num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
                         q_lora_rank=24),
                    dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=1, scoring="sigmoid",
                         norm_topk=True, router_dtype="fp32")),
    "gpt_oss": (dict(BASE, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2, head_dim=16,
                     num_key_value_heads=2, layer_types=["sliding_attention", "full_attention"], sliding_window=16),
                dict(n_experts=8, top_k=2, d_ff_expert=48, router_bias=True, expert_bias=True)),
    "llama4_text": (dict(BASE, intermediate_size=48, intermediate_size_mlp=100, num_local_experts=8,
                         num_experts_per_tok=2, head_dim=16, num_key_value_heads=2, interleave_moe_layer_step=1),
                    dict(n_experts=8, top_k=2, d_ff_expert=48, n_shared_experts=1, scoring="sigmoid")),
}


def sparse_block(model_type: str):
    config, _ = CASES[model_type]
    cfg = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(config))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="batched_mm")
    layer = model.model.layers[-1]
    return layer.feed_forward if hasattr(layer, "feed_forward") else layer.mlp


@pytest.mark.parametrize("model_type", CASES)
def test_params_and_flops_equal_transformers(model_type: str) -> None:
    block = sparse_block(model_type)
    cfg = MoEFFN(activation="swiglu", **CASES[model_type][1])
    B, S = 3, 5
    leaves = dict(moe.sparse(cfg, D, 2, moe.ExpertDims.of(cfg), B * S))
    assert sum(p.numel() for p in block.parameters()) == sum(c.params for c in leaves.values())
    x = torch.empty(B, S, D, device="meta", dtype=next(block.parameters()).dtype)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        block(x)
    matmul = sum(c.matmul for c in leaves.values())
    if model_type == "llama4_text":  # every expert on every token: E/K times the routed work
        routed = sum(c.matmul for k, c in leaves.items() if k.startswith("experts/"))
        matmul += routed * (cfg.n_experts // cfg.top_k - 1)
    assert counter.get_total_flops() == matmul


def test_expert_params_split_as_transformers_stores_them() -> None:
    """gpt-oss keeps each expert's biases beside its weights: gate_up_proj_bias (E, 2f) and
    down_proj_bias (E, d); the router has a weight (E, d) and a bias (E)."""
    block = sparse_block("gpt_oss")
    shapes = {n: tuple(p.shape) for n, p in block.named_parameters()}
    assert shapes == {
        "router.weight": (8, D), "router.bias": (8,),
        "experts.gate_up_proj": (8, D, 96), "experts.gate_up_proj_bias": (8, 96),
        "experts.down_proj": (8, 48, D), "experts.down_proj_bias": (8, D),
    }
    cfg = MoEFFN(activation="swiglu", **CASES["gpt_oss"][1])
    assert moe.expert_params(cfg, D) == (D * 96 + 96) + (48 * D + D)


def test_deepseek_router_weight_is_fp32() -> None:
    """DeepSeek-V3 keeps gate.weight in fp32 whatever the model's dtype: router_dtype fp32."""
    config, _ = CASES["deepseek_v3"]
    cfg = transformers.AutoConfig.for_model("deepseek_v3", **copy.deepcopy(config))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="batched_mm",
                                                               torch_dtype=torch.bfloat16)
    gate = model.model.layers[-1].mlp.gate
    assert gate.weight.dtype == torch.float32
    assert model.model.layers[-1].mlp.experts.gate_up_proj.dtype == torch.bfloat16


# --- whole models imported from their configs (costmodel/hf/families/moe.py) ------------------

WHOLE = {
    "mixtral": dict(CASES["mixtral"][0], sliding_window=None),
    "qwen2_moe": dict(CASES["qwen2_moe"][0], num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3],
                      num_key_value_heads=2),
    "qwen3_moe": dict(CASES["qwen3_moe"][0], num_hidden_layers=3, mlp_only_layers=[0], norm_topk_prob=True),
    "olmoe": dict(CASES["olmoe"][0], num_key_value_heads=2),
}
ARCH = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
        "olmoe": "OlmoeForCausalLM"}


@pytest.mark.parametrize("model_type", WHOLE)
def test_imported_config_counts_as_transformers(model_type: str, tmp_path) -> None:
    """load_hf of the config: our parameters equal the transformers model's, and our prefill
    matmul FLOPs equal FlopCounterMode over its forward (eager attention, batched_mm experts)."""
    import json

    from torch.utils.flop_counter import FlopCounterMode

    from costmodel.analysis import analyze
    from costmodel.hf import load_hf

    config = {"model_type": model_type, "architectures": [ARCH[model_type]], **WHOLE[model_type]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = load_hf(path)
    assert spec.moe is not None
    cfg = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(WHOLE[model_type]))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, experts_implementation="batched_mm", attn_implementation="eager")
    a = analyze(spec, "prefill", batch=2, seq=8)
    assert a.total().params == sum(p.numel() for p in model.parameters())
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids)
    assert counter.get_total_flops() == a.total().flops_matmul
