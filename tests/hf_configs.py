"""Configs for every supported model type, built by hand: each exercises the fields that change a
cost. Config 0 of each type is the configuration class's defaults alone, the sizes (which a config
must state: no default is taken for them) written out as the class's defaults (transformers 5.24)."""

SMALL = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=160,
             vocab_size=300,
             max_position_embeddings=128)

FALCON_SMALL = {k: v for k, v in SMALL.items() if k != "intermediate_size"}  # falcon: ffn_hidden_size

_LLAMA = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
              num_attention_heads=32, max_position_embeddings=2048)
# The configuration classes' default sizes (configuration_<type>.py).
CLASS_SIZES = {
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "intermediate_size": 14336, "max_position_embeddings": 4096 * 32},
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, max_position_embeddings=8192),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, max_position_embeddings=8192),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, max_position_embeddings=131072),
    "qwen2": {**_LLAMA, "vocab_size": 151936, "intermediate_size": 22016, "max_position_embeddings": 32768},
    "qwen3": {**_LLAMA, "vocab_size": 151936, "intermediate_size": 22016, "max_position_embeddings": 32768},
    "olmo2": {**_LLAMA, "vocab_size": 50304},
    "phi3": {**_LLAMA, "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
             "max_position_embeddings": 4096},
    "cohere": dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
                   num_attention_heads=64, max_position_embeddings=8192),
    "cohere2": dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528, num_hidden_layers=40,
                    num_attention_heads=64, max_position_embeddings=8192),
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12),
    "gptj": dict(vocab_size=50400, n_positions=2048, n_embd=4096, n_layer=28, n_head=16),
    "gpt_neox": dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                     intermediate_size=24576, max_position_embeddings=2048),
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                max_position_embeddings=2048,
                num_attention_heads=12),
    "falcon": dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                   max_position_embeddings=2048),
    "gpt_bigcode": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12),
    "starcoder2": dict(vocab_size=49152, hidden_size=3072, intermediate_size=12288, num_hidden_layers=30,
                       num_attention_heads=24, max_position_embeddings=4096),
    "phi": dict(vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                num_attention_heads=32, max_position_embeddings=2048),
    "stablelm": dict(vocab_size=50304, intermediate_size=6912, hidden_size=2560, num_hidden_layers=32,
                     num_attention_heads=32, max_position_embeddings=4096),
    "t5": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
    "deepseek_v2": dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, max_position_embeddings=2048, kv_lora_rank=512,
                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=64,
                        num_experts_per_tok=None, moe_intermediate_size=1407),
    "deepseek_v3": dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
                        num_attention_heads=128, max_position_embeddings=4096, kv_lora_rank=512,
                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=256,
                        num_experts_per_tok=8, moe_intermediate_size=2048),
    # Mixtures of experts whose classes default to a released model: gpt-oss-120b, Llama 4 Scout.
    "gpt_oss": dict(num_hidden_layers=36, num_local_experts=128, vocab_size=201088, hidden_size=2880,
                    intermediate_size=2880, num_attention_heads=64, max_position_embeddings=131072,
                    num_experts_per_tok=4),
    "llama4_text": dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192,
                        intermediate_size_mlp=16384,
                        num_hidden_layers=48, num_attention_heads=40, max_position_embeddings=4096 * 32,
                        num_experts_per_tok=1, num_local_experts=16),
}

# Latent attention (DeepSeek-V2/V3) before a dense FFN in every layer: first_k_dense_replace
# covers the layers (the classes' defaults make the later layers mixture-of-experts ones; the
# sparse configs follow below).
MLA_SMALL = dict(SMALL, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12, head_dim=8,
                 first_k_dense_replace=SMALL["num_hidden_layers"])

