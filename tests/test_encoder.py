"""Encoder-only models (issue 25): BERT, RoBERTa, ModernBERT, DeBERTa-v2/v3.

Counts derived by hand on a tiny BERT; ModernBERT's local window against a brute-force count of
(query, key) pairs; DeBERTa's relative projections against their definition and the claim of
docs/encoders.md; decode refused in one line by every command that would run it; and, on the
meta device, the reference model's parameters and matmul FLOPs equal to the formulas for each
bundled encoder in a forward and a training step, every head."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.analysis import AnalysisError, analyze, count_params
from costmodel.cli import app
from costmodel.spec import SpecError, spec_from_dict
from costmodel.studies.variants import variant

runner = CliRunner()

#: d=8, h=2, f=16, V=10, 2 layers, 6 positions, 2 token types, BERT's biases and norms.
TINY_BERT = dict(name="tiny-bert", architecture="encoder", d_model=8, n_layers=2, n_heads=2, d_ff=16,
                 vocab_size=10, max_seq_len=6, norm="layernorm", norm_position="post", activation="gelu",
                 position="learned", token_types=2, embedding_norm=True, head="pooler",
                 bias={"qkv": True, "attn_out": True, "ffn": True, "lm_head": True}, tied_embeddings=True)


def tiny(**changes):
    return spec_from_dict({k: v for k, v in {**TINY_BERT, **changes}.items() if v is not None})


def test_tiny_bert_parameters_by_hand() -> None:
    """tokens 10*8, positions 6*8, types 2*8, embedding LayerNorm 16; per layer q/k/v/out
    4*(64+8), up 8*16+16, down 16*8+8, two LayerNorms 2*16: 600; pooler 64+8.
    mlm instead: transform 72, its LayerNorm 16, the tied decoder's bias 10.
    classification (3 labels): the pooler 72 and the classifier 8*3+3."""
    embedding = 80 + 48 + 16 + 16
    assert count_params(tiny()) == embedding + 2 * 600 + 72
    assert count_params(tiny(head="none")) == embedding + 2 * 600
    assert count_params(tiny(head="mlm")) == embedding + 2 * 600 + 72 + 16 + 10
    assert count_params(tiny(head="classification", n_labels=3)) == embedding + 2 * 600 + 72 + 27


def test_tiny_bert_forward_flops_by_hand() -> None:
    """B=2, S=5: each layer's q, k, v, out 4 * 2*10*8*8, up and down 2 * 2*10*8*16, scores and
    AV 2 * 2*2*2*5*5*4 (every pair: no mask); the pooler 2*2*8*8 over the [CLS] rows only."""
    a = analyze(tiny(), "prefill", batch=2, seq=5)
    per_layer = 4 * 2 * 10 * 8 * 8 + 2 * 2 * 10 * 8 * 16 + 2 * 2 * 2 * 2 * 5 * 5 * 4
    assert a.total().flops_matmul == 2 * per_layer + 2 * 2 * 8 * 8
    assert a.total().flops_matmul_effective == a.total().flops_matmul
    assert a.total().kv_cache == 0
    mlm = analyze(tiny(head="mlm"), "train", batch=2, seq=5)
    head = 2 * 10 * 8 * 8 + 2 * 10 * 8 * 10  # transform and decoder at every position
    assert mlm.total().flops_matmul == 3 * (2 * per_layer + head)
    # log-sum-exp over V at 10 tokens, x3 in training
    assert mlm.total("loss/cross_entropy").flops_other == 3 * 4 * 10 * 10


@pytest.mark.parametrize("seq", [1, 3, 7, 20])
@pytest.mark.parametrize("window", [2, 5, 8])
def test_local_window_pairs_against_brute_force(seq: int, window: int) -> None:
    """ModernBERT's local layers: a query sees keys with |i - j| <= w // 2 (transformers'
    sliding_window_bidirectional_overlay), counted pair by pair."""
    spec = tiny(position="rope", window=window, layer_pattern=["local"], n_layers=1, head="none",
                max_seq_len=32)
    a = analyze(spec, "prefill", batch=1, seq=seq)
    pairs = sum(1 for i in range(seq) for j in range(seq) if abs(i - j) <= window // 2)
    assert a.total("layers/attention/scores").flops_matmul_effective == 2 * 2 * 4 * pairs
    assert a.total("layers/attention/scores").flops_matmul == 2 * 2 * 4 * seq * seq


def test_deberta_relative_projections_run_every_layer_whatever_the_batch() -> None:
    """Each layer projects the 2k = 512-row table through q and k: 2 * 2*512*768*768 FLOPs, at
    any batch and length; at batch 1 and 128 tokens that is over a third of deberta-v3-base's
    FLOPs (docs/encoders.md), the same share in a training step."""
    spec = catalog.load("deberta-v3-base")
    per_layer = 2 * 2 * 512 * 768 * 768
    for batch, seq in ((1, 128), (4, 300)):
        a = analyze(spec, "prefill", batch=batch, seq=seq)
        rel = sum(r.flops_matmul for r in a.rows if r.key.leaf in ("rel_q", "rel_k"))
        assert rel == 12 * per_layer
    for phase in ("prefill", "train"):
        a = analyze(spec, phase, batch=1, seq=128)
        rel = sum(r.flops for r in a.rows if r.key.leaf in ("rel_q", "rel_k"))
        assert 0.36 < rel / a.total().flops < 0.38
    c2p = analyze(spec, "prefill", batch=2, seq=100).total("layers/attention/c2p")
    assert c2p.flops_matmul == 12 * 2 * 2 * 12 * 100 * 64 * 512


def test_bundled_encoders_have_no_decode_and_refuse_it_in_one_line() -> None:
    spec = catalog.load("bert-base-uncased")
    with pytest.raises(AnalysisError, match="encoder-only"):
        analyze(spec, "decode")
    result = runner.invoke(app, ["analyze", "bert-base-uncased", "-p", "decode"])
    assert result.exit_code == 2 and "encoder-only" in result.output
    assert result.output.count("\n") == 1
    for args in (["inference", "bert-base-uncased", "--hardware", "h100-sxm"],
                 ["serve", "bert-base-uncased", "--cluster", "dgx-h100", "--tp", "4"],
                 ["deploy", "bert-base-uncased", "--cluster", "dgx-h100", "--gpus", "8", "--seq", "128",
                  "--output-tokens", "8", "--rate", "1"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "encoder-only" in result.output and result.output.count("\n") == 1, result.output
    result = runner.invoke(app, ["analyze", "bert-base-uncased", "-f", "json"])
    assert result.exit_code == 0 and '"decode"' not in result.output


def test_heads_run_as_their_transformers_modules() -> None:
    """Each family's pooler as transformers runs it: BertPooler and RobertaClassificationHead
    dense + tanh; DeBERTa-v2's ContextPooler dense + GELU (pooler_hidden_act); ModernBERT's
    ModernBertPredictionHead dense (classifier_bias) + GELU + LayerNorm. B=2 [CLS] rows of d=8:
    tanh 1 FLOP an element (16), GELU 8 (128), the norm's 16 elements beside."""
    from costmodel import hf

    small = dict(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=16, max_position_embeddings=6)
    got = {t: hf.spec_from_hf({"model_type": t, **small, **extra}) for t, extra in (
        ("bert", {}), ("roberta", {}), ("deberta-v2", {}),
        ("modernbert", {"mlp_bias": True, "classifier_bias": False}))}
    assert {t: (s.pooler_activation.value, s.pooler_norm, s.head_bias) for t, s in got.items()} == {
        "bert": ("tanh", False, True), "roberta": ("tanh", False, True), "deberta-v2": ("gelu", False, True),
        "modernbert": ("gelu", True, False)}
    tanh = analyze(tiny(head="classification"), "prefill", batch=2, seq=5)
    gelu = analyze(tiny(head="classification", pooler_activation="gelu", pooler_norm=True), "prefill",
                   batch=2, seq=5)
    assert tanh.total("pooler/act").flops_other == 16 and gelu.total("pooler/act").flops_other == 128
    assert "pooler/norm" not in {r.path for r in tanh.rows} and gelu.total("pooler/norm").params == 16
    with pytest.raises(SpecError, match=r': pooler_hidden_act: "relu" after the pooler is not supported'):
        hf.spec_from_hf({"model_type": "deberta-v2", **small, "pooler_hidden_act": "relu"})


