"""``python -m evolora.cli``: the same command line as ``evolora``."""

from evolora.cli import main

main()
