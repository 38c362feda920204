"""The sweep grid (``costmodel.timing_grid.predict_grid``) gives ``timing.predict``'s time at
every point, to 1e-12, for every bundled spec and phase (training's backward products
included), every kernel option, the datasheet profiles and a calibrated-style one (a
multi-point (M, N, K) table as ``costmodel calibrate`` writes), MoE routing and MLA conventions,
windows, chunks, encoder lengths and shapes past int64. Generic on purpose: a term added to
the time model in one evaluation and not the other fails here."""

from __future__ import annotations

import functools
import itertools
import warnings

import pytest

from costmodel import catalog
from costmodel.analysis import AnalysisError, analyze, phases_of
from costmodel.devices.hardware import load_hardware
from costmodel.runtime.timing import Kernels, predict
from tests.helpers import CALIBRATE_GRID, calibrated_profile

np = pytest.importorskip("numpy")
from costmodel.runtime.timing_grid import predict_grid  # noqa: E402  (numpy first)

KERNELS = (Kernels(), Kernels(flash_attention=True), Kernels(fused=True),
           Kernels(fused_softmax=True, fused_bias_dropout_add=True), Kernels(flash_attention=True,
                                                                             fused=True))


@functools.cache
def profiles() -> dict:
    return {"h100-sxm": load_hardware("h100-sxm"), "a100-80gb": load_hardware("a100-80gb"),
            "calibrated": calibrated_profile(), "calibrated-realistic": calibrated_profile(realistic=True)}


def assert_grid_is_predict(spec, phase, batch, seq, hw, kernels, enc_seq=None, **options) -> None:
    """predict_grid over (batch, seq) broadcast equals predict(analyze(...)) at each point."""
    grid = predict_grid(spec, phase, batch, seq, hw, "bf16", kernels, enc_seq=enc_seq, **options)
    b, s = np.broadcast_arrays(batch, seq)
    e = np.broadcast_to(enc_seq, b.shape) if enc_seq is not None else None
    assert grid.shape == b.shape
    for index in np.ndindex(b.shape):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # RoPE past max_seq_len: a warning, the counts stand
            a = analyze(spec, phase, batch=int(b[index]), seq=int(s[index]),
                        enc_seq=None if e is None else int(e[index]), **options)
        want = predict(a, hw, kernels).time_s
        assert grid[index] == pytest.approx(want, rel=1e-12), (spec.name, phase, kernels, hw.name, index)


def shape_for(spec):
    """Two lengths: 3, and the largest of 9000 and the spec's positions (past every window and
    Llama 4's 8192 chunk where positions allow), for batch 1 and 6."""
    return np.array([[1, 6]]), np.array([[3], [min(9000, spec.max_seq_len - 1)]])


@pytest.mark.slow
@pytest.mark.parametrize(("name", "phase"), [(n, ph) for n in catalog.bundled_names()
                                             for ph in phases_of(catalog.load(n))])
def test_the_grid_is_predict_on_every_spec(name, phase) -> None:
    """Each profile with a kernel option, every option in turn over the specs and phases."""
    spec = catalog.load(name)
    batch, seq = shape_for(spec)
    turn = catalog.bundled_names().index(name) + ["prefill", "decode", "train"].index(phase)
    cases = zip(("calibrated", "calibrated", "h100-sxm", "a100-80gb", "calibrated-realistic"),
                (KERNELS[(turn + i) % len(KERNELS)] for i in range(5)), strict=False)
    for hw, kernels in cases:
        assert_grid_is_predict(spec, phase, batch, seq, profiles()[hw], kernels)


@pytest.mark.parametrize("name, options", [
    ("deepseek-v3", {"mla": "absorbed"}), ("deepseek-v2-lite", {"mla": "absorbed", "routing": "worst"}),
    ("mixtral-8x7b", {"routing": "worst"}), ("qwen3-30b-a3b", {"routing": "worst"})])
@pytest.mark.parametrize("phase", ["prefill", "decode", "train"])
def test_the_grid_is_predict_in_each_mla_convention_and_routing(name, options, phase) -> None:
    spec = catalog.load(name)
    batch, seq = shape_for(spec)
    for hw, kernels in itertools.product(("calibrated", "h100-sxm"), KERNELS[:2]):
        assert_grid_is_predict(spec, phase, batch, seq, profiles()[hw], kernels, **options)


