"""costmodel: an analytical cost model for transformer architectures."""
from costmodel.spec import Spec, SpecError, load_spec
from costmodel.analysis import Analysis, analyze, formula
