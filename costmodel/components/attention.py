"""Attention: projections, QK-norm, scores, softmax, AV, output, and the KV cache.

One definition covers every variant. The number of key/value heads k makes MHA (k = h),
GQA (1 < k < h; Ainslie et al. 2023, "GQA") and MQA (k = 1; Shazeer 2019, "Fast
Transformer Decoding: One Write-Head is All You Need"). The ``Shape`` of a layer says which
tokens it sees: causal self-attention with or without a sliding window (Child et al. 2019;
Beltagy et al. 2020, "Longformer"; Mistral 7B), bidirectional encoder self-attention, and
cross-attention over the encoder output (Vaswani et al. 2017). Phases only substitute
S and C (and S_e, C_e), so prefill and decode share every formula below.

Scores and AV follow the dense convention of docs/reference.md: the S x span score matrix is computed
whole, as a plain implementation does; ``matmul_eff`` counts only the (query, key) pairs a
mask-skipping kernel would compute.
"""

from __future__ import annotations

from typing import Any

from costmodel.components import disentangled, mla, position
from costmodel.components.element import Alternative, Choose, Element, Symbol, toggle
from costmodel.components.norm import norm
from costmodel.components.scores import Shape as Shape
from costmodel.components.scores import heads_kind, mha_label, probabilities
from costmodel.cost import Cost, Dims, Num, floor_div, gemm, half, linear, smax, smin, triangle
from costmodel.spec import LayerKind, Position, QKNorm, Spec


def causal(dims: Dims, window: bool) -> Shape:
    """Decoder self-attention: S new queries at the end of a context of C tokens.

    Query j (1-based position in the context) sees min(j, w) keys. The S queries of a pass sit
    at positions C-S+1 .. C, so they span min(C, w + S - 1) keys and allow
        sum_{j=C-S+1}^{C} min(j, w) = S(2C-S+1)/2 - T(max(C-w, 0)) + T(max(C-S-w, 0))
    pairs, T(n) = n(n+1)/2. Without a window, S(2C-S+1)/2. Prefill (S = C) gives C(C+1)/2
    and decode (S = 1) gives C, or min(C, w). A rolling cache (Mistral 7B) keeps min(C, w).
    """
    S, C = dims.S, dims.C
    full_pairs = half(S * (2 * C - S + 1))
    if not window:
        return Shape(S, S, C, full_pairs, cached=C, written=S, masked=True)
    w = dims.w
    pairs = full_pairs - triangle(smax(C - w, 0)) + triangle(smax(C - S - w, 0))
    return Shape(S, S, smin(C, w + S - 1), pairs, cached=smin(C, w), written=smin(S, w), masked=True)


def chunked(dims: Dims) -> Shape:
    """Chunked local attention (Llama 4, Meta 2025): the context is cut into chunks of c tokens
    and a query sees the keys of its own chunk up to itself, so query j (1-based) sees
    ((j - 1) mod c) + 1 keys, where a window would see min(j, w). Summed over queries 1..n,
        F(n) = floor(n/c) * T(c) + T(n - c*floor(n/c)),
    the S queries at C-S+1 .. C allow F(C) - F(C-S) pairs: prefill C(C+1)/2 while C <= c, then
    about C*c/2 (a window of the same size allows about C*w). The keys live in a rolling buffer of
    min(C, c) slots during a step, as in transformers (cache_utils: "sliding and chunked are the
    same in how they should behave, only the mask differs"; it keeps the last c - 1 between steps,
    the next token making c); a decode step's dense scores span it, masking the slots of the
    previous chunk; a prompt spans its own S keys.
    """
    S, C, c = dims.S, dims.C, dims.c

    def before(n: Num) -> Num:  # F(n): pairs of the first n queries
        chunks = floor_div(n, c)
        return chunks * triangle(c) + triangle(n - c * chunks)

    pairs = before(C) - before(C - S)
    return Shape(S, S, smin(C, c + S - 1), pairs, cached=smin(C, c), written=smin(S, c), masked=True)


