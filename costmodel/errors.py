"""The errors every layer raises, at the bottom so that any module can raise them.

``SpecError``: bad input (a spec, a profile, a file); ``AnalysisError``: a request the model
cannot answer. Both are ``ValueError``s whose message is one line a user can act on; the CLI
prints them without a traceback. ``costmodel.spec`` and ``costmodel.analysis`` re-export them.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A spec that cannot be used: the message is one line naming file, field and problem."""


class AnalysisError(ValueError):
    """A request the model cannot answer (a length beyond a learned position table, ...)."""
