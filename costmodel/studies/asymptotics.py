"""Leading-order terms of our own attention formulas, against Shazeer (2019).

Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need" (2019), sections 2.4.1,
2.4.2 and 3.1, analyses one attention layer with n tokens per sequence, b sequences, width d,
h heads of dimension k = d/h (our d_h), assuming n <= d:
- batched MHA (training, prefill):  FLOPs Theta(b n d^2), memory Theta(b n d + b h n^2 + d^2),
  memory/FLOPs O(1/k + 1/(b n)): compute-bound;
- incremental MHA (n decode steps): FLOPs Theta(b n d^2), memory Theta(b n^2 d + n d^2),
  memory/FLOPs O(n/d + 1/b): memory-bound unless b is large and n small;
- incremental MQA (k = 1 key/value head): memory Theta(b n d + b n^2 k + n d^2),
  memory/FLOPs O(1/d + n/(d h) + 1/b).

Here the same statements come out of the component tree (``analysis.symbolic_tree``): the
attention sub-block of a spec's layer (full attention), with d_h = d/h, one layer, p = 1 (sizes
in elements, as Shazeer counts them), memory = unfused bytes (every tensor an op touches, his
"total size of memory accessed"). Incremental = a decode step summed over C = 1..n. Then the
terms that stay as b, n, d, h grow: a term is dropped when another bounds it for every such
growth, under Shazeer's n <= d and, for the logits b h n^2 of incremental MQA, h <= d/h
(heads no more than the head dimension: h = 8, k = 128 in his experiments).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache
from typing import Any

import sympy

from costmodel import model
from costmodel import symbols as sym
from costmodel.analysis import select, symbolic_tree
from costmodel.spec import Spec
from costmodel.studies.attention_variants import full_attention, standard_attention

B, n, d, h = sym.B, sym.n, sym.d, sym.h
#: What grows, in this order in an exponent vector.
GROWING = (B, n, d, h)
#: Shazeer's assumptions as linear forms of log-sizes that must be >= 0 (sizes are >= 1):
#: n <= d, and h <= d/h (h^2 <= d).
ASSUMPTIONS = (
    (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1),
    (0, -1, 1, 0),
    (0, 0, 1, -2),
)
ASSUMPTIONS_TEXT = "n <= d (Shazeer's assumption), h <= d/h (heads no more than the head dimension)"


@dataclass(frozen=True)
class Case:
    """One of Shazeer's three results, in our symbols (his k = d/h, his b = B)."""

    name: str
    phase: str  # prefill: batched; decode: incremental, summed over n steps
    mqa: bool  # k = 1 key/value head, else k = h
    flops: sympy.Expr  # the Theta terms he states
    memory: sympy.Expr
    ratio: sympy.Expr  # the O(...) bound he states on memory / FLOPs


CASES = (
    Case("batched MHA", "prefill", False, B * n * d**2, B * n * d + B * h * n**2 + d**2,
         h / d + 1 / (B * n)),
    Case("incremental MHA", "decode", False, B * n * d**2, B * n**2 * d + n * d**2, n / d + 1 / B),
    Case("incremental MQA", "decode", True, B * n * d**2, B * n * d + B * n**2 * d / h + n * d**2,
         1 / d + n / (d * h) + 1 / B),
)


# --- leading-order terms --------------------------------------------------------------------


@cache
def _rays() -> tuple[tuple[sympy.Rational, ...], ...]:
    """Extreme rays of the cone of log-sizes allowed by ASSUMPTIONS: each is the null space of
    len(GROWING) - 1 constraints held with equality, kept when it satisfies all the others."""
    dim = len(GROWING)
    found = set()
    for active in itertools.combinations(ASSUMPTIONS, dim - 1):
        null = sympy.Matrix(active).nullspace()
        if len(null) != 1:
            continue
        for sign in (1, -1):
            ray = [sign * x for x in null[0]]
            if all(sum(a * x for a, x in zip(row, ray, strict=True)) >= 0 for row in ASSUMPTIONS):
                scale = max(abs(x) for x in ray)
                found.add(tuple(sympy.Rational(x) / scale for x in ray))
    return tuple(sorted(found))


#: A monomial's exponents over GROWING.
Exponents = tuple[sympy.Rational, ...]


def _diff(a: Exponents, b: Exponents) -> Exponents:
    """The exponents of the monomial a / b."""
    return tuple(x - y for x, y in zip(a, b, strict=True))


def bounded(exponents: Exponents) -> bool:
    """Whether the monomial with these exponents of GROWING stays bounded under ASSUMPTIONS:
    its log is a linear form, bounded above on the cone iff it is <= 0 on every extreme ray."""
    return all(sum(e * x for e, x in zip(exponents, ray, strict=True)) <= 0 for ray in _rays())


