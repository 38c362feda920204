"""Random small specs mixing every design element (hypothesis).

- On the meta device, in all three phases, measured parameters, matmul FLOPs and KV-cache
  bytes equal the formulas exactly.
- On the CPU, the reference model is a working transformer: decoding token S+1 from the cache
  that a prefill of S tokens left gives the logits a full forward over S+1 tokens gives at its
  last position (RoPE offsets, rolling windows, cached cross-attention, position biases).
A failure prints the spec (YAML) and shape that broke it.
"""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from costmodel.measure.reference import build  # noqa: E402
from costmodel.measure.run import measure  # noqa: E402
from costmodel.spec import Spec, spec_from_dict  # noqa: E402

PER_LAYER = ("rope", "t5_relative", "alibi")
MAX_SEQ = 64


@st.composite
def specs(draw) -> dict:
    """A valid spec mixing the design elements, as the YAML mapping a user would write."""
    enc_dec = draw(st.integers(0, 3)) == 0  # one in four
    kv = draw(st.sampled_from([1, 2]))
    heads = kv * draw(st.sampled_from([1, 2, 3]))
    head_dim = draw(st.sampled_from([2, 4, 8]))
    norm = draw(st.sampled_from(["layernorm", "rmsnorm"]))
    position = draw(st.sampled_from(["sinusoidal", "learned", "rope", "t5_relative", "alibi", "none"]))
    block = draw(st.sampled_from(["serial", "parallel"]))
    data = {
        "name": "random",
        "d_model": draw(st.sampled_from([6, 8, 12])),
        "n_heads": heads,
        "n_kv_heads": kv,
        "head_dim": head_dim,
        "d_ff": draw(st.integers(2, 20)),
        "vocab_size": draw(st.integers(3, 40)),
        "max_seq_len": MAX_SEQ,
        "norm": norm,
        "norm_position": draw(st.sampled_from(["pre", "post", "sandwich", "post_sublayer"])),
        "activation": draw(st.sampled_from(["relu", "gelu", "reglu", "geglu", "swiglu"])),
        "block": block,
        "position": position,
        "bias": {
            "qkv": draw(st.booleans()), "attn_out": draw(st.booleans()), "ffn": draw(st.booleans()),
            "lm_head": draw(st.booleans()),
            "norm": draw(st.booleans()) if norm == "layernorm" else False,
        },
        "tied_embeddings": draw(st.booleans()),
        "embedding_scale": draw(st.booleans()),
        "qk_norm": draw(st.sampled_from(["none", "head", "full"])),
        "z_loss": draw(st.sampled_from([0.0, 1e-4])),
        "dropout": draw(st.sampled_from([0.0, 0.1])),
        "head_scale": draw(st.booleans()),
    }
    for site in ("embedding_dropout", "attention_dropout", "ffn_dropout", "final_dropout"):
        if draw(st.booleans()):
            data[site] = draw(st.sampled_from([0.0, 0.2]))
    if draw(st.booleans()):
        data["logit_scale"] = 0.25
    if position == "learned" and draw(st.booleans()):
        data["position_offset"] = 2  # OPT
    if block == "parallel":
        data["shared_norm"] = draw(st.booleans())
    if position == "rope" and head_dim % 4 == 0:
        data["rotary_fraction"] = draw(st.sampled_from([0.5, 1.0]))
    if position == "t5_relative":
        data["relative_buckets"] = draw(st.sampled_from([4, 8, 32]))
    for cap in ("attn_softcap", "final_softcap"):
        if draw(st.booleans()):
            data[cap] = 20.0
    if enc_dec:
        data["architecture"] = "encoder-decoder"
        data["n_encoder_layers"] = draw(st.integers(1, 2))
        data["n_decoder_layers"] = draw(st.integers(1, 2))
        return data
    layers = draw(st.integers(1, 4))
    data["n_layers"] = layers
    if draw(st.booleans()):
        data["window"] = draw(st.integers(1, 6))
        pattern = draw(st.lists(st.sampled_from(["local", "global"]), min_size=1, max_size=layers))
        if "local" not in pattern:
            pattern[0] = "local"
        data["layer_pattern"] = pattern
        if "global" in pattern and position in PER_LAYER:
            data["global_nope"] = draw(st.booleans())
    return data


def _spec(data: dict) -> Spec:
    return spec_from_dict(data, "hypothesis")


def _show(data: dict, **shape) -> str:
    return f"shape {shape}, spec:\n{yaml.safe_dump(data, sort_keys=False)}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=specs(), batch=st.integers(1, 3), seq=st.integers(1, 12), enc_seq=st.integers(1, 6))
def test_random_specs_count_exactly(data: dict, batch: int, seq: int, enc_seq: int) -> None:
    """Every phase of a random spec: parameters, matmul FLOPs and KV cache equal the formulas."""
    spec = _spec(data)
    model = build(spec)
    for phase in ("prefill", "decode", "train"):
        m = measure(spec, phase, batch=batch, seq=seq, count_bytes=False, model=model,
                    enc_seq=enc_seq if spec.is_encoder_decoder else None)
        wrong = [f"{c.quantity}: formula {c.formula:,} measured {c.measured:,}"
                 for c in m.comparisons if not c.agrees]
        assert not wrong, f"{phase}: {wrong}\n{_show(data, batch=batch, seq=seq, enc_seq=enc_seq)}"


def decode_matches_prefill(spec: Spec, seq: int, enc_seq: int = 3, batch: int = 2,
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits for token seq+1: (full forward over seq+1 tokens, decode after a prefill of seq)."""
    model = build(spec, "cpu", torch.float32, seed=1).eval()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, spec.vocab_size, (batch, seq + 1), generator=g)
    enc = None
    if spec.is_encoder_decoder:
        enc = torch.randint(0, spec.vocab_size, (batch, enc_seq), generator=g)
    with torch.no_grad():
        full = model(tokens, enc)[:, -1]
        cache = model.new_cache(batch, seq + 1, enc_seq)
        model(tokens[:, :seq], enc, cache)
        step = model(tokens[:, seq:], None, cache, start=seq)[:, -1]
    return full, step


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=specs(), seq=st.integers(1, 12))
def test_random_specs_decode_from_cache(data: dict, seq: int) -> None:
    """A decode step from the prefill's cache computes what a full forward computes."""
    spec = _spec(data)
    full, step = decode_matches_prefill(spec, seq)
    assert torch.allclose(full, step, atol=1e-5, rtol=1e-4), _show(data, seq=seq)
