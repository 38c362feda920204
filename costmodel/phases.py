"""The three phases: substitutions of (S, C) and (S_e, C_e), and what a training step multiplies.

- prefill: a forward pass over B sequences of S tokens with no cache (C = S), logits at every
  position, writing S tokens into the KV cache.
- decode: one new token per sequence (S = 1) with C - 1 tokens already cached; the encoder of
  an encoder-decoder does not run again (S_e = 0) but its C_e outputs are cross-attended.
- train: forward and backward over B x S tokens (C = S). Backward costs twice the forward for
  every op (Chinchilla, Hoffmann et al. 2022, appendix F: exact for matmuls, whose backward is
  two matmuls of the same size; a convention for the rest), so FLOPs and unfused bytes are
  3 x forward; the loss and dropout exist only here; no KV cache is kept.

The fused lower bound of a training step reads every weight twice (forward, backward) and
writes its gradient once: 3 x weights read, plus the token ids in. The logits need not reach
memory (a fused loss); activations kept for backward are left out of a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel import symbols as sym
from costmodel.cost import Cost, Num


@dataclass(frozen=True)
class Phase:
    name: str
    summary: str
    fixes: dict[str, str | int]  # symbol name -> symbol name or integer: what this phase fixes
    seq_symbol: str  # the symbol a user's --seq sets (S, or C in decode)
    seq_offset: int  # C = seq + 1 in decode: the cached tokens plus the new one
    enc_symbol: str  # the symbol a user's --enc-seq sets
    passes: int  # forward = 1, forward + backward = 3
    training: bool

    @property
    def subs(self) -> dict[Any, Any]:
        """The substitution as sympy symbols, for formulas."""
        return {getattr(sym, a): b if isinstance(b, int) else getattr(sym, b) for a, b in self.fixes.items()}

    def shape(self, batch: int, seq: int, enc_seq: int) -> dict[str, int]:
        """B, S, C, S_e, C_e for a user's batch, sequence length and encoder length."""
        given: dict[str, int] = {"B": batch, self.seq_symbol: self.context(seq), self.enc_symbol: enc_seq}
        for target, source in self.fixes.items():
            given[target] = source if isinstance(source, int) else given[source]
        return {name: given[name] for name in ("B", "S", "C", "S_e", "C_e")}

    def context(self, seq: int) -> int:
        """The context a user's --seq means in this phase: seq, or seq + 1 in decode."""
        return seq + self.seq_offset

    def seq_for(self, context: int) -> int:
        """The --seq that gives this context (the inverse of ``context``)."""
        return context - self.seq_offset

    def quantities(self, cost: Cost) -> dict[str, Num]:
        """A component's numbers (or expressions) in this phase, from its forward cost."""
        if cost.train_only and not self.training:
            return dict.fromkeys(QUANTITIES, 0)
        n = self.passes
        if self.training:
            fused = n * cost.weights_read + cost.act_in
            kv = 0
        else:
            fused = cost.weights_read + cost.kv_read + cost.kv_write + cost.act_in + cost.act_out
            kv = cost.kv_cache
        return {
            "params": cost.params,
            **{q: n * getattr(cost, f) for q, f in PER_PASS.items()},
            "bytes_fused": fused,
            "kv_cache": kv,
        }

    def quantity(self, cost: Cost, name: str, times: int = 1) -> Num:
        """``quantities(cost)[name]`` times `times`, computing that one only (the sweep grid reads
        a few, over a component's layers: passes x layers is one number, so one array multiply)."""
        if cost.train_only and not self.training:
            return 0
        if name == "params":
            return cost.params if times == 1 else times * cost.params
        if name in PER_PASS:
            n = self.passes * times
            value = getattr(cost, PER_PASS[name])
            return value if n == 1 else n * value  # (over arrays x 1 is a pass for nothing)
        value = self.quantities(cost)[name]
        return value if times == 1 else times * value


#: The quantities a phase counts once per pass, and the forward cost's field each comes from.
PER_PASS = {"flops_matmul": "matmul", "flops_matmul_effective": "matmul_eff", "flops_other": "other",
            "bytes_unfused": "bytes_unfused"}


QUANTITIES = ("params", "flops_matmul", "flops_matmul_effective", "flops_other", "bytes_unfused",
              "bytes_fused", "kv_cache")

#: Every quantity's label, once: the phase's quantities above and those derived from them
#: (flops = matmul + other; intensity = FLOPs / fused bytes). Tables and reports read these.
LABELS: dict[str, str] = {
    "params": "parameters",
    "flops": "FLOPs total",
    "flops_matmul": "FLOPs matmul (dense)",
    "flops_matmul_effective": "FLOPs matmul (masked)",
    "flops_other": "FLOPs other",
    "bytes_unfused": "bytes unfused",
    "bytes_fused": "bytes fused (lower bound)",
    "kv_cache": "KV cache",
    "intensity": "intensity (fused)",
    "intensity_unfused": "intensity (unfused)",
}

PREFILL = Phase(
    "prefill", "forward over B x S prompt tokens, no cache; writes S tokens of KV cache",
    fixes={"C": "S", "C_e": "S_e"}, seq_symbol="S", seq_offset=0, enc_symbol="S_e",
    passes=1, training=False,
)
DECODE = Phase(
    "decode", "one new token per sequence attending to S cached tokens + itself (C = S + 1)",
    fixes={"S": 1, "S_e": 0}, seq_symbol="C", seq_offset=1, enc_symbol="C_e",
    passes=1, training=False,
)
TRAIN = Phase(
    "train", "forward + backward over B x S tokens (backward = 2 x forward), with the loss",
    fixes={"C": "S", "C_e": "S_e"}, seq_symbol="S", seq_offset=0, enc_symbol="S_e",
    passes=3, training=True,
)

PHASES = {p.name: p for p in (TRAIN, PREFILL, DECODE)}
