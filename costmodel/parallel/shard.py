"""One tensor-parallel rank's slice of a spec, as a spec: what ``parallel.device`` counts per
GPU and ``parallel.step`` and ``parallel.serve`` time (both import it from here, below them)."""

from __future__ import annotations

from typing import Any

from costmodel.spec import Spec


def shard_spec(spec: Spec, tp: int, layers: int | None = None) -> Spec:
    """One tensor-parallel rank's slice of `spec` as a spec (Shoeybi et al. 2019): column-parallel
    Q, K, V and FFN-up, row-parallel output and FFN-down, a vocabulary-parallel embedding and head.
    Key/value heads fewer than t are replicated, one per rank. `layers` sets n_layers (the
    formulas then count that many layers). Every FFN width of the spec's kind splits over t."""
    attention = spec.attention
    if hasattr(attention, "n_kv_heads"):
        k = attention.n_kv_heads
        attention = attention.model_copy(update={"n_kv_heads": k // tp if k >= tp else 1})
    widths = {f: getattr(spec.ffn, f) // tp for f in ("d_ff", "d_ff_expert", "d_ff_shared")
              if getattr(spec.ffn, f, None)}
    update: dict[str, Any] = dict(
        n_heads=spec.n_heads // tp,
        attention=attention,
        ffn=spec.ffn.model_copy(update=widths),
        vocab_size=-(-spec.vocab_size // tp),
    )
    if layers is not None:
        update["n_layers"] = layers
    return spec.model_copy(update=update)
