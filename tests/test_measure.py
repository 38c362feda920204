"""costmodel measure and calibrate: counters on hand-derived cases, the reference model, the
commands of docs/measure.md, "Commands", and bad input."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="measuring needs the [measure] extra (torch)")

import torch  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from costmodel import catalog  # noqa: E402
from costmodel.catalog import load_spec
from costmodel.cli import app  # noqa: E402
from costmodel.devices.hardware import load_hardware  # noqa: E402
from costmodel.measure.counters import ByteCounter, Counts, MetaShapes  # noqa: E402
from costmodel.measure.reference import build  # noqa: E402
from costmodel.measure.run import keep_layers, measure  # noqa: E402
from costmodel.spec import LayerKind, parse_spec  # noqa: E402

runner = CliRunner()

TINY = """
name: tiny
d_model: 8
n_layers: 2
n_heads: 2
d_ff: 16
vocab_size: 10
max_seq_len: 16
norm: layernorm
activation: gelu
position: learned
bias: true
tied_embeddings: true
"""


@pytest.fixture(autouse=True)
def hardware_dir(tmp_path, monkeypatch):
    """Profiles written by calibrate go to a temporary folder, never the user's."""
    monkeypatch.setenv("COSTMODEL_HARDWARE_DIR", str(tmp_path / "hardware"))
    return tmp_path / "hardware"


# --- counters -------------------------------------------------------------------------------


def _bytes(fn) -> int:
    from torch.utils.module_tracker import ModuleTracker

    with ModuleTracker() as tracker, ByteCounter(tracker) as counter:
        fn()
    return counter.total


def test_bytes_of_an_add_are_two_reads_and_a_write() -> None:
    """(4, 8) fp32 + (4, 8) fp32: 3 x 128 bytes."""
    a, b = torch.ones(4, 8), torch.ones(4, 8)
    assert _bytes(lambda: a + b) == 3 * 4 * 8 * 4


def test_views_move_nothing_and_broadcasts_are_read_once() -> None:
    """A transpose is free; adding a (8,) row to (4, 8) reads the row once: 128 + 32 + 128."""
    a, row = torch.ones(4, 8), torch.ones(8)
    assert _bytes(lambda: a.t()) == 0
    assert _bytes(lambda: a + row) == 128 + 32 + 128


def test_in_place_copy_and_gathers_move_what_they_touch() -> None:
    """copy_ reads the source and writes the destination once; an embedding lookup reads the
    ids and the rows it gathers, not its table; index_copy_ writes only the copied rows."""
    dst, src = torch.zeros(4, 8), torch.ones(4, 8)
    assert _bytes(lambda: dst.copy_(src)) == 2 * 128
    table, ids = torch.ones(1000, 8), torch.tensor([1, 2, 3])
    assert _bytes(lambda: torch.nn.functional.embedding(ids, table)) == 3 * 8 + 2 * 3 * 8 * 4
    big, rows = torch.zeros(1000, 8), torch.ones(3, 8)
    assert _bytes(lambda: big.index_copy_(0, ids, rows)) == 3 * 8 + 2 * 3 * 8 * 4


def test_matmul_flops_are_2mkn_forward_and_twice_that_backward() -> None:
    """(5 x 6) @ (6 x 7): 2*5*6*7 forward; backward adds two matmuls of the same size."""
    x = torch.ones(5, 6, requires_grad=True)
    w = torch.ones(6, 7, requires_grad=True)
    with Counts(count_bytes=False) as c:
        (x @ w).sum().backward()
    assert c.total_flops == 3 * 2 * 5 * 6 * 7


def test_meta_shapes_match_torch() -> None:
    """The fast meta path returns what torch's own meta kernels return, shape and dtype."""
    a = torch.empty(2, 3, 8, device="meta", dtype=torch.bfloat16)
    w = torch.empty(8, device="meta", dtype=torch.bfloat16)
    cases = [
        lambda: a * w, lambda: a * 0.5, lambda: torch.tanh(a / 3.0), lambda: a.pow(2).mean(-1, keepdim=True),
        lambda: torch.cat((a, a), dim=-1), lambda: torch.softmax(a, dim=-1), lambda: a.float(),
        lambda: torch.nn.functional.layer_norm(a, (8,), w, w),
        lambda: torch.nn.functional.gelu(a, approximate="tanh"), lambda: a.sum((0, 2)),
    ]
    for case in cases:
        expected = case()
        with MetaShapes():
            got = case()
        assert (got.shape, got.dtype) == (expected.shape, expected.dtype)


# --- the reference model --------------------------------------------------------------------