# One or more configs per supported model type, each exercising the fields that change a cost.
CONFIGS = {
    "llama": [CLASS_SIZES["llama"], {**SMALL, "num_key_value_heads": 2, "head_dim": 24,
                                     "attention_bias": True, "mlp_bias": True,
                   "tie_word_embeddings": True, "attention_dropout": 0.1}],
    "mistral": [CLASS_SIZES["mistral"], {**SMALL, "num_key_value_heads": 1, "sliding_window": 32,
                                         "head_dim": 32},
                {**SMALL, "num_key_value_heads": 4, "sliding_window": None}],
    "gemma": [CLASS_SIZES["gemma"], {**SMALL, "num_key_value_heads": 1, "head_dim": 48,
                                     "hidden_act": "gelu"}],
    "gemma2": [CLASS_SIZES["gemma2"], {**SMALL, "num_key_value_heads": 2, "head_dim": 40,
                                       "sliding_window": 16,
                    "layer_types": ["full_attention", "sliding_attention"] * 2,
                                       "attn_logit_softcapping": None}],
    "gemma3_text": [CLASS_SIZES["gemma3_text"], {**SMALL, "num_hidden_layers": 7, "num_key_value_heads": 2,
                                                 "head_dim": 32,
                         "sliding_window": 16, "sliding_window_pattern": 3}],
    "qwen2": [CLASS_SIZES["qwen2"], {**SMALL, "num_key_value_heads": 2, "use_sliding_window": True,
                                     "sliding_window": 16,
                   "max_window_layers": 1}],
    "qwen3": [CLASS_SIZES["qwen3"], {**SMALL, "num_key_value_heads": 2, "head_dim": 16,
                                     "attention_bias": True,
                   "tie_word_embeddings": True}],
    "olmo2": [CLASS_SIZES["olmo2"], {**SMALL, "num_key_value_heads": 2, "attention_bias": True}],
    "phi3": [CLASS_SIZES["phi3"], {**SMALL, "num_key_value_heads": 2, "pad_token_id": 0,
                                   "partial_rotary_factor": 0.5, "sliding_window": 64,
                  "resid_pdrop": 0.1}],
    "cohere": [CLASS_SIZES["cohere"], {**SMALL, "num_key_value_heads": 1, "head_dim": 32,
                                       "use_qk_norm": True}],
    "cohere2": [CLASS_SIZES["cohere2"], {**SMALL, "num_hidden_layers": 6, "num_key_value_heads": 2,
                                         "sliding_window": 16}],
    "gpt2": [CLASS_SIZES["gpt2"], dict(n_embd=64, n_layer=3, n_head=4, n_inner=100, vocab_size=300,
                                       n_positions=64,
                      tie_word_embeddings=False, embd_pdrop=0.0)],
    "gptj": [CLASS_SIZES["gptj"], dict(n_embd=64, n_layer=3, n_head=4, rotary_dim=8, vocab_size=300,
                                       n_positions=64,
                      tie_word_embeddings=True)],
    "gpt_neox": [CLASS_SIZES["gpt_neox"], {**SMALL, "rotary_pct": 0.5, "use_parallel_residual": False,
                                           "attention_bias": False},
                 {**SMALL, "tie_word_embeddings": True, "hidden_dropout": 0.1}],
    "opt": [CLASS_SIZES["opt"], dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, ffn_dim=100,
                                     vocab_size=300,
                     max_position_embeddings=64, do_layer_norm_before=False, enable_bias=False,
                     tie_word_embeddings=False)],
    "falcon": [CLASS_SIZES["falcon"],
               {**FALCON_SMALL, "multi_query": False, "parallel_attn": False, "bias": True, "alibi": True},
               {**FALCON_SMALL, "new_decoder_architecture": True, "num_kv_heads": 2, "ffn_hidden_size": 96},
               {**FALCON_SMALL, "new_decoder_architecture": True, "num_kv_heads": 2,
                "num_ln_in_parallel_attn": 1}],
    "t5": [{**CLASS_SIZES["t5"], "dropout_rate": 0.0},
           dict(d_model=64, d_kv=24, d_ff=100, num_layers=3, num_decoder_layers=2, num_heads=4,
                vocab_size=300,
                relative_attention_num_buckets=16, feed_forward_proj="gated-gelu", n_positions=64,
                tie_word_embeddings=False,
                dropout_rate=0.0)],
    "gpt_bigcode": [CLASS_SIZES["gpt_bigcode"],
                    dict(n_embd=64, n_layer=3, n_head=4, n_inner=100, vocab_size=300, n_positions=64,
                         tie_word_embeddings=False, embd_pdrop=0.0),
                    dict(n_embd=64, n_layer=2, n_head=4, vocab_size=300, n_positions=64, multi_query=False)],
    "starcoder2": [CLASS_SIZES["starcoder2"],
                   {**SMALL, "num_key_value_heads": 2, "sliding_window": 32, "use_bias": False,
                    "tie_word_embeddings": False, "residual_dropout": 0.1, "embedding_dropout": 0.05}],
    "phi": [CLASS_SIZES["phi"], {**SMALL, "num_key_value_heads": 2, "partial_rotary_factor": 0.25,
                                 "tie_word_embeddings": True, "resid_pdrop": 0.1}],
    "deepseek_v2": [{**CLASS_SIZES["deepseek_v2"], "first_k_dense_replace": 32},
                    {**MLA_SMALL, "q_lora_rank": None, "attention_bias": True, "mlp_bias": True},
                    {**MLA_SMALL, "q_lora_rank": 24, "tie_word_embeddings": True}],
    "deepseek_v3": [{**CLASS_SIZES["deepseek_v3"], "first_k_dense_replace": 61},
                    {**MLA_SMALL, "q_lora_rank": 24, "attention_bias": True, "num_key_value_heads": 4},
                    {**MLA_SMALL, "q_lora_rank": None, "num_key_value_heads": 4, "rope_interleave": False}],
    "stablelm": [CLASS_SIZES["stablelm"],
                 {**SMALL, "num_key_value_heads": 2, "use_qkv_bias": True, "use_parallel_residual": True,
                  "partial_rotary_factor": 0.5, "tie_word_embeddings": True}],
}