def bench_grid(spec):
    """bench/time_sweep_speed.py's sweep, every fourth seq and batch: 25 seqs geometric from 512
    to 8192 (evenly spaced where positions are few) x batch 1 .. 97; most stacked products lie
    past the tables' grids, some below, as in the benchmark."""
    top = min(8192, spec.max_seq_len - 1)
    lo = min(512, top // 16)
    seq = np.unique(np.rint(np.geomspace(lo, top, 100)).astype(np.int64))
    if seq.size < 100:
        seq = np.unique(np.rint(np.linspace(lo, top, 100)).astype(np.int64))
    return np.arange(1, 101, 4)[np.newaxis, :], seq[::4, np.newaxis]


@pytest.mark.parametrize("name", ["llama-3-8b", "gemma-3-27b", "mixtral-8x7b", "deepseek-v3", "t5-11b"])
def test_the_grid_is_predict_on_the_benchmarks_sweep(name) -> None:
    """The benchmark's specs and shapes (many points per array, so the lookups take their
    gathered and separable paths), every phase and profile: predict_grid over the whole grid,
    predict at five of its points (the corners and one inside)."""
    spec = catalog.load(name)
    batch, seq = bench_grid(spec)
    points = [(0, 0), (0, -1), (-1, 0), (-1, -1), (7, 19)]
    for turn, (hw, phase) in enumerate(itertools.product(profiles(), ("decode", "prefill", "train"))):
        kernels = KERNELS[turn % 2]  # with and without flash attention (the measured tables)
        grid = predict_grid(spec, phase, batch, seq, profiles()[hw], "bf16", kernels)
        for i, j in points:
            a = analyze(spec, phase, batch=int(batch[0, j]), seq=int(seq[i, 0]))
            want = predict(a, profiles()[hw], kernels).time_s
            assert grid[i, j] == pytest.approx(want, rel=1e-12), (name, phase, hw, kernels, i, j)


@pytest.mark.parametrize("name", ["gemma-3-27b", "mistral-7b", "llama-4-scout"])
def test_the_grid_is_predict_across_windows_and_chunks(name) -> None:
    """Lengths below, at and past the window (gemma-3: 1024 local; mistral: 4096) or chunk
    (Llama 4: 8192), including the pairs formula's edges, as a 3 x 3 grid and as scattered
    (batch, seq) pairs (then every array is the points' own, two array axes per product)."""
    spec = catalog.load(name)
    edge = spec.window or spec.attention_chunk
    lengths = np.array([edge - 1, edge, edge + 1, 2 * edge + 3])
    hw = profiles()["calibrated"]
    for phase in ("prefill", "decode", "train"):
        assert_grid_is_predict(spec, phase, np.array([[1, 2, 5]]), lengths[:3, None], hw, Kernels())
        assert_grid_is_predict(spec, phase, np.array([3, 1, 2, 4]), lengths, hw,
                               Kernels(flash_attention=True))


def test_the_grid_is_predict_for_encoder_lengths_of_their_own() -> None:
    spec = catalog.load("t5-11b")
    for phase in ("prefill", "decode", "train"):
        assert_grid_is_predict(spec, phase, np.array([[1, 4]]), np.array([[5], [300]]),
                               profiles()["calibrated"],
                               Kernels(), enc_seq=np.array([[7], [500]]))


def test_sizes_past_int64_do_not_wrap() -> None:
    """LLaMA 3.1 405B, a training step of 4096 x 131,072 tokens: 1.3e21 FLOPs, past int64's
    9.2e18 (the grid once held sizes as int64 and gave 1.2e6 s where predict gives 1.7e7 s)."""
    spec = catalog.load("llama-3.1-405b")
    assert_grid_is_predict(spec, "train", np.array([4096]), np.array([131072]), profiles()["h100-sxm"],
                           Kernels())
    assert_grid_is_predict(spec, "train", np.array([4096]), np.array([131072]), profiles()["calibrated"],
                           Kernels())


def test_a_profile_without_tables_is_refused_in_one_line() -> None:
    with pytest.raises(AnalysisError, match="no efficiency tables") as e:
        predict_grid(catalog.load("llama-3-8b"), "decode", np.array([1]), np.array([8]),
                     load_hardware("h100-sxm"),
                     "fp32")
    assert "\n" not in str(e.value)


def test_the_calibrated_style_grid_is_calibrates() -> None:
    pytest.importorskip("torch")
    from costmodel.measure.calibrate import GRID

    assert {k: GRID["cpu"][k] for k in CALIBRATE_GRID} == CALIBRATE_GRID
    hw = calibrated_profile()
    table = hw.efficiency.matmul["bf16"]
    assert (table.M, table.N, table.K) == (GRID["cpu"]["M"], GRID["cpu"]["N"], GRID["cpu"]["K"])
    assert len({v for plane in table.efficiency for row in plane for v in row}) > 10  # varies, not flat


@pytest.mark.parametrize("values", [
    [0.0, 0.0, 0.0, 3e-10, 3e-10, 3e-10],  # a first-touch table: 0 to a threshold, then one rate
    [0.5, 0.5, 0.7, 0.7, 0.9, 0.9],  # two changes: comparisons
    [0.1, 0.2, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],  # more changes than _COMPARE: by exponent, or a search
    [0.4, 0.4, 0.4],  # no change: one value everywhere
])
@pytest.mark.parametrize("scale", [1.0, 3.0])  # powers of two (read by exponent), or not
def test_a_step_table_with_repeated_values_reads_as_the_whole_table(values, scale) -> None:
    """``grid_lookup.step`` drops the grid points where the value does not change; it still gives
    values[number of grid points <= x] (bisect over the whole grid) at every size, on the
    points themselves and between them."""
    from bisect import bisect_right

    from costmodel.runtime.grid_lookup import step

    grid = [scale * 2.0 ** (10 + 2 * k) for k in range(len(values) - 1)]
    x = np.array(sorted({0.0, 1.0, 5e-324, *grid, *(g * 1.5 for g in grid), *(g * (1 - 1e-12) for g in grid),
                         *(np.nextafter(g, 0) for g in grid), 1e30, np.inf, -1.0, -np.inf}))
    x = np.append(x, -0.0)  # (a sign bit of its own: the exponent's shift is negative, and wraps)
    want = np.array([values[bisect_right(grid, v)] for v in x])
    assert np.array_equal(step(grid, values, x), want)


@pytest.mark.parametrize("efficiency", [
    [0.05, 0.5, 0.95, 0.35, 0.8, 0.2, 0.65, 0.05, 0.5],  # the calibrated-style profile's memory table
    [0.1, 0.9, 0.2, 0.3],  # a bigger size's rate takes over below the grid (above[0] is e_1 / g_1)
    [0.2, 0.8, 0.9, 0.95],  # time falls on the first segment only
])
def test_a_log_table_on_its_envelope_is_a_log_table(efficiency) -> None:
    """``grid_lookup.log_envelope_table`` (the grid plus the crossings where a bigger size's rate
    takes over) read by one log-log interpolation gives ``efficiency._lookup``'s envelope at
    every size: below, on, between and past the grid points."""
    from costmodel.devices.efficiency import _lookup, rates_above
    from costmodel.runtime.grid_lookup import log_envelope_table

    grid = [4.0 ** (6 + k) for k in range(len(efficiency))]
    above = rates_above(grid, efficiency)
    log_x, log_e = log_envelope_table(grid, efficiency, above)
    x = np.geomspace(grid[0] / 64, grid[-1] * 64, 2001)
    x = np.concatenate([x, grid, np.asarray(grid) * (1 + 1e-12), np.asarray(grid) * (1 - 1e-12)])
    want = np.array([_lookup(grid, efficiency, v, "log", above) for v in x])
    got = np.exp(np.interp(np.log(x), log_x, log_e))
    assert np.max(np.abs(got / want - 1)) < 1e-13
    assert len(log_x) > len(grid)  # the crossings are points of their own


def test_lazy_lookups_and_quantities_are_their_arrays() -> None:
    """``grid_lookup.Partial`` (a constant with values at a few points, not spread yet) and
    ``grid_merge.Scaled`` (k x an array, not multiplied yet) give, in every use the rule and the
    lookups make of them, the same floats as their arrays (``Partial``) or within the rounding
    of k / rate (``Scaled``): sums of one `below` or two, with numbers and arrays, products."""
    from costmodel.runtime.grid_lookup import Partial
    from costmodel.runtime.grid_merge import Scaled
    from costmodel.runtime.timing_grid import _per

    rng = np.random.default_rng(7)
    shape = (7, 9)
    x = rng.uniform(1, 1e6, shape)
    one, other = np.flatnonzero(rng.random(63) < 0.2), np.flatnonzero(rng.random(63) < 0.4)
    a = Partial(0.25, one, rng.uniform(0, 1, one.size), shape)
    b = Partial(1.5, one, rng.uniform(0, 1, one.size), shape)
    c = Partial(3.0, other, rng.uniform(0, 1, other.size), shape)
    A, B, C = a.spread(), b.spread(), c.spread()
    assert A.ravel()[one].tolist() == a.values.tolist() and (np.delete(A.ravel(), one) == 0.25).all()
    for got, want in [(a + b, A + B), (a + c, A + C), ((a + b) + c, (A + B) + C), (a + 2.0, A + 2.0),
                      (2.0 + a, 2.0 + A), (x + a, x + A), (a + x, A + x), (x * a, x * A),
                      (x * (a + b + c), x * ((A + B) + C)), (x[:1] * c, x[:1] * C), (x * c, x * C)]:
        got = got.spread() if isinstance(got, Partial) else got
        assert np.array_equal(got, want)
    k = 6
    s, t = Scaled(k, x), Scaled(k, 2 * x)
    assert np.array_equal(s.value(), k * x) and np.array_equal((3 * s).value(), (3 * k) * x)
    assert np.array_equal(s + 5, k * x + 5) and np.array_equal(s - x, k * x - x)
    assert np.array_equal(s + 0, k * x) and np.array_equal(x - s, x - k * x)
    got = _per((s, t), 1e12)
    assert np.max(np.abs(got / ((k * x + k * (2 * x)) / 1e12) - 1)) < 1e-15


@pytest.mark.parametrize("times", ["number", "row", "column", "none"])
def test_a_log_read_off_another_is_its_log(times) -> None:
    """``grid_logs.Logs`` takes the log of an array that is a number, or a number per row or per
    column, times one logged before from that one (a pass for a log): within 1e-15 of np.log
    relative to the log's size; an array that is none of these is logged as it stands."""
    from costmodel.runtime.grid_logs import Logs

    S, B = np.rint(np.geomspace(512, 8191, 40))[:, None], np.arange(1.0, 41.0)[None, :]
    logs = Logs()
    T = S * B
    assert np.array_equal(logs.new(T), np.log(T))
    x = {"number": 12288.0 * T, "row": (7 * S + 5) * T, "column": T * (B + 2), "none": T + 1000}[times]
    got = logs.new(x)
    assert np.max(np.abs(got - np.log(x))) <= 1e-15 * np.max(np.abs(np.log(x)))
    derived = len(logs._logged[x.shape]) == 1  # (not a base of its own)
    assert derived == (times != "none")
    if times == "none":
        assert np.array_equal(got, np.log(x))


def test_freed_heap_is_kept_on_glibc() -> None:
    """``keep_freed_heap`` sets glibc's trim and mmap thresholds (once: it answers the same
    after); elsewhere it does nothing and says so."""
    import platform

    from costmodel.measure.malloc import keep_freed_heap

    first = keep_freed_heap()
    assert keep_freed_heap() is first
    assert first is (platform.libc_ver()[0] == "glibc")


def test_numbers_for_batch_and_seq_give_predicts_time_in_their_shape() -> None:
    """A number for batch or seq is one point (the rule's arrays all have an axis): the result
    has the inputs' broadcast shape, 0-d for two numbers, and is predict's time there."""
    spec, hw = catalog.load("t5-11b"), calibrated_profile()
    want = predict(analyze(spec, "train", batch=3, seq=200), hw).time_s
    one = predict_grid(spec, "train", 3, 200, hw)
    assert one.shape == () and float(one) == pytest.approx(want, rel=1e-12)
    row = predict_grid(spec, "train", np.array([3.0, 5.0]), 200, hw)
    assert row.shape == (2,) and row[0] == pytest.approx(want, rel=1e-12)
