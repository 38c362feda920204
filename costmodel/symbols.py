"""The alphabet every formula is written in (docs/reference.md, "Symbols"), and byte widths.

Each symbol is declared once, here, with the assumptions sympy needs to keep expressions
simple (all sizes are positive integers). Formulas never build symbols from strings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sympy

#: Token ids are int64 in every reference implementation (torch.long).
ID_BYTES = 8
#: A boolean mask element (attention masks, dropout masks) is one byte.
MASK_BYTES = 1

#: Bytes per element for each dtype the CLI accepts.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

_SIZE = dict(integer=True, positive=True)

#: The symbols of a pass and of the asymptotics: name -> (assumptions, meaning). The model
#: sizes (d, h, k, d_h, f, V, ...) are declared by their elements (``costmodel.components``),
#: which hand them to ``declare_sizes`` when that package is imported (this module sits below
#: the components and never imports them); ``alphabet()`` is both. The symbols themselves are
#: made on first use, so that evaluating numbers (`costmodel analyze`) never pays for sympy.
ALPHABET: dict[str, tuple[dict[str, bool], str]] = {
    # Shape of the pass (the phase binds these).
    "B": (_SIZE, "batch size"),
    "S": (_SIZE, "tokens processed in this pass (1 in decode)"),
    "C": (_SIZE, "context attended to (S in prefill/train, cached + 1 in decode)"),
    # Encoder side of an encoder-decoder: tokens encoded in this pass (0 in decode, when the
    # encoder output is already cached) and encoder tokens the decoder cross-attends to.
    "S_e": (dict(integer=True, nonnegative=True), "encoder tokens processed in this pass"),
    "C_e": (_SIZE, "encoder tokens cross-attended to"),
    "p": (_SIZE, "bytes per element of weights and activations"),
    # Asymptotics (Shazeer 2019): tokens per sequence, the decode steps summed over.
    "n": (_SIZE, "sequence length n of Shazeer (2019)"),
}

_made: dict[str, Any] = {}
#: The model sizes, name -> meaning, as the elements declare them (``declare_sizes``).
_sizes: dict[str, str] = {}


def declare_sizes(sizes: dict[str, str]) -> None:
    """The elements' model-size symbols, name -> meaning: ``costmodel.components`` declares
    them once, on import, before any formula reads ``symbols.d``."""
    _sizes.update(sizes)


def alphabet() -> dict[str, tuple[dict[str, bool], str]]:
    """Every symbol: the pass's above, then each element's model sizes (positive integers)."""
    return {**ALPHABET, **{n: (_SIZE, meaning) for n, meaning in _sizes.items()}}


def __getattr__(name: str) -> sympy.Symbol:
    """``symbols.B``, ``symbols.d`` and friends: each symbol is made once, on first use."""
    if name not in _made:
        if name.startswith("__"):
            raise AttributeError(name)
        known = alphabet()
        if name not in known:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import sympy

        _made[name] = sympy.Symbol(name, **known[name][0])
    return _made[name]


def layer_count(stack: str, group: str | None) -> sympy.Symbol:
    """The symbol counting the layers of one group of one stack.

    A decoder-only model with one kind of layer has plain ``L``; an encoder-decoder has
    ``L_enc`` and ``L_dec``; a local/global pattern splits a stack into ``L_local`` and
    ``L_global``.
    """
    import sympy

    parts = ["L"]
    if stack != "layers":
        parts.append({"encoder": "enc", "decoder": "dec"}[stack])
    if group is not None:
        parts.append(group)
    return sympy.Symbol("_".join(parts), **_SIZE)


def meaning(name: str) -> str:
    """What a symbol of a formula stands for (docs/reference.md, "Symbols")."""
    known = alphabet()
    if name in known:
        return known[name][1]
    if name == "L" or name.startswith("L_"):
        parts = name.split("_")[1:]
        stack = {"enc": "encoder ", "dec": "decoder "}.get(parts[0], "") if parts else ""
        kind = next((p for p in parts if p in ("local", "global")), None)
        return f"{stack}layers" + (f" of kind {kind}" if kind else "")
    return "a symbol of the formula"


def legend(names: Any) -> dict[str, str]:
    """name -> meaning for the symbols of one expression, in a stable order."""
    order = list(alphabet())
    return {n: meaning(n) for n in sorted(set(names),
                                          key=lambda n: (order.index(n) if n in order else len(order), n))}