def bidirectional(dims: Dims) -> Shape:
    """Encoder self-attention of the S_e tokens of this pass over themselves; nothing is cached
    (the encoder runs once). The span is S_e, not C_e: they are equal whenever the encoder
    runs, and a decode step (S_e = 0) must read no encoder keys."""
    return Shape(dims.S_e, dims.S_e, dims.S_e, dims.S_e * dims.S_e, cached=None, written=0,
                 masked=False)


def encoder_self(dims: Dims, window: bool) -> Shape:
    """Encoder-only self-attention (BERT): the S tokens of the pass over themselves, nothing
    cached. A local layer (ModernBERT, Warner et al. 2024) lets a query see the keys within
    w/2 positions on either side (transformers: |i - j| <= local_attention // 2), so over S
    queries, with m = min(w/2, S - 1), S + 2(mS - T(m)) pairs; the dense scores still span S."""
    S = dims.S
    if not window:
        return Shape(S, S, S, S * S, cached=None, written=0, masked=False)
    m = smin(floor_div(dims.w, 2), S - 1)
    return Shape(S, S, S, S + 2 * (m * S - triangle(m)), cached=None, written=0, masked=True)


def cross(dims: Dims) -> Shape:
    """Decoder queries over the C_e encoder outputs; K and V are projected once (S_e tokens,
    0 in decode) and cached for every later step."""
    return Shape(dims.S, dims.S_e, dims.C_e, dims.S * dims.C_e, cached=dims.C_e, written=dims.S_e,
                 masked=False)


