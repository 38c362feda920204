"""``python -m costmodel ...``: the same command line as the ``costmodel`` script."""

from costmodel.cli import main

main()
