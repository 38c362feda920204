"""What a design element declares, once, in its own module (docs/architecture.md).

An ``Element`` names the spec fields it owns, the text ``describe`` and ``compare`` show for
it, its alternatives (what ``ablate`` and ``elements`` swap it for), how a random small spec
draws it (the property tests), and the size symbols its formulas are written in. Everything
that lists elements (report.describe, compare, variants.swaps, the symbol alphabet, the test
strategy) reads ``costmodel.components.ELEMENTS`` rather than a list of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from costmodel.spec import Spec

#: Picks one of the options (the test strategy passes hypothesis's draw of sampled_from).
Choose = Callable[[Sequence[Any]], Any]
#: (label, changes): one alternative, as ``--set`` changes to the spec's fields.
Alternative = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Symbol:
    """A model-size symbol: what it means and its value for a spec (None: the spec has none)."""

    meaning: str
    value: Callable[[Spec], int | None]


@dataclass(frozen=True)
class Element:
    """One design element of ../shared/DESIGN.md.

    name       as ablate/elements/compare call it
    fields     the Spec fields it owns (top-level names; a sub-model belongs whole)
    describe   its words in ``describe``'s one line; None when it has nothing to say (its default)
    choices    compare's rows: (label, value of one spec)
    swaps      its alternatives for a spec, given the sliding window to try; None for a size, which
               ``ablate --set`` varies but no swap stands for
    sample     sets its fields in a random small spec (``data``, what is drawn so far)
    symbols    the size symbols its formulas use, by name
    """

    name: str
    fields: tuple[str, ...]
    describe: Callable[[Spec], str | None]
    choices: tuple[tuple[str, Callable[[Spec], Any]], ...]
    swaps: Callable[[Spec, int], list[Alternative]] | None
    sample: Callable[[Choose, dict[str, Any]], None]
    symbols: dict[str, Symbol] = field(default_factory=dict)


def toggle(flag: str, on: str = "on", off: str = "off") -> Callable[[Spec, int], list[Alternative]]:
    """The one alternative of a boolean field: its opposite."""

    def swaps(spec: Spec, window: int) -> list[Alternative]:
        value = bool(getattr(spec, flag))
        return [(f"{on if value else off} -> {off if value else on}", {flag: not value})]

    return swaps
