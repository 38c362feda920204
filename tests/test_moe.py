"""The mixture-of-experts FFN: hand-derived counts, the expected-experts formula against
enumeration, and the PyTorch reference module counted by FlopCounterMode and the byte counter."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest
from pydantic import ValidationError

from costmodel.components import moe
from costmodel.components.moe import Routing
from costmodel.spec import MoEFFN

MIXTRAL = MoEFFN(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=14336, norm_topk=True)
D_MIXTRAL = 4096


def _sum(leaves, quantity: str, training: bool = False):
    return sum(getattr(c, quantity) for _, c in leaves if training or not c.train_only)


# --- parameters -------------------------------------------------------------------------------


def test_mixtral_total_params_by_hand() -> None:
    """Mixtral 8x7B (Jiang et al. 2024; config.json: d 4096, 32 layers, 32 heads, 8 KV heads,
    f 14336, 8 experts, V 32000, untied): 46,702,792,704, the figure of the issue.

    Per layer: attention 2*4096^2 + 2*4096*1024 = 41,943,040; two RMSNorms 8,192; router
    4096*8 = 32,768; experts 8*3*4096*14336 = 1,409,286,144. Then 32 layers, two 32000x4096
    tables and the final norm.
    """
    leaves = moe.sparse(MIXTRAL, D_MIXTRAL, 2, moe.ExpertDims.of(MIXTRAL), 1)
    ffn = _sum(leaves, "params")
    assert ffn == 32_768 + 1_409_286_144
    total = 32 * (41_943_040 + 8_192 + ffn) + 2 * 32_000 * 4096 + 4096
    assert total == 46_702_792_704


def test_mixtral_active_params_both_conventions() -> None:
    """A token skips 6 of 8 experts in all 32 layers: 32*6*3*4096*14336 = 33,822,867,456.
    With the embedding 12,879,925,248 (Mixtral's published 12.9B); without the 131,072,000 of
    the input table 12,748,853,248."""
    assert moe.inactive_params(MIXTRAL, D_MIXTRAL, 32) == 33_822_867_456
    total, embedding = 46_702_792_704, 32_000 * 4096
    with_emb = moe.active_params(total, embedding, MIXTRAL, D_MIXTRAL, 32,
                                 moe.ActiveConvention.with_embedding)
    without = moe.active_params(total, embedding, MIXTRAL, D_MIXTRAL, 32,
                                moe.ActiveConvention.without_embedding)
    assert (with_emb, without) == (12_879_925_248, 12_748_853_248)
    assert round(with_emb / 1e8) == 129


def test_expert_biases_and_ungated_experts() -> None:
    """gpt-oss experts carry a bias on each linear: a gated expert 3*d*f + 2*f + d, an ungated
    one 2*d*f + f + d."""
    gated = MoEFFN(activation="swiglu", n_experts=4, top_k=1, d_ff_expert=6, expert_bias=True)
    plain = MoEFFN(activation="gelu", n_experts=4, top_k=1, d_ff_expert=6, expert_bias=True)
    assert moe.expert_params(gated, 5) == 3 * 5 * 6 + 2 * 6 + 5
    assert moe.expert_params(plain, 5) == 2 * 5 * 6 + 6 + 5


def test_shared_experts_are_one_wide_mlp() -> None:
    """DeepSeekMoE: n_s shared experts of f_s hold n_s*3*d*f_s params and every token runs
    them: 2*T*3*d*n_s*f_s matmul FLOPs, beside 2*T*K*3*d*f_e for the routed ones."""
    cfg = MoEFFN(activation="swiglu", n_experts=16, top_k=4, d_ff_expert=8, n_shared_experts=2,
                 d_ff_shared=12)
    d, T = 10, 7
    leaves = dict(moe.sparse(cfg, d, 2, moe.ExpertDims.of(cfg), T))
    shared = sum(c.params for k, c in leaves.items() if k.startswith("shared/"))
    assert shared == 2 * 3 * d * 12
    assert sum(c.matmul for k, c in leaves.items() if k.startswith("shared/")) == 2 * T * 3 * d * 24
    assert sum(c.matmul for k, c in leaves.items() if k.startswith("experts/")) == 2 * T * 4 * 3 * d * 8


# --- FLOPs ------------------------------------------------------------------------------------


def test_router_flops_and_params() -> None:
    """The router is a d x E linear: 2*T*d*E matmul FLOPs, d*E params; a bias adds E params
    and T*E adds."""
    cfg = MoEFFN(activation="swiglu", n_experts=32, top_k=4, d_ff_expert=64, router_bias=True)
    d, T = 48, 10
    router = dict(moe.sparse(cfg, d, 2, moe.ExpertDims.of(cfg), T))["router"]
    assert (router.params, router.matmul, router.other) == (d * 32 + 32, 2 * T * d * 32, T * 32)


def test_dropless_flops_are_top_k_experts_per_token() -> None:
    """Mixtral per token per layer: router 2*4096*8, two experts of 3 matmuls of 2*4096*14336."""
    leaves = moe.sparse(MIXTRAL, D_MIXTRAL, 2, moe.ExpertDims.of(MIXTRAL), 1)
    assert _sum(leaves, "matmul") == 2 * 4096 * 8 + 2 * 3 * 2 * 4096 * 14336


def test_capacity_factor_pads_every_expert() -> None:
    """Switch with capacity factor 1.25, T = 15 tokens, K = 2, E = 8: C = ceil(1.25*30/8) = 5
    rows per expert, 40 in all (not 30), and all 8 experts read their weights."""
    cfg = MoEFFN(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=32, capacity_factor=1.25)
    d, p = 16, 2
    leaves = dict(moe.sparse(cfg, d, p, moe.ExpertDims.of(cfg), 15))
    assert leaves["experts/up"].matmul == 2 * 40 * d * 32
    assert leaves["experts/up"].weights_read == p * 8 * d * 32


def test_aux_loss_only_in_training() -> None:
    cfg = MoEFFN(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=32, aux_loss=0.01)
    leaves = dict(moe.sparse(cfg, 16, 2, moe.ExpertDims.of(cfg), 10))
    assert leaves["aux_loss"].train_only
    assert leaves["aux_loss"].other == 10 * 8 + 10 * 2 + 2 * 8 + 2
    assert "aux_loss" not in dict(moe.sparse(MIXTRAL, 16, 2, moe.ExpertDims.of(MIXTRAL), 10))


# --- experts read -------------------------------------------------------------------------------


def _enumerated(E: int, K: int, B: int) -> tuple[Fraction, int]:
    """Mean and maximum number of distinct experts over every way B tokens pick K of E."""
    subsets = list(itertools.combinations(range(E), K))
    counts = [len(set().union(*picks)) for picks in itertools.product(subsets, repeat=B)]
    return Fraction(sum(counts), len(counts)), max(counts)


@pytest.mark.parametrize("E,K,B", [(4, 1, 3), (5, 2, 3), (6, 3, 2), (4, 4, 2), (8, 2, 1), (3, 1, 5)])
def test_expected_experts_against_enumeration(E: int, K: int, B: int) -> None:
    """E*(1 - (1 - K/E)^B) is the mean over all C(E,K)^B routings; min(E, B*K) their maximum."""
    mean, most = _enumerated(E, K, B)
    assert moe.expected_experts(E, K, B) == float(mean)
    assert moe.worst_experts(E, K, B) == most


def test_expected_experts_monte_carlo() -> None:
    """E = 64, K = 8, B = 16 (too many routings to enumerate): the sample mean of 4,000 random
    routings lies within 4 standard errors of the formula."""
    rng = random.Random(0)
    E, K, B, n = 64, 8, 16, 4000
    samples = [len(set().union(*(rng.sample(range(E), K) for _ in range(B)))) for _ in range(n)]
    mean = sum(samples) / n
    sd = (sum((s - mean) ** 2 for s in samples) / (n - 1)) ** 0.5
    assert abs(mean - moe.expected_experts(E, K, B)) < 4 * sd / n**0.5


def test_expected_experts_limits() -> None:
    """One token reads exactly K experts; none reads none; a large batch reads all E."""
    assert moe.expected_experts(256, 8, 1) == 8
    assert moe.expected_experts(256, 8, 0) == 0
    assert moe.expected_experts(256, 8, 100_000) == 256
    assert moe.expected_experts(256, 8, 64) < moe.worst_experts(256, 8, 64) == 256


def test_symbolic_expected_experts_matches_numbers() -> None:
    import sympy

    e = moe.ExpertDims.symbolic()
    T = sympy.Symbol("T", positive=True, integer=True)
    expr = moe.expected_experts(e.E, e.K, T)
    value = expr.xreplace({e.E: 64, e.K: 6, T: 5})
    assert float(value) == pytest.approx(moe.expected_experts(64, 6, 5), rel=1e-15)


def test_decode_reads_expected_experts_weights() -> None:
    """Decode with B = 4 on Mixtral: each expert matrix is read E*(1 - (3/4)^4) = 5.46875
    times (exactly 175/32 of 8), 2 bytes per weight."""
    leaves = dict(moe.sparse(MIXTRAL, D_MIXTRAL, 2, moe.ExpertDims.of(MIXTRAL), 4))
    assert leaves["experts/up"].weights_read == round(2 * 4096 * 14336 * Fraction(175, 32))
    worst = dict(moe.sparse(MIXTRAL, D_MIXTRAL, 2, moe.ExpertDims.of(MIXTRAL), 4, routing=Routing.worst))
    assert worst["experts/up"].weights_read == 2 * 4096 * 14336 * 8


def test_decode_intensity_rises_with_batch() -> None:
    """Batch 1 reads K experts for K experts of work: the FFN's intensity is about one FLOP
    per byte in bf16 (2 FLOPs per weight, 2 bytes per weight), as a dense layer's; it rises with
    batch, slowly while B*K < E, then as B*K/E once every expert is read."""
    wide = MoEFFN(activation="swiglu", n_experts=256, top_k=8, d_ff_expert=2048)
    curve = moe.batch_curve(wide, 7168, 2, [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096])
    intensities = [pt.intensity for pt in curve]
    assert intensities == sorted(intensities)
    assert curve[0].intensity == pytest.approx(1.0, rel=1e-3)
    assert curve[0].experts_read == 8
    assert curve[-1].experts_read == pytest.approx(256)
    # saturated: intensity ~ B*K/E FLOPs per byte (x 2 FLOPs / 2 bytes per weight)
    assert curve[-1].intensity == pytest.approx(4096 * 8 / 256, rel=1e-2)
    # at B = 32 (B*K = E) the layer reads 63% of its experts, 1 - (1 - 8/256)^32
    assert curve[5].experts_read / 256 == pytest.approx(1 - (1 - 8 / 256) ** 32)


# --- which layers are sparse ------------------------------------------------------------------


def test_sparse_layer_patterns() -> None:
    """DeepSeek-V3: first 3 dense of 61; Llama 4 Maverick: every 2nd layer (1, 3, ...), as
    transformers' moe_layers = range(step - 1, L, step); an explicit list."""
    ds = MoEFFN(activation="swiglu", n_experts=256, top_k=8, d_ff_expert=2048, d_ff=18432, first_k_dense=3)
    assert ds.sparse_layers(61).count(True) == 58 and ds.sparse_layers(61)[:4] == (False,) * 3 + (True,)
    mav = MoEFFN(activation="swiglu", n_experts=128, top_k=1, d_ff_expert=8192, d_ff=16384, moe_every=2)
    assert [i for i, s in enumerate(mav.sparse_layers(8)) if s] == [1, 3, 5, 7]
    listed = MoEFFN(activation="swiglu", n_experts=4, top_k=1, d_ff_expert=8, d_ff=16, moe_layers=(0, 2))
    assert listed.sparse_layers(4) == (True, False, True, False)
    listed.check_layers(4)


@pytest.mark.parametrize("fields,message", [
    (dict(top_k=9), "top_k"),
    (dict(d_ff_shared=8), "d_ff_shared"),
    (dict(moe_layers=(0,), first_k_dense=1), "first_k_dense"),
    (dict(moe_layers=()), "moe_layers"),
    (dict(unknown=1), "unknown"),
])
def test_bad_fields_are_refused(fields, message) -> None:
    base = dict(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=16)
    with pytest.raises(ValidationError, match=message):
        MoEFFN(**{**base, **fields})


def test_layer_checks() -> None:
    with pytest.raises(ValueError, match="d_ff: required"):
        MoEFFN(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=16, first_k_dense=1).check_layers(4)
    with pytest.raises(ValueError, match="d_ff: every layer"):
        MoEFFN(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=16, d_ff=32).check_layers(4)
    with pytest.raises(ValueError, match="moe_layers"):
        MoEFFN(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=16, d_ff=32, moe_layers=(5,
                                                                                               )).check_layers(4)


# --- the reference module, counted --------------------------------------------------------------

CASES = {
    "mixtral-like": dict(),
    "shared+gate": dict(n_shared_experts=2, d_ff_shared=24, shared_expert_gate=True),
    "capacity": dict(capacity_factor=1.25),
    "biases, ungated": dict(expert_bias=True, router_bias=True, activation="gelu"),
    "sigmoid, fp32 router": dict(scoring="sigmoid", router_dtype="fp32"),
    "more experts than assignments": dict(n_experts=64, top_k=3),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_reference_counts_equal_the_formulas(case: str, device: str) -> None:
    """Round-robin routing sends every token to exactly K experts, so FlopCounterMode's count
    and the parameters equal the formulas, and the bytes the expert linears move equal theirs
    under the worst-case routing that round robin realises (min(E, T*K) experts read)."""
    torch = pytest.importorskip("torch")
    from costmodel.measure.counters import Counts
    from costmodel.measure.moe import SparseMLP

    cfg = MoEFFN(**{**dict(activation="swiglu", n_experts=8, top_k=2, d_ff_expert=32, norm_topk=True),
                    **CASES[case]})
    d, B, S = 16, 3, 5
    with torch.device(device):
        module = SparseMLP(cfg, d).to(torch.bfloat16)
    module.keep_router_dtype()
    x = torch.randn(B, S, d, device=device, dtype=torch.bfloat16)
    with torch.no_grad(), Counts() as counts:
        y = module(x)
    assert y.shape == x.shape
    leaves = dict(moe.sparse(cfg, d, 2, moe.ExpertDims.of(cfg), B * S, routing=Routing.worst))
    assert counts.total_flops == _sum(leaves.items(), "matmul")
    assert sum(p.numel() for p in module.parameters()) == _sum(leaves.items(), "params")
    by_module = counts.bytes_by_module()
    for leaf in ("gate", "up", "down"):
        if f"experts/{leaf}" not in leaves:
            continue
        measured = sum(v for k, v in by_module.items() if ".experts." in k and k.endswith(f".{leaf}"))
        assert measured == leaves[f"experts/{leaf}"].bytes_unfused, leaf
    router = sum(v for k, v in by_module.items() if k.endswith(".router"))
    assert router == leaves["router"].bytes_unfused


def test_round_robin_routing() -> None:
    """Each token gets K distinct experts; loads differ by at most one; min(E, T*K) are hit."""
    from costmodel.measure.moe import round_robin

    for T, K, E in [(5, 2, 8), (3, 3, 64), (40, 8, 16), (1, 4, 4)]:
        groups = round_robin(T, K, E)
        per_token: dict[int, set[int]] = {}
        for e, (tokens, _) in enumerate(groups):
            for t in tokens:
                per_token.setdefault(t, set()).add(e)
        assert all(len(s) == K for s in per_token.values()) and len(per_token) == T
        loads = [len(tokens) for tokens, _ in groups]
        assert max(loads) - min(loads) <= 1
        assert sum(1 for n in loads if n) == min(E, T * K)


# --- the bundled MoE specs ----------------------------------------------------------------------


def _moe_specs():
    """Every bundled spec with a mixture of experts, as YAML data."""
    import pathlib

    import yaml

    root = pathlib.Path(__file__).resolve().parent.parent / "specs"
    paths = sorted(root.glob("*.yaml"))
    data = {p.stem: yaml.safe_load(p.read_text()) for p in paths}
    return {name: d for name, d in data.items() if isinstance(d.get("ffn"),
                                                              dict) and d["ffn"]["kind"] == "moe"}


PENDING = _moe_specs()


def test_every_model_of_the_issue_has_a_spec() -> None:
    assert set(PENDING) == {
        "mixtral-8x7b", "deepseek-v3", "deepseek-v2-lite", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b",
        "gpt-oss-120b", "olmoe-1b-7b", "llama-4-scout", "llama-4-maverick", "kimi-k2", "dbrx-base",
    }


@pytest.mark.parametrize("name", PENDING)
def test_published_active_params(name: str) -> None:
    """The transformers count (published.exact) less the experts a token skips gives the
    published active count, in the convention its publisher uses, within its rounding."""
    from costmodel.spec import parse_count

    data = PENDING[name]
    cfg = MoEFFN(**data["ffn"])
    cfg.check_layers(data["n_layers"])
    pub = data["published"]
    n_sparse = cfg.sparse_layers(data["n_layers"]).count(True)
    embedding = data["vocab_size"] * data["d_model"]
    convention = moe.ActiveConvention(pub["active_convention"])
    active = moe.active_params(pub["exact"], embedding, cfg, data["d_model"], n_sparse, convention)
    value, half_unit = parse_count(pub["active"])
    allowed = pub["active_tolerance"] * value if "active_tolerance" in pub else half_unit
    assert abs(active - value) <= allowed, f"{name}: {active:,} vs {pub['active']}"
    other = next(c for c in moe.ActiveConvention if c is not convention)
    assert moe.active_params(pub["exact"], embedding, cfg, data["d_model"], n_sparse, other) != active


@pytest.mark.slow
def test_saved_for_backward_of_the_block_equals_the_reference() -> None:
    """Training: the tensors the sparse block keeps for backward (each storage once, parameters
    aside) are the formulas' saved bytes exactly (router input, scores, ids, weights, expert
    inputs and hiddens, outputs and their weighted products; with a balance loss, its E counts)."""
    torch = pytest.importorskip("torch")
    from costmodel.measure.moe import SparseMLP

    for E, K, norm, aux, router in ((64, 8, False, 0.0, None), (8, 2, True, 0.01, None), (16, 4, True, 0.0,
                                                                                          None),
                                    (16, 4, False, 0.01, "fp32")):
        cfg = MoEFFN(activation="swiglu", n_experts=E, top_k=K, d_ff_expert=32, norm_topk=norm, aux_loss=aux,
                     router_dtype=router)
        module = SparseMLP(cfg, 16).to(torch.bfloat16)
        module.keep_router_dtype()  # before the parameters are listed: the fp32 router is a new storage
        x = torch.randn(2, 8, 16, dtype=torch.bfloat16, requires_grad=True)
        params = {p.untyped_storage().data_ptr() for p in module.parameters()}
        kept: dict[int, int] = {}

        alive: list = []  # held, so that a freed storage's address is never reused in the count

        def pack(t, kept=kept, params=params, alive=alive):
            alive.append(t)
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                kept[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(x)
        leaves = moe.sparse(cfg, 16, 2, moe.ExpertDims.of(cfg), 16, routing=Routing.worst)
        assert sum(kept.values()) == sum(c.saved for _, c in leaves), (E, K, norm, aux, router)
        # the product f * P keeps f for P's gradient: E counts at the scores' width
        assert dict(leaves).get("aux_loss", moe.Cost()).saved == (E * (4 if router else 2) if aux else 0)


def test_layer_groups_are_counted_not_listed() -> None:
    """The (attention kind, sparse) counts equal the per-layer list for small stacks, and a
    billion-layer mixture of experts is counted without building that list."""
    from collections import Counter

    from costmodel.spec import spec_from_dict

    base = {"name": "m", "d_model": 16, "n_heads": 2, "vocab_size": 32, "max_seq_len": 64, "norm": "rmsnorm",
            "position": "rope", "window": 4}
    for n_layers, pattern, rule in ((7, ["local", "global"], {"first_k_dense": 2, "moe_every": 3}),
                                   (12, ["local", "local", "global"], {"moe_every": 2}),
                                   (5, ["global"], {"moe_layers": [1, 4]}),
                                   (9, ["local", "global"], {"first_k_dense": 1})):
        pattern = pattern if "local" in pattern else ["global"]
        data = {**base, "n_layers": n_layers, "layer_pattern": pattern,
                "ffn": {"kind": "moe", "activation": "swiglu", "n_experts": 4, "top_k": 2, "d_ff_expert": 8,
                        "d_ff": 16, **rule}}
        if "local" not in pattern:
            data.pop("window")
        spec = spec_from_dict(data)
        listed = Counter(zip(spec.layer_kinds(), spec.sparse_layers(), strict=True))
        assert spec.layer_group_counts() == dict(listed), (n_layers, pattern, rule)
    big = spec_from_dict({**base, "n_layers": 10**9, "layer_pattern": ["local", "global"],
                          "ffn": {"kind": "moe", "activation": "swiglu", "n_experts": 4, "top_k": 2,
                                  "d_ff_expert": 8, "d_ff": 16, "first_k_dense": 3, "moe_every": 2}})
    counts = big.layer_group_counts()
    assert sum(counts.values()) == 10**9
    assert sum(c for (_, sparse), c in counts.items() if sparse) == (10**9 - 3) // 2
