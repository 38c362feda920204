"""Which components of a sweep's tree ``timing_grid.predict_grid`` times once: components whose
one-layer costs are equal and that ``timing.component_time`` treats alike, over all their layers.

A component's time is linear in the layers it spans (each product, op, byte and gradient is per
layer, as ``component_time`` counts them; the token table's gradients are not, and it merges with
nothing), so two components whose one layer costs the same, and of which the rule reads the same
things (``rule_traits``), take the time of one over the layers of both. That holds across layer
groups (an FFN beside local and global attention), within a layer (Llama's k and v, its two norms,
its two residual adds) and across stacks (T5's encoder and decoder layers: in prefill and
training S_e = S, so 36 of its 61 training-step components repeat another one). Equal costs
are found by a fingerprint (a few sampled values of each quantity) and confirmed on every value.
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
    ``timing_grid._number`` at every other ``GridRates`` entry. Over integer fields (below 2^53)
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
    a measured kernel's table is read by key (a flash core or routed experts outside training),
    the key itself less its layer group (the tables do not depend on the group)."""
    flash = kernels.flash_attention and key.attention_core
    if not training and (flash or key.part == "experts"):
        return ("kernel", replace(key, group=None))
    return (kernels.share(key, dropped), key == TOKEN_TABLE, key.leaf if flash else None)


def _print(x: Any) -> Any:
    """A value's fingerprint: a number as it is, an array by its shape and three of its values."""
    if isinstance(x, np.ndarray):
        return (x.shape, x.item(0), x.item(-1), x.item(x.size // 2)) if x.size > 1 else x.item()
    return x


def _fingerprint(cost: Cost) -> tuple[Any, ...]:
    return (*(_print(getattr(cost, f)) for f in READ), *(_print(x) for g in cost.gemms for x in g))


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        # (== and all directly: np.array_equal's checks cost a third of it at 10,000 points)
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and bool((a == b).all()))
    return bool(a == b)


def _equal(a: Cost, b: Cost) -> bool:
    """Every quantity the rule reads equal (the fingerprints already are, gemms' count with them)."""
    return a is b or (all(_same(getattr(a, f), getattr(b, f)) for f in READ)
                      and all(_same(x, y) for g, h in zip(a.gemms, b.gemms, strict=True)
                              for x, y in zip(g, h, strict=True)))


def merged(costs: dict[Key, Cost], groups: dict[tuple[str, str | None], int], kernels: Kernels,
           dropped: set[SubBlock], training: bool) -> dict[Key, tuple[Cost, int]]:
    """key -> (one layer's cost, layers): each set of components with equal traits
    (``rule_traits``) and equal costs per layer once, under the first one's key, over all their
    layers (the sum of their times: the time is linear in the layers)."""
    out: dict[Key, tuple[Cost, int]] = {}
    seen: dict[tuple[Any, ...], list[Key]] = {}
    for key, cost in costs.items():
        layers = layer_count(groups, key)
        heads = seen.setdefault((rule_traits(key, kernels, dropped, training), len(cost.gemms),
                                 _fingerprint(cost)), [])
        for head in heads:
            other, count = out[head]
            if _equal(cost, other):
                out[head] = (other, count + layers)
                break
        else:
            heads.append(key)
            out[key] = (cost, layers)
    return out
