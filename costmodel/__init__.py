"""costmodel: an analytical cost model for transformer architectures.

    spec = costmodel.load_spec("specs/llama-2-7b.yaml")
    costmodel.analyze(spec, phase="decode", batch=8, seq=4096).to_dict()
    costmodel.formula(spec, "kv_cache", phase="decode", symbolic=True)
"""

from costmodel.analysis import Analysis, analyze, formula
from costmodel.spec import Spec, SpecError, load_spec

__all__ = ["Analysis", "Spec", "SpecError", "analyze", "formula", "load_spec"]
