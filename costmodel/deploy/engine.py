"""A serving engine as vLLM, TensorRT-LLM and SGLang run one: its settings, its memory in pages,
and the steady state of continuous batching with chunked prefill.

**Settings** (``Engine``), named as the engines name them:

- ``block``: tokens per KV-cache page (vLLM's ``--block-size``, default 16; TensorRT-LLM's
  ``tokens_per_block``, default 32). We take vLLM's 16 (PagedAttention, Kwon et al. 2023).
- ``memory_fraction``: the share of device memory the engine may hold (vLLM's
  ``--gpu-memory-utilization``, default 0.9). vLLM's rule: the KV cache gets what is left of
  that share after the weights and the activations' peak. (TensorRT-LLM's
  ``free_gpu_memory_fraction`` is a share of what is free after them instead.)
- ``max_batch``: sequences in flight per engine (vLLM's ``--max-num-seqs``, TensorRT-LLM's
  ``max_batch_size``).
- ``max_tokens``: the token budget of one step, decode tokens and prefill chunk together
  (vLLM's ``--max-num-batched-tokens``, TensorRT-LLM's ``max_num_tokens``; default 8192, both
  engines' default for serving). At least ``max_batch``, as vLLM requires.
- ``prefix_sharing``: the share of each prompt found in the prefix cache (vLLM's automatic
  prefix caching, SGLang's RadixAttention): not prefilled again, and its pages held once
  (optional, default 0).

**Memory** (``engine_memory``), per GPU: the shard's weights; the activations' working set of
one step at the token budget (``runtime.memory.live_peak`` of a prefill of ``max_tokens``
tokens, and the logits of ``max_batch`` rows; as vLLM profiles a dummy step of
``max_num_batched_tokens`` before sizing the cache); the KV cache in pages of ``block`` tokens.
A request holds ceil(context / block) pages at its full context, prompt and output (TensorRT-LLM's
``GUARANTEED_NO_EVICT`` reserves that much; vLLM grows to it); so the pages bound how many
requests are in flight: floor(pages / pages per request) per attention replica.

**Steady state** (``closed_loop``, ``open_loop``), in the vLLM V1 scheduler's rules: each step
first schedules one token for every running decode request, then prefill chunks, first come
first served, in the budget left (chunked prefill: Sarathi-Serve, Agrawal et al. 2024; the
step as the unit of batching: Orca, Yu et al. 2022). For ``c`` requests running on one
attention replica, each with a prompt of P tokens prefilled in k = ceil(P / room) chunks (room:
the budget left beside the decoders) and m = O - 1 decode steps (the first output token comes
with the prompt's last chunk), counted in steps:

- a request's cycle is k + w + m steps (w: steps its prompt waits for the budget); completions
  per step are c / cycle (Little's law), and a step takes u = room / P prompts' worth of
  prefill (several packed where they fit; whole prompts only, u = floor(room / P), without
  chunked prefill), so c / cycle <= u: past that the prompts queue, cycle = c / u;
- a decoding request shares its steps with the others decoding, (c - 1) m / cycle of them on
  average, and with another's chunk in a share min(1, (c - 1) k / cycle) of its steps (all of
  them when prompts queue); a prefilling request with (c - 1) m / cycle decoders;
- TPOT = the mean step time a decoding request sees; TTFT(P) = (w + ceil(P / room)) steps of
  a chunk-carrying step; a request's latency is TTFT + m TPOT; throughput = c / latency
  requests/s (closed loop).

The loop is solved by a fixed-point iteration on the share of steps in decode (it settles in a
few passes: the counts are in steps, independent of the step's time). Requests beyond what runs
(``max_batch``, the pages) wait in the engine's queue: their wait is queue / throughput (Little).
The open loop (``open_loop``, arrivals at a rate) finds the running count with c = rate x
(TTFT + m TPOT), and adds the mean wait of an M/D/1 queue at the prefill budget
(Pollaczek-Khinchine: rho s / (2 (1 - rho)), s a prompt's prefill time, rho = rate x s); past
rho = 1 or the running cap it is overloaded, and no latency is given.

**Percentiles** are deterministic. TTFT at the q-quantile is the TTFT of the q-quantile prompt
(it grows with the prompt; the queueing wait is its mean). A request's TPOT is the mean of its
m steps; the number of them carrying a chunk is binomial (m, share), taken normal, and the
q-quantile of the mixture over the output lengths is read off its distribution function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from costmodel.deploy.step import Shard, StepTimes
from costmodel.deploy.workload import Workload
from costmodel.errors import AnalysisError
from costmodel.runtime.memory import live_peak
from costmodel.symbols import DTYPE_BYTES

ITERATIONS = 12  # fixed-point passes of the closed loop (the share in decode settles in < 6)
OPEN_ITERATIONS = 60  # of the open loop's running count
PERCENTILES = (50, 90, 99)
TPOT_BINS = 16  # output lengths the TPOT percentiles mix over
X_GRID = np.linspace(0.0, 1.0, 201)  # the share of a request's steps carrying a chunk


@dataclass(frozen=True)
class Engine:
    """The engine's settings (module docstring)."""

    block: int = 16
    memory_fraction: float = 0.9
    max_batch: int = 256
    max_tokens: int = 8192
    prefix_sharing: float = 0.0
    kv_of_free: bool = False  # TensorRT-LLM's rule: the KV cache is memory_fraction of what is free
    chunked: bool = True  # chunked prefill; False: whole prompts only (trtllm-bench's default)
    # how an fp8 cache's decode core is read (``deploy.step.Shard.cache_read``): "table", the measured
    # kernel's (vLLM's FA3); "bf16-rate", at the bandwidth the bf16 kernel reaches (TensorRT-LLM's XQA
    # reads fp8 natively: docs/serving.md, "Checked against measurements")
    cache_read: str = "table"
    # whose measured MoE and MLA kernels the steps read (``deploy.step.Shard.kernel_framework``):
    # None, the tables' defaults (vLLM's fused MoE, SGLang's MLA); "trtllm", TensorRT-LLM's own
    kernel_framework: str | None = None
    name: str = "vllm"

    def check(self) -> None:
        if not 1 <= self.block <= 1 << 20:
            raise AnalysisError(f"--block-size: must be at least 1 token (got {self.block})")
        if not (math.isfinite(self.memory_fraction) and 0 < self.memory_fraction <= 1):
            raise AnalysisError("--gpu-memory-utilization: must be above 0 and at most 1 "
                                f"(got {self.memory_fraction:g})")
        if not 1 <= self.max_batch <= 1 << 20:
            raise AnalysisError(f"--batch: must be at least 1 (got {self.max_batch})")
        if not 1 <= self.max_tokens <= 1 << 24:
            raise AnalysisError(f"--max-num-tokens: must be at least 1 (got {self.max_tokens})")
        if not (math.isfinite(self.prefix_sharing) and 0 <= self.prefix_sharing < 1):
            raise AnalysisError("--prefix-sharing: must be at least 0 and below 1 "
                                f"(got {self.prefix_sharing:g})")

    def to_dict(self) -> dict[str, Any]:
        return {"block_size": self.block, "gpu_memory_utilization": self.memory_fraction,
                "max_batch": self.max_batch, "max_num_tokens": self.max_tokens,
                "prefix_sharing": self.prefix_sharing, "kv_fraction_of_free": self.kv_of_free,
                "chunked_prefill": self.chunked, "fp8_cache_read": self.cache_read,
                "kernel_framework": self.kernel_framework, "engine": self.name}


