"""Cross-validation of the measured kernel tables (specs/kernels/<gpu>/; issue 21).

Each table is one framework's collection (vLLM's; bench/build_kernel_tables.py says why) and the
lookup (``costmodel.devices.kernels``) interpolates it and extrapolates past it. Three checks of
that lookup, all from the bundled JSON alone (pure Python, no parquet reader:
tests/test_kernel_validation.py recomputes them and holds docs/gpu-time.md to them):

1. **Another framework.** ``holdout.json`` keeps the same GPU's same op classes as SGLang and
   TRT-LLM measured them (thinned to about 400 points a set; never read by the model). For each
   point, the lookup's time against theirs: the points, how many lay inside the table, the
   median and 90th percentile of |predicted / measured - 1|, and the worst ratio (the larger of
   predicted / measured and its inverse). Beside them, on the points whose shape the table
   measured itself (a grid node the collection has, not a filled one; decode's cache within the
   one token the collectors count differently), the same median between the two measurements
   with no lookup involved: how far the frameworks lie apart, the floor of the first figures.
2. **Left out.** Each table rebuilt with every other grid line of one axis removed (each axis in
   turn, the first and last lines kept), predicting the removed measured points: the
   interpolation rule against the framework's own data. For attention also each measured head
   configuration removed in turn and predicted from the others: the nearest-configuration rule.
3. **The shapes the model asks for.** The GEMMs of a prefill and a decode step of bundled specs
   (``costmodel.model.tree``'s ``Cost.gemms``, the attention core left to the attention tables):
   the share of calls, and of their looked-up time, inside each GPU's GEMM grid, and which fall
   outside.

Targets (issue 21): median |error| <= 10% (attention 15%), worst within 2x.

    python bench/kernel_validation.py            # the tables, markdown, to stdout
    python bench/kernel_validation.py --write    # and into docs/gpu-time.md, between its markers,
                                                 # and each GPU's error bands (errors.json)
    python bench/kernel_validation.py --all      # every removed point left out (about 20 s)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the package is the checkout's
    sys.path.insert(0, str(ROOT))

from costmodel.devices.kernels import (  # noqa: E402
    AttentionTable,
    Grid,
    KernelTables,
    Lookup,
    MoETable,
    Phase,
    kernels_root,
    load_kernels,
    nearest_table,
    read_attention,
    read_moe,
)

GPUS = ("a100-80gb", "h100-sxm", "h200", "b200", "gb200")
OPS = ("gemm/bf16", "gemm/fp8", "gemm/nvfp4", "attention/prefill", "attention/decode")
#: The MoE layers' routed experts (moe.json) and latent attention's core (mla.json): their own
#: tables on the page, so that the dense op classes' figures stay as they were.
SPARSE_OPS = ("moe/bf16", "moe/fp8", "mla/prefill", "mla/decode")
DOC = ROOT / "docs" / "gpu-time.md"
BEGIN, END = "<!-- kernel-validation: begin -->", "<!-- kernel-validation: end -->"
#: Predictions per (GPU, op class, what was left out): about this many, evenly spaced over the removed
#: points (deterministic; all of them change no figure by more than a few tenths of a percent).
CAP = 1500
#: (spec, latent attention's convention) x (phase, batch, seq) for the shapes the model asks for.
MODELS = (("llama-3-8b", "naive"), ("llama-3-70b", "naive"), ("deepseek-v3", "absorbed"))
STEPS = (("prefill", 1, 2048), ("prefill", 1, 8192), ("decode", 1, 2048), ("decode", 64, 2048))
SHAPE_GPUS = ("a100-80gb", "h100-sxm")  # h200's and b200's GEMM axes are h100-sxm's
#: The serving frameworks with MoE and MLA tables of their own (moe.<framework>.json; deploy
#: --engine trtllm reads them), cross-validated against the defaults' framework and the holdout's
#: others.
FRAMEWORKS = ("trtllm",)
THIN = 400  # points a framework's set is thinned to, as holdout.json's


def target(op: str) -> float:
    """The issue's median target for an op class: attention (MLA's too) 15%, the rest 10%; a
    framework's own table (``moe/fp8@trtllm``) as its op class."""
    return 0.15 if op.startswith(("attention", "mla")) else 0.10


