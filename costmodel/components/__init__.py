"""One module per design element of ../shared/DESIGN.md, each returning symbolic costs.

Every function takes the spec (for its discrete choices: which norm, which activation) and a
``Dims`` (for the sizes, symbols or integers) and returns ``Cost`` objects. ``costmodel.model``
assembles them into the component tree of a whole model.
"""
