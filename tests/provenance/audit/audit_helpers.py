"""Shared helpers of the ``tests/provenance/audit`` test files (not a test module itself): the
results folder of the small tree the ``tree`` fixture (conftest.py) writes, and a file writer."""

from __future__ import annotations

RESULTS = "results/x"


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