def test_encoder_pipeline_stages_hold_the_embedding_and_the_head() -> None:
    """bert-large-uncased on PP 2 and 4: the first stage keeps the embedding's activations (its
    norm and token types with them), the last the head's; the stages' weights and activations
    (one micro-batch each) add up to the single-device memory model's, plus, for the masked-LM
    head only, the tied table's copy on the last stage (30522 x 1024). A pooler has no tied
    head: before, the last stage held a copy and summed its gradient with the first."""
    from costmodel.components.key import Role
    from costmodel.parallel import device
    from costmodel.parallel.cluster import load_cluster
    from costmodel.parallel.layout import Layout, Recompute
    from costmodel.parallel.step import StepModel
    from costmodel.runtime.kernels import KERNELS
    from costmodel.runtime.memory import Run, memory

    for head in ("pooler", "mlm"):
        spec = variant(catalog.load("bert-large-uncased"), {"head": head})
        whole = memory(spec, "train", batch=1, seq=512, run=Run(mask_bytes=1))
        acts = {i.key: i.bytes for i in whole.items if i.category == "activations"}
        split = device.activations(spec, 1, 512, 1, False, Recompute.none)
        embedding = {k.leaf for k in acts if k is not None and k.block == "embedding"}
        assert embedding == {"tokens", "positions", "token_types", "norm", "dropout"}
        assert split.first == sum(n for k, n in acts.items() if k is not None and k.block == "embedding")
        head_keys = [k for k in acts if k is not None and k.role in (Role.head, Role.loss)]
        assert split.last == sum(acts[k] for k in head_keys) and head_keys
        assert split.shared == 0  # an encoder without local layers masks nothing
        model = StepModel(spec, load_cluster("dgx-h100"), seq=512, kernels=KERNELS["eager"])
        for pp in (2, 4):
            stages = [model.stage_memory(Layout(global_batch=1, pp=pp), i) for i in range(pp)]
            assert sum(s.activations for s in stages) == whole.total("activations")
            tied = 30522 * 1024 if head == "mlm" else 0
            assert sum(s.weights for s in stages) == whole.total("weights") + 2 * tied
        synced = model.step(Layout(global_batch=4, pp=2)).breakdown["embedding_sync"]
        assert (synced > 0) is (head == "mlm")


