"""Korthikanti et al. 2022 on DGX A100: Table 5's seconds per iteration and Figure 1's GiB per GPU
beside ours. The bounds below are the errors this model achieves (docs/parallel.md, "Checked
against Megatron-LM"), so that a change for the worse fails; the issue's targets are stricter
for time (3.5% average, 8% worst) and are reported, not claimed. Every time is too fast by
10-17% (the A100 compute efficiencies are best-case microbenchmarks, one point each; the
tensor-parallel collectives are NCCL as measured on 8 A100s since issue 21), while the speedup
of selective recompute + SP over full recompute, which the efficiencies mostly cancel out of,
is within 5% of the paper's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from costmodel.parallel.validation import PAPER, compare_all

KERNELS = Path(__file__).resolve().parent.parent / "specs" / "kernels" / "a100-80gb" / "collectives.json"


@pytest.fixture(scope="module")
def comparisons():
    return compare_all()


def test_the_four_models_and_their_layouts(comparisons):
    """Table 3's layouts as run: TP 8 everywhere, N = TP x PP x DP with DP = 1 for all four."""
    for c in comparisons:
        lo = c.full.layout
        assert (lo.tp, lo.pp, lo.dp, lo.gpus) == (c.paper.tp, c.paper.pp, 1, c.paper.gpus)
        assert lo.micro_batches == c.paper.global_batch // c.paper.micro_batch


def test_activation_memory_matches_figure_1(comparisons):
    """The first stage's layers' activations, no recompute or SP and SP + selective recompute, from
    the memory model's exact count: Korthikanti's plus the LayerNorms' statistics (16sb a layer)."""
    for c in comparisons:
        e = c.errors()
        assert 0 <= e["activations"] < 0.001, c.paper.spec
        assert abs(e["activations_sp_selective"]) < 0.001, c.paper.spec


def test_parameters_and_optimizer_match_figure_1(comparisons):
    """18 bytes per parameter of the first stage's layers (exact count, biases and norms included)."""
    for c in comparisons:
        assert abs(c.errors()["params_optimizer"]) < 0.002, c.paper.spec


def test_step_times_against_table_5(comparisons):
    errors = [abs(c.errors()[k]) for c in comparisons for k in ("full_s", "selective_sp_s")]
    assert len(errors) == 2 * len(PAPER)
    # achieved: 9.1% (14.2% before issue 21; 13.0% with the TP collectives NCCL's measured times,
    # 9.1% with the A100's GEMMs off the measured per-shape table too)
    assert sum(errors) / len(errors) < 0.095
    assert max(errors) < 0.145  # achieved: 13.9% (530B, selective + SP; 18.7% before issue 21)
    assert all(c.errors()[k] < 0 for c in comparisons for k in ("full_s", "selective_sp_s"))  # all too fast


def test_the_speedup_of_selective_recompute_with_sp(comparisons):
    """Table 5's full-recompute time over selective + SP (1.29-1.32): ours 1.32-1.35, within 5%
    (achieved +0.7% at 1T to +3.7% at 530B: the replicated norms and dropout of full recompute
    are charged the time model's backward = 2 x forward bytes, where their kernels move less)."""
    for c in comparisons:
        ours = c.full.step_time_s / c.selective_sp.step_time_s
        paper = c.paper.full_s / c.paper.selective_sp_s
        assert abs(ours / paper - 1) < 0.05, c.paper.spec


def test_full_recompute_is_slower_than_selective_with_sp(comparisons):
    """The paper's point: selective recompute + SP beats full recompute by 29-32% (Table 5)."""
    for c in comparisons:
        assert c.full.step_time_s > 1.2 * c.selective_sp.step_time_s
        assert c.none.fits is False and c.full.fits and c.selective_sp.fits  # why recompute at all


def test_the_tensor_parallel_collectives_are_nccls_measured_times(comparisons):
    """Every TP group of Table 5's runs is the 8 GPUs of one DGX A100: its collectives read NCCL
    2.27.3 as measured there (specs/kernels/a100-80gb/collectives.json), not the α-β model. 22B's
    SP all-gather of b s h = 4 x 2048 x 6144 fp16 (96 MiB) sits 0.585 of the way from 64 to 128
    MiB in log size: the file's two times, log-log."""
    for c in comparisons:
        for st in (c.full, c.selective_sp):
            for key, e in st.by_collective().items():
                if key.startswith("tp/"):
                    assert e["link"] == "intra_node" and e["basis"] in ("measured", "interpolated"), key
    table = next(t for t in json.loads(KERNELS.read_text())["tables"] if t["kind"] == "all_gather")
    sizes, times = table["axes"]["bytes"], table["time_s"]
    i = table["axes"]["gpus"].index(8) * len(sizes) + sizes.index(2**26)
    w = math.log(1.5) / math.log(2)
    ag = comparisons[0].selective_sp.by_collective()["tp/all_gather"]
    assert ag["time_s"] / ag["calls"] == pytest.approx(times[i] ** (1 - w) * times[i + 1] ** w)