#: ``--engine``: the serving framework's defaults where they change the model. An explicit
#: ``--block-size`` or ``--gpu-memory-utilization`` overrides its.
#: - ``vllm``: vLLM V1 (vllm/config: ``block_size`` 16, ``gpu_memory_utilization`` 0.9 of the
#:   device, chunked prefill on); its fp8 cache as the measured tables (vLLM's own kernels) have it.
#: - ``trtllm``: TensorRT-LLM's PyTorch flow (``tokens_per_block`` 32; ``free_gpu_memory_fraction``
#:   0.9 of the memory the weights and activations leave free; ``enable_chunked_prefill`` off by
#:   default, tensorrt_llm/llmapi/llm_args.py), its decode kernel (XQA) reading an fp8 cache
#:   natively: at the bf16 kernel's bandwidth; its own fused MoE and MLA kernels, as aiconfigurator
#:   measured them (specs/kernels/<gpu>/moe.trtllm.json, mla.trtllm.json; docs/gpu-time.md). The
#:   engine `bench/serving_validation.py` checks.
ENGINES: dict[str, Engine] = {
    "vllm": Engine(),
    "trtllm": Engine(block=32, kv_of_free=True, chunked=False, cache_read="bf16-rate",
                     kernel_framework="trtllm", name="trtllm"),
}