@dataclass(frozen=True)
class Stats:
    """Predicted / measured ratios summed up."""

    points: int
    inside: int
    median: float  # |ratio - 1|
    p90: float
    worst: float  # max(ratio, 1 / ratio)

    @classmethod
    def of(cls, ratios: Sequence[float], inside: int) -> Stats:
        errors = sorted(abs(r - 1) for r in ratios)
        p90 = errors[max(0, math.ceil(0.9 * len(errors)) - 1)]  # nearest rank
        worst = max(max(ratios), 1 / min(ratios))
        return cls(len(errors), inside, statistics.median(errors), p90, worst)

    def met(self, op: str) -> bool:
        return self.median <= target(op) and self.worst <= 2


@dataclass(frozen=True)
class Row:
    gpu: str
    op: str
    against: str  # the other framework, or what was left out
    stats: Stats
    same: Stats | None = None  # the other framework on the table's own shapes, no lookup


# --- 1. another framework ----------------------------------------------------------------------


def holdout(gpu: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((kernels_root() / gpu / "holdout.json").read_text())
    return data


def node(grid: Grid, coords: Sequence[float], slack: Sequence[float]) -> float | None:
    """The measured time at the grid node within `slack` of `coords` on every axis, None where no
    such node or a filled one."""
    flat = 0
    for axis, stride, x, s in zip(grid.axes, grid.strides, coords, slack, strict=True):
        near = [i for i, a in enumerate(axis) if abs(a - x) <= s]
        if not near:
            return None
        flat += near[0] * stride
    return None if flat in grid.filled else float(grid.times[flat])


@lru_cache(maxsize=None)
def against_framework(gpu: str, ops: tuple[str, ...] = OPS) -> tuple[Row, ...]:
    """Per (op class of `ops`, framework) of ``holdout.json``: the lookup against the other
    framework."""
    k = load_kernels(gpu)
    rows = []
    for op in ops:
        for part in holdout(gpu)["sets"].get(op, []):
            source = part["source"]
            ratios, inside, same = [], 0, []
            for point in part["points"]:
                got, measured_here = _predict(k, op, point)
                ratios.append(got.time_s / point[-1])
                inside += got.inside
                if measured_here is not None:
                    same.append(measured_here / point[-1])
            who = f"{source['framework']} {source['version']} ({source['kernel']})"
            same_stats = Stats.of(same, len(same)) if same else None
            rows.append(Row(gpu, op, who, Stats.of(ratios, inside), same_stats))
    return tuple(rows)


def _predict(k: KernelTables, op: str, point: Sequence[Any]) -> tuple[Lookup, float | None]:
    """The lookup of a holdout point, and the table's own measurement of its shape if it has one."""
    kind, which = op.split("/")
    if kind == "gemm":
        M, N, K = point[:3]
        grid = k.gemms[which]
        got = k.gemm(which, M, N, K)
        assert got is not None
        return got, node(grid, (M, N, K), (0, 0, 0))
    if kind in ("moe", "mla"):
        return _predict_sparse(k, kind, which, point)
    phase: Phase = "prefill" if which == "prefill" else "decode"
    batch, seq, heads, kv_heads, head_dim, kv_dtype = point[:6]
    table = k.nearest(phase, heads, kv_heads, head_dim, kv_dtype)
    got_a = read_attention(table, phase, batch, seq, heads, kv_heads, head_dim, kv_dtype)
    exact = (table.heads, table.kv_heads, table.head_dim, table.kv_dtype) == (
        heads, kv_heads, head_dim, kv_dtype)
    # decode: vLLM's cache holds 2^k - 1 tokens where the others' hold 2^k (the new one counted alike)
    here = node(table.grid, (batch, seq), (0, 1 if phase == "decode" else 0)) if exact else None
    return got_a, here


def _predict_sparse(
    k: KernelTables, kind: str, which: str, point: Sequence[Any]
) -> tuple[Lookup, float | None]:
    """A MoE point [tokens, hidden, inter, experts, top_k, s], an MLA one [heads, batch, seq,
    kv dtype, s] or an absorbed-MLA product's [pre or post, heads, tokens, s]: the lookup, and the
    table's own measurement of the shape if it has one."""
    if kind == "mla_bmm":  # [op, heads, tokens, s]: absorbed MLA's pre or post product
        op, heads, tokens = point[:3]
        bmm = k.mla_bmm_table(op, which)
        assert bmm is not None
        return bmm.grid(heads, tokens), node(bmm.grid, (heads, tokens), (0, 0))
    if kind == "moe":
        tokens, hidden, inter, experts, topk = point[:5]
        table = k.moe_table(which, hidden, inter, experts, topk)
        assert table is not None
        exact = table.exact(hidden, inter, experts, topk)
        got = read_moe(table, tokens, hidden, inter, experts, topk)
        return got, node(table.grid, (tokens,), (0,)) if exact else None
    phase: Phase = "prefill" if which == "prefill" else "decode"
    heads, batch, seq, kv_dtype = point[:4]
    mla = k.mla_table(phase, kv_dtype)
    got_m = k.mla(phase, batch, seq, heads, kv_dtype)
    assert mla is not None and got_m is not None
    return got_m, node(mla.grid, (heads, batch, seq), (0, 0, 0)) if mla.kv_dtype == kv_dtype else None


# --- 2. left out -------------------------------------------------------------------------------


def thinned(grid: Grid, axis: int) -> tuple[Grid, list[int]]:
    """`grid` without every other interior line of `axis` (the 2nd, 4th, ...; the first and the
    last kept), and the flat indices of the measured (not filled) points it lost."""
    n, stride = len(grid.axes[axis]), grid.strides[axis]
    kept = [i % 2 == 0 or i == n - 1 for i in range(n)]
    axes = [a if d != axis else [x for x, k in zip(a, kept, strict=True) if k]
            for d, a in enumerate(grid.axes)]
    times: list[float] = []
    filled: list[int] = []
    lost: list[int] = []
    for flat, t in enumerate(grid.times):
        if kept[flat // stride % n]:
            if flat in grid.filled:
                filled.append(len(times))
            times.append(t)
        elif flat not in grid.filled:
            lost.append(flat)
    return Grid(axes, times, filled, grid.growth, grid.where), lost


def coords(grid: Grid, flat: int) -> tuple[float, ...]:
    """The shape at a flat index of `grid`."""
    return tuple(a[flat // s % len(a)] for a, s in zip(grid.axes, grid.strides, strict=True))


def _every(items: Sequence[Any]) -> Sequence[Any]:
    """About CAP of `items`, evenly spaced (deterministic)."""
    return items[:: max(1, math.ceil(len(items) / CAP))]


def _grid_left_out(grids: Sequence[Grid], names: Sequence[str]) -> list[tuple[str, Stats]]:
    """Per axis, pooled over `grids`: every other line removed and (about CAP of) its points
    predicted."""
    out = []
    for axis, name in enumerate(names):
        lost = []
        for grid in grids:
            if len(grid.axes[axis]) >= 3:
                small, flats = thinned(grid, axis)
                lost += [(grid, small, f) for f in flats]
        ratios, inside = [], 0
        for grid, small, flat in _every(lost):
            got = small(*coords(grid, flat))
            ratios.append(got.time_s / grid.times[flat])
            inside += got.inside
        if ratios:
            out.append((f"every other {name}", Stats.of(ratios, inside)))
    return out


def _configurations_left_out(tables: Sequence[AttentionTable], phase: Phase) -> Stats:
    """Each measured head configuration removed, (about CAP of) its measured points predicted
    from the others."""
    points = [(t, flat) for t in tables for flat in range(len(t.grid.times)) if flat not in t.grid.filled]
    nearest: dict[int, AttentionTable] = {}
    ratios = []
    for t, flat in _every(points):
        if id(t) not in nearest:
            others = [u for u in tables if u is not t]
            nearest[id(t)] = nearest_table(others, t.heads, t.kv_heads, t.head_dim, t.kv_dtype)
        batch, seq = coords(t.grid, flat)
        got = read_attention(nearest[id(t)], phase, batch, seq, t.heads, t.kv_heads, t.head_dim, t.kv_dtype)
        ratios.append(got.time_s / t.grid.times[flat])
    return Stats.of(ratios, 0)  # every prediction reads another configuration: none inside


@lru_cache(maxsize=None)
def left_out(gpu: str) -> tuple[Row, ...]:
    """Per op class: the interpolation rule, and for attention the configuration rule."""
    k = load_kernels(gpu)
    rows = []
    for dtype, grid in k.gemms.items():
        rows += [Row(gpu, f"gemm/{dtype}", what, s) for what, s in _grid_left_out([grid], ("M", "N", "K"))]
    for phase in ("prefill", "decode"):
        tables = k.attention_tables.get(phase, ())
        op = f"attention/{phase}"
        grids = [t.grid for t in tables]
        rows += [Row(gpu, op, what, s) for what, s in _grid_left_out(grids, ("batch", "seq"))]
        rows.append(Row(gpu, op, "each head configuration", _configurations_left_out(tables, phase)))
    grids = list(k.collectives.values())
    rows += [Row(gpu, "collectives", what, s) for what, s in _grid_left_out(grids, ("GPU count", "size"))]
    return tuple(rows)


def _moe_configurations_left_out(tables: Sequence[MoETable]) -> Stats:
    """Each measured MoE configuration removed, its measured points predicted from the nearest
    of the others (``read_moe``: as many rows routed, the time scaled by a row's work)."""
    ratios = []
    for t in tables:
        others = [u for u in tables if u is not t]
        if not others:
            continue
        near = min(others, key=lambda u: u.distance(t.hidden, t.inter, t.experts, t.topk))
        for flat, (tokens,) in enumerate(coords(t.grid, f) for f in range(len(t.grid.times))):
            got = read_moe(near, tokens, t.hidden, t.inter, t.experts, t.topk)
            ratios.append(got.time_s / t.grid.times[flat])
    return Stats.of(ratios, 0)


def _moe_layouts_left_out(single: Sequence[MoETable], laid: Sequence[MoETable]) -> Stats:
    """Each row measured at EP or TP above 1, its points predicted as a layout no row was
    measured at is read (``KernelTables.moe_table``'s fallback): one GPU's configuration (E/EP
    experts of width inter/TP) off the EP = TP = 1 tables, at the GPU's own tokens (the EP
    group's / EP)."""
    ratios, inside = [], 0
    for t in laid:
        local = t.local
        near = min(single, key=lambda u: u.distance(*local))
        for tokens, measured in zip(t.grid.axes[0], t.grid.times, strict=True):
            got = read_moe(near, tokens / t.ep, *local)
            ratios.append(got.time_s / measured)
            inside += got.inside
    return Stats.of(ratios, inside)


@lru_cache(maxsize=None)
def left_out_sparse(gpu: str) -> tuple[Row, ...]:
    """MoE: every other token count, and each configuration; MLA: every other line of heads,
    batch and seq."""
    k = load_kernels(gpu)
    rows = []
    for dtype, moe in k.moe_tables.items():
        op = f"moe/{dtype}"
        rows += [Row(gpu, op, what, s) for what, s in _grid_left_out([t.grid for t in moe], ("tokens",))]
        rows.append(Row(gpu, op, "each configuration", _moe_configurations_left_out(moe)))
    for phase, mla in k.mla_tables.items():
        grids = [t.grid for t in mla]
        axes = ("heads", "batch", "seq")
        rows += [Row(gpu, f"mla/{phase}", what, s) for what, s in _grid_left_out(grids, axes)]
    return tuple(rows)


# --- a framework's own MoE and MLA tables (moe.<framework>.json) -------------------------------


def framework_ops(gpu: str, framework: str) -> tuple[str, ...]:
    """The op classes (``moe/fp8``, ``mla/decode``, ``mla_bmm/fp8``) `framework`'s own files give `gpu`."""
    k = load_kernels(gpu, framework)
    return tuple([f"moe/{d}" for d, t in k.moe_tables.items() if t[0].framework == framework]
                 + [f"mla/{p}" for p, t in k.mla_tables.items() if t[0].framework == framework]
                 + list(dict.fromkeys(f"mla_bmm/{d}" for _, d in k.mla_bmm_tables)))


def _default_points(gpu: str, op: str) -> tuple[list[list[Any]], dict[str, Any]]:
    """The folder default's own measurements of `op` (vLLM's MoE, SGLang's MLA: the grid nodes it
    measured, not filled ones) as holdout points, thinned to about THIN, and their source."""
    k = load_kernels(gpu)
    kind, which = op.split("/")
    points: list[list[Any]] = []
    if kind == "moe":
        for t in k.moe_tables.get(which, ()):
            points += [[x, t.hidden, t.inter, t.experts, t.topk, y]
                       for x, y in zip(t.grid.axes[0], t.grid.times, strict=True)]
    else:
        for m in k.mla_tables.get(which, ()):
            points += [[*coords(m.grid, f), m.kv_dtype, m.grid.times[f]]
                       for f in range(len(m.grid.times)) if f not in m.grid.filled]
    if op not in k.sources:  # the default has no such table (moe/mxfp4: vLLM's file has none)
        return [], {}
    points.sort(key=lambda p: tuple(str(x) if isinstance(x, str) else x for x in p))
    return points[:: max(1, len(points) // THIN)], k.sources[op]


def _rate(k: KernelTables, op: str, points: Sequence[Sequence[Any]], who: str, gpu: str, name: str) -> Row:
    kind, which = op.split("/")
    ratios, inside, same = [], 0, []
    for point in points:
        got, here = _predict_sparse(k, kind, which, point)
        ratios.append(got.time_s / point[-1])
        inside += got.inside
        if here is not None:
            same.append(here / point[-1])
    return Row(gpu, name, who, Stats.of(ratios, inside), Stats.of(same, len(same)) if same else None)


@lru_cache(maxsize=None)
def framework_against(gpu: str, framework: str = "trtllm") -> tuple[Row, ...]:
    """`framework`'s own tables (``load_kernels(gpu, framework)``) against the other frameworks'
    measurements of the same op class: the folder default's (vLLM's MoE, SGLang's MLA; its own
    grid nodes, thinned) and holdout.json's sets of any third framework."""
    k = load_kernels(gpu, framework)
    rows = []
    for op in framework_ops(gpu, framework):
        name = f"{op}@{framework}"
        points, source = _default_points(gpu, op)
        if points and source.get("framework") != framework:
            who = f"{source['framework']} {source['version']} ({source['kernel']})"
            rows.append(_rate(k, op, points, who, gpu, name))
        for part in holdout(gpu)["sets"].get(op, []):
            src = part["source"]
            if src["framework"] != framework:
                who = f"{src['framework']} {src['version']} ({src['kernel']})"
                rows.append(_rate(k, op, part["points"], who, gpu, name))
    return tuple(rows)


@lru_cache(maxsize=None)
def framework_left_out(gpu: str, framework: str = "trtllm") -> tuple[Row, ...]:
    """`framework`'s own tables with every other line of an axis left out, and each MoE
    configuration read off the nearest other (``left_out_sparse``'s rules)."""
    k = load_kernels(gpu, framework)
    rows = []
    for moe in k.moe_tables.values():
        if moe[0].framework != framework:
            continue
        op = moe[0].op
        rows += [Row(gpu, op, what, s) for what, s in _grid_left_out([t.grid for t in moe], ("tokens",))]
        if len(moe) > 1:  # one configuration (H100's MXFP4: 32 experts alone) has no other to read
            rows.append(Row(gpu, op, "each configuration", _moe_configurations_left_out(moe)))
        laid = [t for t in k.moe_parallel_tables.values() if t.dtype == moe[0].dtype]
        if laid:
            rows.append(Row(gpu, op, "each EP/TP row", _moe_layouts_left_out(moe, laid)))
    for phase, mla in k.mla_tables.items():
        if mla[0].framework == framework:
            rows += [Row(gpu, f"mla/{phase}@{framework}", what, s)
                     for what, s in _grid_left_out([t.grid for t in mla], ("heads", "batch", "seq"))]
    for dtype in dict.fromkeys(d for _, d in k.mla_bmm_tables):  # pre and post pooled, as read together
        bmm = [t for t in k.mla_bmm_tables.values() if t.dtype == dtype]
        rows += [Row(gpu, bmm[0].name, what, s) for what, s in _grid_left_out([t.grid for t in bmm],
                                                                               ("heads", "tokens"))]
    return tuple(rows)


def framework_sources(gpu: str) -> dict[str, dict[str, Any]]:
    """The sources of the frameworks' own tables (``moe/fp8@trtllm`` -> its file, version, ...)."""
    return {op: s for f in FRAMEWORKS for op, s in load_kernels(gpu, f).sources.items()
            if op.endswith(f"@{f}")}


# --- 3. the shapes the model asks for ----------------------------------------------------------


@dataclass(frozen=True)
class Coverage:
    calls: int
    inside: dict[str, float]  # gpu -> share of calls inside the grid
    time_inside: dict[str, float]  # gpu -> share of their looked-up time
    outside: str  # the products outside on the last GPU, and the axis past the grid


def model_gemms(name: str, mla: str, phase: str, batch: int,
                seq: int) -> list[tuple[str, int, int, int, int]]:
    """The linear products of one step, as (leaf, count, M, K, N): the tree's ``Cost.gemms``
    without the attention core (the fused attention tables time that)."""
    from costmodel import model
    from costmodel.analysis import analyze
    from costmodel.catalog import load_spec

    spec = load_spec(name)
    a = analyze(spec, phase, batch=batch, seq=seq, mla=mla)
    costs = model.tree(spec, model.numeric_dims(spec, a.shape, a.bytes_per_element, a.mla, a.routing))
    return [
        (key.path.rsplit("/", 1)[-1], int(c), int(M), int(K), int(N))
        for key, cost in costs.items()
        if not key.attention_core
        for c, M, K, N in cost.gemms
    ]


@lru_cache(maxsize=None)
def coverage(name: str, mla: str, phase: str, batch: int, seq: int) -> Coverage:
    gemms = model_gemms(name, mla, phase, batch, seq)
    calls = sum(g[1] for g in gemms)
    inside, time_inside, outside = {}, {}, ""
    for gpu in SHAPE_GPUS:
        k = load_kernels(gpu)
        grid = k.gemms["bf16"]
        n_in, t_in, t_all, out = 0, 0.0, 0.0, []
        for leaf, count, M, K, N in gemms:
            got = k.gemm("bf16", M, N, K)
            assert got is not None
            t_all += count * got.time_s
            if got.inside:
                n_in += count
                t_in += count * got.time_s
            else:
                past = [f"{a} {v:,} > {top:,.0f}"
                        for a, v, top in zip("MNK", (M, N, K), (axis[-1] for axis in grid.axes), strict=True)
                        if v > top]
                out.append(f"{leaf} ({', '.join(past) or 'a filled point'})")
        inside[gpu], time_inside[gpu] = n_in / calls, t_in / t_all
        outside = "; ".join(dict.fromkeys(out)) or "none"
    return Coverage(calls, inside, time_inside, outside)


# --- the page ----------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _stats_cells(s: Stats) -> list[str]:
    return [str(s.points), str(s.inside), _pct(s.median), _pct(s.p90), f"{s.worst:.2f}x"]


def _against_table(rows_of: Callable[[str], Iterable[Any]]) -> str:
    """The holdout table: each GPU's rows against another framework, with the same-shape column."""
    return _table(
        ["GPU", "op class", "measured by", "points", "inside", "median", "p90", "worst", "same shape",
         "target met"],
        [[r.gpu, r.op, r.against, *_stats_cells(r.stats),
          f"{_pct(r.same.median)} / {r.same.worst:.2f}x ({r.same.points})" if r.same else "-",
          _met(r.stats, r.op)]
         for gpu in GPUS for r in rows_of(gpu)])


def _left_out_table(rows_of: Callable[[str], Iterable[Any]]) -> str:
    """The left-out table: each GPU's rows predicted from the table rebuilt without them."""
    return _table(["GPU", "op class", "left out", "points", "inside", "median", "p90", "worst", "target met"],
                  [[r.gpu, r.op, r.against, *_stats_cells(r.stats), _met(r.stats, r.op)]
                   for gpu in GPUS for r in rows_of(gpu)])


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _met(s: Stats, op: str) -> str:
    median = "yes" if s.median <= target(op) else "no"
    worst = "yes" if s.worst <= 2 else "no"
    return f"{median} / {worst}"


@lru_cache(maxsize=1)
def markdown() -> str:
    """The generated part of docs/gpu-time.md: sources, the three checks."""
    parts = [
        "### Sources\n",
        _table(
            ["GPU", "table", "framework", "kernel", "device", "file (in the wheel)"],
            [
                [gpu, key, f"{s['framework']} {s['version']}", s["kernel"], s["device"], f"`{s['path']}`"]
                for gpu in GPUS
                for key, s in {**load_kernels(gpu).sources, **framework_sources(gpu)}.items()
            ],
        ),
        "\n### Against another framework (holdout.json)\n",
        "Median, p90: |predicted / measured - 1|; worst: the larger of the ratio and its inverse. "
        "*Same shape*: median and worst between the two frameworks' own measurements where the "
        "table measured the very shape (points), no lookup involved. Target met: median / worst.\n",
        _against_table(against_framework),
        "\n### Left out of the table (the framework's own data)\n",
        _left_out_table(left_out),
        "\n### MoE layers and latent attention\n",
        "`moe.json`: a MoE layer's routed experts as one measured kernel (vLLM's `fused_experts`); "
        "`mla.json`: latent attention's core (SGLang's; TRT-LLM's on A100). Against another "
        "framework (holdout.json), as above:\n",
        _against_table(lambda gpu: against_framework(gpu, SPARSE_OPS)),
        "\nLeft out of the table:\n",
        _left_out_table(left_out_sparse),
        "\n### TensorRT-LLM's own MoE and MLA tables\n",
        "`moe.trtllm.json` (TRT-LLM's fused MoE op), `mla.trtllm.json` (its MLA core; A100's "
        "`mla.json` is TRT-LLM's already) and `mla_bmm.trtllm.json` (absorbed MLA's two per-head "
        "products, pre and post pooled), which `deploy --engine trtllm` reads (`moe/fp8@trtllm`). "
        "Against the default table's framework (its own measured grid nodes, thinned to about 400) "
        "and holdout.json's third framework, as above:\n",
        _against_table(framework_against),
        "\nLeft out of the table:\n",
        _left_out_table(framework_left_out),
        "\n### The GEMMs the model asks for\n",
        "Linear products of one step (`Cost.gemms`, the attention core left out), bf16; calls "
        "counted with their multiplicity (layers, heads of a batched product). h200's and b200's "
        "GEMM axes are h100-sxm's.\n",
        _table(
            ["model", "step", "calls", "inside a100", "time inside a100", "inside h100", "time inside h100",
             "outside the h100 grid"],
            [
                [name + (f" ({mla})" if mla != "naive" else ""), f"{phase} {batch} x {seq}", f"{c.calls:,}",
                 _pct(c.inside["a100-80gb"]), _pct(c.time_inside["a100-80gb"]),
                 _pct(c.inside["h100-sxm"]), _pct(c.time_inside["h100-sxm"]), c.outside]
                for name, mla in MODELS
                for phase, batch, seq in STEPS
                for c in [coverage(name, mla, phase, batch, seq)]
            ],
        ),
    ]
    return "\n".join(parts) + "\n"


def bands(gpu: str) -> dict[str, Any]:
    """Each op class's error bands, as every predicted time carries them (``KernelTables.errors``,
    written to specs/kernels/<gpu>/errors.json by ``--write``): against each other framework's
    measurements of the same op class (SGLang runs the same FlashAttention and cuBLAS kernels;
    TRT-LLM times its own, attention with RoPE and the cache write: docs/gpu-time.md), so a
    reader sees how far another stack lies; collectives, which no other framework measured
    here, their left-out figure (the interpolation's own error, a lower bound on the truth's)."""
    out: dict[str, Any] = {}
    for op in OPS + SPARSE_OPS:
        rows = [r for r in against_framework(gpu, OPS if op in OPS else SPARSE_OPS) if r.op == op]
        if rows:
            out[op] = [_band(r.stats, f"vs {r.against}") for r in rows]
    # No other framework measured them: the worst left-out figure (a lower bound on the truth's).
    for f in FRAMEWORKS:
        for r in framework_against(gpu, f):
            out.setdefault(r.op, []).append(_band(r.stats, f"vs {r.against}"))
    left = [r for r in left_out(gpu) + left_out_sparse(gpu) if r.op not in out]
    left += [r for f in FRAMEWORKS for r in framework_left_out(gpu, f) if r.op not in out]
    for op in dict.fromkeys(r.op for r in left):
        r = max((r for r in left if r.op == op), key=lambda r: r.stats.median)
        out[op] = [_band(r.stats, f"interpolation ({r.against} left out)")]
    return out


def _band(s: Stats, against: str) -> dict[str, Any]:
    return {"median": round(s.median, 4), "p90": round(s.p90, 4), "worst": round(s.worst, 3),
            "points": s.points, "against": against}


def write_bands() -> None:
    for gpu in GPUS:
        data = {"gpu": gpu, "built_by": "bench/kernel_validation.py", "op": "errors", "bands": bands(gpu)}
        (kernels_root() / gpu / "errors.json").write_text(json.dumps(data, indent=1) + "\n")


def generated(doc: str) -> str:
    """The part of a page between the markers."""
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC.relative_to(ROOT)}: no {BEGIN} ... {END} block")
    return doc.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def write(page: Path = DOC, make: Callable[[], str] = markdown) -> None:
    doc = page.read_text()
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    page.write_text(f"{head}{BEGIN}\n{make()}{END}{tail}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the tables into {DOC.relative_to(ROOT)}")
    parser.add_argument("--all", action="store_true",
                        help="predict every removed point (about 20 s), not about CAP per row")
    args = parser.parse_args(argv)
    if args.all and args.write:
        parser.error("--all is not what the page holds (the test recomputes the sampled rows)")
    if args.all:
        global CAP
        CAP = 10**9
    print(markdown(), end="")
    if args.write:
        write()
        write_bands()


if __name__ == "__main__":
    main(sys.argv[1:])
