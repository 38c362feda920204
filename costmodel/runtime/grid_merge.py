"""Which components of a sweep's tree ``timing_grid.predict_grid`` times once: components whose
one-layer costs are equal and that ``timing.component_time`` treats alike, over all their layers.

A component's time is linear in the layers it spans (each product, op, byte and gradient is per
layer, as ``component_time`` counts them; the token table's gradients are not, and it merges with
nothing), so two components whose one layer costs the same, and of which the rule reads the same
things (``rule_traits``), take the time of one over the layers of both. That holds across layer
groups (an FFN beside local and global attention), within a layer (Llama's k and v, its two norms,
its two residual adds) and across stacks (T5's encoder and decoder layers: in prefill and
training S_e = S, so 36 of its 61 training-step components repeat another one). Equal costs
are found by one dictionary key: their numbers and a token per array (``Canonical``: arrays equal
at every point share one, and the lookups of ``timing_grid.GridRates`` read the same tokens); a
key's traits are kept across calls (they depend on the key, the kernels, the dropout sub-blocks
and the phase alone, never on the points).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from costmodel.components.key import TOKEN_TABLE, Key, SubBlock
from costmodel.cost import Cost
from costmodel.phases import PER_PASS, Phase
from costmodel.runtime.timing import Kernels, layer_count

#: What the rule reads of a component's cost (``Phase.quantity`` of these, and the products).
READ = ("params", "matmul", "matmul_eff", "other", "bytes_unfused", "train_only")


class Scaled:
    """k x a, an array a times a number k, not multiplied out yet: a per-pass quantity over a
    merged component's layers (passes x layers x the field). ``GridRates.roof`` folds k into
    its division by the peak or the bandwidth (one pass over the points where the multiply and
    the division were two); any other use multiplies it out (``value``): arithmetic here, and
    ``grid_values._number`` at every other ``GridRates`` entry. Over integer fields (below 2^53)
    the times differ from the product's by the rounding of k / peak, about 1e-16."""

    __slots__ = ("k", "a")
    __array_ufunc__ = None  # an array + or - it: numpy defers to the methods here

    def __init__(self, k: float, a: np.ndarray) -> None:
        self.k, self.a = k, a

    def value(self) -> np.ndarray:
        out: np.ndarray = self.k * self.a
        return out

    def __mul__(self, n: Any) -> Any:
        return Scaled(n * self.k, self.a) if isinstance(n, (int, float)) else self.value() * n

    __rmul__ = __mul__

    def __add__(self, o: Any) -> Any:
        return self.value() if isinstance(o, (int, float)) and not o else self.value() + _plain(o)

    __radd__ = __add__

    def __sub__(self, o: Any) -> Any:
        return self.value() - _plain(o)

    def __rsub__(self, o: Any) -> Any:
        return _plain(o) - self.value()


def _plain(x: Any) -> Any:
    return x.value() if isinstance(x, Scaled) else x


class Whole:
    """A component's phase quantities over all its layers, from one layer's cost, each computed
    when the rule first reads it (``Phase.quantity`` times the layers; an array per-pass
    quantity as ``Scaled``, its factor not multiplied in yet)."""

    def __init__(self, phase: Phase, cost: Cost, layers: int) -> None:
        self._phase, self._cost, self._layers = phase, cost, layers

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        field = PER_PASS.get(name)
        value = None if field is None else getattr(self._cost, field)
        n = self._phase.passes * self._layers
        if (isinstance(value, np.ndarray) and value.ndim and n != 1
                and (self._phase.training or not self._cost.train_only)):
            value = Scaled(n, value)  # Phase.quantity's (passes x times) x field, not multiplied yet
        else:
            value = self._phase.quantity(self._cost, name, self._layers)
        setattr(self, name, value)
        return value


def rule_traits(key: Key, kernels: Kernels, dropped: set[SubBlock], training: bool) -> tuple[Any, ...]:
    """What ``timing.component_time`` reads of a component's key, beside its cost: two
    components with equal traits and equal costs per layer take the same time per layer. Keep in
    step with the rule: the share of its bytes that reaches memory (``Kernels.share``), whether
    it is the token table (its gradients), its leaf under flash attention (``on_chip``), and where
    a measured kernel's table is read by key (a flash core, routed experts or latent attention's
    kv_b outside training),
    the key itself less its layer group (the tables do not depend on the group)."""
    flash = kernels.flash_attention and key.attention_core
    if not training and (flash or key.part == "experts" or key.leaf == "kv_b"):
        return ("kernel", replace(key, group=None))
    return (kernels.share(key, dropped), key == TOKEN_TABLE, key.leaf if flash else None)


