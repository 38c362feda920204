"""Issue 21, items 3 and 4: the kernels every command assumes (``--kernels``), chosen by the
device (``runtime.kernels``): flash attention and absorbed latent attention on a GPU profile,
eager where the reference is torch eager; training as large runs train (fused attention keeps no
score matrices), Korthikanti et al. 2022's Megatron-LM kept as ``megatron-2022``. Expected
bytes are hand-derived from the element formulas (Dao et al. 2022 for what flash keeps)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from costmodel import catalog
from costmodel.cli import app
from costmodel.cli.app import KernelsName
from costmodel.devices.hardware import load_hardware
from costmodel.parallel.cluster import load_cluster
from costmodel.parallel.device import MEGATRON_KERNELS
from costmodel.parallel.layout import Layout, Recompute
from costmodel.parallel.plan import layouts
from costmodel.parallel.step import StepModel
from costmodel.runtime import kernels
from costmodel.runtime.memory import Run, memory
from costmodel.runtime.timing import Kernels
from tests.helpers import calibrated_profile

runner = CliRunner()
GPUS = ("a100-80gb", "h100-sxm", "h200", "b200", "gb200", "l4", "rtx-4090", "mi300x", "mi325x")


def test_the_option_lists_the_librarys_names() -> None:
    assert [k.value for k in KernelsName] == list(kernels.KERNELS) == ["eager", "flash", "fused",
                                                                       "megatron-2022"]


def test_what_each_name_fuses() -> None:
    """Each name's flags as runtime.timing.Kernels defines them (its docstring)."""
    k = kernels.KERNELS
    assert k["eager"] == Kernels()
    assert k["flash"] == Kernels(flash_attention=True, fused_bias_dropout_add=True)
    assert k["fused"] == Kernels(flash_attention=True, fused=True, fused_bias_dropout_add=True)
    assert k["megatron-2022"] == Kernels(fused_softmax=True, fused_bias_dropout_add=True) == MEGATRON_KERNELS


@pytest.mark.parametrize("name", GPUS)
def test_a_gpu_profile_runs_flash_and_absorbed_latent_attention(name: str) -> None:
    hw = load_hardware(name)
    assert kernels.default_kernels(hw, "serve") == kernels.default_kernels(hw, "train") == "flash"
    assert kernels.default_mla(hw) == "absorbed"
    assert kernels.default_kernels(hw, "measure") == "eager"  # the PyTorch reference is eager


def test_no_device_or_a_calibrated_one_is_eager() -> None:
    hw = calibrated_profile()  # measured by `costmodel calibrate`: torch eager ops
    for device in (None, hw):
        assert kernels.default_kernels(device, "serve") == kernels.default_kernels(device, "train") == "eager"
        assert kernels.default_mla(device) == "naive"