# Released models' config.json, as published on the Hugging Face hub (the cost-free fields, token
# ids, eps and RoPE bases, left out), for the model types added with issue 11.
RELEASED = {
    # microsoft/phi-2 config.json (transformers_version 4.42.0.dev0), as quoted verbatim in a public
    # repository's PhiConfig dict (code search: "_name_or_path": "microsoft/phi-2").
    "phi-2": dict(model_type="phi", architectures=["PhiForCausalLM"], _name_or_path="microsoft/phi-2",
                  attention_dropout=0.0, embd_pdrop=0.0, hidden_act="gelu_new", hidden_size=2560,
                  intermediate_size=10240, max_position_embeddings=2048, num_attention_heads=32,
                  num_hidden_layers=32, num_key_value_heads=32, partial_rotary_factor=0.4, qk_layernorm=False,
                  resid_pdrop=0.1, rope_scaling=None, rope_theta=10000.0, tie_word_embeddings=False,
                  torch_dtype="float16", vocab_size=51200),
    # bigcode/starcoder (StarCoder 15.5B, Li et al. 2023): the sizes of its config.json as Cerebras'
    # HF converter writes them (n_embd 6144, n_head 48, n_layer 40, n_inner 24576, n_positions 8192,
    # vocab 49152, multi_query, tied), with the released config's BigCode-specific keys.
    "starcoder": dict(model_type="gpt_bigcode", architectures=["GPTBigCodeForCausalLM"],
                      _name_or_path="bigcode/starcoder", activation_function="gelu_pytorch_tanh",
                      attention_softmax_in_fp32=True, scale_attention_softmax_in_fp32=True, attn_pdrop=0.1,
                      embd_pdrop=0.1, resid_pdrop=0.1, n_embd=6144, n_head=48, n_inner=24576, n_layer=40,
                      n_positions=8192, multi_query=True, scale_attn_weights=True, vocab_size=49152,
                      tie_word_embeddings=True, inference_runner=0, max_batch_size=None,
                      max_sequence_length=None, validate_runner_input=True),
    # bigcode/starcoder2-3b: hidden 3072, 30 layers, 24 heads, 2 KV heads, FFN 12288, vocab 49152
    # (its config.json as quoted in public test fixtures), 16,384 context and a 4,096 sliding window
    # (transformers' docs/source/en/model_doc/starcoder2.md, Lozhkov et al. 2024); norm_type and
    # mlp_type are BigCode's own keys of that config.
    "starcoder2-3b": dict(model_type="starcoder2", architectures=["Starcoder2ForCausalLM"],
                          _name_or_path="bigcode/starcoder2-3b", hidden_act="gelu_pytorch_tanh",
                          hidden_size=3072,
                          intermediate_size=12288, max_position_embeddings=16384, norm_type="layer_norm",
                          mlp_type="default", num_attention_heads=24, num_hidden_layers=30,
                          num_key_value_heads=2,
                          sliding_window=4096, use_bias=True, vocab_size=49152, norm_epsilon=1e-5),
    # stabilityai/stablelm-2-1_6b (Bellagente et al. 2024, "Stable LM 2 1.6B Technical Report",
    # Table 1: d 2048, 24 layers, 32 heads, FFN 5632, 100,352-token vocabulary, 4,096 context; 25%
    # rotary, q/k/v biases, LayerNorm, untied).
    "stablelm-2-1.6b": dict(model_type="stablelm", architectures=["StableLmForCausalLM"],
                            _name_or_path="stabilityai/stablelm-2-1_6b", hidden_act="silu", hidden_size=2048,
                            intermediate_size=5632, max_position_embeddings=4096, num_attention_heads=32,
                            num_hidden_layers=24, num_key_value_heads=32, partial_rotary_factor=0.25,
                            use_qkv_bias=True, qk_layernorm=False, use_parallel_residual=False,
                            tie_word_embeddings=False, vocab_size=100352, layer_norm_eps=1e-5),
}

