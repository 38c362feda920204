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

#: The public names, each imported from its module on first use: importing any module of the
#: package (``costmodel.units``) runs this file, which must load nothing else.
_NAMES = {
    "Analysis": "costmodel.analysis", "AnalysisError": "costmodel.errors", "SpecError": "costmodel.errors",
    "formula": "costmodel.analysis", "Spec": "costmodel.spec", "load_spec": "costmodel.catalog",
    "analyze": "costmodel.runtime.on_device", "Hardware": "costmodel.devices.hardware",
    "load_hardware": "costmodel.devices.hardware",
}

__all__ = sorted(_NAMES)

#: ``costmodel.<name>`` -> the module it names (the modules of the flat layout keep their names).
_MODULES = {
    **{name: f"costmodel.{name}" for name in (
        "analysis", "catalog", "cost", "errors", "hf", "loading", "measure", "model", "phases",
        "precision", "spec", "symbols", "units", "devices", "runtime", "studies", "parallel")},
    "hardware": "costmodel.devices.hardware", "metrics": "costmodel.runtime.roofline",
    "roofline": "costmodel.runtime.roofline",
    **{name: f"costmodel.studies.{name}" for name in (
        "asymptotics", "attention_variants", "compare", "conventions", "sweep", "variants")},
    "report": "costmodel.report", "compare_report": "costmodel.report.compare",
    "report_attention": "costmodel.report.attention",
}


def __getattr__(name: str) -> Any:
    """``costmodel.analyze``, ``costmodel.hf`` and the other public names and modules, imported
    on first use (sympy and numpy only when asked for)."""
    if name in _NAMES:
        return getattr(import_module(_NAMES[name]), name)
    if name in _MODULES:
        return import_module(_MODULES[name])
    raise AttributeError(f"module 'costmodel' has no attribute {name!r}")
