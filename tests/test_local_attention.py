"""Chunked local attention (Llama 4), Llama 4's 3 chunked (RoPE) : 1 global (NoPE) pattern, and
attention sinks (gpt-oss): closed forms against brute force and cases derived by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel import analyze
from costmodel.components import attention as attn
from costmodel.model import numeric_dims
from costmodel.spec import SpecError
from tests.helpers import tiny

d, h, k, d_h, L = 8, 2, 1, 4, 2
P = 2  # bf16


def chunked(c: int = 4, **changes):
    return tiny(layer_pattern=["chunked"], attention_chunk=c, **changes)


# --- chunks: pairs, span and cache ----------------------------------------------------------


@given(st.integers(1, 40), st.integers(0, 40), st.integers(1, 50))
def test_chunk_pairs_match_brute_force(S: int, cached: int, c: int) -> None:
    """Query j (1-based) sees ((j-1) mod c) + 1 keys; the closed form F(C) - F(C-S) is the loop."""
    C = S + cached
    dims = numeric_dims(chunked(c), dict(B=1, S=S, C=C, S_e=0, C_e=0), 2)
    shape = attn.chunked(dims)
    assert shape.pairs == sum((j - 1) % c + 1 for j in range(C - S + 1, C + 1))
    # brute force over the mask itself: keys at or before the query, in its chunk (0-based positions)
    assert shape.pairs == sum(1 for q in range(C - S,
                                               C) for key in range(C) if key <= q and key // c == q // c)
    assert shape.span == min(C, c + S - 1) and shape.cached == min(C, c) and shape.written == min(S, c)


def test_chunks_and_windows_differ_in_pairs() -> None:
    """Prefill of 10 tokens, c = w = 4: a window allows 1+2+3+4*7 = 34 pairs per head, chunks of 4
    allow (1+2+3+4) + (1+2+3+4) + (1+2) = 23; both keep 4 tokens of cache and span 10 keys."""
    window = analyze(tiny(window=4), seq=10).total("layers/attention/scores")
    chunks = analyze(chunked(4), seq=10).total("layers/attention/scores")
    assert window.flops_matmul_effective == L * 2 * h * 34 * d_h
    assert chunks.flops_matmul_effective == L * 2 * h * 23 * d_h
    assert window.flops_matmul == chunks.flops_matmul == L * 2 * h * 10 * 10 * d_h
    assert analyze(chunked(4), seq=10).total().kv_cache == 2 * L * 4 * k * d_h * P


def test_decode_at_a_chunk_boundary_sees_one_key() -> None:
    """c = 4, 8 cached: the new token (position 9, 1-based) opens the third chunk and sees only itself;
    the dense scores still span the 4 buffered slots, masked."""
    s = analyze(chunked(4), "decode", seq=8).total("layers/attention/scores")
    assert s.flops_matmul_effective == L * 2 * h * 1 * d_h
    assert s.flops_matmul == L * 2 * h * 4 * d_h
    s = analyze(chunked(4), "decode", seq=10).total("layers/attention/scores")  # position 11: 3 keys
    assert s.flops_matmul_effective == L * 2 * h * 3 * d_h


def test_llama4_pattern_three_chunked_rope_one_global_nope() -> None:
    """[chunked, chunked, chunked, global] over 8 layers with NoPE on global layers (Llama 4):
    6 chunked layers keep min(C, c) tokens, 2 global keep C; RoPE only on the chunked ones."""
    spec = tiny(n_layers=8, layer_pattern=["chunked", "chunked", "chunked", "global"], attention_chunk=4,
                global_nope=True)
    a = analyze(spec, "decode", batch=3, seq=99)
    per_token = 2 * k * d_h * P  # K and V of one token in one layer
    assert a.total().kv_cache == 3 * per_token * (6 * 4 + 2 * 100)
    paths = {r.path for r in a.rows}
    assert "layers[chunked]/attention/rope" in paths and "layers[global]/attention/rope" not in paths
    assert a.total("layers[chunked]/attention/q").params == 6 * d * h * d_h


@pytest.mark.parametrize("changes, message", [
    (dict(layer_pattern=["chunked", "global"]),
     "attention_chunk: required, since layer_pattern has chunked layers"),
    (dict(attention_chunk=4), "layer_pattern: an attention_chunk is given but no layer is chunked"),
    (dict(layer_pattern=["chunk"], attention_chunk=4),
     "layer_pattern: unknown value 'chunk'; expected one of local, global, chunked"),
])
def test_bad_chunk_specs_are_one_line(changes, message) -> None:
    with pytest.raises(SpecError) as e:
        tiny(**changes)
    assert str(e.value) == f"<spec>: {message}"


# --- sinks ------------------------------------------------------------------------------------


def test_sinks_are_one_logit_per_head_and_one_softmax_column() -> None:
    """h parameters per layer; the softmax runs over one column more: 5 FLOPs x B*h*S per layer."""
    base, sunk = analyze(tiny(), batch=2, seq=5), analyze(tiny(attention_sinks=True), batch=2, seq=5)
    assert sunk.total().params - base.total().params == L * h
    assert sunk.total("layers/attention/sinks").flops_other == L * 5 * 2 * h * 5
    assert sunk.total().flops_matmul == base.total().flops_matmul
    assert sunk.total().kv_cache == base.total().kv_cache


# --- the reference model ----------------------------------------------------------------------

torch = pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")

from costmodel.measure.reference import build  # noqa: E402
from costmodel.measure.run import measure  # noqa: E402
from tests.test_measure_properties import decode_matches_prefill  # noqa: E402

LLAMA4_LIKE = dict(n_layers=4, layer_pattern=["chunked", "chunked", "chunked", "global"], attention_chunk=4,
                   global_nope=True, attention_sinks=True)


@pytest.mark.parametrize("phase, seq", [("prefill", 11), ("decode", 7), ("decode", 8), ("train", 6)])
def test_reference_counts_equal_formulas(phase: str, seq: int) -> None:
    for spec in (tiny(**LLAMA4_LIKE), chunked(3), tiny(window=3, attention_sinks=True)):
        m = measure(spec, phase, batch=2, seq=seq, count_bytes=False)
        assert m.ok, [(c.quantity, c.formula, c.measured) for c in m.comparisons]


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=st.integers(1, 14), c=st.integers(1, 6), sinks=st.booleans())
def test_chunked_decode_from_cache_equals_full_forward(seq: int, c: int, sinks: bool) -> None:
    """The rolling buffer of c slots holds what the next token's chunk needs, at every position."""
    spec = tiny(**{**LLAMA4_LIKE, "attention_chunk": c, "attention_sinks": sinks})
    full, step = decode_matches_prefill(spec, seq)
    assert torch.allclose(full, step, atol=1e-5, rtol=1e-4)