@pytest.mark.parametrize("changes,field", [
    ({"architecture": "decoder", "head": None, "pooler_activation": "gelu"}, "pooler_activation"),
    ({"architecture": "decoder", "head": None, "bias": {"head": True}}, "bias.head"),
    ({"architecture": "decoder", "head": "mlm"}, "head"),
    ({"head": "pooler", "n_labels": 3}, "n_labels"),
    ({"attention_sinks": True}, "attention_sinks"),
    ({"architecture": "decoder", "head": None, "position": "disentangled"}, "position"),
    ({"position_buckets": 8}, "position_buckets"),
    ({"architecture": "encoder-decoder", "n_layers": None, "n_encoder_layers": 1, "n_decoder_layers": 1,
      "head": None}, "token_types"),
])
def test_bad_encoder_specs_name_the_field(changes, field) -> None:
    with pytest.raises(SpecError) as e:
        tiny(**changes)
    assert f": {field}:" in str(e.value) and "\n" not in str(e.value)


torch = pytest.importorskip("torch", reason="the reference model needs torch")


HEADS = [("bert-base-uncased", "classification"), ("roberta-large", "mlm"), ("modernbert-base", "none"),
         ("deberta-v3-base", "mlm"), ("bert-large-uncased", "pooler"), ("modernbert-base", "classification"),
         ("deberta-v3-base", "classification")]


@pytest.mark.parametrize("name,head", HEADS, ids=[f"{n}-{h}" for n, h in HEADS])
def test_reference_model_counts_equal_formulas(name: str, head: str) -> None:
    """Two layers of each bundled encoder on the meta device (ModernBERT: a global and a local
    one), a forward past the local window and a training step, each head somewhere: parameters
    and matmul FLOPs measured equal the formulas exactly, KV cache 0 (tests/test_measure_bundled.py
    measures every bundled spec with its own head, at two shapes and full depth)."""
    from costmodel.measure.run import measure

    s = variant(catalog.load(name), {"head": head}, name=name)
    for phase in ("prefill", "train"):
        m = measure(s, phase, batch=2, seq=150, count_bytes=False, layers=2)
        wrong = [(c.quantity, c.formula, c.measured) for c in m.comparisons if not c.agrees]
        assert not wrong, (name, head, phase, wrong)


def test_reference_encoder_runs_on_cpu() -> None:
    """A real forward of a tiny DeBERTa and ModernBERT: finite outputs, bidirectional (the first
    position's output depends on the last token)."""
    from costmodel.measure.reference import build

    local = {"position": "rope", "window": 2, "layer_pattern": ["global", "local"]}
    for changes in ({"position": "disentangled", "position_buckets": 4}, local):
        spec = tiny(head="none", **changes)
        model = build(spec, "cpu", torch.float32, seed=1).eval()
        ids = torch.tensor([[1, 2, 3, 4, 5]])
        other = ids.clone()
        other[0, -1] = 9
        with torch.no_grad():
            a, b = model(ids), model(other)
        assert torch.isfinite(a).all()
        assert not torch.allclose(a[0, 0], b[0, 0])