def test_at_bekmans_gemm_level_table_5_would_be_met(monkeypatch):
    """docs/parallel.md's sensitivity, not applied: the A100's measured GEMM table scaled to the
    level of Bekman's maximum achievable matmul FLOPS (267.9 TFLOP/s at the best shape, where the
    collection reaches 299.3) gives mean |error| 1.6%, worst 5.3%: the remaining error is the
    GEMMs' level."""
    import costmodel.devices.hardware as hardware
    from costmodel.devices.efficiency import MatmulTable
    from costmodel.parallel.validation import compare

    measured = hardware.with_kernels

    def at_bekmans(hw):
        hw = measured(hw)
        if hw.name != "a100-80gb":
            return hw
        e = hw.efficiency
        mm = {d: MatmulTable.model_construct(M=t.M, N=t.N, K=t.K, efficiency=[
            [[x * 267.9 / 299.3 for x in row] for row in plane] for plane in t.efficiency])
            for d, t in e.matmul.items()}
        return hw.model_copy(update={"efficiency": e.model_copy(update={"matmul": mm})})

    monkeypatch.setattr(hardware, "with_kernels", at_bekmans)
    hardware._load_hardware_kept.cache_clear()  # load_hardware keeps profiles: read them scaled
    try:
        errors = [abs(c.errors()[k]) for c in (compare(m) for m in PAPER)
                  for k in ("full_s", "selective_sp_s")]
    finally:
        hardware._load_hardware_kept.cache_clear()  # and nobody after this test reads them so
    assert sum(errors) / len(errors) == pytest.approx(0.016, abs=0.002)
    assert max(errors) == pytest.approx(0.053, abs=0.002)


# --- Dubey et al. 2024, Table 4: Llama 3 405B on H100 ---------------------------------------------


@pytest.fixture(scope="module")
def production():
    from costmodel.parallel.validation import LLAMA3, production_step
    return [(r, production_step(r)) for r in LLAMA3]


def test_table_4s_layouts_as_the_paper_gives_them(production):
    """GPUs = TP x CP x PP x DP; 16M tokens a step (Table 4's "Tokens/Batch"); one layer fewer
    on the first and the last of the 16 stages (section 3.3.2)."""
    from costmodel.parallel.validation import LLAMA3
    assert [(r.gpus, r.tp, r.cp, r.pp, r.dp, r.seq) for r in LLAMA3] == [
        (8192, 8, 1, 16, 64, 8192), (16384, 8, 1, 16, 128, 8192), (16384, 8, 16, 16, 8, 131072)]
    for r, st in production:
        assert st.layout.gpus == r.gpus
        assert st.tokens == 16 * 2**20
        assert "stages of 7/" + "8/" * 14 + "7 layers" in st.notes[0]
        assert st.layout.recompute.value == "none"  # "without activation checkpointing"


def test_table_4_against_this_model(production):
    """The errors docs/parallel.md reports ("Checked against Llama 3 405B on H100"): every row too
    fast; at 8K by 25-29% under either attention-FLOP convention, at 131K by 10% (causal) to 36%
    (dense). Bounds around today's figures, so that a change in either direction is seen."""
    from costmodel.parallel.validation import causal_flops
    for r, st in production:
        dense, causal = r.error(st, st.model_flops), r.error(st, causal_flops(st))
        if r.cp == 1:
            assert -0.32 < dense < -0.25 and -0.29 < causal < -0.22
        else:
            assert -0.39 < dense < -0.32 and -0.14 < causal < -0.07
        # what the paper ran in 80 GB fits: one-kernel norms and SwiGLU, FSDP's shards (72 GiB)
        assert st.fits and 70 < st.memory.total / 2**30 < 75


def test_docs_quote_table_4s_comparison_as_the_code_prints_it():
    from costmodel.parallel.validation import production_markdown
    doc = (Path(__file__).resolve().parent.parent / "docs" / "parallel.md").read_text()
    assert production_markdown() in doc


# --- MosaicML's MPT benchmarks on H100 (llm-foundry) -------------------------------------------------


