"""Numbers and formulas for one spec: the library entry points behind every CLI command.

``analyze`` evaluates the component tree with integers (exact, no sympy on the hot path);
``formula`` builds the same tree with symbols and returns the sympy expression. Both come from
the one set of formulas in ``costmodel.components``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from costmodel import model
from costmodel import symbols as sym
from costmodel.components.key import Key
from costmodel.components.mla import Convention
from costmodel.cost import Cost
from costmodel.errors import AnalysisError as AnalysisError  # re-exported: where callers have found it
from costmodel.phases import PHASES, QUANTITIES, Phase
from costmodel.precision import (
    DEFAULT_GROUP,
    FP8,
    INT_BITS,
    TENSOR_SCALED,
    Widths,
    quantises,
    tensor_scales,
    weight_bytes_of,
)
from costmodel.spec import ActiveConvention, Position, Spec
from costmodel.symbols import DTYPE_BYTES

if TYPE_CHECKING:
    import sympy

DEFAULT_SEQ = 2048  # capped at the spec's max_seq_len
MAX_COUNT = 10**300  # float64 ends at 1.8e308; ratios and sums of counts need headroom


class ContextWarning(UserWarning):
    """A length the model can compute but was not trained for (RoPE past max_seq_len)."""


@dataclass(frozen=True)
class Row:
    """One component's numbers in one phase. `path` names it (tables, JSON); `key` says what it
    is (``components.key.Key``), for selecting components: a sum's key is ``Key.total``."""

    path: str
    params: int
    flops_matmul: int
    flops_matmul_effective: int
    flops_other: int
    bytes_unfused: int
    bytes_fused: int
    kv_cache: int
    key: Key = field(default=None, repr=False)  # type: ignore[assignment]  # set by every constructor

    def __post_init__(self) -> None:
        if self.key is None:
            object.__setattr__(self, "key", Key.total(self.path))

    @property
    def flops(self) -> int:
        return self.flops_matmul + self.flops_other

    def numbers(self) -> dict[str, Any]:
        """The path and the numbers, as JSON holds a row (the key is no number)."""
        return {f: getattr(self, f) for f in ROW_FIELDS}


