"""Configs for every supported model type, built by hand: each exercises the fields that change a
cost (config 0 of each type is the configuration class's defaults alone)."""

SMALL = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=160, vocab_size=300,
             max_position_embeddings=128)

FALCON_SMALL = {k: v for k, v in SMALL.items() if k != "intermediate_size"}  # falcon: ffn_hidden_size

# One or more configs per supported model type, each exercising the fields that change a cost.
CONFIGS = {
    "llama": [{}, {**SMALL, "num_key_value_heads": 2, "head_dim": 24, "attention_bias": True, "mlp_bias": True,
                   "tie_word_embeddings": True, "attention_dropout": 0.1}],
    "mistral": [{}, {**SMALL, "num_key_value_heads": 1, "sliding_window": 32, "head_dim": 32},
                {**SMALL, "num_key_value_heads": 4, "sliding_window": None}],
    "gemma": [{}, {**SMALL, "num_key_value_heads": 1, "head_dim": 48, "hidden_act": "gelu"}],
    "gemma2": [{}, {**SMALL, "num_key_value_heads": 2, "head_dim": 40, "sliding_window": 16,
                    "layer_types": ["full_attention", "sliding_attention"] * 2, "attn_logit_softcapping": None}],
    "gemma3_text": [{}, {**SMALL, "num_hidden_layers": 7, "num_key_value_heads": 2, "head_dim": 32,
                         "sliding_window": 16, "sliding_window_pattern": 3}],
    "qwen2": [{}, {**SMALL, "num_key_value_heads": 2, "use_sliding_window": True, "sliding_window": 16,
                   "max_window_layers": 1}],
    "qwen3": [{}, {**SMALL, "num_key_value_heads": 2, "head_dim": 16, "attention_bias": True,
                   "tie_word_embeddings": True}],
    "olmo2": [{}, {**SMALL, "num_key_value_heads": 2, "attention_bias": True}],
    "phi3": [{}, {**SMALL, "num_key_value_heads": 2, "pad_token_id": 0, "partial_rotary_factor": 0.5, "sliding_window": 64,
                  "resid_pdrop": 0.1}],
    "cohere": [{}, {**SMALL, "num_key_value_heads": 1, "head_dim": 32, "use_qk_norm": True}],
    "cohere2": [{}, {**SMALL, "num_hidden_layers": 6, "num_key_value_heads": 2, "sliding_window": 16}],
    "gpt2": [{}, dict(n_embd=64, n_layer=3, n_head=4, n_inner=100, vocab_size=300, n_positions=64,
                      tie_word_embeddings=False, embd_pdrop=0.0)],
    "gptj": [{}, dict(n_embd=64, n_layer=3, n_head=4, rotary_dim=8, vocab_size=300, n_positions=64,
                      tie_word_embeddings=True)],
    "gpt_neox": [{}, {**SMALL, "rotary_pct": 0.5, "use_parallel_residual": False, "attention_bias": False},
                 {**SMALL, "tie_word_embeddings": True, "hidden_dropout": 0.1}],
    "opt": [{}, dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, ffn_dim=100, vocab_size=300,
                     max_position_embeddings=64, do_layer_norm_before=False, enable_bias=False,
                     tie_word_embeddings=False)],
    "falcon": [{},
               {**FALCON_SMALL, "multi_query": False, "parallel_attn": False, "bias": True, "alibi": True},
               {**FALCON_SMALL, "new_decoder_architecture": True, "num_kv_heads": 2, "ffn_hidden_size": 96},
               {**FALCON_SMALL, "new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1}],
    "t5": [{"dropout_rate": 0.0},
           dict(d_model=64, d_kv=24, d_ff=100, num_layers=3, num_decoder_layers=2, num_heads=4, vocab_size=300,
                relative_attention_num_buckets=16, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                dropout_rate=0.0)],
}
