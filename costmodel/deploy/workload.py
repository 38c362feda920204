"""A serving workload: prompt and output length distributions, and how requests arrive.

Validated at the edge: every problem is one ``AnalysisError`` line naming the option
(``--seq``, ``--output-tokens``, ``--concurrency``, ``--rate``), which the CLI turns into
exit code 2.

- **Lengths** (``parse_lengths``): ``1024`` (every request the same), ``512..2048`` (uniform
  over the integers lo..hi, each equally likely), or a histogram file: CSV lines
  ``length,weight`` (a header line allowed) or JSON, ``{"1024": 3, "2048": 1}`` or
  ``[[1024, 3], [2048, 1]]``. Quantiles are deterministic: the q-quantile is the least length
  whose cumulative weight reaches q (the inverse of the distribution function), so the same
  input gives the same numbers, with no sampling.
- **Arrivals**: a concurrency (closed loop: each finished request is replaced at once, as
  ``trtllm-bench`` and vLLM's ``benchmark_serving.py --max-concurrency`` run their
  max-throughput measurements), or a rate in requests per second (open loop, Poisson
  arrivals), or neither (each deployment at its engine's max batch: the max-throughput run).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from costmodel.errors import AnalysisError
from costmodel.spec import Spec

MAX_LENGTH = 1 << 24  # tokens: no spec's context is longer
MAX_BINS = 100_000  # distinct lengths in one histogram file or range


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts: distinct `values`, ascending, with `weights` summing to 1."""

    values: tuple[int, ...]
    weights: tuple[float, ...]
    label: str  # as given: "1024", "512..2048", "lengths.csv"

    @property
    def fixed(self) -> bool:
        return len(self.values) == 1

    @property
    def lo(self) -> int:
        return self.values[0]

    @property
    def hi(self) -> int:
        return self.values[-1]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.values, dtype=float), np.asarray(self.weights, dtype=float)

    @property
    def mean(self) -> float:
        v, w = self.arrays()
        return float(v @ w)

    def quantile(self, q: float) -> int:
        """The least length whose cumulative weight reaches `q` (0 < q <= 1)."""
        cum = np.cumsum(self.weights)
        i = int(np.searchsorted(cum, q * cum[-1] - 1e-12))
        return self.values[min(i, len(self.values) - 1)]

    def bins(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """At most `n` representative lengths and their weights: the distribution itself when it
        has that few values, else the (i + 0.5)/n quantiles, weight 1/n each."""
        if len(self.values) <= n:
            return self.arrays()
        return (np.array([self.quantile((i + 0.5) / n) for i in range(n)], dtype=float),
                np.full(n, 1.0 / n))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"given": self.label, "mean": self.mean, "min": self.lo, "max": self.hi}
        if not self.fixed:
            out.update({f"p{q}": self.quantile(q / 100) for q in (50, 90, 99)})
        return out


def fixed(n: int) -> Lengths:
    return Lengths((n,), (1.0,), str(n))


def parse_lengths(text: str, option: str) -> Lengths:
    """``1024``, ``512..2048`` or a histogram file (module docstring); one line naming `option`
    for anything else."""
    text = text.strip()
    lo, dots, hi = text.partition("..")
    bad = (f"{option}: {text!r} is not a length (1024), a range (512..2048) or a histogram file (CSV "
           "length,weight or JSON)")
    if dots:
        try:
            a, b = int(lo), int(hi)
        except ValueError:
            raise AnalysisError(bad) from None
        _in_range(option, a)
        _in_range(option, b)
        if b < a:
            raise AnalysisError(f"{option}: {text!r}: the range's upper end is below its lower end")
        if b - a >= MAX_BINS:
            raise AnalysisError(f"{option}: {text!r}: at most {MAX_BINS:,} lengths in a range")
        n = b - a + 1
        return Lengths(tuple(range(a, b + 1)), (1.0 / n,) * n, text)
    if text.isdigit() or (text[:1] == "-" and text[1:].isdigit()):
        _in_range(option, int(text))
        return fixed(int(text))
    return _histogram(Path(text), option, bad)


def _in_range(option: str, n: int) -> None:
    if not 1 <= n <= MAX_LENGTH:
        raise AnalysisError(f"{option}: every length must be at least 1 token and at most {MAX_LENGTH:,} "
                            f"(got {n:,})")