# Mixtures of experts (costmodel/hf/families/moe.py), sizes given (their configuration classes
# default to full-size models: the bundled specs cover those).
_MOE = {**SMALL, "num_key_value_heads": 2, "num_experts_per_tok": 2}
CONFIGS.update({
    "mixtral": [{**_MOE, "num_local_experts": 4, "sliding_window": 32}],
    "qwen2_moe": [{**_MOE, "num_experts": 4, "moe_intermediate_size": 24,
                   "shared_expert_intermediate_size": 40,
                       "decoder_sparse_step": 2, "mlp_only_layers": [3], "norm_topk_prob": True}],
    "qwen3_moe": [{**_MOE, "num_experts": 8, "moe_intermediate_size": 24, "head_dim": 16,
                   "mlp_only_layers": [0]}],
    "olmoe": [{**_MOE, "num_experts": 4, "output_router_logits": True, "router_aux_loss_coef": 0.01}],
    # gpt-oss: default layer_types (even layers slide), then explicit ones without biases.
    "gpt_oss": [CLASS_SIZES["gpt_oss"],
                {**_MOE, "num_local_experts": 4, "head_dim": 16, "sliding_window": 8},
                {**_MOE, "num_local_experts": 4, "head_dim": 24, "sliding_window": 16,
                 "attention_bias": False,
                 "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                                 "full_attention"],
                 "tie_word_embeddings": True}],
    # Llama 4: Scout's defaults; Maverick's interleave with chunks of 4 and QK-norm; listed sparse
    # layers and NoPE every other layer, top-2; every FFN dense and every layer full with RoPE.
    "llama4_text": [CLASS_SIZES["llama4_text"],
                    {**_MOE, "intermediate_size_mlp": 100, "num_local_experts": 4, "num_experts_per_tok": 1,
                     "head_dim": 16, "interleave_moe_layer_step": 2, "attention_chunk_size": 4,
                     "use_qk_norm": True},
                    {**_MOE, "intermediate_size_mlp": 100, "num_local_experts": 4, "head_dim": 16,
                     "moe_layers": [0, 3], "no_rope_layers": [1, 0, 1, 0], "attention_chunk_size": 4,
                     "attention_bias": True, "tie_word_embeddings": True, "use_qk_norm": False},
                    {**_MOE, "intermediate_size_mlp": 100, "num_local_experts": 4, "head_dim": 16,
                     "moe_layers": [],
                     "no_rope_layers": [1, 1, 1, 1], "attention_chunk_size": None}],
})

