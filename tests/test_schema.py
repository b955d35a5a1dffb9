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
