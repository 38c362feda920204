"""Serving: time to first token, time per output token, latency and throughput over batch.

A request is a prompt of P tokens and O generated tokens, B requests batched together:
- **TTFT** (time to first token): one prefill over B x P tokens. In serving only the last
  position's logits are computed (``logits_to_keep=1`` in HF's ``generate``), so by default the
  head (``head_scale``, ``lm_head``, ``logit_scale``, ``logit_softcap``) is charged over B
  tokens, not B x P; ``all_logits=True`` keeps the HF forward's convention (every position).
- **TPOT** (time per output token): decode step j = 1 .. O-1 has P + j - 1 tokens cached and
  attends to P + j, so it grows with the context. The mean is the integral of the step time
  over the O - 1 steps, by the trapezoid rule on at most ``SAMPLES`` evenly spaced steps (the
  step time is smooth in the context); first and last are the steps j = 1 and O - 1.
- **latency** = TTFT + (O - 1) x mean TPOT; **tokens/s per device** = B x O / latency.
An encoder-decoder encodes the prompt (S_e = P) and starts its decoder from one token.
Latent attention (MLA) runs in ``mla``'s convention (``costmodel.components.mla``): ``naive``
(the cached latent re-expanded every step, as transformers runs it) or ``absorbed`` (W_UK and
W_UV folded into query and output, as DeepSeek's kernels run it); the cache is the latent in
both, so only the time changes.

Each phase's time is ``costmodel.runtime.timing.predict``: calibrated when the profile has efficiency
tables, else the roofline (and the result says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from costmodel import units
from costmodel.analysis import Analysis, AnalysisError, analyze, require_decode
from costmodel.components.key import Role
from costmodel.devices.hardware import Hardware
from costmodel.devices.kernels import ErrorBand, Reads
from costmodel.precision import Widths
from costmodel.runtime.kernels import KERNELS, default_kernels, default_mla
from costmodel.runtime.kernels import to_dict as kernels_dict
from costmodel.runtime.roofline import fit, roofline
from costmodel.runtime.timing import Kernels, Prediction, predict
from costmodel.spec import Spec

#: Components after the last hidden state (``Role.head``): computed for the last position only in
#: serving. Their paths, for readers; the code selects them by role.
HEAD = ("head_scale", "lm_head", "logit_scale", "logit_softcap")
SAMPLES = 9  # decode steps evaluated per request (the ends included)


@dataclass(frozen=True)
class ServingPoint:
    batch: int
    ttft_s: float
    tpot_s: float | None  # mean over the O - 1 decode steps (None when O = 1)
    tpot_first_s: float | None
    tpot_last_s: float | None
    latency_s: float
    tokens_per_s: float  # B x O / latency, per device
    fits: bool | None  # weights + KV cache at the last step within device memory (roofline.fit)
    held: int = 0  # those bytes: weights + KV cache at the last step

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "tpot_first_s": self.tpot_first_s, "tpot_last_s": self.tpot_last_s,
                "latency_s": self.latency_s, "tokens_per_s": self.tokens_per_s, "fits": self.fits}


@dataclass(frozen=True)
class Serving:
    spec: Spec
    hardware: Hardware
    dtype: str
    prompt: int
    output: int
    all_logits: bool
    kernels: Kernels
    calibrated: bool
    points: tuple[ServingPoint, ...]
    note: str | None
    mla: str = "naive"  # the convention latent attention runs in (components.mla)
    precision: Widths = Widths()  # the weights' and the KV cache's widths
    kernels_default: bool = False  # the kernels are the device's default (runtime.kernels)
    # The measured tables' error bands and the extrapolated lookups of every phase timed
    # (``timing.Prediction.errors``, ``.extrapolated``).
    errors: dict[str, tuple[ErrorBand, ...]] = field(default_factory=dict)
    extrapolated: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.name, "hardware": self.hardware.name, "dtype": self.dtype,
            "weights_dtype": self.precision.weights or self.dtype,
            "kv_dtype": self.precision.kv or self.dtype,
            "prompt": self.prompt, "output": self.output,
            "logits": "all positions" if self.all_logits else "last position only",
            **({"mla_convention": self.mla} if self.spec.mla is not None else {}),
            "kernels": kernels_dict(self.kernels, self.kernels_default), "calibrated": self.calibrated,
            "note": self.note,
            **Reads(self.errors, self.extrapolated).to_dict(),
            "batches": [p.to_dict() for p in self.points],
        }

    def unrunnable(self) -> str | None:
        """Why no batch size asked for can run (weights and the KV cache of the smallest past the
        device's memory), in one line; None when one can."""
        if not self.points or any(p.fits is not False for p in self.points):
            return None
        p = min(self.points, key=lambda q: q.batch)
        return (f"{self.spec.name} does not fit on one {self.hardware.name} at any batch asked for: batch "
                f"{p.batch} holds {units.decimal_bytes(p.held)} of weights and KV cache on "
                f"{units.decimal_bytes(self.hardware.memory_bytes)}")


MAX_BATCHES = 64  # batch sizes in one list: each is a full serving run
MAX_BATCH = 2**40  # sequences in one batch


def parse_batches(text: str, option: str = "batch") -> tuple[int, ...]:
    """'1,8,64' -> (1, 8, 64); one clear error for anything else: not integers, more than
    MAX_BATCHES of them (20,000 took minutes), one below 1 or above MAX_BATCH."""
    items = text.split(",")
    shown = text if len(text) <= 60 else text[:57] + "..."
    if len(items) > MAX_BATCHES:
        raise AnalysisError(f"{option}: {len(items):,} batch sizes; at most {MAX_BATCHES} in one list")
    try:
        values = tuple(int(v) for v in items if len(v.strip()) <= 100)
    except ValueError:
        values = ()
    if len(values) != len(items):
        raise AnalysisError(f"{option}: {shown!r} is not a comma-separated list of integers "
                            "(e.g. 1,8,64)")
    bad = [v for v in values if v < 1]
    if bad:
        raise AnalysisError(f"{option}: every batch size must be at least 1 (got {bad[0]} in {shown!r})")
    big = [v for v in values if v > MAX_BATCH]
    if big:
        raise AnalysisError(f"{option}: every batch size must be at most {MAX_BATCH:,} (got {big[0]:,})")
    return values


def _time(p: Prediction, a: Analysis, hw: Hardware, head: bool) -> float:
    """The phase's time of the head's components (`head`), or of all the others."""
    if p.calibrated:
        return sum(r.time_s for r in p.rows if (r.key.role is Role.head) == head)
    kept = [r for r in a.rows if (r.key.role is Role.head) == head]
    return roofline(sum(r.flops for r in kept), sum(r.bytes_unfused for r in kept), hw, a.dtype).time_s


def serve(spec: Spec, hw: Hardware, prompt: int, output: int, batches: tuple[int, ...], dtype: str = "bf16",
          all_logits: bool = False, kernels: Kernels | None = None, mla: str | None = None,
          precision: Widths = Widths(), kernels_default: bool | None = None) -> Serving:
    """TTFT, TPOT, latency and tokens/s of `spec` on `hw` for each batch size (latent attention
    in the `mla` convention; weights and KV cache at `precision`'s widths). Without `kernels` or
    `mla`, what `hw` runs (``runtime.kernels``: flash attention and absorbed latent attention on
    a GPU, eager and naive on a calibrated profile); `kernels_default` says the caller's came
    from there too."""
    require_decode(spec, "serving")
    if kernels_default is None:
        kernels_default = kernels is None
    if kernels is None:
        kernels = KERNELS[default_kernels(hw, "serve")]
    if mla is None:
        mla = default_mla(hw)
    if prompt < 1:
        raise AnalysisError(f"prompt: must be at least 1 token (got {prompt})")
    if output < 1:
        raise AnalysisError(f"output: must be at least 1 token (got {output})")
    if not batches or min(batches) < 1:
        raise AnalysisError("batch: every batch size must be at least 1")
    hw.peak(dtype)
    encdec = spec.is_encoder_decoder

    def decode(B: int, j: int) -> tuple[Analysis, Prediction]:
        """Decode step j (1-based): P + j - 1 tokens cached (encoder-decoder: j decoder tokens)."""
        a = analyze(spec, "decode", batch=B, seq=j if encdec else prompt + j - 1, dtype=dtype,
                    enc_seq=prompt if encdec else None, mla=mla, **widths)
        return a, predict(a, hw, kernels)

    widths = precision.options()
    points = []
    probes: list[Prediction] = []  # the first decode step's: the tables in use, or why not
    timed: list[Prediction] = []  # the prefills, with the probes and last steps: bands, extrapolation
    for B in batches:
        pre = analyze(spec, "prefill", batch=B, seq=1 if encdec else prompt, dtype=dtype,
                      enc_seq=prompt if encdec else None, mla=mla, **widths)
        p_pre = predict(pre, hw, kernels)
        first = decode(B, 1)
        probes.append(first[1])
        timed.append(p_pre)
        if all_logits or encdec:  # an encoder-decoder's prefill has one decoder position already
            ttft = p_pre.time_s
        else:  # the head over the last position: the decode step's head (B tokens, same weights)
            ttft = _time(p_pre, pre, hw, head=False) + _time(first[1], first[0], hw, head=True)
        steps = output - 1
        last = first
        decode_total = 0.0
        tpot = tpot_first = tpot_last = None
        if steps:
            # 1 .. steps, in exact arithmetic (a float quotient misses the last step past 2^53)
            js = sorted({1 + round(Fraction(i * (steps - 1), SAMPLES - 1)) for i in range(SAMPLES)})
            times = {1: first[1].time_s}
            for j in js[1:]:
                last = decode(B, j)
                times[j] = last[1].time_s
            decode_total = _integrate(js, times)
            tpot, tpot_first, tpot_last = decode_total / steps, times[1], times[steps]
        latency = ttft + decode_total
        timed.append(last[1])
        points.append(ServingPoint(B, ttft, tpot, tpot_first, tpot_last, latency, B * output / latency,
                                   fits(last[0], hw), last[0].bytes_weights + last[0].total().kv_cache))
    reads = Reads.union(timed + probes)
    return Serving(spec, hw, dtype, prompt, output, all_logits, kernels, probes[0].calibrated, tuple(points),
                   probes[0].note, mla, precision, kernels_default, dict(reads.errors),
                   tuple(sorted(reads.extrapolated)))


def _integrate(js: list[int], times: dict[int, float]) -> float:
    """Sum of the step times over steps js[0] .. js[-1], linear between the sampled steps."""
    total = times[js[0]]
    for j0, j1 in zip(js, js[1:], strict=False):
        # steps j0+1 .. j1: sum_{i=1}^{n} t0 + (t1 - t0) i / n = n t0 + (t1 - t0)(n + 1) / 2
        n = j1 - j0
        total += n * times[j0] + (times[j1] - times[j0]) * (n + 1) / 2
    return total


def fits(a: Analysis, hw: Hardware) -> bool | None:
    """Hook for the memory model: whether weights and the KV cache of the last decode step fit
    in device memory (``roofline.fit``; activations and workspace are not counted yet). None
    when the phase keeps no cache."""
    try:
        return a.batch <= fit(a, hw).max_batch
    except AnalysisError:
        return None
