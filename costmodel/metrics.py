"""Folded into ``costmodel.hardware`` (profiles and what an analysis means on them live in one
module); these names stay importable from here for code written before the fold."""

from costmodel.hardware import (
    ATTENTION_BLOCKS,
    Fit,
    attention_total,
    fit,
    hardware_dict,
    is_attention,
    roofline_dict,
    roofline_json,
    roofline_of,
)

__all__ = ["ATTENTION_BLOCKS", "Fit", "attention_total", "fit", "hardware_dict", "is_attention",
           "roofline_dict",
           "roofline_json", "roofline_of"]
