"""Hugging Face ``config.json`` <-> Spec, in pure Python (json only; transformers not needed).

Import (``spec_from_hf``, ``load_hf``) reads a config as the transformers implementation of its
``model_type`` reads it: every field that changes a cost is mapped, every field known to change
none is listed (with the reason), and any other field is ignored with a warning and listed as
``ignored_fields`` (transformers' class does not read it either). A cost-changing value the spec
cannot express, an unsupported model type or a mixture-of-experts model is a ``SpecError``
naming the file, the fields and the problems, all at once: never a silently wrong number.

Export (``export_hf``) writes the config of a Spec for the model type that implements it, so
that transformers can instantiate the same architecture (the tests' independent oracle). It
re-imports what it wrote and reports every spec field the config could not carry.

One ``Family`` per model type (costmodel/hf/families/, one registration each) holds how it reads
a config, its defaults, how it writes one and whether a spec matches it. docs/hf.md has the table.
"""

from __future__ import annotations

from costmodel.hf import families as _families  # noqa: F401  (registers every Family)
from costmodel.hf.export import Export, cost_fields, export_hf
from costmodel.hf.family import FAMILIES, Family, register
from costmodel.hf.importer import (
    MULTIMODAL,
    Imported,
    config_path,
    load_hf,
    read_config,
    spec_fields_from_hf,
    spec_from_hf,
)
from costmodel.hf.reader import COMMON_IGNORED, MIXTURE_OF_EXPERTS, Config
from costmodel.hf.yaml_out import to_yaml
from costmodel.spec import SpecError

SUPPORTED = tuple(FAMILIES)

__all__ = [
    "COMMON_IGNORED", "FAMILIES", "MIXTURE_OF_EXPERTS", "MULTIMODAL", "SUPPORTED", "Config", "Export",
    "Family",
    "Imported", "SpecError", "config_path", "cost_fields", "export_hf", "load_hf", "read_config", "register",
    "spec_fields_from_hf", "spec_from_hf", "to_yaml",
]
