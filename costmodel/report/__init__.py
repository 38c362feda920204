"""Presentation: ``tables`` (the ``Table``, analyze's tables and every renderer), and one module
of tables per command family (``compare``, ``attention``, ``memory``, ``parallel``, ``measure``),
``plot`` (matplotlib figures). Results come from the layers below; nothing below imports this."""
