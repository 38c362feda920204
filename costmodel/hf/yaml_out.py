"""An imported spec as YAML: fields in the README's order, with a comment where one helps."""

from __future__ import annotations

import json
import re
from typing import Any

from costmodel.spec import FIELD_ORDER

_ORDER = FIELD_ORDER

# Comments beside the written fields: where a value comes from, when it is not obvious.
_COMMENTS = {
    "head_dim": "d_h",
    "position_offset": "rows of the learned position table past max_seq_len",
    "head_scale": "decoder output * d_model^-1/2 before the tied head",
    "global_nope": "full-attention layers apply no RoPE",
    "layer_pattern": "from layer_types (or the pattern that fills them)",
    "embedding_dropout": "embeddings dropped out at another rate",
    "attention_dropout": "attention probabilities dropped out at another rate",
    "ffn_dropout": "dropout on the FFN hidden activations",
    "final_dropout": "dropout after each stack's final norm",
    "ignored_fields": "unknown config fields, skipped",
}


def to_yaml(fields: dict[str, Any]) -> str:
    """A spec mapping as YAML, fields in the README's order, with a comment where one helps."""
    lines = []
    for key in sorted(fields, key=_ORDER.index):
        if key == "dropout" and not fields[key]:
            continue  # the default
        value = _yaml_value(fields[key])
        comment = _COMMENTS.get(key)
        lines.append(f"{key}: {value}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n"


def _yaml_value(v: Any) -> str:
    if v is None:
        return "null"  # latent attention's q_lora_rank: queries straight from d_model
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_yaml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(x)}" for k, x in v.items()) + "}"
    if _PLAIN.fullmatch(v) and v.lower() not in _YAML_WORDS:
        return str(v)  # a str: fullmatch takes nothing else
    return json.dumps(str(v))  # a JSON string is a valid YAML scalar


_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}


