"""One ``Family`` per Hugging Face model type, and the registry that lists them.

A family holds everything this tool knows about one ``model_type``: how it reads a config
(``read``), the configuration class's defaults, the fields that are required (the sizes: a
config that leaves one out is an error naming it, never the class default silently taken), the
fields it reads but that change no cost (``ignored``, each with the reason), how it writes a
spec back as a config (``export``), whether a spec can be one of its models (``matches``), and
the quantisations of its released checkpoints that are read as the unquantised model
(``quantized``).

Adding a model type is one ``register(Family(...))`` call in a module of
``costmodel/hf/families/`` (every module there is imported): nothing else lists families.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from costmodel.hf.reader import Config
    from costmodel.spec import Spec


def _decoder_only(spec: Spec) -> bool:
    return not spec.is_encoder_decoder and not spec.is_encoder


@dataclass(frozen=True)
class Family:
    """How one model_type maps to a Spec, and back."""

    model_type: str
    architecture: str  # the transformers class with an LM head (an encoder's: its AutoModel class)
    read: Callable[[Config, dict[str, Any]], None]  # config -> spec fields, into the dict
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the configuration class's defaults
    required: tuple[str, ...] = ()  # fields with no default here (the sizes)
    ignored: Mapping[str, str] = field(default_factory=dict)  # fields read but cost-free, and why
    export: Callable[[Spec], dict[str, Any]] | None = None  # spec -> config fields (None: import only)
    # A cheap pre-filter; export then keeps the families whose config re-imports to the same costs.
    matches: Callable[[Spec], bool] = _decoder_only
    # Fields the importer refuses when non-zero that export writes: re-read at 0 and reported lost.
    unreadable_on_export: tuple[str, ...] = ()
    # quantization_config quant_methods of released checkpoints that transformers dequantises into
    # the same modules (gpt-oss: mxfp4), each with the line warned; any other one is refused.
    quantized: Mapping[str, str] = field(default_factory=dict)
    # An encoder-only type (BERT): counted as its AutoModel class holds it, whatever task class
    # the config's architectures name (the head is the spec's ``head``).
    encoder: bool = False


# model_type -> Family, in registration order (export prefers the earlier of two exact matches).
FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    if family.model_type in FAMILIES:
        raise ValueError(f"model_type {family.model_type} is registered twice")
    FAMILIES[family.model_type] = family
    return family
