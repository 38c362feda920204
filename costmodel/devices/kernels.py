"""Measured kernel tables: what a GEMM, a fused attention kernel and a collective take on one GPU,
by shape, from public measurements (specs/kernels/<gpu>/, built by bench/build_kernel_tables.py
from NVIDIA's aiconfigurator collections; each table names its file, framework, version and
kernel).

Tables are data, the models that read them are code: a new GPU is a folder of JSON. One lookup
interface (``KernelTables``):

- ``gemm(dtype, M, N, K)``: (M x K) @ (K x N);
- ``attention(phase, batch, seq, heads, kv_heads, head_dim, kv_dtype)``: one fused attention
  kernel, prefill (causal over ``seq`` prompt tokens) or decode (one token per sequence against
  a cache of ``seq`` tokens);
- ``collective(kind, gpus, nbytes)``: an NCCL collective inside one node;
- ``moe(dtype, tokens, hidden, inter, experts, topk)``: a mixture-of-experts layer's routed
  experts as a serving stack runs them (grouped GEMMs: gate/up, the activation, down, the
  weighted sum over top_k; routing left out) over `tokens` tokens on one GPU;
- ``mla(phase, batch, seq, heads, kv_dtype)``: latent attention's core (prefill: the causal
  pass; decode: absorbed, one token against the cached latent), DeepSeek-V3's latent sizes;
- ``mla_bmm(op, dtype, heads, tokens)``: absorbed latent attention's two per-head batched
  products (``pre``: q_nope @ W_UK; ``post``: the latent output @ W_UV) over `tokens` tokens,
  `heads` heads on the GPU; a serving framework's own (``mla_bmm.<framework>.json``) only.

Each answers a ``Lookup``: seconds, and whether the shape was inside what was measured.
Between grid points the time is interpolated multilinearly in log(time) over log(axis), as
Calculon and aiconfigurator do. Outside the grid the kernel model extrapolates: below the
smallest point the time is held (less work takes no longer; the launch floor), above the
largest it grows as the work does (linear in M, N, K, batch, bytes and decode's cache; prefill's
causal pass quadratic in seq; a collective held past the GPU counts measured). An attention
shape whose (heads, kv_heads, head_dim, kv dtype) was not measured reads the nearest measured
one at the batch that does the same work (FLOPs in prefill, cache bytes in decode; twice the
heads is twice the sequences to the kernel, and a launch-bound shape stays launch-bound):
extrapolated, too. Neither rule can make a time fall
below the physical floor, which the time model applies on top (``costmodel.runtime.timing``).

A MoE configuration (hidden, inter, experts, top_k) that was not measured reads the nearest
measured one at the tokens that route as many rows to each expert (tokens x top_k / experts),
its time scaled by all the experts' work (experts x hidden x inter): extrapolated.

Tables by framework: a folder's ``moe.json`` and ``mla.json`` are its defaults (vLLM's MoE,
SGLang's MLA: docs/gpu-time.md); ``moe.<framework>.json`` and ``mla.<framework>.json`` beside them
hold one serving framework's own kernels (``trtllm``: TensorRT-LLM's). ``load_kernels(name,
framework)`` reads the framework's table of a dtype (MoE) or phase (MLA) where it has one and the
default's elsewhere; the op classes it read from the framework's files are named with it
(``moe/fp8@trtllm``, ``mla/decode@trtllm``), so their error bands and the kernel notes say which
was read. A new framework is files, not code. ``mla_bmm.<framework>.json`` (absorbed MLA's
per-head products, ``mla_bmm/fp8@trtllm``) has no default: read only with its framework.

Pure Python (the lookup runs inside ``analyze --hardware``, which never imports numpy); a
folder is read and validated once per process. A bad file is one line naming the file, the
table and the field.

Long because: one reader and one lookup per op class (GEMM, attention, collectives, MoE, MLA),
each with its validation, share the grid, its envelope and the errors; split, each would import
the others' helpers.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

from costmodel.spec import SpecError

Phase = Literal["prefill", "decode"]
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@dataclass(frozen=True)
class Lookup:
    """A measured table's answer: seconds, and whether the shape lay inside the measurements
    (False: extrapolated by the kernel model, or read off a grid point the collection lacked)."""

    time_s: float
    inside: bool


@dataclass(frozen=True)
class ErrorBand:
    """How far a table's times lay from another measurement of the same kernels: the median
    |predicted / measured - 1| and the worst ratio (bench/kernel_validation.py)."""

    median: float
    worst: float
    against: str

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "worst": self.worst, "against": self.against}


class HasReads(Protocol):
    """Anything that says what its GPU time read of the measured tables: a ``Reads``, a
    ``runtime.timing.Prediction``, ``runtime.serving.Serving``, ``parallel.step.Step``,
    ``parallel.serve.Decode``."""

    @property
    def errors(self) -> Mapping[str, tuple[ErrorBand, ...]]: ...

    @property
    def extrapolated(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Reads:
    """What a predicted GPU time read of its device's measured tables (docs/gpu-time.md): each op
    class's error bands in the cross-validation (``errors``: "gemm/bf16", "attention/decode",
    "moe/bf16", "mla/prefill", "collectives" -> errors.json's bands), and the op classes read
    outside what was measured (``extrapolated``: "gemm", "attention/decode", "moe/bf16", ... by the
    kernel model's rule; "collectives" past the message sizes measured, or past the GPU counts
    measured, scaled there by the ring model, ``parallel.collectives``). Every command that
    prints a GPU time carries both, as the JSON keys ``errors`` and ``extrapolated``
    (``to_dict``) and as the lines ``report.tables.kernel_notes`` writes. A profile without
    measured tables (a calibrated CPU, L4) has no band (a shape past its own efficiency table is
    still "gemm" extrapolated: the table's edge is held)."""

    errors: Mapping[str, tuple[ErrorBand, ...]] = dataclasses.field(default_factory=dict)
    extrapolated: tuple[str, ...] = ()

    @staticmethod
    def union(items: Iterable[HasReads]) -> Reads:
        """What `items` read together: each op class once, in the order first read."""
        errors: dict[str, tuple[ErrorBand, ...]] = {}
        extrapolated: list[str] = []
        for item in items:
            errors.update(item.errors)
            extrapolated += [op for op in item.extrapolated if op not in extrapolated]
        return Reads(errors, tuple(extrapolated))

    def to_dict(self) -> dict[str, Any]:
        return {"errors": {op: [b.to_dict() for b in bands] for op, bands in self.errors.items()},
                "extrapolated": list(self.extrapolated)}


class Grid:
    """Times on the product of increasing axes, row-major; ``filled``: flat indices of grid points
    the collection lacked (bench/build_kernel_tables.py filled them from a neighbour)."""

    def __init__(
        self,
        axes: Sequence[Sequence[float]],
        times: Sequence[float],
        filled: Sequence[int],
        growth: Sequence[float],
        where: str,
    ) -> None:
        self.axes = [list(map(float, a)) for a in axes]
        self.times = times
        self._log_t: list[float] | None = None  # taken at the first lookup: most tables are never read
        self.log_axes = [[math.log(x) for x in a] for a in self.axes]
        self.filled = frozenset(filled)
        self.growth = list(growth)  # the work's exponent on each axis above the grid
        self.strides = [math.prod(len(a) for a in self.axes[d + 1 :]) for d in range(len(self.axes))]
        self.where = where

    @property
    def log_t(self) -> list[float]:
        """log of the times the lookup reads: the time envelope of the measurements."""
        if self._log_t is None:
            self._log_t = [math.log(t) for t in self.envelope()]
        return self._log_t

    def envelope(self) -> list[float]:
        """At each grid point the least measured time at or above it on every axis: more work
        never takes less time (a kernel can run the smaller shape padded to the larger; the
        collections' run-to-run noise and tile effects otherwise make a bigger shape faster, as
        ``efficiency``'s tables are read too). A suffix minimum along each axis in turn."""
        t = list(self.times)
        shape = [len(a) for a in self.axes]
        for d, n in enumerate(shape):
            stride = self.strides[d]
            for i in reversed(range(len(t))):
                if (i // stride) % n < n - 1:
                    above = t[i + stride]
                    if above < t[i]:
                        t[i] = above
        return t

    def __call__(self, *x: float) -> Lookup:
        log_t = self.log_t
        inside = True
        scale = 1.0
        corners: list[tuple[int, float]] = []  # per axis: (index below, weight of the one above)
        for d, (axis, logs, v) in enumerate(zip(self.axes, self.log_axes, x, strict=True)):
            if v < axis[0] or v > axis[-1]:
                inside = False
                if v > axis[-1]:
                    scale *= (v / axis[-1]) ** self.growth[d]
                v = min(max(v, axis[0]), axis[-1])
            if len(axis) == 1:
                corners.append((0, 0.0))
                continue
            i = min(bisect_right(axis, v) - 1, len(axis) - 2)
            corners.append((i, (math.log(v) - logs[i]) / (logs[i + 1] - logs[i])))
        total = 0.0
        for mask in range(1 << len(corners)):
            w, flat = 1.0, 0
            for d, (i, t) in enumerate(corners):
                up = (mask >> d) & 1
                w *= t if up else 1 - t
                flat += (i + up) * self.strides[d]
            if w:
                total += w * log_t[flat]
                inside = inside and flat not in self.filled
        return Lookup(math.exp(total) * scale, inside)


@dataclass(frozen=True)
class AttentionTable:
    head_dim: int
    heads: int
    kv_heads: int
    kv_dtype: str
    grid: Grid  # (batch, seq)

    def distance(self, heads: int, kv_heads: int, head_dim: int, kv_dtype: str) -> float:
        """How far a shape's configuration is from this table's: head size first (a different
        kernel tile), then the cache's dtype, the GQA group and the KV heads."""
        return (
            4 * abs(math.log(head_dim / self.head_dim))
            + 3 * (kv_dtype != self.kv_dtype)
            + 2 * abs(math.log((heads / kv_heads) / (self.heads / self.kv_heads)))
            + abs(math.log(kv_heads / self.kv_heads))
        )


def attention_work(phase: Phase, heads: int, kv_heads: int, head_dim: int, kv_dtype: str) -> float:
    """What a configuration's time scales with, per (batch, seq): the FLOPs of a causal prefill
    (heads x head_dim), the cache bytes a decode step reads (kv_heads x head_dim x width)."""
    if phase == "prefill":
        return heads * head_dim
    return kv_heads * head_dim * (1 if kv_dtype.startswith("fp8") or kv_dtype == "int8" else 2)


def nearest_table(
    tables: Sequence[AttentionTable], heads: int, kv_heads: int, head_dim: int, kv_dtype: str
) -> AttentionTable:
    """The table of a configuration, else the nearest measured one (``AttentionTable.distance``)."""
    return min(tables, key=lambda t: t.distance(heads, kv_heads, head_dim, kv_dtype))


def read_attention(
    table: AttentionTable,
    phase: Phase,
    batch: float,
    seq: float,
    heads: int,
    kv_heads: int,
    head_dim: int,
    kv_dtype: str,
) -> Lookup:
    """One fused attention kernel read off `table`. A configuration the table did not measure is
    read at the batch that does the same work (``attention_work``): the kernel's thread blocks
    run over (sequence, head) pairs, so twice the heads is twice the sequences, and a small shape
    keeps the launch floor that scaling the time would multiply. Extrapolated then (``inside``
    False)."""
    work, exact = batch_factor(table, phase, heads, kv_heads, head_dim, kv_dtype)
    got = table.grid(batch * work, seq)
    return got if exact else Lookup(got.time_s, False)


def batch_factor(
    table: AttentionTable, phase: Phase, heads: int, kv_heads: int, head_dim: int, kv_dtype: str
) -> tuple[float, bool]:
    """(the factor on the batch a configuration is read at on `table`, whether it is the table's
    own): 1 on its own table, else the ratio of the work (``attention_work``)."""
    if (table.heads, table.kv_heads, table.head_dim, table.kv_dtype) == (heads, kv_heads, head_dim, kv_dtype):
        return 1.0, True
    work = attention_work(phase, heads, kv_heads, head_dim, kv_dtype) / attention_work(
        phase, table.heads, table.kv_heads, table.head_dim, table.kv_dtype
    )
    return work, False


@dataclass(frozen=True)
class MoETable:
    """One measured MoE configuration: a layer's routed experts by tokens (``moe.json``). At
    ``ep`` or ``tp`` above 1 (TensorRT-LLM's collection, ``moe_ep_size``, ``moe_tp_size``) one
    GPU's share of the layer: ``experts / ep`` local experts of width ``inter / tp``, `tokens`
    the tokens entering the op (every token of the EP group, routed over all ``experts``; the
    GPU runs the rows its local experts receive, ``tokens x topk / ep`` balanced), the
    dispatch and combine left out."""

    dtype: str
    hidden: int
    inter: int
    experts: int
    topk: int
    grid: Grid  # (tokens,)
    framework: str | None = None  # None: the folder's default table (moe.json)
    ep: int = 1
    tp: int = 1

    @property
    def op(self) -> str:
        """The op class read: ``moe/bf16``, ``moe/fp8@trtllm`` (``framework_op``)."""
        return framework_op(f"moe/{self.dtype}", self.framework)

    @property
    def local(self) -> tuple[int, int, int, int]:
        """One GPU's configuration: (hidden, inter / tp, experts / ep, top_k)."""
        return self.hidden, self.inter // self.tp, self.experts // self.ep, self.topk

    def distance(self, hidden: int, inter: int, experts: int, topk: int) -> float:
        """How far a configuration is from this one: an expert's work (hidden x inter) and the
        experts first (the weights streamed), then top_k and the aspect."""
        return (
            2 * abs(math.log(hidden * inter / (self.hidden * self.inter)))
            + 2 * abs(math.log(experts / self.experts))
            + abs(math.log(topk / self.topk))
            + 0.5 * abs(math.log(hidden / self.hidden))
        )

    def exact(self, hidden: int, inter: int, experts: int, topk: int) -> bool:
        """Whether one GPU's configuration (its local experts and width) is this table's."""
        return self.local == (hidden, inter, experts, topk)


def moe_scaling(
    table: MoETable, hidden: int, inter: int, experts: int, topk: int
) -> tuple[float, float]:
    """(factor on the tokens, factor on the time) a configuration of `experts` experts on one GPU
    is read at on `table`: as many rows per expert (tokens x top_k / experts, the routing
    balanced; an EP table's tokens are the EP group's, routed over all its experts, so its own
    local configuration reads at ``ep`` x the tokens), the time scaled by all the experts' work
    at those rows (experts x hidden x inter, the table's on one GPU): a grouped GEMM is one
    product per expert, each streaming its weights. (1, 1) on its own EP = TP = 1
    configuration. Left out, each measured configuration read off the nearest other: median
    3-5% on bf16 (docs/gpu-time.md)."""
    rows = (topk / experts) / (table.topk / table.experts)
    _, t_inter, t_experts, _ = table.local
    return rows, experts * hidden * inter / (t_experts * table.hidden * t_inter)


def read_moe(table: MoETable, tokens: float, hidden: int, inter: int, experts: int, topk: int) -> Lookup:
    """A MoE layer's experts over `tokens` tokens read off `table` (``moe_scaling``); another
    configuration's read is extrapolated (``inside`` False)."""
    per_token, per_time = moe_scaling(table, hidden, inter, experts, topk)
    got = table.grid(tokens * per_token)
    return got if table.exact(hidden, inter, experts, topk) else Lookup(got.time_s * per_time, False)


@dataclass(frozen=True)
class MLATable:
    """Latent attention's core at one KV cache dtype by (heads on the GPU, batch, seq)."""

    kv_dtype: str
    grid: Grid
    framework: str | None = None  # None: the folder's default table (mla.json)


def framework_op(op: str, framework: str | None) -> str:
    """An op class as read from a framework's own file (``moe/fp8@trtllm``); the default's bare."""
    return op if framework is None else f"{op}@{framework}"


#: The latent sizes an MLA table is measured at (its source names them): kv_lora_rank,
#: qk_rope_head_dim, qk_nope_head_dim, v_head_dim.
MLA_FIELDS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
#: Those of absorbed MLA's products (``pre``: d_n -> r_kv a head; ``post``: r_kv -> d_v).
MLA_BMM_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim")
MLA_BMM_OPS = ("pre", "post")


@dataclass(frozen=True)
class MLABmmTable:
    """One of absorbed MLA's per-head batched products at one dtype by (heads on the GPU, tokens):
    ``pre`` (each head's q_nope, tokens x d_n, @ its W_UK, d_n x r_kv) or ``post`` (each head's
    latent output, tokens x r_kv, @ its W_UV, r_kv x d_v), at the latent sizes ``dims``."""

    op: str
    dtype: str
    grid: Grid
    framework: str
    dims: tuple[int, ...]  # MLA_BMM_FIELDS

    @property
    def name(self) -> str:
        """The op class read: ``mla_bmm/fp8@trtllm`` (pre and post together)."""
        return framework_op(f"mla_bmm/{self.dtype}", self.framework)


def band_label(bands: Sequence[ErrorBand]) -> str:
    """An op class's bands in words: ``median 5% (worst 1.7x) vs sglang 0.5.14
    (sglang_torch_linear), 3% (worst 1.3x) vs trtllm ...``."""
    return "median " + ", ".join(f"{100 * b.median:.0f}% (worst {b.worst:.1f}x) {b.against}" for b in bands)


class KernelTables:
    """One GPU's measured tables (a folder like specs/kernels/<name>/), and where each came from.
    Each file is read and validated the first time a lookup needs it."""

    def __init__(self, folder: Path, framework: str | None = None) -> None:
        self.folder, self.name, self.framework = folder, folder.name, framework
        # (EP, TP) of the engine these tables are read for: a routed-experts read takes the
        # measured row of its configuration at that layout where one exists (``moe_table``)
        self.experts_layout = (1, 1)
        self._nearest: dict[tuple[str, int, int, int, str], AttentionTable] = {}  # a sweep asks again
        present = [f for f in FILES if (folder / f).is_file()]
        if not present:
            raise SpecError(f"{folder.name}: no kernel tables ({', '.join(FILES)})")

    @cached_property
    def _gemm(self) -> tuple[dict[str, Grid], dict[str, dict[str, Any]]]:
        return _read_gemm(self.folder / "gemm.json")

    @cached_property
    def _attention(self) -> tuple[dict[str, tuple[AttentionTable, ...]], dict[str, dict[str, Any]]]:
        return _read_attention(self.folder / "attention.json")

    @cached_property
    def _collectives(self) -> tuple[dict[str, Grid], dict[str, dict[str, Any]]]:
        return _read_collectives(self.folder / "collectives.json")

    @cached_property
    def _moe(self) -> tuple[dict[str, tuple[MoETable, ...]], dict[str, dict[str, Any]]]:
        tables, sources = _read_moe(self.folder / "moe.json")
        if self.framework is not None:  # its dtypes in place of the default's, the others kept
            own, own_sources = _read_moe(self.folder / f"moe.{self.framework}.json", self.framework)
            tables, sources = {**tables, **own}, {**sources, **own_sources}
        return tables, sources

    @cached_property
    def _moe_split(self) -> tuple[dict[str, tuple[MoETable, ...]], dict[tuple[Any, ...], MoETable]]:
        """(dtype -> the EP = TP = 1 tables; (dtype, ep, tp, hidden, inter, experts, top_k) -> an
        EP or TP table)."""
        single = {d: tuple(t for t in ts if (t.ep, t.tp) == (1, 1)) for d, ts in self._moe[0].items()}
        laid = {(d, t.ep, t.tp, t.hidden, t.inter, t.experts, t.topk): t
                for d, ts in self._moe[0].items() for t in ts if (t.ep, t.tp) != (1, 1)}
        return {d: ts for d, ts in single.items() if ts}, laid

    def laid_out(self, ep: int, tp: int) -> KernelTables:
        """These tables read for an engine whose experts run at EP `ep` and TP `tp` (the files
        read once, shared)."""
        if (ep, tp) == self.experts_layout:
            return self
        other = copy.copy(self)  # the cached files (in __dict__) are shared
        other.experts_layout = (ep, tp)
        return other

    @cached_property
    def _mla(self) -> tuple[dict[str, tuple[MLATable, ...]], dict[str, dict[str, Any]]]:
        tables, sources = _read_mla(self.folder / "mla.json")
        if self.framework is not None:  # its phases in place of the default's
            own, own_sources = _read_mla(self.folder / f"mla.{self.framework}.json", self.framework)
            tables, sources = {**tables, **own}, {**sources, **own_sources}
        return tables, sources

    @cached_property
    def _mla_bmm(self) -> tuple[dict[tuple[str, str], MLABmmTable], dict[str, dict[str, Any]]]:
        if self.framework is None:  # a framework's own kernels, with no default to stand in for
            return {}, {}
        return _read_mla_bmm(self.folder / f"mla_bmm.{self.framework}.json", self.framework)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks with tables of their own in the folder (``moe.<framework>.json``,
        ``mla.<framework>.json``, ``mla_bmm.<framework>.json``)."""
        names = {p.name.split(".")[1] for op in ("moe", "mla", "mla_bmm")
                 for p in self.folder.glob(f"{op}.*.json")}
        return tuple(sorted(names))

    @property
    def mla_bmm_tables(self) -> dict[tuple[str, str], MLABmmTable]:
        """(op, dtype) -> absorbed MLA's product ``pre`` or ``post`` by (heads, tokens); empty
        without a framework or where it measured none."""
        return self._mla_bmm[0]

    def mla_bmm_table(self, op: str, dtype: str) -> MLABmmTable | None:
        """Absorbed MLA's product `op` (``pre``, ``post``) measured at `dtype` (fp16 reads bf16's,
        fp8-block fp8's: TensorRT-LLM's fp8 products are block-scaled; nvfp4 bf16's: NVIDIA's FP4
        DeepSeek checkpoints leave kv_b unquantised, ``costmodel.precision``); None where not
        measured."""
        dtype = {"fp16": "bf16", "fp8-block": "fp8", "nvfp4": "bf16"}.get(dtype, dtype)
        return self.mla_bmm_tables.get((op, dtype))

    def mla_bmm(self, op: str, dtype: str, heads: float, tokens: float) -> Lookup | None:
        """Absorbed MLA's product `op` over `tokens` tokens of `heads` heads on the GPU, at the
        table's latent sizes (``MLABmmTable.dims``); None where not measured."""
        table = self.mla_bmm_table(op, dtype)
        return None if table is None else table.grid(heads, tokens)

    @property
    def moe_tables(self) -> dict[str, tuple[MoETable, ...]]:
        """dtype -> one tokens table per measured (hidden, inter, experts, top_k), EP = TP = 1."""
        return self._moe_split[0]

    @property
    def moe_parallel_tables(self) -> dict[tuple[Any, ...], MoETable]:
        """(dtype, ep, tp, hidden, inter, experts, top_k) -> one GPU's share of a configuration
        measured at EP or TP above 1 (``MoETable``)."""
        return self._moe_split[1]

    @property
    def mla_tables(self) -> dict[str, tuple[MLATable, ...]]:
        """phase -> one (heads, batch, seq) table per KV cache dtype measured."""
        return self._mla[0]

    @property
    def gemms(self) -> dict[str, Grid]:
        """dtype -> (M, N, K)."""
        return self._gemm[0]

    @property
    def attention_tables(self) -> dict[str, tuple[AttentionTable, ...]]:
        """phase -> one (batch, seq) table per measured configuration."""
        return self._attention[0]

    @property
    def collectives(self) -> dict[str, Grid]:
        """kind -> (gpus, bytes)."""
        return self._collectives[0]

    @property
    def sources(self) -> dict[str, dict[str, Any]]:
        """ "gemm/bf16", "attention/decode", "collectives" -> where the table came from."""
        return {**self._gemm[1], **self._attention[1], **self._collectives[1], **self._moe[1], **self._mla[1],
                **self._mla_bmm[1]}

    @cached_property
    def errors(self) -> dict[str, tuple[ErrorBand, ...]]:
        """op class ("gemm/bf16", "attention/decode", "collectives") -> the error its times showed
        in the cross-validation, one band per other measurement (errors.json, written by
        bench/kernel_validation.py)."""
        file = self.folder / "errors.json"
        if not file.is_file():
            return {}
        bands = _read(file).get("bands")
        if not isinstance(bands, dict):
            raise _bad(file, "file", "bands", "must be an object")
        out = {}
        for op, listed in bands.items():
            try:
                out[op] = tuple(
                    ErrorBand(float(b["median"]), float(b["worst"]), str(b["against"])) for b in listed
                )
            except (KeyError, TypeError, ValueError):
                raise _bad(file, op, "median, worst, against", "missing or not numbers") from None
            if not out[op] or not all(0 <= b.median < 100 and 1 <= b.worst < 1e6 for b in out[op]):
                raise _bad(file, op, "median, worst", "out of range")
        return out

    def error_label(self, op: str) -> str | None:
        """``gemm/bf16: median 5% (worst 1.7x) vs ...`` (``band_label``); None where none was measured."""
        bands = self.errors.get(op)
        return f"{op}: {band_label(bands)}" if bands else None

    def validate(self) -> KernelTables:
        """Read every file now (``SpecError`` on the first bad one)."""
        self._gemm, self._attention, self._collectives, self._moe, self._mla, self._mla_bmm, self.errors  # noqa: B018
        return self

    def gemm_dtype(self, dtype: str) -> str | None:
        """The measured GEMM table `dtype` reads: its own, fp16 bf16's (the same tensor cores at
        the same peak); None where neither was measured."""
        if dtype in self.gemms:
            return dtype
        return "bf16" if dtype == "fp16" and "bf16" in self.gemms else None

    def bands(self, dtypes: Iterable[str], used: Iterable[str]) -> dict[str, tuple[ErrorBand, ...]]:
        """The error bands of the tables a prediction read: each of `dtypes`' GEMMs
        (``gemm_dtype``; an FP8 checkpoint's head reads bf16's) and the op classes `used`."""
        gemms = sorted({f"gemm/{g}" for d in dtypes if (g := self.gemm_dtype(d))})
        return {op: self.errors[op] for op in [*gemms, *sorted(used)] if op in self.errors}

    def gemm(self, dtype: str, M: float, N: float, K: float) -> Lookup | None:
        """(M x K) @ (K x N) in `dtype` (``gemm_dtype``); None where not measured."""
        measured = self.gemm_dtype(dtype)
        return None if measured is None else self.gemms[measured](M, N, K)

    def attention_table(
        self, phase: Phase, heads: int, kv_heads: int, head_dim: int, kv_dtype: str = "bf16"
    ) -> tuple[AttentionTable, float, bool] | None:
        """The table a configuration reads (``nearest``): (table, the factor on the batch it is
        read at, exact); None when no table of the phase. Not exact: the nearest measured
        configuration at the batch that does the same work (``read_attention``)."""
        if not self.attention_tables.get(phase):
            return None
        table = self.nearest(phase, heads, kv_heads, head_dim, kv_dtype)
        return (table, *batch_factor(table, phase, heads, kv_heads, head_dim, kv_dtype))

    def attention(
        self,
        phase: Phase,
        batch: float,
        seq: float,
        heads: int,
        kv_heads: int,
        head_dim: int,
        kv_dtype: str = "bf16",
    ) -> Lookup | None:
        """One fused attention kernel over `batch` sequences; None when no table of the phase."""
        if not self.attention_tables.get(phase):
            return None
        return read_attention(
            self.nearest(phase, heads, kv_heads, head_dim, kv_dtype),
            phase,
            batch,
            seq,
            heads,
            kv_heads,
            head_dim,
            kv_dtype,
        )

    def nearest(
        self, phase: Phase, heads: int, kv_heads: int, head_dim: int, kv_dtype: str
    ) -> AttentionTable:
        """The phase's table a configuration reads (``nearest_table``), found once per configuration."""
        key = (phase, heads, kv_heads, head_dim, kv_dtype)
        if key not in self._nearest:
            self._nearest[key] = nearest_table(
                self.attention_tables[phase], heads, kv_heads, head_dim, kv_dtype
            )
        return self._nearest[key]

    def moe_table(self, dtype: str, hidden: int, inter: int, experts: int, topk: int) -> MoETable | None:
        """The MoE table one GPU's configuration (its local experts and width) reads at `dtype`
        (fp16 reads bf16's, as the GEMMs): at ``experts_layout`` (EP, TP) other than (1, 1), the
        row measured at that layout for the whole configuration (experts x EP, inter x TP) where
        one exists; else its own EP = TP = 1 table, else the nearest measured
        (``MoETable.distance``); None where the dtype has none."""
        if dtype == "fp16" and dtype not in self.moe_tables:
            dtype = "bf16"
        ep, tp = self.experts_layout
        if (ep, tp) != (1, 1):
            laid = self.moe_parallel_tables.get((dtype, ep, tp, hidden, inter * tp, experts * ep, topk))
            if laid is not None:
                return laid
        tables = self.moe_tables.get(dtype)
        if not tables:
            return None
        return min(tables, key=lambda t: t.distance(hidden, inter, experts, topk))

    def moe(
        self, dtype: str, tokens: float, hidden: int, inter: int, experts: int, topk: int
    ) -> Lookup | None:
        """A MoE layer's routed experts (gated: gate/up, activation, down, the weighted sum) over
        `tokens` tokens, `experts` of width `inter` on a model of width `hidden`, `topk` a token,
        no parallelism; None where not measured."""
        table = self.moe_table(dtype, hidden, inter, experts, topk)
        return None if table is None else read_moe(table, tokens, hidden, inter, experts, topk)

    def mla_table(self, phase: Phase, kv_dtype: str = "bf16") -> MLATable | None:
        """The phase's MLA table at the cache's dtype, else the bf16 one; None where none."""
        tables = {t.kv_dtype: t for t in self.mla_tables.get(phase, ())}
        return tables.get(kv_dtype) or tables.get("bf16")

    def mla_dims(self, phase: Phase) -> tuple[int, ...] | None:
        """The latent sizes the phase's MLA tables were measured at (``MLA_FIELDS``)."""
        tables = self.mla_tables.get(phase)
        source = self.sources.get(framework_op(f"mla/{phase}", tables[0].framework)) if tables else None
        return None if source is None else tuple(source[f] for f in MLA_FIELDS)

    def mla(
        self, phase: Phase, batch: float, seq: float, heads: float, kv_dtype: str = "bf16"
    ) -> Lookup | None:
        """Latent attention's core over `batch` sequences of `seq` tokens (prefill: the prompt;
        decode: the cache, the new token included) with `heads` query heads on the GPU, at the
        latent sizes of ``mla_dims``; None where the phase has no table. A cache dtype not
        measured reads bf16's (extrapolated)."""
        table = self.mla_table(phase, kv_dtype)
        if table is None:
            return None
        got = table.grid(heads, batch, seq)
        return got if table.kv_dtype == kv_dtype else Lookup(got.time_s, False)

    def collective(self, kind: str, gpus: int, nbytes: float) -> Lookup | None:
        """One NCCL collective of an `nbytes` message over `gpus` GPUs of one node: nccl-tests'
        size (all-reduce: the buffer; all-gather: the gathered output; reduce-scatter: the
        unreduced input; all-to-all: what one GPU sends in all). Past the measured GPU counts the
        time is held (``parallel.collectives`` scales it by its ring model there)."""
        grid = self.collectives.get(kind)
        return None if grid is None or gpus < 2 else grid(gpus, nbytes)

    def source(self, key: str) -> str:
        """A table's origin in a few words: framework and version, kernel, device (the file and the
        package are in ``sources``)."""
        # only the file the key names is read (``analyze --hardware`` names its GEMM table's
        # source: the attention and NCCL files are not read for it)
        if key.startswith("gemm/"):
            s = self._gemm[1].get(key)
        elif key.startswith("attention/"):
            s = self._attention[1].get(key)
        else:
            s = self._collectives[1].get(key)
        if s is None:
            return f"{self.name} {key}: not measured"
        return f"{s.get('framework')} {s.get('version')} {s.get('kernel')} on {s.get('device', self.name)}"


# --- reading a folder -------------------------------------------------------------------------


def kernels_root() -> Path:
    from costmodel.catalog import specs_dir

    return specs_dir() / "kernels"


def _bad(file: Path, table: str, field: str, problem: str) -> SpecError:
    return SpecError(f"{file.name}: {table}: {field}: {problem}")


def _grid(file: Path, table: str, data: Any, names: Sequence[str], growth: Sequence[float]) -> Grid:
    if not isinstance(data, dict):
        raise _bad(file, table, "table", "must be an object")
    for field in ("axes", "time_s"):
        if field not in data:
            raise _bad(file, table, field, "missing")
    axes = data["axes"]
    if not isinstance(axes, dict) or list(axes) != list(names):
        raise _bad(file, table, "axes", f"must be {', '.join(names)} in that order")
    for name in names:
        a = axes[name]
        if (
            not isinstance(a, list)
            or not a
            or not all(_number(x) and x > 0 for x in a)
            or any(b <= c for c, b in zip(a, a[1:], strict=False))
        ):
            raise _bad(file, table, f"axes.{name}", "must be positive, finite and strictly increasing")
    times = data["time_s"]
    n = math.prod(len(axes[name]) for name in names)
    if not isinstance(times, list) or len(times) != n:
        raise _bad(file, table, "time_s", f"must hold {n} values (the product of the axes)")
    try:  # NaN and Infinity were refused by the parser: min and sum see numbers or fail
        ok = min(times) > 0 and math.isfinite(math.fsum(times))
    except TypeError:
        ok = False
    if not ok:
        raise _bad(file, table, "time_s", "every time must be a positive, finite number")
    filled = data.get("filled", [])
    if not isinstance(filled, list) or not all(isinstance(i, int) and 0 <= i < n for i in filled):
        raise _bad(file, table, "filled", f"must be indices below {n}")
    return Grid([axes[name] for name in names], times, filled, growth, f"{file.name}: {table}")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a table may hold")


def _read(file: Path) -> dict[str, Any]:
    from costmodel.loading import LoadError, read_text

    try:
        data = json.loads(read_text(file, "kernel table"), parse_constant=_no_constant)
    except LoadError as e:
        raise SpecError(str(e)) from None
    except ValueError as e:
        raise SpecError(f"{file.name}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{file.name}: must be a JSON object")
    return data


FILES = ("gemm.json", "attention.json", "collectives.json", "moe.json", "mla.json")


def read_kernels(folder: Path, framework: str | None = None) -> KernelTables:
    """A folder's tables (with `framework`'s own where it has them), every file validated now
    (``SpecError`` naming the file, table and field)."""
    return KernelTables(folder, framework).validate()


def _read_gemm(file: Path) -> tuple[dict[str, Grid], dict[str, dict[str, Any]]]:
    gemms: dict[str, Grid] = {}
    sources: dict[str, dict[str, Any]] = {}
    if file.is_file():
        for i, t in enumerate(_list(file, _read(file), "tables")):
            dtype = t.get("dtype")
            if not isinstance(dtype, str):
                raise _bad(file, f"tables[{i}]", "dtype", "missing")
            gemms[dtype] = _grid(file, f"tables[{i}] ({dtype})", t, ("M", "N", "K"), (1, 1, 1))
            sources[f"gemm/{dtype}"] = t.get("source", {})
    return gemms, sources


def _read_attention(file: Path) -> tuple[dict[str, tuple[AttentionTable, ...]], dict[str, dict[str, Any]]]:
    attention: dict[str, tuple[AttentionTable, ...]] = {}
    sources: dict[str, dict[str, Any]] = {}
    if not file.is_file():
        return attention, sources
    data = _read(file)
    for phase in ("prefill", "decode"):
        if phase not in data:
            continue
        block = data[phase]
        sources[f"attention/{phase}"] = block.get("source", {}) if isinstance(block, dict) else {}
        tables = []
        for i, t in enumerate(_list(file, block, "tables")):
            where = f"{phase}.tables[{i}]"
            for field in ("head_dim", "heads", "kv_heads"):
                if not isinstance(t.get(field), int) or t[field] <= 0:
                    raise _bad(file, where, field, "must be a positive integer")
            if not isinstance(t.get("kv_dtype"), str):
                raise _bad(file, where, "kv_dtype", "missing")
            growth = (1, 2 if phase == "prefill" else 1)  # causal prefill: S^2/2 pairs
            tables.append(
                AttentionTable(
                    t["head_dim"],
                    t["heads"],
                    t["kv_heads"],
                    t["kv_dtype"],
                    _grid(file, where, t, ("batch", "seq"), growth),
                )
            )
        attention[phase] = tuple(tables)
    return attention, sources


def _read_collectives(file: Path) -> tuple[dict[str, Grid], dict[str, dict[str, Any]]]:
    collectives: dict[str, Grid] = {}
    sources: dict[str, dict[str, Any]] = {}
    if file.is_file():
        data = _read(file)
        sources["collectives"] = data.get("source", {})
        for i, t in enumerate(_list(file, data, "tables")):
            kind = t.get("kind")
            if kind not in KINDS:
                raise _bad(file, f"tables[{i}]", "kind", f"must be one of {', '.join(KINDS)}")
            collectives[kind] = _grid(file, f"tables[{i}] ({kind})", t, ("gpus", "bytes"), (0, 1))
    return collectives, sources


def _read_moe(
    file: Path, framework: str | None = None
) -> tuple[dict[str, tuple[MoETable, ...]], dict[str, dict[str, Any]]]:
    moe: dict[str, tuple[MoETable, ...]] = {}
    sources: dict[str, dict[str, Any]] = {}
    if not file.is_file():
        return moe, sources
    for i, t in enumerate(_list(file, _read(file), "tables")):
        dtype = t.get("dtype")
        if not isinstance(dtype, str):
            raise _bad(file, f"tables[{i}]", "dtype", "missing")
        sources[framework_op(f"moe/{dtype}", framework)] = t.get("source", {})
        tables = []
        for j, c in enumerate(_list(file, t, "configs")):
            where = f"tables[{i}] ({dtype}).configs[{j}]"
            layout = {"ep": c.get("ep", 1), "tp": c.get("tp", 1)}  # absent: one GPU, no parallelism
            for field, value in (*((f, c.get(f)) for f in ("hidden", "inter", "experts", "topk")),
                                 *layout.items()):
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise _bad(file, where, field, "must be a positive integer")
            if c["topk"] > c["experts"]:
                raise _bad(file, where, "topk", f"{c['topk']} experts a token, but only {c['experts']}")
            for field, whole in (("ep", "experts"), ("tp", "inter")):
                if c[whole] % layout[field]:
                    raise _bad(file, where, field, f"{layout[field]} does not divide {whole} {c[whole]}")
            grid = _grid(file, where, c, ("tokens",), (1,))
            tables.append(MoETable(dtype, c["hidden"], c["inter"], c["experts"], c["topk"], grid, framework,
                                   layout["ep"], layout["tp"]))
        moe[dtype] = tuple(tables)
    return moe, sources


def _read_mla(
    file: Path, framework: str | None = None
) -> tuple[dict[str, tuple[MLATable, ...]], dict[str, dict[str, Any]]]:
    mla: dict[str, tuple[MLATable, ...]] = {}
    sources: dict[str, dict[str, Any]] = {}
    if not file.is_file():
        return mla, sources
    data = _read(file)
    for phase in ("prefill", "decode"):
        if phase not in data:
            continue
        block = data[phase]
        source = block.get("source") if isinstance(block, dict) else None
        if not isinstance(source, dict):
            raise _bad(file, phase, "source", "must be an object naming the latent sizes")
        for field in MLA_FIELDS:
            if not isinstance(source.get(field), int) or source[field] <= 0:
                raise _bad(file, phase, f"source.{field}", "must be a positive integer")
        sources[framework_op(f"mla/{phase}", framework)] = source
        tables = []
        for i, t in enumerate(_list(file, block, "tables")):
            where = f"{phase}.tables[{i}]"
            if not isinstance(t.get("kv_dtype"), str):
                raise _bad(file, where, "kv_dtype", "missing")
            growth = (1, 1, 2 if phase == "prefill" else 1)  # heads, batch; a causal prefill's S^2/2 pairs
            grid = _grid(file, where, t, ("heads", "batch", "seq"), growth)
            tables.append(MLATable(t["kv_dtype"], grid, framework))
        mla[phase] = tuple(tables)
    return mla, sources


def _read_mla_bmm(
    file: Path, framework: str
) -> tuple[dict[tuple[str, str], MLABmmTable], dict[str, dict[str, Any]]]:
    tables: dict[tuple[str, str], MLABmmTable] = {}
    sources: dict[str, dict[str, Any]] = {}
    if not file.is_file():
        return tables, sources
    for i, t in enumerate(_list(file, _read(file), "tables")):
        where = f"tables[{i}]"
        if t.get("op") not in MLA_BMM_OPS:
            raise _bad(file, where, "op", f"must be one of {', '.join(MLA_BMM_OPS)}")
        if not isinstance(t.get("dtype"), str):
            raise _bad(file, where, "dtype", "missing")
        source = t.get("source")
        if not isinstance(source, dict):
            raise _bad(file, where, "source", "must be an object naming the latent sizes")
        for field in MLA_BMM_FIELDS:
            if not isinstance(source.get(field), int) or source[field] <= 0:
                raise _bad(file, where, f"source.{field}", "must be a positive integer")
        grid = _grid(file, f"{where} ({t['op']}, {t['dtype']})", t, ("heads", "tokens"), (1, 1))
        table = MLABmmTable(t["op"], t["dtype"], grid, framework, tuple(source[f] for f in MLA_BMM_FIELDS))
        tables[(table.op, table.dtype)] = table
        sources.setdefault(table.name, source)  # pre's; post's names the same file and version
    return tables, sources


def _list(file: Path, data: Any, field: str) -> list[dict[str, Any]]:
    items = data.get(field) if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(t, dict) for t in items):
        raise _bad(file, "file", field, "must be a list of tables")
    return items


