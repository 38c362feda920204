"""Other papers' counting conventions, each in its own formula, beside our exact count.

Four papers each count a transformer's parameters or training FLOPs their own way. Every
function below is the paper's formula as printed (expanded into integers where the paper
factors it), over the paper's own symbols; ``paper_counts`` applies them to a spec and says,
for that spec, what each formula leaves out.

- Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Table 1 and section 2.1:
  N = 2 d L (2 d_attn + d_ff) non-embedding parameters (= 12 L d^2 with d_attn = d_ff/4 = d),
  C_forward = 2N + 2 L n_ctx d_attn per token; backward = 2 x forward, so C ~ 6N per token
  once the context term is dropped.
- Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (Chinchilla),
  appendix F: a per-operation table for one sequence (embeddings, QKV, logits, softmax,
  softmax @ values, output projection, dense block, final logits); backward = 2 x forward.
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", section 5.1 and appendix: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)) (Eq. 2);
  F = 96 B s l h^2 (1 + s/(6h) + V/(16lh)) per iteration with full activation recomputation
  (Eq. 3), and 72 B s l h^2 (1 + s/(6h) + V/(12lh)) without it (the same count, one forward
  pass fewer); end-to-end training time ~ 8TP/(nX) (Eq. 4).
- Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways", appendix B:
  6N + 12 L H Q T training FLOPs per token (N all parameters, H heads, Q head size, T
  sequence length); model FLOPs utilization = achieved tokens/s over peak / (6N + 12LHQT).

All four are defined for decoder-only models; an encoder-decoder gets no paper count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from costmodel.analysis import analyze, default_seq
from costmodel.components.ffn import dense_equivalent_d_ff
from costmodel.components.scores import heads_kind
from costmodel.spec import ActiveConvention, Position, Spec


class ConventionName(str, Enum):
    """The choices of ``--convention``; ``exact`` is our own count, always shown."""

    exact = "exact"
    kaplan = "kaplan"
    chinchilla = "chinchilla"
    megatron = "megatron"
    palm = "palm"
    all = "all"


PAPER_CONVENTIONS = ("kaplan", "chinchilla", "megatron", "palm")

SOURCES = {
    "kaplan": "Kaplan et al. 2020, Scaling Laws for Neural Language Models, Table 1 and section 2.1",
    "chinchilla": "Hoffmann et al. 2022, Training Compute-Optimal Large Language Models, appendix F",
    "megatron": "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU "
                "Clusters Using Megatron-LM, Eq. 2-4",
    "palm": "Chowdhery et al. 2022, PaLM: Scaling Language Modeling with Pathways, appendix B",
}


# --- the papers' formulas, over the papers' symbols -------------------------------------------


def kaplan_params(n_layer: int, d_model: int, d_attn: int, d_ff: int) -> int:
    """Kaplan et al. 2020, Table 1: N = 2 d_model n_layer (2 d_attn + d_ff), non-embedding."""
    return 2 * d_model * n_layer * (2 * d_attn + d_ff)


def kaplan_forward_flops_per_token(n_params: int, n_layer: int, n_ctx: int, d_attn: int) -> int:
    """Kaplan et al. 2020, Table 1: C_forward = 2N + 2 n_layer n_ctx d_attn per token."""
    return 2 * n_params + 2 * n_layer * n_ctx * d_attn


def chinchilla_forward_flops(
    seq_len: int, vocab_size: int, d_model: int, num_heads: int, key_size: int, num_layers: int,
    ffw_size: int, embeddings_and_logits: bool = True,
) -> int:
    """Hoffmann et al. 2022, appendix F: forward FLOPs for one sequence of `seq_len` tokens.

    embeddings 2 S V d; per layer: QKV 2*3 S d (k H), logits 2 S S (k H), softmax 3 H S S,
    softmax @ values 2 S S (k H), final linear 2 S (k H) d, dense block 2 S (d f + d f);
    final logits 2 S d V. Table A4 is reproduced only without the embedding and logit terms
    (the authors' correction of a typo, as reported in nanoGPT's scaling_laws.ipynb):
    ``embeddings_and_logits=False``.
    """
    S, V, d, H, kq, f = seq_len, vocab_size, d_model, num_heads, key_size, ffw_size
    attention = (2 * 3 * S * d * (kq * H) + 2 * S * S * (kq * H) + 3 * H * S * S
                 + 2 * S * S * (kq * H) + 2 * S * (kq * H) * d)
    dense = 2 * S * (d * f + d * f)
    ends = 2 * S * V * d + 2 * S * d * V if embeddings_and_logits else 0
    return ends + num_layers * (attention + dense)


def megatron_params(n_layers: int, hidden: int, vocab_size: int, seq_len: int) -> int:
    """Narayanan et al. 2021, Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)),
    i.e. 12 l h^2 + 13 l h + (V + s) h (weights, biases and LayerNorms; a tied embedding table
    and a learned position table)."""
    l, h = n_layers, hidden
    return 12 * l * h * h + 13 * l * h + (vocab_size + seq_len) * h


def megatron_flops_per_iteration(
    batch: int, seq_len: int, n_layers: int, hidden: int, vocab_size: int, recompute: bool = False
) -> int:
    """Narayanan et al. 2021: training FLOPs of one iteration, matmuls only.

    Without recomputation 72 B s l h^2 (1 + s/(6h) + V/(12lh)) = 72 B s l h^2 + 12 B s^2 l h
    + 6 B s h V; with full activation recomputation (Eq. 3) every layer runs its forward pass
    twice: 96 B s l h^2 (1 + s/(6h) + V/(16lh)) = 96 B s l h^2 + 16 B s^2 l h + 6 B s h V.
    """
    B, s, l, h, V = batch, seq_len, n_layers, hidden, vocab_size
    layer_passes = 4 if recompute else 3  # forward (+ recomputed forward) + backward (2x)
    return layer_passes * (24 * B * s * l * h * h + 4 * B * s * s * l * h) + 6 * B * s * h * V


def megatron_training_seconds(tokens: float, params: float, gpus: int, flops_per_gpu: float) -> float:
    """Narayanan et al. 2021, Eq. 4: end-to-end training time ~ 8TP/(nX) (with recomputation:
    Eq. 3 is ~ 8 x params FLOPs per token when s << 6h and V << 16lh)."""
    return 8 * tokens * params / (gpus * flops_per_gpu)


def palm_train_flops_per_token(
    n_params: int, n_layers: int, n_heads: int, head_dim: int, seq_len: int
) -> int:
    """Chowdhery et al. 2022, appendix B: 6N + 12 L H Q T model FLOPs per token (no
    rematerialisation): 6N for the weight matmuls, 6LH(2QT) for dense self-attention."""
    return 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len


def model_flops_utilization(tokens_per_second: float, flops_per_token: float, peak_flops: float) -> float:
    """Chowdhery et al. 2022, section 4.1 and appendix B: observed tokens/s over the peak
    throughput R = P / (FLOPs per token)."""
    return tokens_per_second * flops_per_token / peak_flops


# --- a spec in each paper's terms -------------------------------------------------------------


@dataclass(frozen=True)
class PaperCount:
    """One paper's count for one spec at one sequence length, per training token.

    params          the paper's parameter count (None: its formula gives none)
    params_meaning  what that count includes
    forward, train  FLOPs per token (training = forward + backward, as the paper has it)
    leaves_out      for this spec, what the formula leaves out or assumes differently
    """

    convention: str
    source: str
    formula: str
    params: int | None
    params_meaning: str
    forward: int | None
    train: int | None
    leaves_out: tuple[str, ...]
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConventionRow:
    """A paper's count beside ours: difference = paper - ours; relative to ours."""

    count: PaperCount
    ours_params: int
    ours_train: float  # all FLOPs per training token, our exact count
    ours_train_matmul: float  # matmul FLOPs only

    @property
    def params_difference(self) -> int | None:
        return None if self.count.params is None else self.count.params - self.ours_params

    @property
    def params_relative(self) -> float | None:
        return _relative(self.params_difference, self.ours_params)

    @property
    def train_difference(self) -> float | None:
        return None if self.count.train is None else self.count.train - self.ours_train

    @property
    def train_relative(self) -> float | None:
        return _relative(self.train_difference, self.ours_train)

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in asdict(self.count).items() if k != "leaves_out"},
            "leaves_out": list(self.count.leaves_out),
            "ours_params": self.ours_params,
            "ours_train_flops_per_token": self.ours_train,
            "ours_train_matmul_flops_per_token": self.ours_train_matmul,
            "params_difference": self.params_difference,
            "params_relative": self.params_relative,
            "train_difference": self.train_difference,
            "train_relative": self.train_relative,
        }


