"""Tests for dashrepro.data.spec: the dataset spec's schema, as the loaders check it."""

from __future__ import annotations

import pytest

from dashrepro.data import datasets as ds
from dashrepro.data import layouts


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        (
            {"layout": "local_benchmark", "expected_size": 1},
            "must be one of its forms: a local file",
        ),
        (
            {"path": "a.jsonl", "hf_id": "o/n", "layout": "local_benchmark", "expected_size": 1},
            r"must be one of its forms: a local file \(path and its sha256\); or a Hugging Face",
        ),
        ({"path": "a.jsonl", "expected_size": 1}, "spec: 'layout' is a required property"),
        # a local file is pinned by its content, as in the workflow config
        (
            {"path": "a.jsonl", "layout": "local_benchmark", "expected_size": 1},
            "'sha256' is a required property",
        ),
        (
            {"path": "a.jsonl", "layout": "local_benchmark", "expected_size": 1, "sha265": "x"},
            r"spec\.sha265: Additional properties are not allowed",
        ),
        (
            {"hf_id": "MathArena/aime_2025", "layout": "matharena", "expected_size": 30},
            "spec: 'revision' is a required property",
        ),
        (
            {
                "hf_id": "MathArena/aime_2025",
                "revision": "abc",
                "sha256": "0" * 64,
                "layout": "matharena",
                "expected_size": 30,
            },
            "a hub dataset is pinned by its revision; path and sha256 are a local file's",
        ),
        (
            {"path": "a.jsonl", "layout": "local_benchmark", "expected_size": "30"},
            "spec.expected_size: '30' is not of type 'integer'",
        ),
        (
            {"path": "a.jsonl", "sha256": "0" * 64, "layout": "nope", "expected_size": 1},
            r"spec\.layout: 'nope' is not one of \['hf_aime_2024'",
        ),
    ],
)
def test_bad_specs(spec, pattern):
    with pytest.raises(layouts.DataError, match=pattern):
        ds.load_benchmark(spec)
