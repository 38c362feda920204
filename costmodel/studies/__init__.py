"""Studies on the core: spec against spec (``compare``), one element swapped (``variants``:
ablate, elements), published conventions (``conventions``), the asymptotics of attention
(``asymptotics``), formulas over grids (``sweep``), the attention variants side by side
(``attention_variants``)."""