# DBRX (costmodel/hf/families/dbrx.py): its sizes in attn_config and ffn_config; renormalised top-k
# or not, dropout at the residual and attention sites. transformers reads rope_theta there.
_DBRX = dict(d_model=64, n_heads=4, n_layers=2, max_seq_len=128, vocab_size=300)
CONFIGS["dbrx"] = [
    {**_DBRX, "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0},
     "ffn_config": {"ffn_hidden_size": 48, "moe_num_experts": 4, "moe_top_k": 2}},
    {**_DBRX, "resid_pdrop": 0.1, "output_router_logits": True,
     "attn_config": {"kv_n_heads": 4, "clip_qkv": 8.0, "attn_pdrop": 0.2, "rope_theta": 10000.0},
     "ffn_config": {"ffn_hidden_size": 24, "moe_num_experts": 8, "moe_top_k": 3,
                    "moe_normalize_expert_weights": None, "moe_loss_weight": 0.05,
                    "ffn_act_fn": {"name": "gelu"}}},
]

# DeepSeek-V2/V3 with their sparse layers (costmodel/hf/families/deepseek.py), sizes given.
_DS = {**MLA_SMALL, "num_hidden_layers": 3, "n_routed_experts": 8, "num_experts_per_tok": 2,
       "moe_intermediate_size": 24}
CONFIGS["deepseek_v2"] += [
    {**_DS, "first_k_dense_replace": 1, "q_lora_rank": None, "n_shared_experts": 2, "mlp_bias": True,
     "topk_method": "group_limited_greedy", "n_group": 2, "topk_group": 1, "routed_scaling_factor": 16.0},
    {**_DS, "first_k_dense_replace": 0, "q_lora_rank": 24, "n_shared_experts": 0, "norm_topk_prob": True},
]
CONFIGS["deepseek_v3"] += [
    {**_DS, "first_k_dense_replace": 1, "q_lora_rank": 24, "num_key_value_heads": 4, "n_shared_experts": 1,
     "n_group": 2, "topk_group": 1, "norm_topk_prob": False},
    {**_DS, "first_k_dense_replace": 2, "q_lora_rank": None, "num_key_value_heads": 4, "n_shared_experts": 2,
     "n_group": 1, "topk_group": 1, "attention_bias": True},
]

# The released config.json of the three bundled DeepSeek-architecture models (the Hugging Face
# hub URLs below; no network here): DeepSeek-V3's as DeepSeek-R1's config, which has the same
# architecture fields, is quoted verbatim in a public repository, plus V3's aux_loss_alpha and
# seq_aux; DeepSeek-V2-Lite's and Kimi-K2-Instruct's assembled from public quotes of their
# fields (architecture, routing, rope_scaling), the cost-free ids and versions as published.
# Each ships block-scaled fp8 weights (quantization_config), which the importer reads with a warning
# naming --weights-dtype fp8-block; each imports as the bundled spec of the same name.
DEEPSEEK_RELEASED = {
    # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
        "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
        "first_k_dense_replace": 3,
        "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
        "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
        "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
        "pretraining_tp": 1,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
    },
    # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json
    # (bf16 weights: no quantization_config)
    "deepseek-v2-lite": {
        "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV2Config",
                     "AutoModel": "modeling_deepseek.DeepseekV2Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"},
        "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
        "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
        "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
        "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
        "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                         "mscale_all_dim": 0.707,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
    },
    # https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json (model_type kimi_k2)
    "kimi-k2": {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
        "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163585, "first_k_dense_replace": 1,
        "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
        "kv_lora_rank": 512, "max_position_embeddings": 131072, "model_type": "kimi_k2",
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 384,
        "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 64, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 64, "num_nextn_predict_layers": 0,
        "pad_token_id": 163839,
        "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "transformers_version": "4.48.3", "use_cache": True, "v_head_dim": 128, "vocab_size": 163840,
    },
}