@dataclass(frozen=True)
class EngineMemory:
    """What one GPU of an engine holds, in bytes (module docstring)."""

    budget: int  # memory_fraction x device memory
    weights: int
    activations: int
    page_bytes: int  # one page of `block` tokens' keys and values on one GPU
    pages: int  # pages the rest of the budget holds (0 when nothing is left)
    pages_per_request: int
    max_running: int  # requests the pages hold, per attention replica

    @property
    def kv_cache(self) -> int:
        return self.pages * self.page_bytes

    @property
    def fits(self) -> bool:
        return self.max_running >= 1

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "weights": self.weights, "activations": self.activations,
                "kv_cache": self.kv_cache, "page_bytes": self.page_bytes, "pages": self.pages,
                "pages_per_request": self.pages_per_request, "max_running": self.max_running}


def held(shard: Shard, block: int) -> tuple[int, int]:
    """(weights, bytes of one page of `block` tokens) on one GPU of `shard`: the same for every
    max batch and budget, so a search counts them once per layout."""
    weights = int(shard.analyze("prefill", 1, 1).bytes_weights)
    return weights, int(shard.analyze("prefill", 1, block).total().kv_cache)  # `block` tokens cached


def engine_memory(shard: Shard, memory_bytes: float, engine: Engine, workload: Workload,
                  weights_and_page: tuple[int, int] | None = None) -> EngineMemory:
    """One GPU's memory of an engine on `shard`, and the requests its pages hold
    (`weights_and_page`: ``held``'s, when already counted)."""
    local = shard.local
    p = DTYPE_BYTES[shard.dtype]
    flash = shard.kernels.flash_attention
    tokens = engine.max_tokens
    step = live_peak(local, {"B": 1, "S": tokens, "C": tokens}, p, flash, True, shard.mla)
    logits = live_peak(local, {"B": engine.max_batch, "S": 1, "C": 1}, p, flash, True, shard.mla)
    activations = max(step["attention"], step["ffn"], logits["lm_head"])
    weights, page = weights_and_page or held(shard, engine.block)
    if engine.kv_of_free:  # TensorRT-LLM: free_gpu_memory_fraction of what the weights and activations leave
        budget = int(memory_bytes)
        free = int(engine.memory_fraction * (budget - weights - activations))
    else:
        budget = int(engine.memory_fraction * memory_bytes)
        free = budget - weights - activations
    pages = max(0, free // page) if page else 0
    shared = engine.prefix_sharing * workload.prompt.mean
    context = workload.prompt.mean - shared + workload.output.mean
    per_request = max(1, math.ceil(context / engine.block))
    return EngineMemory(budget, weights, int(activations), page, pages, per_request, pages // per_request)


@dataclass(frozen=True)
class Loop:
    """The steady state of arrays of deployments on one attention replica each (seconds, per
    replica): the inputs broadcast together."""

    running: np.ndarray  # requests running (mean)
    queued: np.ndarray  # requests waiting for a batch slot or pages (closed loop)
    decoding: np.ndarray  # decoders in a step a decoding request runs in
    chunk: np.ndarray  # prefill tokens in a chunk-carrying step
    chunk_share: np.ndarray  # share of a decoding request's steps carrying a chunk
    tpot_plain: np.ndarray  # a decode step without a chunk
    tpot_mixed: np.ndarray  # with one
    tpot: np.ndarray  # mean
    ttft_mean: np.ndarray
    ttft: dict[int, np.ndarray]  # percentile -> seconds
    tpot_at: dict[int, np.ndarray]
    requests_per_s: np.ndarray
    stable: np.ndarray  # False: an open loop past its capacity (its times are not given)


@dataclass(frozen=True)
class _Shape:
    """The workload as the loop reads it: means, and the prompt lengths of the percentiles."""

    prompt: float  # mean tokens prefilled per request (prefix sharing taken out)
    steps: float  # mean decode steps per request, E[O] - 1
    output: float  # mean output tokens
    quantile_prompts: dict[int, float]  # percentile -> the prompt's tokens prefilled
    share: float  # prefix sharing
    out_lengths: np.ndarray  # output length bins, for the TPOT percentiles
    out_weights: np.ndarray
    chunked: bool = True  # prompts split across steps (else whole prompts only)


def shape_of(workload: Workload, engine: Engine) -> _Shape:
    keep = 1 - engine.prefix_sharing
    o, w = workload.output.bins(TPOT_BINS)
    return _Shape(workload.prompt.mean * keep, workload.output.mean - 1, workload.output.mean,
                  {q: workload.prompt.quantile(q / 100) * keep for q in PERCENTILES}, engine.prefix_sharing,
                  o, w, engine.chunked)


def decode_context(workload: Workload) -> float:
    """The mean context a decode step attends to: decode step j of a request of prompt P has
    P + j tokens before it, j = 1 .. O - 1, so the mean over all decode steps is E[P] +
    E[(O - 1) O / 2] / E[O - 1] (prompt and output lengths independent)."""
    o, w = workload.output.arrays()
    m = float((o - 1) @ w)
    if m == 0:
        return workload.prompt.mean + 1
    return workload.prompt.mean + float(((o - 1) * o / 2) @ w) / m


def _prompt_core(times: StepTimes, tokens: Any, share: float) -> Any:
    """A prompt's attention core with its shared prefix not prefilled again: all its pairs less
    the prefix's own (the prompt of `tokens` prefilled is tokens / (1 - share) long)."""
    whole = np.asarray(tokens) / (1 - share)
    return times.prompt_core(whole) - (times.prompt_core(whole * share) if share else 0.0)


def _per_step(room: np.ndarray, prompt: float, chunked: bool) -> np.ndarray:
    """Prompts' worth of prefill one step takes in `room` tokens: chunked, tokens of several prompts
    packed up to the room (vLLM V1, TensorRT-LLM with chunked context); else whole prompts only, at
    least one (the budget holds a whole prompt: trtllm-bench sets max_num_tokens >= ISL + max batch)."""
    return room / prompt if chunked else np.maximum(1.0, np.floor(room / prompt))


@dataclass(frozen=True)
class _Counts:
    """The step counts of the closed loop (module docstring), per attention replica."""

    room: np.ndarray  # the budget left beside the decoders
    k: np.ndarray  # steps one prompt's prefill spans
    wait: np.ndarray  # steps a prompt waits for the budget
    beside: np.ndarray  # decoders in a step a prompt is prefilled in
    seen: np.ndarray  # decoders a decoding request sees, itself included
    share: np.ndarray  # share of a decoder's steps carrying prefill tokens
    prefill: np.ndarray  # others' prefill tokens in a step that carries some
    admitted: np.ndarray  # the others' prompts admitted per step


def _solve(c: np.ndarray, budget: np.ndarray, w: _Shape, open_loop: bool) -> _Counts:
    """The step counts of the closed loop of `c` running requests (module docstring). Not queued,
    a request's cycle is k + m steps; queued (c / (k + m) above the u prompts a step's room
    takes), every step carries a full room of prefill, cycle = c / u, and the room is what the
    u m decoders leave: room = budget / (1 + (c - 1) m / (c P)) (chunked; whole prompts: u the
    whole prompts that fit in it)."""
    m, P = w.steps, max(w.prompt, 1.0)
    c = np.asarray(c, dtype=float)
    others = np.maximum(c - 1, 0.0)
    k = np.ones(np.shape(c))
    for _ in range(ITERATIONS):  # k settles in a pass or two: it only grows with the decoders
        room = np.maximum(budget - others * m / (k + m), 1.0)
        k = np.ceil(P / room) if w.chunked else np.ones(np.shape(room))
    queued = np.logical_and(c / (k + m) > _per_step(room, P, w.chunked), not open_loop)
    room_q = np.maximum(budget / (1 + others * m / (np.maximum(c, 1.0) * P)), 1.0)
    k_q = np.ceil(P / room_q) if w.chunked else np.ones(np.shape(room_q))
    room, k = np.where(queued, room_q, room), np.where(queued, k_q, k)
    cycle = np.where(queued, np.maximum(c / _per_step(room, P, w.chunked), k + m), k + m)
    beside = others * m / cycle
    admitted = others / cycle
    share = np.where(queued, 1.0, np.minimum(1.0, admitted * k))
    own = np.minimum(P, room)
    prefill = np.where(share > 0, np.minimum(room, admitted * P / np.maximum(share, 1e-12)), own)
    return _Counts(room, k, cycle - k - m, beside, 1 + beside, share, np.maximum(prefill, own), admitted)


def _loop(times: StepTimes, c: np.ndarray, budget: np.ndarray, w: _Shape, open_loop: bool
          ) -> tuple[Loop, np.ndarray]:
    """The loop at `c` running (no queue, no open-loop wait yet), and the seconds of prefill
    server time one prompt takes (the open loop's M/D/1 service)."""
    n = _solve(c, budget, w, open_loop)
    P = max(w.prompt, 1.0)
    whole = _prompt_core(times, P, w.share)  # one prompt's attention core
    x = n.prefill  # a chunk-carrying step's prefill tokens: a share x / P of whole prompts' cores
    plain = times.step(n.seen, np.zeros_like(n.seen), np.zeros_like(n.seen), n.seen)
    mixed = times.step(n.seen, x, x / P * whole, n.seen + x / P)
    tpot = (1 - n.share) * plain + n.share * mixed
    ttft: dict[int, np.ndarray] = {}
    t_pre = plain
    for q, tokens in {0: P, **w.quantile_prompts}.items():
        t = max(tokens, 1.0)
        kq = np.ceil(t / n.room) if w.chunked else np.ones(np.shape(n.room))
        own = np.minimum(t, n.room)
        # its own chunk, and the prefill of the others admitted beside it
        xq = np.maximum(own, np.minimum(n.room, own + n.admitted * P))
        core = _prompt_core(times, t, w.share) / kq + (xq - own) / P * whole
        step = times.step(n.beside, xq, core, n.beside + xq / P)
        if q == 0:
            t_pre = step
        else:
            ttft[q] = (n.wait + kq) * step
    ttft_mean = (n.wait + n.k) * t_pre
    latency = ttft_mean + w.steps * tpot
    tpot_at = tpot_percentiles(plain, mixed, n.share, w) if w.steps > 0 else {q: tpot for q in PERCENTILES}
    none = np.zeros(np.shape(c))
    loop = Loop(c + none, none, n.seen, x + none, n.share, plain, mixed, tpot, ttft_mean, ttft, tpot_at,
                c / latency, np.ones(np.shape(c), dtype=bool))
    return loop, t_pre / _per_step(n.room, P, w.chunked)


def closed_loop(times: StepTimes, concurrency: np.ndarray, cap: np.ndarray, budget: np.ndarray,
                w: _Shape) -> Loop:
    """`concurrency` requests per attention replica, at most `cap` of them running (the engine's
    max batch, the pages): the rest wait in its queue (module docstring)."""
    running = np.minimum(concurrency, cap).astype(float)
    loop, _ = _loop(times, running, budget, w, False)
    queued = np.maximum(concurrency - running, 0.0)
    extra = queued / loop.requests_per_s
    return replace(loop, queued=queued, ttft_mean=loop.ttft_mean + extra,
                   ttft={q: t + extra for q, t in loop.ttft.items()})


def open_loop(times: StepTimes, rate: np.ndarray, cap: np.ndarray, budget: np.ndarray, w: _Shape) -> Loop:
    """Arrivals at `rate` requests/s per attention replica (module docstring): the running count
    c = rate x (TTFT + m TPOT) by a fixed-point iteration from one request (it rises to the
    least fixed point), and the M/D/1 wait at the prefill budget."""
    c = np.ones(np.broadcast_shapes(np.shape(rate), np.shape(cap), np.shape(budget)))
    for _ in range(OPEN_ITERATIONS):
        loop, service = _loop(times, c, budget, w, True)
        c = np.minimum(np.maximum(rate / loop.requests_per_s * c, 1e-9), cap + 1.0)  # a mean: below 1 too
    loop, service = _loop(times, np.minimum(c, cap), budget, w, True)
    rho = rate * service
    stable = (rho < 1) & (c <= cap) & (np.abs(rate / loop.requests_per_s - 1) < 1e-3)
    wait = np.where(stable, rho * service / (2 * np.maximum(1 - rho, 1e-12)), np.inf)
    return replace(loop, ttft_mean=loop.ttft_mean + wait, ttft={q: t + wait for q, t in loop.ttft.items()},
                   requests_per_s=np.where(stable, rate, loop.requests_per_s), stable=stable)


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    """The standard normal distribution function, by Abramowitz & Stegun 7.1.26 (|error| in erf
    below 1.5e-7): numpy has no erf, and the model imports no scipy."""
    x = np.abs(z) / math.sqrt(2)
    t = 1 / (1 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1 - poly * np.exp(-x * x)
    return np.asarray(0.5 * (1 + np.sign(z) * erf))


def tpot_percentiles(plain: np.ndarray, mixed: np.ndarray, share: np.ndarray,
                     w: _Shape) -> dict[int, np.ndarray]:
    """Each request's TPOT is plain + (mixed - plain) X / m, X ~ Binomial(m, share) of its m decode
    steps carrying a chunk, taken normal; the percentiles of the mixture over output lengths."""
    m = np.maximum(w.out_lengths - 1, 0)
    weights = np.where(m > 0, w.out_weights, 0.0)
    weights = weights / weights.sum()
    f = np.asarray(share)[..., None, None]
    sd = np.sqrt(np.maximum(f * (1 - f), 1e-18) / np.maximum(m, 1)[:, None])
    cdf = (_normal_cdf((X_GRID - f) / sd) * weights[:, None]).sum(axis=-2)  # (..., X_GRID)
    cdf[..., -1] = 1.0
    out = {}
    for q in PERCENTILES:
        i = np.argmax(cdf >= q / 100 - 1e-12, axis=-1)
        out[q] = plain + (mixed - plain) * X_GRID[i]
    return out