@dataclass(frozen=True)
class Analysis:
    """What one phase of one spec costs, at one batch, sequence length and dtype."""

    spec: Spec
    phase: str
    batch: int
    seq: int
    enc_seq: int | None
    dtype: str
    shape: dict[str, int]  # B, S, C, S_e, C_e as the phase binds them
    rows: tuple[Row, ...]
    mla: str = "naive"  # the convention latent attention ran in (components.mla)
    routing: str = "uniform"  # experts a sparse layer reads (components.moe.Routing)
    precision: Widths = field(default_factory=Widths)  # weights' and cache's widths
    weight_bytes: int | None = None  # bytes of the weights at precision.weights (None: at dtype)

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def total(self, prefix: str = "") -> Row:
        """The sum over the components whose path starts with `prefix` (all by default)."""
        chosen = [r for r in self.rows if _under(r.path, prefix)]
        if prefix and not chosen:
            raise AnalysisError(f"component {prefix!r}: no such component in {self.spec.name}")
        return sum_rows(chosen, prefix or "total")

    @property
    def params_embedding(self) -> int:
        """Token and learned-position tables: what Kaplan et al. 2020 exclude from N."""
        return self.total("embedding").params

    @property
    def params_lm_head(self) -> int:
        """An untied output projection (0 when tied to the input embedding, or none: an encoder)."""
        return sum_rows([r for r in self.rows if _under(r.path, "lm_head")], "lm_head").params

    def params_active(self, convention: ActiveConvention | None = None) -> int:
        """Parameters one token uses: the total less the E - K routed experts it skips in every
        sparse layer; without_embedding also less the input token table (DeepSeek, gpt-oss).
        The default convention is the one the spec's publisher uses (with_embedding if none).
        A dense spec's active parameters are its total (less the table, likewise)."""
        convention = convention or self.active_convention
        total = self.total().params
        moe = self.spec.moe
        if moe is not None:  # experts rows hold E experts each: a token uses K of them
            experts = sum(r.params for r in self.rows if r.key.routed_expert)
            total -= experts * (moe.n_experts - moe.top_k) // moe.n_experts
        if convention is ActiveConvention.without_embedding:
            total -= self.total("embedding/tokens").params
        return total

    @property
    def active_convention(self) -> ActiveConvention:
        pub = self.spec.published
        if pub is not None and pub.active_convention is not None:
            return pub.active_convention
        return ActiveConvention.with_embedding

    @property
    def bytes_weights(self) -> int:
        """The weights at their width: the dtype's, or ``precision.weights`` (group scales in)."""
        if self.weight_bytes is None:
            return self.total().params * self.bytes_per_element
        return self.weight_bytes

    @property
    def weights_dtype(self) -> str:
        return self.precision.weights or self.dtype

    @property
    def kv_dtype(self) -> str:
        return self.precision.kv or self.dtype

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte against the fused lower bound on traffic (weights and cache once)."""
        t = self.total()
        return t.flops / t.bytes_fused

    @property
    def arithmetic_intensity_unfused(self) -> float:
        t = self.total()
        return t.flops / t.bytes_unfused

    def _active_dict(self) -> dict[str, Any]:
        """params.active for a mixture of experts: in the publisher's convention, and both.
        (A dense spec's JSON keeps its keys: every parameter is active.)"""
        if self.spec.moe is None:
            return {}
        return {
            "active": self.params_active(),
            "active_convention": self.active_convention.value,
            "active_by_convention": {c.value: self.params_active(c) for c in ActiveConvention},
        }

    def to_dict(self) -> dict[str, Any]:
        t = self.total()

        def nonzero(attr: str) -> dict[str, int]:
            return {r.path: getattr(r, attr) for r in self.rows if getattr(r, attr)}

        return {
            "spec": self.spec.name,
            **({"ignored_fields": list(self.spec.ignored_fields)} if self.spec.ignored_fields else {}),
            "phase": self.phase,
            "batch": self.batch,
            "seq": self.seq,
            "enc_seq": self.enc_seq,
            "dtype": self.dtype,
            "weights_dtype": self.weights_dtype,
            "kv_dtype": self.kv_dtype,
            **({"group_size": self.precision.group_size} if self.weights_dtype in INT_BITS else {}),
            **({"mla_convention": self.mla} if self.spec.mla is not None else {}),
            "bytes_per_element": self.bytes_per_element,
            "shape": dict(self.shape),
            "params": {
                "total": t.params,
                "embedding": self.params_embedding,
                "lm_head": self.params_lm_head,
                "non_embedding": t.params - self.params_embedding - self.params_lm_head,
                **self._active_dict(),
                "by_component": nonzero("params"),
            },
            **({"routing": self.routing} if self.spec.moe is not None else {}),
            "flops": {
                "total": t.flops,
                "matmul": t.flops_matmul,
                "matmul_effective": t.flops_matmul_effective,
                "other": t.flops_other,
                "by_component": {r.path: r.flops for r in self.rows if r.flops},
            },
            "bytes": {
                "unfused": t.bytes_unfused,
                "fused_min": t.bytes_fused,
                "weights": self.bytes_weights,
                "by_component": nonzero("bytes_unfused"),
            },
            "kv_cache_bytes": t.kv_cache,
            "arithmetic_intensity": self.arithmetic_intensity,
            "arithmetic_intensity_unfused": self.arithmetic_intensity_unfused,
            "components": [r.numbers() for r in self.rows],
        }


#: A row's fields as JSON and tables hold them: the path and the numbers.
ROW_FIELDS = tuple(f.name for f in fields(Row) if f.name != "key")


def sum_rows(rows: Iterable[Row], path: str) -> Row:
    """One row holding the sums of `rows`, named `path` (its key ``Key.total(path)``)."""
    rows = list(rows)
    sums = {f: sum(getattr(r, f) for r in rows) for f in ROW_FIELDS if f != "path"}
    return Row(path=path, **sums, key=Key.total(path))


def _under(path: str, prefix: str) -> bool:
    return not prefix or path == prefix or path.startswith(prefix.rstrip("/") + "/") or (
        path.startswith(prefix + "[")  # "layers" selects "layers[local]/..." too
    )


def in_component(key: Key, prefix: str) -> bool:
    """Whether a component is under `prefix`, a path or path prefix as ``--component`` takes it
    (``Analysis.total``'s selection; "" selects every component)."""
    return _under(key.path, prefix)


def default_seq(spec: Spec, phase: str = "prefill") -> int:
    """2048 tokens of context, or max_seq_len if shorter, in every phase: decode caches one
    token fewer and adds the new one, so its context is the same as prefill's."""
    context = min(DEFAULT_SEQ, spec.max_seq_len)
    return max(1, PHASES[phase].seq_for(context)) if phase in PHASES else context


def analyze(
    spec: Spec,
    phase: str = "prefill",
    batch: int = 1,
    seq: int | None = None,
    dtype: str = "bf16",
    enc_seq: int | None = None,
    mla: str = "naive",
    routing: str = "uniform",
    weights_dtype: str | None = None,
    kv_dtype: str | None = None,
    group_size: int = DEFAULT_GROUP,
) -> Analysis:
    """Evaluate every component of `spec` in one phase.

    `mla` is the convention latent attention runs in (``components.mla``): ``naive``, as
    transformers executes it, or ``absorbed``, as DeepSeek's inference kernels do.

    `seq` is the prompt length for prefill and train, and the number of cached tokens for
    decode (which then attends to seq + 1). `enc_seq` is the encoder input length of an
    encoder-decoder (default: `seq`). RoPE past max_seq_len warns (ContextWarning); learned
    positions refuse. The counts know no device: ``costmodel.runtime.on_device.analyze`` adds one (the
    roofline and the predicted time).
    `routing` is the experts a sparse layer reads over its tokens: ``uniform`` (the expectation,
    E*(1 - (1 - K/E)^T)) or ``worst`` (min(E, T*K)).

    `weights_dtype` and `kv_dtype` (inference only; default `dtype`) hold and move the weights
    and the KV cache at another width (``costmodel.precision``: an fp8 cache, int8/int4
    weight-only quantisation with an fp16 scale per `group_size` weights).
    """
    if routing not in ("uniform", "worst"):
        raise AnalysisError(f"routing: unknown routing {routing!r}; expected one of uniform, worst")
    if phase not in PHASES:
        raise AnalysisError(f"phase: unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    if dtype not in DTYPE_BYTES:
        raise AnalysisError(f"dtype: unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    check_phase(spec, phase)
    seq = default_seq(spec, phase) if seq is None else seq
    if spec.is_encoder_decoder:
        enc_seq = seq if enc_seq is None else enc_seq
    elif enc_seq is not None:
        raise AnalysisError("enc_seq: only for encoder-decoder specs")
    for name, value in (("batch", batch), ("seq", seq), ("enc_seq", enc_seq)):
        if value is not None and value < 1:
            raise AnalysisError(f"{name}: must be at least 1 (got {value})")
    if mla not in Convention.__members__:
        raise AnalysisError(f"mla: unknown convention {mla!r}; expected one of "
                            f"{', '.join(Convention.__members__)}")
    ph = PHASES[phase]
    shape = ph.shape(batch, seq, enc_seq or 0)
    if spec.position is Position.learned:
        longest = max(shape["C"], shape["C_e"])
        if longest > spec.max_seq_len:
            raise AnalysisError(
                f"seq: {phase} attends to {longest} positions, beyond the {spec.max_seq_len} "
                f"learned positions of {spec.name}"
            )
    elif spec.position is Position.rope and max(shape["C"], shape["C_e"]) > spec.max_seq_len:
        warnings.warn(
            f"seq: attends past the {spec.max_seq_len} positions {spec.name[:60]} was trained on "
            "(RoPE computes the counts; the model's quality there is another matter)",
            ContextWarning, stacklevel=2)
    precision = Widths(weights_dtype, kv_dtype, group_size)
    _check_widths(spec, ph, precision, dtype)
    p = DTYPE_BYTES[dtype]
    p_kv = DTYPE_BYTES[precision.kv] if precision.kv not in (None, dtype) else None
    dims = model.numeric_dims(spec, shape, p, mla, routing, p_kv=p_kv)
    costs = model.tree(spec, dims)
    weight_bytes = None
    if not ph.training and precision.requantises(dtype):  # training holds --dtype's width
        held_as = precision.weights or dtype
        tensors = checkpoint_tensors(spec, costs, held_as, mla, lambda: model.tree(
            spec, model.numeric_dims(spec, shape, p, "naive", routing, p_kv=p_kv)))
        costs, weight_bytes = _at_weight_width(costs, held_as, precision.group_size, p, int, tensors)
    rows = tuple(_row(key, ph, cost) for key, cost in costs.items())
    largest = max(max(getattr(r, q) for q in ("params", "flops_matmul", "flops_other", "bytes_unfused",
                                              "kv_cache")) for r in rows)
    if largest > MAX_COUNT:
        # Counts are exact ints at any size, but intensity, time and the sweep are floats.
        raise AnalysisError(f"{spec.name[:60]}: a count of {len(str(largest))} digits at this shape, past "
                            "the "
                            f"{MAX_COUNT:.0e} that floating-point figures (intensity, time) can hold")
    return Analysis(spec, phase, batch, seq, enc_seq, dtype, shape, rows, mla, routing, precision,
                    weight_bytes)


def phases_of(spec: Spec) -> tuple[str, ...]:
    """The phases a spec runs: an encoder-only model has no decode (nothing is generated)."""
    return tuple(p for p in PHASES if not (spec.is_encoder and p == "decode"))


def check_phase(spec: Spec, phase: str) -> None:
    """Decode asked of an encoder-only model: one line naming what it has instead."""
    if phase not in phases_of(spec):
        raise AnalysisError(f"phase: {spec.name[:60]} is encoder-only: it generates nothing, so it has no "
                            "decode phase and no KV cache; use prefill (a forward pass) or train")


def require_decode(spec: Spec, what: str) -> None:
    """`what` (serving, a deployment) generates tokens: refused for an encoder-only model, in one line."""
    if spec.is_encoder:
        raise AnalysisError(f"spec: {spec.name[:60]} is encoder-only: {what} needs a decode phase (token "
                            "generation, a KV cache); `costmodel analyze -p prefill` counts its forward pass")


def _check_widths(spec: Spec, ph: Phase, widths: Widths, dtype: str) -> None:
    widths.check(spec=spec)
    if not widths.differs(dtype):
        return
    if ph.training:
        raise AnalysisError("weights-dtype, kv-dtype: inference options; a training step runs at --dtype "
                            "(`costmodel memory --precision` holds mixed-precision recipes)")
    if widths.kv not in (None, dtype) and spec.mla is not None:
        raise AnalysisError("kv-dtype: a latent (MLA) cache at another width than the activations is "
                            "not modelled (kv_b reads it back); use --dtype")


def held_wide(key: Key) -> bool:
    """What an FP8 checkpoint holds in bf16 and runs as bf16 GEMMs and gathers: what
    ``precision.quantises`` leaves out at fp8 (the LM head, a router) and the embedding. The
    time model reads these components off the bf16 tables at ``--dtype fp8`` (``timing.predict``
    and ``deploy``'s sweeps alike)."""
    return key.first_stage or not quantises(FP8, lm_head=key.is_lm_head, routed_expert=key.routed_expert,
                                            router=key.is_router)


def checkpoint_tensors(spec: Spec, costs: dict[Key, Cost], held_as: str, mla: str,
                       naive: Callable[[], dict[Key, Cost]]) -> dict[Key, Cost]:
    """The tree whose GEMMs are the checkpoint's weight tensors, where the tensor count matters
    (fp8's and nvfp4's per-tensor scales, ``precision.linears_of``; fp8-block's 128 x 128 blocks
    and nvfp4's 16-element groups, ``precision.blocks_of``): latent attention's naive form (`naive`
    builds it), since the absorbed forms multiply by kv_b's slices a head at a time and the
    checkpoint holds kv_b whole; `costs` itself otherwise."""
    return naive() if held_as in TENSOR_SCALED and mla != "naive" and spec.mla is not None else costs


def _at_weight_width(costs: dict[Key, Cost], held_as: str, group_size: int, p: int,
                     count: Callable[[Any], int], tensors: dict[Key, Cost]) -> tuple[dict[Key, Cost], int]:
    """Each component's weight reads at the weights' width (its unfused bytes and fused bound
    alike), and the weights' bytes: a component reads the same share of its weights as before.
    `count` makes a component's params an integer (``int``, or the spec's sizes put into a
    symbolic tree's expressions); the reads stay numbers or expressions. `tensors`: the tree
    whose GEMMs are the checkpoint's weight tensors (fp8's scales, one pair a tensor): latent
    attention's naive form, where the absorbed forms multiply by kv_b's slices a head at a time
    and the checkpoint holds kv_b whole (``costs`` itself otherwise)."""
    out, total = {}, 0
    for key, c in costs.items():
        params = count(c.params)
        if not params:
            out[key] = c
            continue
        matrices = count(c.matrices)
        gemms = tensors.get(key, c).gemms
        held = weight_bytes_of(params, matrices, held_as, p, group_size, lm_head=key.is_lm_head,
                               routed_expert=key.routed_expert, router=key.is_router,
                               **tensor_scales(matrices, gemms, held_as, count))
        total += held
        share = Fraction(held, p * params)
        read = c.weights_read * share
        if isinstance(c.weights_read, int):  # every read is whole weights: an exact integer
            read = int(read)
        out[key] = replace(c, weights_read=read, bytes_unfused=c.bytes_unfused - c.weights_read + read)
    return out, total


def count_params(spec: Spec) -> int:
    """Total parameters (the same in every phase and shape)."""
    return analyze(spec, "prefill", seq=1).total().params


def _row(key: Key, phase: Phase, cost: Cost) -> Row:
    return Row(key.path, **{q: int(v) for q, v in phase.quantities(cost).items()}, key=key)


# --- formulas -----------------------------------------------------------------------------

#: A formula's quantity -> the phase quantities it sums: each one, and flops (matmul + other).
FORMULA_QUANTITIES: dict[str, tuple[str, ...]] = {
    "flops": ("flops_matmul", "flops_other"),
    **{q: (q,) for q in QUANTITIES},
}
#: Older names still accepted: `--quantity bytes` is bytes_unfused.
FORMULA_ALIASES = {"bytes": "bytes_unfused"}


def symbolic_tree(spec: Spec, phase: str, mla: str = "naive", routing: str = "uniform",
                  widths: Widths = Widths(), dtype: str = "bf16") -> dict[str, dict[str, sympy.Expr]]:
    """path -> quantity -> sympy expression in this phase, over the symbols of docs/reference.md.

    With `widths` other than `dtype`'s (an inference phase, as ``analyze`` holds them; for
    ``costmodel.studies.sweep``), the cache is p x p_kv/p wide and each weight read carries its
    component's held bytes over p x params: numbers in the tree, the shape's symbols kept."""
    import sympy

    ph = PHASES[phase]
    check_phase(spec, phase)
    _check_widths(spec, ph, widths, dtype)
    p = DTYPE_BYTES[dtype]
    p_kv = sym.p * sympy.Rational(DTYPE_BYTES[widths.kv], p) if widths.kv not in (None, dtype) else None
    costs = model.tree(spec, model.symbolic_dims(spec, mla, routing, p_kv=p_kv))
    if not ph.training and widths.requantises(dtype):
        values = model.spec_values(spec)
        tensors = checkpoint_tensors(spec, costs, widths.weights or dtype, mla, lambda: model.tree(
            spec, model.symbolic_dims(spec, "naive", routing, p_kv=p_kv)))
        costs, _ = _at_weight_width(costs, widths.weights or dtype, widths.group_size, p,
                                    lambda x: int(sympy.sympify(x).xreplace(values)), tensors)
    tree = {}
    for key, cost in costs.items():
        quantities = ph.quantities(cost)
        tree[key.path] = {q: sympy.sympify(quantities[q]).xreplace(ph.subs) for q in QUANTITIES}
    return tree


def formula(
    spec: Spec, quantity: str, phase: str = "prefill", component: str = "", symbolic: bool = False,
    mla: str = "naive",
    routing: str = "uniform",
) -> sympy.Expr:
    """The expression for `quantity` summed over `component` (a path prefix; all by default).

    With `symbolic`, every size stays a symbol (d, h, k, L, ...); otherwise the spec's sizes
    are substituted and only the phase's free symbols (B, S or C, S_e or C_e, p) remain.
    """
    quantity = FORMULA_ALIASES.get(quantity, quantity)
    if quantity not in FORMULA_QUANTITIES:
        raise AnalysisError(
            f"quantity: unknown quantity {quantity!r}; expected one of {', '.join(FORMULA_QUANTITIES)}"
        )
    if phase not in PHASES:
        raise AnalysisError(f"phase: unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    import sympy

    expr = sympy.expand(select(symbolic_tree(spec, phase, mla, routing), quantity, component, spec.name))
    if not symbolic:
        return sympy.expand(expr.xreplace(model.spec_values(spec)))
    # Read per layer: the terms of each layer group gathered under its count (L, L_local, ...).
    return sympy.collect(expr, [sym.layer_count(*key) for key in model.layer_groups(spec)])


def select(tree: dict[str, dict[str, sympy.Expr]], quantity: str, component: str = "",
           spec_name: str = "") -> sympy.Expr:
    """`quantity` (a key of FORMULA_QUANTITIES) summed over the paths of `tree` under `component`."""
    import sympy

    quantity = FORMULA_ALIASES.get(quantity, quantity)
    chosen = [p for p in tree if _under(p, component)]
    if not chosen:
        groups = sorted({p.rsplit("/", 1)[0] if "layers" in p else p for p in tree})
        raise AnalysisError(
            f"component: no component {component!r} in {spec_name}; try one of {', '.join(groups)}"
        )
    return sympy.Add(*(tree[p][q] for p in chosen for q in FORMULA_QUANTITIES[quantity]))