def test_the_mpt_models_are_the_benchmarks_own():
    """Our exact count of each MPT spec equals the table's NumParams (the yaml's sizes with
    MPTConfig's defaults: biases, LayerNorm bias, learned positions, tied embeddings)."""
    from costmodel.analysis import analyze
    from costmodel.parallel.validation import FOUNDRY
    for r in FOUNDRY:
        assert analyze(r.spec(), "train", batch=1, seq=r.seq).total().params == r.num_params


def test_mpt_on_h100_against_this_model():
    """docs/parallel.md ("Checked against MosaicML's MPT runs"): every step too fast, 26-43%;
    bounds around today's figures; the docs quote the table as the code prints it."""
    from costmodel.parallel.validation import FOUNDRY, foundry_markdown, foundry_step
    for r in FOUNDRY:
        assert -0.46 < r.error(foundry_step(r)) < -0.23
    doc = (Path(__file__).resolve().parent.parent / "docs" / "parallel.md").read_text()
    assert foundry_markdown() in doc


# --- Megatron-Core's weak scaling on H100 (Megatron-LM README) --------------------------------------


@pytest.fixture(scope="module")
def mcore():
    from costmodel.parallel.validation import MCORE, mcore_step
    return [(r, mcore_step(r)) for r in MCORE]


def test_the_weak_scaling_models_are_the_tables_own():
    """The README's sizes are our exact counts rounded (Megatron's GPT: biases, learned positions,
    untied embeddings over 131,072 tokens), the first truncated (1.754B, "1.7B"); GPUs = TP x PP x 48."""
    from costmodel.analysis import analyze
    from costmodel.parallel.validation import MCORE, SCALING_SEQ
    for r in MCORE:
        params = analyze(r.spec(), "train", batch=1, seq=SCALING_SEQ).total().params / 1e9
        assert (int(params * 10) / 10 if params < 2 else round(params, 1 if params < 10 else 0)) == r.params_b
        assert r.gpus == r.tp * r.pp * 48


def test_megatrons_flop_count_is_our_exact_matmul_count():
    """The FLOPs the table's rate is over (Megatron-LM's formula) are our exact count of the same
    step's matmuls, the scores counted whole (its formula leaves out norms, biases and the softmax):
    the step times the rows convert to are the table's own."""
    from costmodel.analysis import analyze
    from costmodel.parallel.validation import MCORE, SCALING_SEQ
    for r in (MCORE[0], MCORE[-1]):
        a = analyze(r.spec(), "train", batch=r.global_batch, seq=SCALING_SEQ).total()
        assert a.flops_matmul == pytest.approx(r.paper_flops(), rel=1e-12)


def test_megatron_core_weak_scaling_against_this_model(mcore):
    """docs/parallel.md ("Checked against Megatron-Core's weak scaling on H100"): the two rows that
    are compute alone (TP 1-2, no pipeline, DP hidden) 33-38% too fast, as the MPT rows of the same
    sizes; every row between -38% and +8%; it all fits; the docs quote the table as the code prints it."""
    from costmodel.parallel.validation import mcore_markdown
    errs = [r.error(st) for r, st in mcore]
    assert all(-0.40 < e < -0.30 for e in errs[:2])
    assert all(-0.40 < e < 0.10 for e in errs)
    assert all(st.fits for _, st in mcore)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "parallel.md").read_text()
    assert mcore_markdown() in doc


def test_the_step_checks_train_and_plan_print_are_the_checks_figures(comparisons, production, mcore):
    """``parallel.checked.STEP_CHECKS`` (the line under `train` and `plan`) holds the range of the
    checks above: A100 Korthikanti's eight steps and Narayanan's ten (every one too fast); H100
    Table 4's 8K rows under both FLOP conventions, the six MPT rows and Megatron-Core's nine."""
    from costmodel.parallel.checked import STEP_CHECKS
    from costmodel.parallel.validation import FOUNDRY, NARAYANAN, causal_flops, foundry_step, weak_step
    a100 = [e for c in comparisons for e in (c.errors()["full_s"], c.errors()["selective_sp_s"])]
    a100 += [weak_step(w).step_time_s / w.paper_s - 1 for w in NARAYANAN]
    h100 = [r.error(st, flops) for r, st in production if r.cp == 1 for flops in (st.model_flops,
                                                                                   causal_flops(st))]
    h100 += [r.error(foundry_step(r)) for r in FOUNDRY]
    h100 += [r.error(st) for r, st in mcore]
    assert all(e < 0 for e in a100)
    for device, errs in (("a100-80gb", a100), ("h100-sxm", h100)):
        check = STEP_CHECKS[device]
        assert check.low == pytest.approx(min(errs), abs=5e-4)
        assert check.high == pytest.approx(max(errs), abs=5e-4)
