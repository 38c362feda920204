"""The sizes every other element is built on: architecture and layers, width, context.

Their costs live in the elements that use them (a layer is its sub-blocks; d sizes every
matrix); this module declares them as elements so that describe, compare and the test
strategy name them, and ``ablate --set`` varies them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from costmodel.components.element import Choose, Element, Symbol

if TYPE_CHECKING:
    from costmodel.spec import Spec


def layers(spec: Spec) -> str:
    if spec.is_encoder_decoder:
        return f"{spec.n_encoder_layers} + {spec.n_decoder_layers}"
    return str(spec.n_layers)


def _describe_architecture(spec: Spec) -> str:
    if spec.is_encoder_decoder:
        return (f"{spec.architecture.value} · encoder {spec.n_encoder_layers} "
                f"+ decoder {spec.n_decoder_layers} layers")
    return f"{spec.architecture.value} · {spec.n_layers} layers"


def _sample_architecture(choose: Choose, data: dict[str, Any]) -> None:
    kind = choose(["encoder-decoder", "encoder", "decoder", "decoder", "decoder", "decoder"])
    if kind == "encoder-decoder":
        data["architecture"] = "encoder-decoder"
        data["n_encoder_layers"] = choose([1, 2])
        data["n_decoder_layers"] = choose([1, 2])
        return
    if kind == "encoder":  # BERT and its kin
        data["architecture"] = "encoder"
    data["n_layers"] = choose([1, 2, 3, 4])


ELEMENTS = (
    Element(
        "architecture", ("architecture", "n_layers", "n_encoder_layers", "n_decoder_layers"),
        describe=_describe_architecture,
        choices=(("architecture", lambda s: s.architecture.value), ("layers", layers)),
        swaps=None, sample=_sample_architecture,
    ),
    Element(
        "width", ("d_model",),
        describe=lambda s: f"d={s.d_model}",
        choices=(("d_model", lambda s: s.d_model),),
        swaps=None, sample=lambda choose, data: data.update(d_model=choose([6, 8, 12])),
        symbols={"d": Symbol("model width, d_model", lambda s: s.d_model)},
    ),
)

CONTEXT = Element(
    "context", ("max_seq_len",),
    # The spec's longest context, not the one the rows below it were computed at.
    describe=lambda s: f"max context {s.max_seq_len}",
    choices=(("context", lambda s: s.max_seq_len),),
    swaps=None, sample=lambda choose, data: data.update(max_seq_len=64),
)
