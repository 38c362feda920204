"""costmodel: an analytical cost model for transformer architectures.

    spec = costmodel.load_spec("llama-2-7b")          # a bundled name, a YAML file or a config.json
    costmodel.analyze(spec, phase="decode", batch=8, seq=4096).to_dict()
    costmodel.analyze(spec, phase="decode", hardware="h100-sxm").roofline
    costmodel.formula(spec, "kv_cache", phase="decode", symbolic=True)

The public modules (``costmodel.hf``, ``costmodel.sweep``, ``costmodel.compare``, ...) are
attributes of the package, imported on first use (sympy and numpy only when asked for).
"""

from importlib import import_module
from typing import Any

from costmodel.analysis import Analysis, AnalysisError, analyze, formula
from costmodel.hardware import Hardware, load_hardware
from costmodel.spec import Spec, SpecError, load_spec

__all__ = ["Analysis", "AnalysisError", "Hardware", "Spec", "SpecError", "analyze", "formula",
           "load_hardware", "load_spec"]

_MODULES = frozenset({
    "analysis", "asymptotics", "attention_variants", "catalog", "compare", "compare_report",
    "conventions", "cost", "hardware", "hf", "loading", "measure", "metrics", "model", "phases",
    "plot", "report", "report_attention", "spec", "sweep", "symbols", "units", "variants",
})


def __getattr__(name: str) -> Any:
    """``costmodel.hf`` and the other public modules without importing them up front."""
    if name in _MODULES:
        return import_module(f"costmodel.{name}")
    raise AttributeError(f"module 'costmodel' has no attribute {name!r}")