def _relative(difference: float | None, ours: float) -> float | None:
    return None if difference is None else difference / ours


def selected(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The paper conventions a ``--convention`` list asks for (``exact`` adds none)."""
    if "all" in names:
        return PAPER_CONVENTIONS
    return tuple(n for n in PAPER_CONVENTIONS if n in names)


def paper_counts(spec: Spec, seq: int, names: tuple[str, ...] = PAPER_CONVENTIONS) -> list[PaperCount]:
    """Each named paper's count for `spec` at a training sequence of `seq` tokens."""
    # A mixture of experts: the papers' N is the parameters a token uses (the K of E experts),
    # as 6N is applied to sparse models, and their d_ff the active width (_ff).
    exact_params = analyze(spec, "prefill", seq=1).params_active(ActiveConvention.with_embedding)
    out: list[PaperCount] = []
    for name in names:
        if spec.is_encoder_decoder:
            out.append(PaperCount(name, SOURCES[name], "", None, "", None, None,
                                  ("defined for decoder-only models; not applied to an encoder-decoder",)))
        elif name == "megatron":
            out.extend(_megatron(spec, seq))
        else:
            out.append(_BUILDERS[name](spec, seq, exact_params))
    return out


def compare_conventions(
    spec: Spec, seq: int | None = None, names: tuple[str, ...] = PAPER_CONVENTIONS
) -> list[ConventionRow]:
    """Every named paper's count beside our exact training count at `seq` (per token)."""
    seq = default_seq(spec, "train") if seq is None else seq
    train = analyze(spec, "train", batch=1, seq=seq).total()
    return [ConventionRow(c, train.params, train.flops / seq, train.flops_matmul / seq)
            for c in paper_counts(spec, seq, names)]


def _attn_width(spec: Spec) -> int:
    return spec.n_heads * spec.head_dim


def _ff(spec: Spec) -> int:
    """The FFN width the dense formulas take: of a mixture of experts, the width with its sparse
    layers' active FFN weights, K*f_e + n_s*f_s (components.ffn.dense_equivalent_d_ff)."""
    return dense_equivalent_d_ff(spec.moe) if spec.moe is not None else spec.d_ff


def _common_omissions(spec: Spec, counts_kv_full: bool = True) -> list[str]:
    """What none of the four formulas sees, for this spec."""
    out = []
    if spec.moe is not None:
        out.append(f"mixture of experts: counted as a dense FFN of the active width d_ff = {_ff(spec)} "
                   f"(top-{spec.moe.top_k} of {spec.moe.n_experts} experts); the router and any dense "
                   "layers' own width left out")
    h, k, d_h = spec.n_heads, spec.n_kv_heads, spec.head_dim
    if counts_kv_full and k < h:
        kind = heads_kind(h, k)
        out.append(f"{kind}: K and V counted at full width h*d_h = {h * d_h}, not k*d_h = {k * d_h}")
    if spec.window is not None:
        out.append(f"sliding window {spec.window}: attention counted over the full context")
    return out


def _kaplan(spec: Spec, seq: int, exact_params: int) -> PaperCount:
    L, d, d_attn, f = spec.decoder_layers, spec.d_model, _attn_width(spec), _ff(spec)
    N = kaplan_params(L, d, d_attn, f)
    fwd = kaplan_forward_flops_per_token(N, L, seq, d_attn)
    context = 6 * L * seq * d_attn
    leaves = ["embeddings and LM head: N excludes V*d and the position table; C_forward excludes "
              "the 2*d*V de-embedding FLOPs",
              "biases, norms, nonlinearities and softmax (sub-leading terms)"]
    if spec.activation.gated:
        leaves.append(f"gated FFN ({spec.activation.value}): counts 2*d*d_ff, not 3*d*d_ff")
    leaves += _common_omissions(spec)
    leaves.append("attention (mask) term 2*L*n_ctx*d_attn is QK^T and AV over the causal average "
                  "n_ctx/2 keys, half the dense score matrix")
    leaves.append(f"C ~ 6N drops the context term 6*L*n_ctx*d_attn = {context:,} per token "
                  f"({100 * context / (3 * fwd):.1f}% of 3*C_forward)")
    return PaperCount(
        "kaplan", SOURCES["kaplan"],
        "N = 2*d*L*(2*d_attn + d_ff); train = 3*C_forward = 6N + 6*L*n_ctx*d_attn",
        N, "non-embedding weights", fwd, 3 * fwd, tuple(leaves),
        extras={"six_n": 6 * N, "n_ctx": seq, "d_attn": d_attn},
    )


def _chinchilla(spec: Spec, seq: int, exact_params: int) -> PaperCount:
    fwd_seq = chinchilla_forward_flops(seq, spec.vocab_size, spec.d_model, spec.n_heads, spec.head_dim,
                                       spec.decoder_layers, _ff(spec))
    fwd = fwd_seq // seq  # every term carries one factor of seq_len
    leaves = ["embedding lookup counted as a matmul (2*S*V*d) a gather does not execute"]
    if spec.tied_embeddings:
        leaves.append("tied embeddings: the table is counted as an input matmul and again as the logits")
    leaves.append("norms, activations, residual adds, RoPE (only the softmax is counted, 3 per score)")
    if spec.activation.gated:
        leaves.append(f"gated FFN ({spec.activation.value}): dense block counts 2 matrices, not 3")
    leaves += _common_omissions(spec)
    return PaperCount(
        "chinchilla", SOURCES["chinchilla"],
        "per sequence: 2SVd + L*(6Sd*kH + 4S^2*kH + 3HS^2 + 2S*kH*d + 4Sdf) + 2SdV; train = 3x",
        None, "none (appendix F counts FLOPs only)", fwd, 3 * fwd, tuple(leaves),
        extras={"ratio_to_6n": 3 * fwd / (6 * exact_params), "n_for_6n": exact_params},
    )


def _megatron(spec: Spec, seq: int) -> list[PaperCount]:
    l, h, V, f = spec.decoder_layers, spec.d_model, spec.vocab_size, _ff(spec)
    P = megatron_params(l, h, V, seq)
    leaves = ["norms, softmax, activations and biases in FLOPs (matmuls only)"]
    if f != 4 * h or spec.activation.gated:
        leaves.append(f"FFN taken as two d x 4d matrices; this spec has "
                      f"{3 if spec.activation.gated else 2} of d x {f} (f/d = {f / h:.3g})")
    if _attn_width(spec) != h:
        leaves.append(f"attention width taken as d = {h}; this spec has h*d_h = {_attn_width(spec)}")
    leaves += _common_omissions(spec)
    if not spec.tied_embeddings:
        leaves.append("P counts one V*d table (tied); this spec's untied LM head adds another")
    if spec.position is not Position.learned:
        leaves.append(f"P counts an s*d = {seq * h:,} learned position table this spec does not have")
    if not (spec.norm_bias and spec.bias.qkv and spec.bias.attn_out and spec.bias.ffn):
        leaves.append("P counts 13*h per layer of biases and LayerNorm (GPT-style) whatever this spec has")
    if spec.final_norm:
        leaves.append("P leaves out the final norm after the last layer")
    forward = megatron_flops_per_iteration(1, seq, l, h, V) // (3 * seq)
    out = []
    for recompute in (False, True):
        formula = ("96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) per iteration (full recomputation)" if recompute
                   else "72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) per iteration")
        extra = ["recomputation: every layer's forward runs twice (hardware, not model, FLOPs)"
                 ] if recompute else []
        out.append(PaperCount(
            "megatron-recompute" if recompute else "megatron", SOURCES["megatron"], formula,
            P, "12*l*h^2 + 13*l*h + (V + s)*h", forward,
            megatron_flops_per_iteration(1, seq, l, h, V, recompute) // seq, tuple(leaves + extra),
        ))
    return out


def _palm(spec: Spec, seq: int, exact_params: int) -> PaperCount:
    L, H, Q = spec.decoder_layers, spec.n_heads, spec.head_dim
    train = palm_train_flops_per_token(exact_params, L, H, Q, seq)
    leaves = ["6N counts every parameter as a matmul weight: the embedding lookup (no FLOPs), "
              "norm gains and biases included"]
    if not spec.tied_embeddings:
        leaves.append("untied: 6N counts the input table (a lookup) as well as the LM head")
    leaves.append("norms, softmax, activations, residual adds (elementwise work)")
    leaves.append("12LHQT is the dense T x T score matrix (no causal halving)")
    leaves += _common_omissions(spec, counts_kv_full=False)
    return PaperCount(
        "palm", SOURCES["palm"], "6N + 12*L*H*Q*T per token", exact_params,
        "all parameters (our exact N; active ones for a mixture of experts)",
        2 * exact_params + 4 * L * H * Q * seq, train, tuple(leaves),
    )


_BUILDERS = {"kaplan": _kaplan, "chinchilla": _chinchilla, "palm": _palm}
