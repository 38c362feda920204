"""Spec -> config.json: the config of the transformers model type that implements a spec.

Every family with an exporter whose ``matches`` admits the spec writes its config; the config is
re-imported, and the first family (in registration order) whose config reproduces every cost
field is chosen; else the one that loses fewest fields while keeping the parameter count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.hf.family import FAMILIES
from costmodel.hf.importer import spec_from_hf
from costmodel.spec import METADATA, Block, Spec, SpecError

_METADATA = METADATA


@dataclass(frozen=True)
class Export:
    """A spec as a transformers config: its model_type, the config, and what it could not carry."""

    model_type: str
    config: dict[str, Any]
    lost: tuple[str, ...]  # spec fields (changing no parameter) the config cannot express


def export_hf(spec: Spec) -> Export:
    """The config.json of the transformers model type that implements this spec's architecture.

    Raises SpecError naming the fields when no supported model type builds the same parameters.
    """
    from costmodel.analysis import count_params

    ours, params = cost_fields(spec), count_params(spec)
    candidates: list[tuple[Export, bool]] = []
    for family in FAMILIES.values():
        if family.export is None or family.encoder != spec.is_encoder or not family.matches(spec):
            continue
        config = {"_name_or_path": spec.name, "model_type": family.model_type,
                  "architectures": [family.architecture], **family.export(spec)}
        # Sites the importer refuses when non-zero (Falcon's dropout) are re-read at 0, reported lost.
        probe = {**config, **dict.fromkeys(family.unreadable_on_export, 0.0)}
        try:
            back = spec_from_hf(probe, f"<{spec.name} as {family.model_type}>")
        except SpecError:
            continue
        theirs = cost_fields(back)
        lost = tuple(k for k, v in ours.items() if theirs.get(k) != v)
        export = Export(family.model_type, config, lost)
        if not lost:
            return export
        candidates.append((export, count_params(back) == params))
    exact_params = [e for e, same in candidates if same]
    if exact_params:
        return min(exact_params, key=lambda e: len(e.lost))
    nearest = min((e for e, _ in candidates), key=lambda e: len(e.lost), default=None)
    fields = ", ".join(nearest.lost) if nearest else "architecture"
    raise SpecError(f"{spec.name}: {fields}: no Hugging Face model type among {', '.join(FAMILIES)} builds "
                    f"these parameters" + (f" (nearest: {nearest.model_type})" if nearest else ""))


def cost_fields(spec: Spec) -> dict[str, Any]:
    """The fields that set costs, in a canonical form (equal forms of one architecture compare equal)."""
    data = spec.model_dump(mode="json", exclude=set(_METADATA))
    data["layer_pattern"] = [k.value for k in spec.layer_kinds()]
    data["bias"] = {**data["bias"], "norm": spec.norm_bias}
    data["embedding_dropout"] = spec.embedding_dropout_rate
    data["attention_dropout"] = spec.attention_dropout_rate
    if spec.block is Block.serial:
        data.pop("shared_norm")
    return data
