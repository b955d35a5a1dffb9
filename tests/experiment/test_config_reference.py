"""The generated configuration reference: every schema property described, the page current."""

from __future__ import annotations

import pytest

from dashrepro.experiment import config_reference
from dashrepro.experiment.config import config_schema


def test_every_schema_property_has_a_description():
    assert config_reference.undescribed(config_schema()) == []


def test_the_page_in_docs_is_the_generated_one():
    """Regenerate with `python -m dashrepro.experiment.config_reference` after a schema change."""
    assert config_reference.main(["--check"]) == 0, "docs/reference/configuration.md is stale"


def test_every_property_and_its_default_are_on_the_page():
    schema = config_schema()
    page = config_reference.current_page()
    keys = [entry.key for entry in config_reference.entries(schema, schema)]
    assert {"experiment", "evaluation.temperature", "methods.<name>.params",
            "data.training_set.sha256"} <= set(keys)  # fmt: skip
    for key in keys:
        assert f"`{key}`" in page, key
    assert "- **`evaluation.temperature`** — number; > 0; default `1.0`; required  " in page


def test_an_undescribed_property_stops_the_page():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "description": "A."},
                                               "b": {"type": "object", "properties": {
                                                   "c": {"type": "string"}}}}}  # fmt: skip
    assert config_reference.undescribed(schema) == ["b", "b.c"]
    with pytest.raises(ValueError, match=r"\['b', 'b.c'\]"):
        config_reference.render(schema, {})


def test_types_ranges_and_references_are_spelled_out():
    root = {
        "$defs": {"positive_int": {"type": "integer", "minimum": 1, "description": "Count."}},
        "type": "object",
        "properties": {
            "n": {"$ref": "#/$defs/positive_int"},
            "p": {"type": ["number", "null"], "minimum": 0, "maximum": 1,
                  "description": "P, under results/<experiment>/, not `<kept>`."},
            "kind": {"enum": ["hf", "vllm"], "description": "Backend."},
            "names": {"type": "array", "items": {"type": "string"}, "uniqueItems": True,
                      "minItems": 1, "description": "Names."},
            "spec": {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                     "description": "A spec."},
        },
        "required": ["n"],
    }  # fmt: skip
    page = config_reference.render(root, {"n": 3, "kind": "hf"})
    assert "- **`n`** — integer; ≥ 1; default `3`; required  \n  Count." in page
    # HTML-like words outside code spans are escaped; inside them they are kept.
    assert "- **`p`** — number | null; ≥ 0, ≤ 1; default —  \n  P, under " in page
    assert "results/&lt;experiment&gt;/, not `<kept>`." in page
    assert '- **`kind`** — `"hf"` | `"vllm"`; default `"hf"`  ' in page
    assert "- **`names`** — array of string; at least 1 item, unique items; default —" in page
    assert "- **`spec`** — object; default —" in page  # its oneOf only says what is required