def test_tiny_parameter_count_by_hand() -> None:
    """GPT-2 style, d=8, 2 layers, f=16, V=10, 16 positions, every bias, tied head:
    tokens 10*8 = 80, positions 16*8 = 128; per layer 600: 2 LayerNorms 2*16, q/k/v/out
    4*(64+8), up 8*16+16, down 16*8+8; final LayerNorm 16; the tied head only its bias, 10."""
    spec = parse_spec(TINY)
    assert sum(p.numel() for p in build(spec).parameters()) == 80 + 128 + 2 * 600 + 16 + 10


def test_keep_layers_keeps_the_first_layers_and_their_kinds() -> None:
    """Gemma 3 cut to 2 layers: two local layers; NoPE and the window follow what is left."""
    spec = keep_layers(load_spec(catalog.specs_dir() / "gemma-3-27b.yaml"), 2)
    assert spec.n_layers == 2
    assert spec.layer_kinds() == [LayerKind.local, LayerKind.local]
    cr = keep_layers(load_spec(catalog.specs_dir() / "command-r7b.yaml"), 3)
    assert cr.layer_kinds() == [LayerKind.local] * 3 and not cr.global_nope
    t5 = keep_layers(load_spec(catalog.specs_dir() / "t5-11b.yaml"), 1)
    assert (t5.n_encoder_layers, t5.n_decoder_layers) == (1, 1)


def test_decode_kv_cache_is_what_the_step_holds() -> None:
    """Llama 2 7B decode, batch 2, 99 cached tokens: 2 (K, V) * 32 layers * 2 * 100 * 32 * 128 * 2 bytes."""
    spec = load_spec(catalog.specs_dir() / "llama-2-7b.yaml")
    m = measure(spec, "decode", batch=2, seq=99, count_bytes=False)
    assert m.get("kv_cache").measured == 2 * 32 * 2 * 100 * 32 * 128 * 2


def test_a_rolling_window_cache_keeps_w_tokens() -> None:
    """Mistral 7B (w = 4096) decoding at C = 5001 holds 4096 tokens per layer."""
    spec = load_spec(catalog.specs_dir() / "mistral-7b.yaml")
    m = measure(spec, "decode", batch=1, seq=5000, count_bytes=False)
    assert m.get("kv_cache").measured == 2 * 32 * 4096 * 8 * 128 * 2


def test_encoder_decoder_decode_does_not_run_the_encoder() -> None:
    """T5 decode (S_e = 0): no encoder op runs, and the formulas charge the encoder nothing
    (tests/test_measure_formulas.py)."""
    spec = load_spec(catalog.specs_dir() / "t5-11b.yaml")
    m = measure(spec, "decode", batch=2, seq=100, enc_seq=50)
    encoder = [r for r in m.components if r.path.startswith("encoder")]
    assert encoder and all(r.bytes == (0, 0) and r.flops_matmul == (0, 0) for r in encoder)


def test_cpu_run_counts_and_times() -> None:
    """A real run on the CPU gives the same exact counts as the meta device, and a time."""
    spec = parse_spec(TINY)
    m = measure(spec, "train", batch=2, seq=5, dtype="fp32", device="cpu", repeats=2, warmup=0)
    assert m.ok and len(m.times_s) == 2 and all(t > 0 for t in m.times_s)


# --- commands -------------------------------------------------------------------------------


def test_readme_measure_decode() -> None:
    result = runner.invoke(app, ["measure", "llama-2-7b", "--phase", "decode", "--batch", "8",
                                 "--seq", "4095"])
    assert result.exit_code == 0, result.output
    assert "decode: formula vs measured" in result.output
    assert result.output.count("equal") == 3  # parameters, matmul FLOPs, KV cache