def test_chunk_mask_and_sinks_by_hand() -> None:
    """The reference attention: a query attends to its own chunk only, and a sink takes its share."""
    spec = tiny(layer_pattern=["chunked"], attention_chunk=3, attention_sinks=True, n_layers=1)
    model = build(spec, "cpu", torch.float64, seed=3).eval()
    layer = model.decoder.layers[0].attention
    positions = torch.arange(7)
    hidden = layer.mask(positions, positions)
    allowed = {(q, key) for q in range(7) for key in range(7) if not hidden[q, key]}
    assert allowed == {(q, key) for q in range(7) for key in range(q + 1) if key // 3 == q // 3}
    scores = torch.zeros(1, h, 1, 4, dtype=torch.float64)
    with torch.no_grad():
        layer.sinks.weight.copy_(torch.tensor([0.0, 2.0]))
    probs = layer.sinks(scores)
    # head 0: e^0 / (4 e^0 + e^0) = 1/5 per key; head 1: 1 / (4 + e^2)
    assert torch.allclose(probs[0, 0, 0], torch.full((4,), 0.2, dtype=torch.float64))
    assert torch.allclose(probs[0, 1, 0], torch.full((4,), 1 / (4 + math.e**2), dtype=torch.float64))


# --- the attention command and Shazeer's asymptotics --------------------------------------------


def test_window_table_shows_full_attention_beside_the_chunks() -> None:
    """Llama 4's pattern over 8 layers, 1 K/V head of 4, c = 4: at C = 100 the chunked layers keep
    4 tokens, the global ones 100; full attention keeps 100 everywhere."""
    from costmodel.devices.hardware import load_hardware
    from costmodel.studies.attention_variants import compare_windows, window_variants

    spec = tiny(n_layers=8, layer_pattern=["chunked", "chunked", "chunked", "global"], attention_chunk=4,
                global_nope=True)
    labels = [(v.label, v.own) for v in window_variants(spec)]
    assert labels == [("full", False), ("c=4, 3 chunked : 1 global", True)]
    rows = {r.variant: r for r in compare_windows(spec, load_hardware("h100-sxm"), contexts=[100])}
    per_token = 2 * k * d_h * P
    assert rows["full"].kv_cache == per_token * 8 * 100
    assert rows["c=4, 3 chunked : 1 global"].kv_cache == per_token * (6 * 4 + 2 * 100)
    # a window variant of a chunked spec replaces the chunks
    local = [v for v in window_variants(spec, window=4) if v.label == "w=4, all local"]
    assert local and local[0].spec.attention_chunk is None


# --- transformers' own definitions -----------------------------------------------------------------


@given(S=st.integers(1, 20), cached=st.integers(0, 20), c=st.integers(1, 8))
@settings(max_examples=40, deadline=None)
def test_chunk_pairs_are_what_transformers_mask_allows(S: int, cached: int, c: int) -> None:
    """transformers' chunked_causal_mask_function (Llama 4) allows, for the S queries at the end
    of a C-token context, exactly the pairs of our closed form."""
    pytest.importorskip("transformers", reason="the oracle needs transformers (the [hf] extra)")
    from transformers.masking_utils import chunked_causal_mask_function

    C = S + cached
    allowed = chunked_causal_mask_function(c, torch.zeros(1, dtype=torch.long))
    zero = torch.tensor(0)
    q = torch.arange(C - S, C)[:, None]
    kv = torch.arange(C)[None, :]
    pairs = int(allowed(zero, zero, q, kv).sum())
    dims = numeric_dims(chunked(c), dict(B=1, S=S, C=C, S_e=0, C_e=0), 2)
    assert attn.chunked(dims).pairs == pairs


def test_sinks_are_what_gpt_oss_computes() -> None:
    """gpt-oss's eager attention (sinks concatenated as one softmax column, then dropped) gives the
    probabilities of our reference Sinks, and GptOssAttention holds h sink logits."""
    transformers = pytest.importorskip("transformers",
                                       reason="the oracle needs transformers (the [hf] extra)")
    from types import SimpleNamespace

    from transformers.models.gpt_oss import modeling_gpt_oss as gpt_oss

    from costmodel.measure.blocks import Sinks

    torch.manual_seed(0)
    B, heads, S, d = 2, 4, 5, 8
    q, k, v = (torch.randn(B, heads, S, d, dtype=torch.float64) for _ in range(3))
    sinks = Sinks(heads).double()
    with torch.no_grad():
        sinks.weight.copy_(torch.randn(heads, dtype=torch.float64))
    module = SimpleNamespace(num_key_value_groups=1, sinks=sinks.weight, training=False)
    _, theirs = gpt_oss.eager_attention_forward(module, q, k, v, None, scaling=d**-0.5)
    ours = sinks(q @ k.transpose(-2, -1) * d**-0.5)
    assert torch.allclose(ours, theirs, atol=1e-12)
    cfg = transformers.GptOssConfig(hidden_size=16, num_attention_heads=heads, num_key_value_heads=2,
                                    head_dim=d,
                                    num_hidden_layers=1, layer_types=["full_attention"])
    layer = gpt_oss.GptOssAttention(cfg, 0)
    assert layer.sinks.numel() == heads
    spec = tiny(d_model=16, n_heads=heads, n_kv_heads=2, head_dim=d, n_layers=1, attention_sinks=True,
                bias=True)
    a = analyze(spec, seq=3)
    ours_params = sum(a.total(f"layers/attention/{x}").params for x in ("q", "k", "v", "out", "sinks"))
    assert ours_params == sum(p.numel() for p in layer.parameters())


@pytest.mark.parametrize("batch, seq", [(2, 7), (1, 10)])
def test_llama4_chunked_layers_equal_flop_counter_on_transformers(batch: int, seq: int) -> None:
    """transformers' Llama 4 text model with every FFN dense (moe_layers []), chunks of 3, every
    4th layer global and NoPE: parameters, prefill FLOPs and a decode step's FLOPs (the chunked
    layers' keys a rolling buffer of min(C, c)) equal the formulas exactly."""
    transformers = pytest.importorskip("transformers",
                                       reason="the oracle needs transformers (the [hf] extra)")
    from torch.utils.flop_counter import FlopCounterMode

    transformers.logging.set_verbosity_error()
    cfg = transformers.Llama4TextConfig(
        vocab_size=50, hidden_size=16, intermediate_size=24, intermediate_size_mlp=24, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=4, attention_chunk_size=3, moe_layers=[],
        no_rope_layers=[1, 1, 1, 0], use_qk_norm=False, tie_word_embeddings=False, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.Llama4ForCausalLM(cfg).eval()
    spec = tiny(d_model=16, d_ff=24, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=4, vocab_size=50,
                layer_pattern=["chunked"] * 3 + ["global"], attention_chunk=3, global_nope=True)
    ids = torch.randint(0, 50, (batch, seq + 1))
    with torch.no_grad():
        with FlopCounterMode(display=False) as prefill:
            out = model(ids[:, :seq], use_cache=True)
        with FlopCounterMode(display=False) as decode:
            model(ids[:, seq:], cache=out.past_key_values, use_cache=True)
    assert analyze(spec, seq=seq).total().params == sum(p.numel() for p in model.parameters())
    assert analyze(spec, "prefill", batch=batch, seq=seq).total().flops_matmul == prefill.get_total_flops()
    assert analyze(spec, "decode", batch=batch, seq=seq).total().flops_matmul == decode.get_total_flops()
