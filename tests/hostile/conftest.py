"""Hostile programs are data for tests/test_sandbox.py: never import or collect them."""

collect_ignore_glob = ["*.py"]