def attention(
    spec: Spec, dims: Dims, shape: Shape, rope: bool, score_bias: bool
) -> list[tuple[str, Cost]]:
    """The leaves of one attention sub-block (norms, dropout and residual are the block's)."""
    B, h, k, d_h, p = dims.B, dims.h, dims.k, dims.d_h, dims.p
    q_tokens, kv_tokens = B * shape.q_len, B * shape.kv_len
    # (Sizes before the shape in products: fewer array operations in the time grid; the same
    # integers and sympy products.)
    scores = h * shape.q_len * shape.span * B  # elements of the score matrix (the batch last: one full pass)
    kv_row = 2 * B * k * d_h * p  # bytes of K and V for one token of every sequence
    # K (or V) bytes the scores (or AV) read: every key of the span at p, unless the cache has
    # a width of its own (an fp8 cache beside bf16 activations; numbers only): then the cached
    # keys are read back at that width and this pass's own keys at p; the cache holds and is
    # written at it.
    p_c = dims.p_kv if shape.cached is not None else None
    cache_row = kv_row if p_c is None else 2 * B * k * d_h * p_c

    def reading_keys(rest: Any) -> Any:
        """p x (rest + the span's keys); with a cache of its own width, the cached keys at it."""
        if p_c is None:
            return p * (rest + k * d_h * B * shape.span)
        return p * (rest + k * d_h * B * shape.kv_len) + p_c * k * d_h * B * shape.cache_reads

    dense = 2 * d_h * scores
    effective = 2 * h * d_h * B * shape.pairs

    # For backward: q keeps the sub-block's input, which k and v share (cross-attention's
    # k, v input is the encoder output, kept once for every layer: ``costmodel.runtime.memory``).
    q_heads, kv_heads = p * h * d_h * q_tokens, p * k * d_h * B * shape.span
    out: list[tuple[str, Cost]] = [
        ("q", linear(q_tokens, dims.d, h * d_h, spec.bias.qkv, p)),
        ("k", linear(kv_tokens, dims.d, k * d_h, spec.bias.qkv, p, saves_input=False)),
        ("v", linear(kv_tokens, dims.d, k * d_h, spec.bias.qkv, p, saves_input=False)),
    ]
    if spec.qk_norm is not QKNorm.none:
        per_head = spec.qk_norm is QKNorm.head
        out.append((
            "qk_norm",
            norm(spec, dims, q_tokens, h * d_h, d_h if per_head else None)
            + norm(spec, dims, kv_tokens, k * d_h, d_h if per_head else None),
        ))
    if rope:
        out.append(("rope", position.rope(dims, shape.q_len, shape.kv_len)))
    if shape.cached is not None:
        out.append(("kv_cache", Cost(
            # read the new K, V; store them
            bytes_unfused=kv_row * (shape.kv_len + shape.written) if p_c is None else
            kv_row * shape.kv_len + cache_row * shape.written,
            kv_read=cache_row * shape.cache_reads,
            kv_write=cache_row * shape.written,
            kv_cache=cache_row * shape.cached,
        )))
    moved = reading_keys(h * d_h * q_tokens + scores)  # (computed once: over arrays, five passes)
    rows = (h // k) * shape.q_len  # GQA: the g = h/k query heads of a K/V head, stacked
    out.append(("scores", Cost(
        matmul=dense,
        matmul_eff=effective,
        bytes_unfused=moved,
        gemms=(gemm(B * k, rows, d_h, shape.span),),
        saved=q_heads + kv_heads,  # Q and K
    )))
    if spec.position is Position.disentangled:  # DeBERTa: c2p and p2c beside the scores
        out.extend(disentangled.leaves(spec, dims, shape))
    out.extend(probabilities(spec, dims, shape, score_bias))
    dropped = spec.attention_dropout_rate > 0  # AV then keeps the dropped-out probabilities
    out.append(("av", Cost(
        matmul=dense,
        matmul_eff=effective,
        bytes_unfused=moved,  # the scores' (P and V in, O out, as Q and K in, S out)
        gemms=(gemm(B * k, rows, shape.span, d_h),),
        saved=kv_heads + (p * scores if dropped else 0),  # V (and the probabilities)
    )))
    out.append(("out", linear(q_tokens, h * d_h, dims.d, spec.bias.attn_out, p)))
    return out



# --- the elements: heads, sliding window, QK-norm ---------------------------------------------

#: GQA's usual number of key/value heads (LLaMA 2 70B, LLaMA 3, Mistral 7B).
GQA_KV_HEADS = 8
#: Window of the sliding-window swaps when a spec has none: Gemma 3's local window.
DEFAULT_WINDOW = 1024


def heads(spec: Spec) -> str:
    """The attention's kind as compare shows it: "MHA", "GQA 4:1", "MQA", "MLA 576/token"."""
    if spec.mla is not None:
        return mla.label(spec.mla)
    return mha_label(spec.n_heads, spec.n_kv_heads)


def gqa_kv_heads(n_heads: int) -> int | None:
    """Key/value heads for a GQA swap: 8 when it divides h, else the divisor of h (between 1
    and h) nearest 8, the smaller on a tie; None when h has no such divisor."""
    divisors = [k for k in range(2, n_heads) if n_heads % k == 0]
    if not divisors:
        return None
    return min(divisors, key=lambda k: (abs(k - GQA_KV_HEADS), k))


def _describe_heads(spec: Spec) -> str:
    if spec.mla is not None:
        return mla.describe(spec, spec.mla)
    return f"h={spec.n_heads} · k={spec.n_kv_heads} ({heads(spec)}) · d_h={spec.head_dim}"


def _heads_swaps(spec: Spec, window: int) -> list[Alternative]:
    h, k = spec.n_heads, spec.n_kv_heads
    if spec.mla is not None:
        return mla.from_latent(spec, spec.mla, gqa_kv_heads(h))
    options = {"MHA": h, "GQA": gqa_kv_heads(h), "MQA": 1}
    out = [(f"{heads_kind(h, k)} k={k} -> {kind} k={kv}", {"n_kv_heads": kv})
           for kind, kv in options.items() if kv is not None and kv != k and kind != heads_kind(h, k)]
    latent = mla.to_latent(spec)
    return out + ([latent] if latent is not None else [])


def _sample_heads(choose: Choose, data: dict[str, Any]) -> None:
    kv = choose([1, 2])
    data.update(n_heads=kv * choose([1, 2, 3]))
    if "n_layers" in data and data.get("architecture") != "encoder" and choose(range(4)) == 0:
        # a decoder-only spec: latent attention
        mla.sample(choose, data)
        return
    data.update(n_kv_heads=kv, head_dim=choose([2, 4, 8]))


def pattern(spec: Spec) -> str:
    """The layer pattern as runs: "5 local : 1 global", or "all local"."""
    runs: list[list[Any]] = []
    for kind in spec.layer_pattern:
        if runs and runs[-1][1] is kind:
            runs[-1][0] += 1
        else:
            runs.append([1, kind])
    if len(runs) == 1:
        return f"all {runs[0][1].value}"
    return " : ".join(f"{n} {kind.value}" for n, kind in runs)


def window(spec: Spec) -> str:
    """The sliding window as compare shows it: "4096, all local", or "none"."""
    if spec.window is None:
        return "none"
    return f"{spec.window}, {pattern(spec)}" + (", NoPE global" if spec.global_nope else "")


def _window_swaps(spec: Spec, window: int) -> list[Alternative]:
    out: list[Alternative] = []
    runs = pattern(spec)
    if spec.window is None:
        out.append((f"full -> window {window} on every layer", {"window": window,
                                                                "layer_pattern": ["local"]}))
        if spec.decoder_layers >= 6:
            out.append((f"full -> window {window} on 5 of every 6 layers (Gemma 3)",
                        {"window": window, "layer_pattern": ["local"] * 5 + ["global"]}))
    else:
        out.append((f"window {spec.window} on {runs} -> full attention",
                    {"window": None, "layer_pattern": None, "global_nope": None}))
        if LayerKind.global_ in spec.layer_pattern:
            out.append((f"window {spec.window} on {runs} -> on every layer",
                        {"layer_pattern": ["local"], "global_nope": None}))
    return out


def _sample_window(choose: Choose, data: dict[str, Any]) -> None:
    layers = data.get("n_layers")  # decoder- and encoder-only: encoder-decoders have no sliding windows
    if layers is None or not choose([True, False]):
        return
    data["window"] = choose(range(1, 7))
    pattern = [choose(["local", "global"]) for _ in range(choose(range(1, layers + 1)))]
    if "local" not in pattern:
        pattern[0] = "local"
    data["layer_pattern"] = pattern
    if "global" in pattern and data.get("position") in ("rope", "t5_relative", "alibi"):
        data["global_nope"] = choose([True, False])


def _sample_qk_norm(choose: Choose, data: dict[str, Any]) -> None:
    if not mla.is_latent(data):  # latent attention normalises its latents, not q and k
        data["qk_norm"] = choose(["none", "head", "full"])


def _qk_norm_swaps(spec: Spec, window: int) -> list[Alternative]:
    return [(f"{spec.qk_norm.value} -> {q.value}",
             {"qk_norm": q.value}) for q in QKNorm if q is not spec.qk_norm]


ELEMENTS = (
    Element(
        "attention heads", ("n_heads", "attention"),
        describe=_describe_heads,
        choices=(("heads h", lambda s: s.n_heads),
                 ("kv heads k", lambda s: s.n_kv_heads if s.mla is None else "latent"),
                 ("head dim d_h", lambda s: s.head_dim if s.mla is None
                  else f"{s.mla.qk_nope_head_dim}+{s.mla.qk_rope_head_dim}, v {s.mla.v_head_dim}"),
                 ("attention", heads)),
        swaps=_heads_swaps, sample=_sample_heads,
        symbols={
            "h": Symbol("query heads", lambda s: s.n_heads),
            "k": Symbol("key/value heads (k = h: MHA, k = 1: MQA)", lambda s: s.n_kv_heads),
            "d_h": Symbol("head dimension", lambda s: s.head_dim),
            **mla.SYMBOLS,
        },
    ),
    Element(
        "sliding window", ("window", "layer_pattern", "global_nope"),
        describe=lambda s: None if s.window is None else (
            f"window {s.window} [{':'.join(kind.value for kind in s.layer_pattern)}]"
            + (" global NoPE" if s.global_nope else "")),
        choices=(("window", window),),
        swaps=_window_swaps, sample=_sample_window,
        symbols={"w": Symbol("sliding-window length", lambda s: s.window)},
    ),
    Element(
        "QK-norm", ("qk_norm",),
        describe=lambda s: None if s.qk_norm is QKNorm.none else f"qk-norm ({s.qk_norm.value})",
        choices=(("qk-norm", lambda s: s.qk_norm.value),),
        swaps=_qk_norm_swaps, sample=_sample_qk_norm,
    ),
)


# --- chunked local attention and attention sinks ---------------------------------------------


def chunks(spec: Spec) -> str:
    """Chunked attention as compare shows it: "8192, 3 chunked : 1 global", or "none"."""
    if spec.attention_chunk is None:
        return "none"
    return f"{spec.attention_chunk}, {pattern(spec)}" + (", NoPE global" if spec.global_nope else "")


def _describe_chunks(spec: Spec) -> str | None:
    if spec.attention_chunk is None:
        return None
    return (f"chunk {spec.attention_chunk} [{':'.join(kind.value for kind in spec.layer_pattern)}]"
            + (" global NoPE" if spec.global_nope and spec.window is None else ""))


def _chunk_swaps(spec: Spec, window: int) -> list[Alternative]:
    """Full -> Llama 4's 3 chunked (RoPE) : 1 global (NoPE) layers, with chunks of the window
    tried; chunks -> full attention, or a sliding window of the chunk's size."""
    if spec.is_encoder_decoder:
        return []
    c = spec.attention_chunk
    if c is None:
        if spec.window is not None:
            return []
        if spec.decoder_layers >= 4:
            nope = spec.position.per_layer
            return [(f"full -> chunks of {window} on 3 of every 4 layers" + (", NoPE global (Llama 4)" if nope
                                                                             else ""),
                     {"attention_chunk": window, "layer_pattern": ["chunked"] * 3 + ["global"],
                      **({"global_nope": True} if nope else {})})]
        return [(f"full -> chunks of {window} on every layer", {"attention_chunk": window,
                                                                "layer_pattern": ["chunked"]})]
    kinds = [kind.value for kind in spec.layer_pattern]
    full = ["global" if kind == "chunked" else kind for kind in kinds]
    out: list[Alternative] = [(f"chunks of {c} on {pattern(spec)} -> full attention", {
        "attention_chunk": None, "layer_pattern": None if set(full) == {"global"} else full,
        **({"global_nope": None} if set(full) == {"global"} else {})})]
    if spec.window is None:
        local = ["local" if kind == "chunked" else kind for kind in kinds]
        out.append((f"chunks of {c} -> sliding window of {c}",
                    {"attention_chunk": None, "window": c, "layer_pattern": local}))
    return out


def _sample_chunks(choose: Choose, data: dict[str, Any]) -> None:
    """Turn some layers of a drawn local/global pattern chunked (the window sample draws the
    pattern): chunks alone, or mixed with windows."""
    kinds = data.get("layer_pattern")
    if kinds is None or data.get("architecture") == "encoder" or not choose([True, False]):
        return
    data["attention_chunk"] = choose(range(1, 7))
    kinds = data["layer_pattern"] = [choose([kind, "chunked"]) for kind in kinds]
    if "chunked" not in kinds:
        kinds[0] = "chunked"
    if "local" not in kinds:
        data.pop("window", None)
    if "global" not in kinds:
        data.pop("global_nope", None)


CHUNKED = Element(
    "chunked attention", ("attention_chunk",),
    describe=_describe_chunks, choices=(("chunks", chunks),), swaps=_chunk_swaps, sample=_sample_chunks,
    symbols={"c": Symbol("attention chunk of chunked local layers (Llama 4)", lambda s: s.attention_chunk)},
)

SINKS = Element(
    "attention sinks", ("attention_sinks",),
    describe=lambda s: "attention sinks" if s.attention_sinks else None,
    choices=(("attention sinks", lambda s: "yes" if s.attention_sinks else "no"),),
    swaps=toggle("attention_sinks"),
    sample=lambda choose, data: data.update(
        attention_sinks=choose([False, True]) if data.get("architecture") != "encoder" else False),
)