def load_kernels(name: str, framework: str | None = None, experts: tuple[int, int] = (1, 1)) -> KernelTables:
    """The bundled tables of `name` (a folder of specs/kernels/), each file read once per process
    when first needed; with `framework`, its own MoE and MLA tables where the folder has them
    (``moe.<framework>.json``), the defaults elsewhere; `experts`: the (EP, TP) the routed
    experts run at (``KernelTables.moe_table``)."""
    if experts != (1, 1):
        return _laid_out(name, framework, experts)
    return _load_kernels(name, framework)  # one cache key however the framework is passed


@lru_cache(maxsize=64)
def _laid_out(name: str, framework: str | None, experts: tuple[int, int]) -> KernelTables:
    return _load_kernels(name, framework).laid_out(*experts)


@lru_cache(maxsize=16)
def _load_kernels(name: str, framework: str | None) -> KernelTables:
    folder = kernels_root() / name
    if not name or "/" in name or "\\" in name or name.startswith(".") or not folder.is_dir():
        names = (
            sorted(p.name for p in kernels_root().iterdir() if p.is_dir()) if kernels_root().is_dir() else []
        )
        raise SpecError(f"kernels: no measured tables named {name!r} (have {', '.join(names) or 'none'})")
    return KernelTables(folder, framework)
