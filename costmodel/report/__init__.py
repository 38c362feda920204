"""Presentation: ``tables`` (the ``Table``, analyze's tables and every renderer), and one module
of tables per command family (``compare``, ``attention``, ``memory``, ``parallel``, ``measure``),
charts as SVG (``svg``; ``spec_figures``, ``sweep_figures``, ``serving_figures``, ``cluster``,
``html``'s page; ``files`` writes them). Results come from the layers below; nothing below
imports this."""
