"""Schema errors a user can act on: the form meant, the rule in words, the key misspelt."""

from __future__ import annotations

from dashrepro.schema import schema_errors

SOURCE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "path": {"type": "string"},
        "sha256": {"type": "string"},
        "hf_id": {"type": "string"},
        "revision": {"type": "string"},
    },
    "oneOf": [
        {
            "description": "a file (path, sha256)",
            "required": ["path", "sha256"],
            "not": {"description": "a file has no hf_id", "required": ["hf_id"]},
        },
        {
            "description": "a hub dataset (hf_id, revision)",
            "required": ["hf_id", "revision"],
            "not": {"description": "a hub dataset has no sha256", "required": ["sha256"]},
        },
    ],
}
CONFIG = {"type": "object", "properties": {"source": {"oneOf": [{"type": "null"}, SOURCE]}}}


def test_the_form_with_the_fewest_reasons_is_the_one_reported():
    [message] = schema_errors({"hf_id": "a/b"}, SOURCE, root="spec")
    assert message.startswith("spec: 'revision' is a required property")
    # the forms are listed from their descriptions
    assert message.endswith(
        "(spec must be one of its forms: a file (path, sha256); or a hub dataset (hf_id, revision))"
    )


def test_a_not_rule_reads_as_its_description():
    [message] = schema_errors({"hf_id": "a/b", "revision": "c", "sha256": "d"}, SOURCE)
    assert message.startswith("<top level>: a hub dataset has no sha256 (")


def test_a_form_for_another_type_is_not_the_one_meant():
    """`source: null` is allowed; a mapping with a misspelt key must not be told it is not
    null, but which key is wrong and which are allowed."""
    [message] = schema_errors({"source": {"path": "f", "sha265": "x"}}, CONFIG)
    assert message.startswith("source.sha265: Additional properties are not allowed")
    assert "allowed keys here: ['hf_id', 'path', 'revision', 'sha256']" in message
    assert schema_errors({"source": None}, CONFIG) == []


def test_errors_come_in_key_order_each_once():
    schema = {
        "type": "object",
        "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
    }
    assert schema_errors({"b": "x", "a": "y"}, schema) == [
        "a: 'y' is not of type 'integer'",
        "b: 'x' is not of type 'integer'",
    ]


def test_a_number_yaml_read_as_a_string_gets_the_spelling_to_write():
    """YAML 1.1 (PyYAML, so Snakemake) reads 1e-9 as a string: its floats need a dot and a
    signed exponent. The schema error says how to write it."""
    from dashrepro.schema import yaml_number_hint

    schema = {"type": "object", "properties": {"budget": {"type": "number"}}}
    [message] = schema_errors({"budget": "1e-9"}, schema)
    assert message == (
        "budget: '1e-9' is not of type 'number'; YAML reads 1e-9 as a string, not a number "
        "(its floats need a dot and a signed exponent): write 1.0e-9"
    )
    assert yaml_number_hint("1e9", "number").endswith("write 1.0e+9")
    assert yaml_number_hint("-2.5e3", ["number", "null"]).endswith("write -2.5e+3")
    assert yaml_number_hint("fast", "number") is None  # not a number at all
    assert yaml_number_hint("1e-9", "string") is None  # a string is what is wanted
    assert yaml_number_hint(1e-9, "number") is None
    [plain] = schema_errors({"budget": "fast"}, schema)
    assert plain == "budget: 'fast' is not of type 'number'"