def _terms(expr: sympy.Expr) -> dict[Exponents, sympy.Expr]:
    """exponent vector over GROWING -> coefficient, for a sum of monomials."""
    out: dict[Exponents, sympy.Expr] = {}
    for term in sympy.Add.make_args(sympy.expand(expr)):
        powers = term.as_powers_dict()
        exps = tuple(sympy.Rational(powers.get(v, 0)) for v in GROWING)
        coeff = term / sympy.Mul(*(v**e for v, e in zip(GROWING, exps, strict=True)))
        if coeff.free_symbols:
            raise ValueError(f"term {term} has sizes other than {GROWING}")
        out[exps] = out.get(exps, 0) + coeff
    return {e: c for e, c in out.items() if c != 0}


def _monomial(exps: Exponents) -> sympy.Expr:
    return sympy.Mul(*(v**e for v, e in zip(GROWING, exps, strict=True)))


@dataclass(frozen=True)
class Leading:
    kept: sympy.Expr  # the leading terms, with our coefficients
    theta: sympy.Expr  # the same monomials, coefficients dropped: the Theta(...) argument
    dropped: sympy.Expr  # lower-order terms under ASSUMPTIONS


def leading_terms(expr: sympy.Expr) -> Leading:
    """The terms of `expr` that no other term bounds as the sizes grow under ASSUMPTIONS."""
    terms = _terms(expr)
    kept = [e for e in terms if not any(o != e and bounded(_diff(e, o)) for o in terms)]
    return Leading(
        sympy.Add(*(terms[e] * _monomial(e) for e in kept)),
        sympy.Add(*(_monomial(e) for e in kept)),
        sympy.Add(*(terms[e] * _monomial(e) for e in terms if e not in kept)),
    )


def is_big_o(expr: sympy.Expr, bound: sympy.Expr) -> bool:
    """expr = O(bound) under ASSUMPTIONS: every term of expr is bounded by some term of bound."""
    return all(any(bounded(_diff(e, o)) for o in _terms(bound)) for e in _terms(expr))


def same_terms(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Theta(a) and Theta(b) name the same monomials."""
    return set(_terms(a)) == set(_terms(b))


# --- Shazeer's three cases from our formulas --------------------------------------------------


def attention_prefix(spec: Spec) -> str:
    """The self-attention sub-block of a decoder layer."""
    return "decoder/layers/attention" if spec.is_encoder_decoder else "layers/attention"


def layer_expr(spec: Spec, quantity: str, case: Case) -> sympy.Expr:
    """One attention layer of `spec` (full attention) in Shazeer's setting: d_h = d/h, k = h or 1,
    L = 1, p = 1; S = n in a batched pass; an incremental one summed over C = 1..n."""
    full = full_attention(standard_attention(spec))  # latent attention: its multi-head counterpart
    expr = select(symbolic_tree(full, case.phase), quantity, attention_prefix(full), full.name)
    d_h = d / h
    setting = {sym.d_h: d_h, sym.k: 1 if case.mqa else h, sym.p: 1, sym.S: n,
               sym.r: sympy.Rational(full.rotary_fraction) * d_h}
    setting.update({sym.layer_count(*key): 1 for key in model.layer_groups(full)})
    expr = expr.xreplace(setting)
    if case.phase == "decode":
        expr = sympy.summation(sympy.expand(expr), (sym.C, 1, n))
    return sympy.expand(expr)


@dataclass(frozen=True)
class Result:
    case: Case
    flops: Leading
    memory: Leading
    ratio: sympy.Expr  # leading memory / leading FLOPs, expanded

    @property
    def flops_match(self) -> bool:
        return same_terms(self.flops.theta, self.case.flops)

    @property
    def memory_match(self) -> bool:
        return same_terms(self.memory.theta, self.case.memory)

    @property
    def ratio_match(self) -> bool:
        return is_big_o(self.ratio, self.case.ratio)

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case.name,
            "phase": self.case.phase,
            "kv_heads": "1" if self.case.mqa else "h",
            "flops": {"leading": str(self.flops.kept), "theta": str(self.flops.theta),
                      "shazeer": str(self.case.flops), "match": self.flops_match},
            "memory": {"leading": str(self.memory.kept), "theta": str(self.memory.theta),
                       "dropped": str(self.memory.dropped), "shazeer": str(self.case.memory),
                       "match": self.memory_match},
            "memory_per_flop": {"ours": str(self.ratio), "shazeer_big_o": str(self.case.ratio),
                                "within": self.ratio_match},
        }


def shazeer(spec: Spec) -> list[Result]:
    """Shazeer's three results, reproduced from `spec`'s attention layer."""
    out = []
    for case in CASES:
        flops = leading_terms(layer_expr(spec, "flops", case))
        memory = leading_terms(layer_expr(spec, "bytes", case))
        out.append(Result(case, flops, memory, sympy.expand(memory.theta / flops.theta)))
    return out