def _histogram(path: Path, option: str, bad: str) -> Lengths:
    """A histogram file: CSV ``length,weight`` lines (a header allowed) or JSON."""
    if not path.is_file():
        raise AnalysisError(f"{bad}: no such file")
    try:
        raw = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise AnalysisError(f"{option}: {path}: cannot be read as text ({type(e).__name__})") from None
    pairs = _json_pairs(raw) if path.suffix.lower() == ".json" else _csv_pairs(raw)
    if pairs is None:
        raise AnalysisError(f"{option}: {path}: not a histogram: expected CSV lines `length,weight` or "
                            "JSON {\"length\": weight, ...} / [[length, weight], ...]")
    merged: dict[int, float] = {}
    for length, weight in pairs:
        _in_range(option, length)
        if not (math.isfinite(weight) and weight >= 0):
            raise AnalysisError(f"{option}: {path}: the weight of length {length} must be a finite number "
                                f">= 0 (got {weight:g})")
        merged[length] = merged.get(length, 0.0) + weight
    total = sum(merged.values())
    if not merged or total <= 0:
        raise AnalysisError(f"{option}: {path}: not a histogram: no length has a positive weight")
    if len(merged) > MAX_BINS:
        raise AnalysisError(f"{option}: {path}: {len(merged):,} distinct lengths; at most {MAX_BINS:,}")
    keys = sorted(k for k, w in merged.items() if w > 0)
    return Lengths(tuple(keys), tuple(merged[k] / total for k in keys), path.name)


def _number_pair(a: Any, b: Any) -> tuple[int, float] | None:
    try:
        length, weight = float(a), float(b)
    except (TypeError, ValueError):
        return None
    if isinstance(a, bool) or isinstance(b, bool) or not length.is_integer():
        return None
    return int(length), weight


def _csv_pairs(raw: str) -> list[tuple[int, float]] | None:
    rows = [r for r in csv.reader(io.StringIO(raw)) if r and any(c.strip() for c in r)]
    if rows and _number_pair(*(rows[0] + ["", ""])[:2]) is None:
        rows = rows[1:]  # a header
    out = []
    for r in rows:
        got = _number_pair(*r) if len(r) == 2 else None
        if got is None:
            return None
        out.append(got)
    return out or None


def _json_pairs(raw: str) -> list[tuple[int, float]] | None:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return None
    items = list(data.items()) if isinstance(data, dict) else data
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        got = _number_pair(*item) if isinstance(item, (list, tuple)) and len(item) == 2 else None
        if got is None:
            return None
        out.append(got)
    return out or None


@dataclass(frozen=True)
class Workload:
    """Requests of `prompt` and `output` lengths, arriving at `concurrency` (closed loop) or
    `rate` requests/s (open loop) across the whole deployment; neither: each deployment at its
    engine's max batch (closed loop, the max-throughput run)."""

    prompt: Lengths
    output: Lengths
    concurrency: int | None = None
    rate: float | None = None

    def check(self, spec: Spec) -> None:
        """One line naming the option for a workload `spec` cannot serve."""
        if self.concurrency is not None and self.rate is not None:
            raise AnalysisError("--concurrency and --rate: give one (a closed loop or an open one), not both")
        if self.concurrency is not None and not 1 <= self.concurrency <= 1 << 30:
            raise AnalysisError(f"--concurrency: must be at least 1 request in flight "
                                f"(got {self.concurrency})")
        if self.rate is not None and not (math.isfinite(self.rate) and 0 < self.rate <= 1e9):
            raise AnalysisError(f"--rate: must be a finite number of requests/s above 0 (got {self.rate:g})")
        longest = self.prompt.hi + self.output.hi
        if longest > spec.max_seq_len:
            raise AnalysisError(f"--seq and --output-tokens: the longest request, {self.prompt.hi:,} "
                                f"prompt + {self.output.hi:,} output = {longest:,} tokens, is past "
                                f"{spec.name}'s context of {spec.max_seq_len:,}")

    @property
    def arrival(self) -> str:
        if self.rate is not None:
            return f"open loop, {self.rate:g} requests/s"
        if self.concurrency is not None:
            return f"closed loop, {self.concurrency} requests in flight"
        return "closed loop at each engine's max batch (max throughput)"

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt.to_dict(), "output_tokens": self.output.to_dict(),
                "concurrency": self.concurrency, "rate_per_s": self.rate, "arrival": self.arrival}