@pytest.mark.slow
def test_readme_measure_all_phases_json_check() -> None:
    result = runner.invoke(app, ["measure", "specs/gemma-2-9b.yaml", "--seq", "5000", "--check",
                                 "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] and set(data["phases"]) == {"train", "prefill", "decode"}
    decode = data["phases"]["decode"]["quantities"]
    assert decode["flops_matmul"]["formula"] == decode["flops_matmul"]["measured"]


@pytest.mark.slow
def test_readme_measure_components() -> None:
    result = runner.invoke(app, ["measure", "t5-11b", "-p", "prefill", "-s", "512", "--components"])
    assert result.exit_code == 0, result.output
    assert "decoder/layers/cross_attention/q" in result.output and "DIFFERS" not in result.output


@pytest.mark.slow
def test_readme_calibrate_then_measure_on_cpu(hardware_dir, monkeypatch) -> None:
    from costmodel.measure import calibrate

    # The path, not the figures (bench/time_validation.py times those): a grid without its
    # largest products (1024 x 16384 x 4096 takes 0.7 s a call here), each point timed for a
    # tenth of calibrate's 0.1 s; a few seconds where the whole grid takes a minute.
    monkeypatch.setitem(calibrate.GRID["cpu"], "run_s", 0.01)
    monkeypatch.setitem(calibrate.GRID["cpu"], "N", [64, 1024, 4096])
    monkeypatch.setitem(calibrate.GRID["cpu"], "K", [16, 256, 1024])
    cal = runner.invoke(app, ["calibrate", "--device", "cpu", "--dtype", "fp32"])
    assert cal.exit_code == 0, cal.output
    assert "peak fp32" in cal.output and "saved to" in cal.output and "matmul fp32 M=1" in cal.output
    profile = load_hardware("local")
    assert profile.measured and profile.peak_flops["fp32"] > 0 and profile.memory_bandwidth > 0
    assert profile.date and (hardware_dir / "local.yaml").exists()
    # the efficiency tables, measured over the whole grid, including the skinny decode shapes
    tables = profile.efficiency
    assert tables is not None and tables.matmul["fp32"].M[0] == 1 and tables.floor_s > 0
    assert len(tables.memory.bytes) == 9
    # under the default allocator (cache) a fresh block is a reused one: no first-touch table
    # (under system one is measured, and page faults cost: tests/test_allocator.py)
    assert tables.first_touch is None and "fresh output" not in cal.output
    assert tables.allocator == "cache" and "allocator cache" in tables.source
    analyzed = runner.invoke(app, ["analyze", "llama-3-8b", "--hardware", "local", "--dtype", "fp32"])
    assert (analyzed.exit_code == 0 and "predicted time " in analyzed.output
            and "no efficiency" not in analyzed.output)
    result = runner.invoke(app, ["measure", "gpt2-small", "--device", "cpu", "--layers", "1", "-p", "prefill",
                                 "-s", "32", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    assert "time (predicted vs median)" in result.output and "time (roofline vs median)" in result.output
    assert "roofline on local" in result.output
    assert result.output.count("equal") == 3
    assert "timed with the allocator" not in result.output  # measure took the profile's setting


def test_check_fails_when_a_formula_is_wrong(monkeypatch) -> None:
    """--check exits 1 when the formulas and the run disagree (here: a planted FFN bug)."""
    from costmodel.components import ffn

    def wrong_linear(tokens, d_in, d_out, bias, p, **kwargs):
        cost = ffn_linear(tokens, d_in, d_out, bias, p, **kwargs)
        return type(cost)(**{**cost.__dict__, "matmul": 2 * cost.matmul})

    ffn_linear = ffn.linear
    monkeypatch.setattr(ffn, "linear", wrong_linear)
    result = runner.invoke(app, ["measure", "gpt2-small", "-p", "prefill", "-s", "8", "--check"])
    assert result.exit_code == 1
    assert "DIFFERS" in result.output


@pytest.mark.parametrize("args, message", [
    (["measure", "gpt2-small", "--device", "cuda"], "device: CUDA is not available"),
    (["measure", "gpt2-small", "--dtype", "fp8"], "dtype: fp8 cannot be measured"),
    (["measure", "no-such-spec"], "no-such-spec"),
    (["measure", "gpt2-small", "--seq", "5000", "-p", "prefill"], "beyond the 1024 learned positions"),
    (["calibrate", "--device", "meta"], "the meta device runs nothing"),
    (["calibrate", "--device", "cuda"], "device: CUDA is not available"),
    (["calibrate", "--name", "../x"], "name:"),
])
def test_bad_input_is_one_line_and_exit_2(args, message) -> None:
    if args[-1] == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


def test_calibration_weights_are_disjoint_and_outgrow_the_cache() -> None:
    """The matmul grid's weights: disjoint slices of one pool (so successive calls read memory,
    not the cache), stored (N, K) and used as W^T; a product larger than the pool gets its own."""
    import torch

    from costmodel.measure.calibrate import POOL_BYTES, weight_views

    pool = torch.zeros(POOL_BYTES["cpu"] // 4)
    views = weight_views(pool, 2, 64, 16)
    assert len(views) == 64 and all(v.shape == (2, 16, 64) and v.stride() == (1024, 1, 16) for v in views)
    starts = [v.storage_offset() for v in views]
    assert starts == [i * 2 * 64 * 16 for i in range(64)]
    big = weight_views(pool, 1, 4096, 4096)  # 64 MiB: two of them in the 128 MiB pool
    assert len(big) == 2 and big[1].storage_offset() == 4096 * 4096
    alone = weight_views(torch.zeros(10), 1, 4, 4)
    assert len(alone) == 1 and alone[0].untyped_storage().data_ptr() != pool.untyped_storage().data_ptr()
