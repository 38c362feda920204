"""Presentation: ``tables`` (the ``Table``, analyze's tables and every renderer), and one module
of tables per command family (``compare``, ``attention``, ``memory``, ``parallel``, ``measure``),
charts as SVG (``svg``; ``spec_figures``, ``sweep_figures``, ``html``'s page; ``files`` writes
them), ``plot`` (the serving figures matplotlib still draws). Results come from the layers
below; nothing below imports this."""