def test_a_bad_name_is_one_line_naming_the_option() -> None:
    with pytest.raises(Exception, match=r"^--kernels: unknown kernels 'flsh'"):
        kernels.resolve("flsh", None)
    result = runner.invoke(app, ["inference", "gpt2-small", "--hardware", "l4", "--kernels", "flsh"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: --kernels: ")
    result = runner.invoke(app, ["analyze", "gpt2-small", "--kernels", "flash"])
    assert result.exit_code == 2 and result.stderr == "error: --kernels: the kernels a time assumes; give " \
                                                      "--hardware too\n"


# --- serving commands -------------------------------------------------------------------------------


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, args)
    # a memory that does not fit prints its JSON in full and exits 1 (issue 23)
    assert result.exit_code == 0 or (result.exit_code == 1 and "does not fit" in result.stderr), result.output
    return json.loads(result.stdout)


def test_inference_says_its_kernels_in_json_and_table() -> None:
    base = ["inference", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1,8", "--output-tokens", "16"]
    default = _json([*base, "-f", "json"])
    assert default["kernels"] == {"name": "flash", "flash_attention": True, "fused": False,
                                  "fused_softmax": False, "fused_bias_dropout_add": True, "default": True}
    eager = _json([*base, "--kernels", "eager", "-f", "json"])
    assert eager["kernels"]["name"] == "eager" and eager["kernels"]["default"] is False
    # flash never writes the S x S scores: the prefill (TTFT) is faster
    assert default["batches"][1]["ttft_s"] < eager["batches"][1]["ttft_s"]
    table = runner.invoke(app, base).stdout
    assert re.search(r"kernels: flash, the default on h100-sxm", table)


@pytest.mark.parametrize("old", [["--flash-attention", "--fused"], ["--fused", "--flash-attention"]])
def test_the_old_flags_are_the_fused_kernels_in_either_order(old: list[str]) -> None:
    base = ["inference", "gpt2-small", "--hardware", "l4", "--seq", "64", "--output-tokens", "4", "-f",
            "json"]
    before = runner.invoke(app, [*base, *old])
    after = runner.invoke(app, [*base, "--kernels", "fused"])
    assert before.exit_code == after.exit_code == 0
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert before.stderr.count("is deprecated") == 2


def test_analyze_on_a_gpu_times_flash_and_runs_latent_attention_absorbed() -> None:
    data = _json(["analyze", "deepseek-v2-lite", "--hardware", "h100-sxm", "-f", "json"])
    phases = data["phases"]
    assert phases["decode"]["time"]["kernels"]["name"] == "flash"
    assert phases["decode"]["mla_convention"] == phases["prefill"]["mla_convention"] == "absorbed"
    assert phases["train"]["mla_convention"] == "naive"  # training learns kv_b: the naive pass
    plain = _json(["analyze", "deepseek-v2-lite", "-f", "json"])["phases"]
    assert plain["decode"]["mla_convention"] == "naive" and "time" not in plain["decode"]
    asked = _json(["analyze", "deepseek-v2-lite", "--hardware", "h100-sxm", "--mla", "naive", "--kernels",
                   "eager", "-p", "decode", "-f", "json"])["phases"]["decode"]
    assert asked["mla_convention"] == "naive" and asked["time"]["kernels"]["default"] is False


def test_serve_says_its_kernels_and_convention() -> None:
    data = _json(["serve", "deepseek-v2-lite", "--cluster", "dgx-h100", "--tp", "1", "-f", "json"])
    r = data["results"][0]
    assert r["kernels"]["name"] == "flash" and r["kernels"]["default"] and r["mla_convention"] == "absorbed"


# --- memory -------------------------------------------------------------------------------------------


def test_flash_keeps_no_scores_hand_derived() -> None:
    """llama-2-7b, B 1, S 2048, training: eager keeps every layer's softmax output (h S^2 x 2 bytes,
    no attention dropout) and one causal mask (S^2 bools); flash keeps each layer's output and
    fp32 log-sum-exp instead (h S (2 d_h + 4)). Flash's other components are one kernel each
    (``Dims.one_kernel``): each RMSNorm (two a layer and the final one) keeps its bf16 input where
    torch's ``rms_norm`` keeps an fp32 copy and the fp32 normalised x (4 + 4 bytes, less 2: 6 S d);
    SwiGLU keeps gate and up, not SiLU(gate) as well (2 S f a layer)."""
    spec = catalog.load("llama-2-7b")
    L, h, S, d_h, d, f = 32, 32, 2048, 128, 4096, 11008
    eager = memory(spec, "train", 1, S, run=Run()).total("activations")
    flash = memory(spec, "train", 1, S, run=Run(flash=True)).total("activations")
    scores = L * h * S * S * 2 + S * S - L * h * S * (2 * d_h + 4)
    one_kernel = (2 * L + 1) * 6 * S * d + L * 2 * S * f
    assert scores == 8_048_869_376 and one_kernel == 4_714_397_696
    assert eager - flash == scores + one_kernel


def test_memory_follows_the_device() -> None:
    base = ["memory", "llama-2-7b", "-f", "json"]
    none = _json(base)
    gpu = _json([*base, "--hardware", "h100-sxm"])
    assert none["kernels"]["name"] == "eager" and gpu["kernels"]["name"] == "flash"
    # the scores and the one-kernel norms and SwiGLU (test_flash_keeps_no_scores_hand_derived)
    assert none["memory"]["activations"] - gpu["memory"]["activations"] == 8_048_869_376 + 4_714_397_696
    asked = _json([*base, "--hardware", "h100-sxm", "--kernels", "eager"])
    assert asked["memory"]["activations"] == none["memory"]["activations"] and not asked["kernels"]["default"]


# --- training (item 4) ----------------------------------------------------------------------------------

H100 = load_cluster("dgx-h100")
#: Llama 3 405B's layout at 8K (Dubey et al. 2024, Table 4: TP 8, CP 1, PP 16, seq 8192), on one
#: data-parallel rank: 16 micro-batches of 1 (what the pipeline keeps in flight, 16 at most).
LLAMA_405B = Layout(16, 1, tp=8, pp=16, dp=1, sequence_parallel=True)


@pytest.fixture(scope="module")
def llama405b():
    spec = catalog.load("llama-3.1-405b")
    return (StepModel(spec, H100, seq=8192).step(LLAMA_405B),
            StepModel(spec, H100, seq=8192, kernels=MEGATRON_KERNELS).step(LLAMA_405B))


def test_llama_405b_at_8k_keeps_no_score_matrices(llama405b) -> None:
    """126 layers on 16 stages: 7/8/.../8/7, stage 1 the fullest (8 layers, 15 micro-batches in
    flight). 2022 Megatron keeps each layer's softmax output: 128/8 heads x 8192^2 x 2 bytes per
    micro-batch (SP splits the whole layer's count over the 8 ranks) and one causal mask (8192^2
    bools); flash keeps the output and log-sum-exp, 128/8 x 8192 x (2 x 128 + 4) bytes, and its
    other components are one kernel each: two RMSNorms keep their bf16 input, not an fp32 copy
    and the fp32 normalised x (6 S d fewer bytes each), SwiGLU gate and up without SiLU(gate)
    (2 S f), over the 8 ranks of SP."""
    flash, megatron = llama405b
    assert flash.kernels == kernels.KERNELS["flash"] and megatron.kernels == MEGATRON_KERNELS
    S, d, f = 8192, 16384, 53248
    per_layer = 128 * S * S * 2 // 8 - 128 * S * (2 * 128 + 4) // 8
    one_kernel = (2 * 6 * S * d + 2 * S * f) // 8
    assert flash.per_gpu.stage == megatron.per_gpu.stage == "stage 1"
    saved = 8 * 15 * (per_layer + one_kernel) + S * S
    assert megatron.per_gpu.activations - flash.per_gpu.activations == saved
    # what the issue read (388 GiB); with fused attention 117 GiB: still over 80 GB without recompute
    # on one data-parallel rank (ZeRO shards nothing)
    assert megatron.per_gpu.total / 2**30 == pytest.approx(387.7, abs=0.05)
    assert flash.per_gpu.total / 2**30 == pytest.approx(116.8, abs=0.05)
    assert not flash.fits and flash.step_time_s < megatron.step_time_s  # no S^2 traffic either


def test_train_prints_the_kernels_and_exits_1_when_it_does_not_fit() -> None:
    args = ["train", "llama-3.1-405b", "--cluster", "dgx-h100", "--gpus", "128", "--tp", "8", "--pp", "16",
            "--sp", "--seq", "8192", "-G", "16"]
    result = runner.invoke(app, [*args, "-f", "json"])
    assert result.exit_code == 1 and "does not fit" in result.stderr
    data = json.loads(result.stdout)
    assert data["kernels"]["name"] == "flash" and data["kernels"]["default"] is True
    assert data["memory"]["per_gpu"]["total"] / 2**30 == pytest.approx(116.8, abs=0.05)
    old = json.loads(runner.invoke(app, [*args, "--kernels", "megatron-2022", "-f", "json"]).stdout)
    assert old["kernels"]["name"] == "megatron-2022" and old["kernels"]["default"] is False
    assert old["memory"]["per_gpu"]["total"] / 2**30 == pytest.approx(387.7, abs=0.05)
    # full recompute fits (22.7 GiB with ZeRO-1 over Meta's 128 data-parallel ranks)
    fits = runner.invoke(app, ["train", "llama-3.1-405b", "--cluster", "dgx-h100", "--gpus", "16384", "--tp",
                               "8", "--pp", "16", "--dp", "128", "--sp", "--seq", "8192", "-G", "2048",
                               "--zero", "1", "--recompute", "full"])
    assert fits.exit_code == 0 and "kernels: flash, the default on h100-sxm" in fits.stdout


def test_selective_recompute_under_flash_replays_the_fused_core() -> None:
    """Megatron-Core's selective recompute of ``core_attn`` over a fused attention kernel: the
    core's forward runs again, and it keeps not even flash's output and log-sum-exp: llama-2-7b
    at b 1, s 2048, bf16 keeps 32 layers x 32 heads x 2048 x (128 x 2 + 4) B = 545,259,520 B less."""
    base = ["memory", "llama-2-7b", "--hardware", "h100-sxm", "-f", "json"]
    flash, selective = _json(base), _json([*base, "--recompute", "selective"])
    kept = flash["memory"]["activations"] - selective["memory"]["activations"]
    assert kept == 32 * 32 * 2048 * (128 * 2 + 4)
    model = StepModel(catalog.load("megatron-22b"), load_cluster("dgx-a100-80gb"), seq=2048, dtype="fp16")
    none, sel = (model.step(Layout(4, 4, tp=8, recompute=rc)) for rc in (Recompute.none, Recompute.selective))
    assert sel.step_time_s > none.step_time_s  # the core's forward again
    assert any(lo.recompute is Recompute.selective for lo in layouts(model, 8, 4))
    result = runner.invoke(app, ["train", "megatron-22b", "--cluster", "dgx-a100-80gb", "--gpus", "8", "--tp",
                                 "8", "-G", "4", "--recompute", "selective"])
    assert result.exit_code == 0, result.output
