"""``python -m evolora``: the same command line as ``evolora`` (and ``python -m evolora.cli``)."""

from evolora.cli import main

if __name__ == "__main__":
    main()