# The released configs of the bundled gpt-oss and Llama 4 specs (cost-free fields kept, as
# published), for the import == bundled spec check (tests/test_moe_oracle.py).
_GPT_OSS = dict(
    architectures=["GptOssForCausalLM"], model_type="gpt_oss", attention_bias=True, attention_dropout=0.0,
    eos_token_id=200002, experts_per_token=4, head_dim=64, hidden_act="silu", hidden_size=2880,
    initial_context_length=4096, initializer_range=0.02, intermediate_size=2880,
    max_position_embeddings=131072,
    num_attention_heads=64, num_experts_per_tok=4, num_key_value_heads=8, output_router_logits=False,
    pad_token_id=199999, rms_norm_eps=1e-05, rope_theta=150000, router_aux_loss_coef=0.9, sliding_window=128,
    swiglu_limit=7.0, tie_word_embeddings=False, transformers_version="4.55.0.dev0", use_cache=True,
    vocab_size=201088,
    quantization_config={"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                    "model.embed_tokens", "lm_head"],
                         "quant_method": "mxfp4"},
    rope_scaling={"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                  "original_max_position_embeddings": 4096,
                  "rope_type": "yarn", "truncate": False},
)
_LLAMA4 = dict(
    attention_bias=False, attention_chunk_size=8192, attention_dropout=0.0, bos_token_id=200000,
    eos_token_id=[200001, 200007, 200008], for_llm_compressor=False, head_dim=128, hidden_act="silu",
    hidden_size=5120, initializer_range=0.02, intermediate_size=8192, intermediate_size_mlp=16384,
    model_type="llama4_text", num_attention_heads=40, num_experts_per_tok=1, num_hidden_layers=48,
    num_key_value_heads=8, output_router_logits=False, pad_token_id=200018, rms_norm_eps=1e-05,
    rope_theta=500000.0,
    router_aux_loss_coef=0.001, router_jitter_noise=0.0, torch_dtype="bfloat16", use_cache=True,
    vocab_size=202048,
)
_LLAMA4_WRAPPER = dict(
    architectures=["Llama4ForConditionalGeneration"], boi_token_index=200080, eoi_token_index=200081,
    image_token_index=200092, model_type="llama4", tie_word_embeddings=False,
    vision_config=dict(attention_dropout=0.0, hidden_act="gelu", hidden_size=1408, image_size=336,
                       initializer_range=0.02, intermediate_size=5632, model_type="llama4_vision_model",
                       multi_modal_projector_bias=False, norm_eps=1e-05, num_attention_heads=16,
                       num_channels=3,
                       num_hidden_layers=34, patch_size=14, pixel_shuffle_ratio=0.5, projector_dropout=0.0,
                       projector_input_dim=4096, projector_output_dim=4096, rope_theta=10000,
                       vision_feature_layer=-1, vision_feature_select_strategy="default",
                       vision_output_dim=4096),
)
RELEASED_MOE = {
    # https://huggingface.co/openai/gpt-oss-120b/raw/main/config.json, every field as a public test
    # quotes it (code search: "REAL = {  # https://huggingface.co/openai/gpt-oss-120b/raw/main/config.json";
    # layer_types: 18 x [sliding, full]).
    "gpt-oss-120b": dict(_GPT_OSS, num_hidden_layers=36, num_local_experts=128,
                         layer_types=["sliding_attention", "full_attention"] * 18),
    # https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json as mirrored in EchoCog/gpt-oss-20b
    # (config.json, commit 52971a17): the 120b's fields with 24 layers and 32 experts. The mirror's
    # quantization_config names gptq; the release's is mxfp4 (model card, section 2.1), as the 120b's.
    "gpt-oss-20b": dict(_GPT_OSS, num_hidden_layers=24, num_local_experts=32,
                        layer_types=["sliding_attention", "full_attention"] * 12),
    # https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json, as AMD-AGI/Primus
    # pull request 165 quotes it (text_config up to router_jitter_noise; use_qk_norm true and vocab_size
    # 202048 from its pull request 163 and a printed Llama4Config of the same checkpoint).
    "llama-4-scout": dict(_LLAMA4_WRAPPER, text_config=dict(
        _LLAMA4, interleave_moe_layer_step=1, max_position_embeddings=262144, no_rope_layers=[],
        num_local_experts=16, use_qk_norm=True,
        rope_scaling={"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"})),
    # https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E/blob/main/config.json,
    # as NVIDIA/TensorRT-LLM
    # tests/unittest/_torch/modeling/test_modeling_llama_min_latency.py quotes it, there cut to 2 of its 48
    # layers (with no_rope_layer_interval 2 added "so that both RoPE and no-RoPE layers are present"): here
    # the 48 layers and the class's default interval, 4 (AMD-AGI/Primus pull request 172 cites the same file).
    "llama-4-maverick": dict(_LLAMA4_WRAPPER, text_config=dict(
        _LLAMA4, _attn_implementation_autoset=True, interleave_moe_layer_step=2,
        max_position_embeddings=1048576,
        num_local_experts=128, rope_scaling=None, use_qk_norm=False)),
    # https://huggingface.co/databricks/dbrx-base/blob/main/config.json, every field that changes a
    # cost as the public copies quote it (dbrx-instruct's, the same architecture, as the MLX 4-bit
    # conversion reproduces it field for field, less its "quantization" and the sub-configs'
    # PretrainedConfig defaults; the sizes as Databricks' model card and llm-viewer's model list give them).
    # moe_normalize_expert_weights is 1 in the file; transformers 5.24's strict DbrxFFNConfig takes 1.0.
    "dbrx-base": dict(
        architectures=["DbrxForCausalLM"], model_type="dbrx", d_model=6144, n_heads=48, n_layers=40,
        max_seq_len=32768, vocab_size=100352, emb_pdrop=0.0, resid_pdrop=0.0, initializer_range=0.02,
        attn_config={"attn_pdrop": 0, "clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
        ffn_config={"ffn_act_fn": {"name": "silu"}, "ffn_hidden_size": 10752, "moe_num_experts": 16,
                    "moe_top_k": 4, "moe_jitter_eps": 0, "moe_loss_weight": 0.05,
                    "moe_normalize_expert_weights": 1.0, "uniform_expert_assignment": False},
        output_router_logits=False, router_aux_loss_coef=0.05, tie_word_embeddings=False,
        torch_dtype="bfloat16", transformers_version="4.39.2", use_cache=True),
}

# Encoder-only types (issue 25): counted as their AutoModel classes hold them. Config 0: the class
# defaults; then small configs exercising each cost field.
_ENC = dict(SMALL, max_position_embeddings=64)
CLASS_SIZES.update({
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512),
    "roberta": dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=512),
    "modernbert": dict(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
                       num_attention_heads=12, max_position_embeddings=8192),
    "deberta-v2": dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
                       intermediate_size=6144, max_position_embeddings=512),
})
CONFIGS.update({
    "bert": [CLASS_SIZES["bert"], {**_ENC, "type_vocab_size": 3, "hidden_dropout_prob": 0.0},
             {**_ENC, "type_vocab_size": 0, "architectures": ["BertForMaskedLM"]}],
    "roberta": [CLASS_SIZES["roberta"], {**_ENC, "type_vocab_size": 1, "max_position_embeddings": 66}],
    "modernbert": [CLASS_SIZES["modernbert"],
                   {**_ENC, "num_hidden_layers": 5, "global_attn_every_n_layers": 2, "local_attention": 16,
                    "norm_bias": True, "attention_bias": True, "mlp_bias": True, "pad_token_id": 0}],
    "deberta-v2": [CLASS_SIZES["deberta-v2"],
                   {**_ENC, "relative_attention": True, "position_biased_input": False, "position_buckets": 8,
                    "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": "p2c|c2p"},
                   {**_ENC, "relative_attention": True, "position_biased_input": False,
                    "max_relative_positions": 12,
                    "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": ["c2p", "p2c"],
                    "type_vocab_size": 2}],
})