class Canonical:
    """One token per set of equal arrays seen in a call: ``of(a)`` is the token of the first
    array seen equal to `a` (a small array by its bytes; a larger one among the arrays that share
    its shape and three sampled values, compared on every value; each array object once, then
    found by identity: -0.0 and 0.0 differ in bytes, so two such arrays may keep two tokens,
    which costs a lookup, never a wrong one). A token is an object of its own, equal to
    nothing else: a key of numbers and tokens never mistakes an array for a number. The merge
    and ``timing_grid.GridRates``'s lookups share one per call, so an array the merge has
    compared is found by identity in the lookups."""

    def __init__(self) -> None:
        self._alias: dict[int, tuple[np.ndarray, object]] = {}  # holds `a`: its id stays its own
        self._by_value: dict[tuple[Any, ...], list[tuple[np.ndarray, object]]] = {}
        self._by_bytes: dict[tuple[Any, ...], object] = {}

    def of(self, a: np.ndarray) -> object:
        hit = self._alias.get(id(a))
        if hit is not None:
            return hit[1]
        if a.size <= 64:  # found by its bytes, dtype and shape: one dictionary lookup
            token = self._by_bytes.setdefault((a.shape, a.dtype, a.tobytes()), object())
        else:  # its candidates: equal shape and three sampled values (== and all: a pass)
            seen = self._by_value.setdefault((a.shape, a.item(0), a.item(-1), a.item(a.size // 2)), [])
            token = next((t for b, t in seen if (a == b).all()), None)
            if token is None:
                token = object()
                seen.append((a, token))
        self._alias[id(a)] = (a, token)
        return token


def _values(cost: Cost, of: Any) -> tuple[Any, ...]:
    """What the rule reads of `cost` (``READ`` and the products), an array as its token
    (``Canonical``), a number as it is."""
    nd = np.ndarray
    return tuple([of(x) if type(x) is nd else x
                  for x in (cost.params, cost.matmul, cost.matmul_eff, cost.other, cost.bytes_unfused,
                            cost.train_only, *[x for g in cost.gemms for x in g])])


#: (kernels, dropout sub-blocks, training) -> key -> ``rule_traits``: what a key's traits depend on.
_TRAITS: dict[tuple[Kernels, frozenset[SubBlock], bool], dict[Key, tuple[Any, ...]]] = {}


def _traits_of(kernels: Kernels, dropped: set[SubBlock], training: bool) -> dict[Key, tuple[Any, ...]]:
    if len(_TRAITS) > 256:
        _TRAITS.clear()
    return _TRAITS.setdefault((kernels, frozenset(dropped), training), {})


def merged(costs: dict[Key, Cost], groups: dict[tuple[str, str | None], int], kernels: Kernels,
           dropped: set[SubBlock], training: bool,
           canonical: Canonical | None = None) -> dict[Key, tuple[Cost, int]]:
    """key -> (one layer's cost, layers): each set of components with equal traits
    (``rule_traits``) and equal costs per layer once, under the first one's key, over all their
    layers (the sum of their times: the time is linear in the layers). Costs are equal when
    their numbers are and their arrays are equal at every point (``Canonical``: the same token)."""
    of = (canonical or Canonical()).of
    known = _traits_of(kernels, dropped, training)
    out: dict[Key, tuple[Cost, int]] = {}
    heads: dict[tuple[Any, ...], Key] = {}
    for key, cost in costs.items():
        layers = layer_count(groups, key)
        traits = known.get(key)
        if traits is None:
            traits = known[key] = rule_traits(key, kernels, dropped, training)
        head = heads.setdefault((traits, _values(cost, of)), key)
        if head is key:
            out[key] = (cost, layers)
        else:
            other, count = out[head]
            out[head] = (other, count + layers)
    return out
