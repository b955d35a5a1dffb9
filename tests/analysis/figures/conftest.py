"""Cheap helpers shared by the figure tests: the benchmarks and the context a figure kind is
given."""

from __future__ import annotations

BENCHES = {"a": "A", "b": "B", "c": "C"}


def context(methods, input_keys=None) -> dict:
    return {"id": "f", "experiment": "e", "scale": "s", "scales": ["s"],
            "benchmarks": list(BENCHES), "benchmark_labels": BENCHES,
            "method_labels": {m: m.upper() for m in methods},
            "input_keys": input_keys or {}}  # fmt: skip
