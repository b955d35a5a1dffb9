"""JSON-schema validation (``jsonschema``, draft 2020-12) with errors a user can act on.

jsonschema's own messages name neither the key a misspelt key should have been nor, for a value
that fits none of a ``oneOf``'s forms, which form was meant. Here each error reads
``key.path: message``; a failed ``oneOf``/``anyOf`` reports the reason of the form it came
closest to, and a schema node's ``description`` (the rule in words, written once beside the rule)
replaces messages that would print the whole instance (``not``) and lists the allowed forms. A
number YAML read as a string (``1e-9``: YAML 1.1 floats need a dot) gets the spelling to write.
Torch- and pandas-free: Snakemake imports it while it parses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import jsonschema

ROOT = "<top level>"

# How much a leaf error of a failed oneOf/anyOf says about what to fix, most telling first: a
# key that is not allowed (often misspelt), a missing key, a bad value, then structural ones.
_TELLING = ("additionalProperties", "required", "enum", "const", "pattern", "minimum", "maximum")


def _key_path(error: jsonschema.ValidationError, root: str) -> str:
    parts = [str(p) for p in error.absolute_path]
    if root != ROOT:
        parts = [root, *parts]
    return ".".join(parts) if parts else ROOT


def _leaves(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    if not error.context:
        return [error]
    return [leaf for sub in error.context for leaf in _leaves(sub)]


def _rank(leaf: jsonschema.ValidationError) -> tuple[int, int]:
    telling = _TELLING.index(leaf.validator) if leaf.validator in _TELLING else len(_TELLING)
    return (-len(leaf.absolute_path), telling)


def _most_specific(
    error: jsonschema.ValidationError,
) -> tuple[jsonschema.ValidationError, jsonschema.ValidationError | None]:
    """For a ``oneOf``/``anyOf`` failure, the sub-error that says what to fix, and the failure
    whose forms to list (the innermost one whose forms all have a ``description``), or None.

    jsonschema reports "is not valid under any of the given schemas" and keeps each form's
    reasons in ``error.context``. A form for another type of value (``null`` where a mapping is
    given) is not the one meant; of the others, the one with the fewest reasons is. Of its
    reasons (each followed down the same way), the deepest and most telling one wins: a misspelt
    key over a missing one.
    """
    if not error.context:
        return error, None
    forms: dict = {}
    for sub in error.context:
        forms.setdefault(sub.relative_schema_path[0], []).append(sub)
    of_this_type = {
        form: subs
        for form, subs in forms.items()
        if not any(s.validator == "type" and not s.relative_path for s in subs)
    }
    closest = min(
        (of_this_type or forms).values(), key=lambda subs: sum(len(_leaves(s)) for s in subs)
    )
    leaf, listed = min((_most_specific(sub) for sub in closest), key=lambda pair: _rank(pair[0]))
    described = all(form.get("description") for form in error.validator_value)
    return leaf, listed or (error if described else None)


# A number in exponent form as YAML 1.1 (PyYAML, so Snakemake) reads it: a string unless it has
# a dot and a signed exponent (1.0e-9, 1.0e+9).
_EXPONENT = re.compile(r"([-+]?)([0-9]*)(?:\.([0-9]*))?[eE]([-+]?)([0-9]+)")


def yaml_number_hint(instance: object, types: object) -> str | None:
    """How to write ``instance``, a string where ``types`` (a schema's ``type``) allow a
    number, so that YAML reads a number: ``1e-9`` -> ``1.0e-9``; None for any other value."""
    allowed = [types] if isinstance(types, str) else list(types or [])
    if "number" not in allowed or not isinstance(instance, str):
        return None
    match = _EXPONENT.fullmatch(instance.strip())
    if not match or not (match[2] or match[3]):
        return None
    sign, whole, fraction, exponent_sign, exponent = match.groups()
    spelled = f"{sign}{whole or '0'}.{fraction or '0'}e{exponent_sign or '+'}{exponent}"
    import yaml  # PyYAML: the loader whose reading is explained

    if not isinstance(yaml.safe_load(spelled), float):
        return None
    return (
        f"YAML reads {instance} as a string, not a number (its floats need a dot and a signed "
        f"exponent): write {spelled}"
    )


def _describe(error: jsonschema.ValidationError, root: str) -> str:
    """``key.path: message``; a key that is not allowed is named in the path itself."""
    path = _key_path(error, root)
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(str(k) for k in error.instance if k not in allowed)
        if extra and allowed:
            prefix = "" if path == ROOT else f"{path}."
            keys = ", ".join(f"{prefix}{k}" for k in extra)
            return f"{keys}: {error.message}; allowed keys here: {sorted(allowed)}"
    if error.validator == "not" and error.validator_value.get("description"):
        return f"{path}: {error.validator_value['description']}"
    if error.validator == "type":
        hint = yaml_number_hint(error.instance, error.validator_value)
        if hint:
            return f"{path}: {error.message}; {hint}"
    return f"{path}: {error.message}"


def schema_errors(instance: object, schema: Mapping, root: str = ROOT) -> list[str]:
    """Every way ``instance`` breaks ``schema``, one ``key.path: message`` line each, in key
    order; ``root`` names the instance itself in the paths (a config: none)."""
    validator = jsonschema.Draft202012Validator(schema)
    messages = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.path))):
        specific, listed = _most_specific(error)
        message = _describe(specific, root)
        if listed is not None:
            forms = "; or ".join(form["description"] for form in listed.validator_value)
            message += f" ({_key_path(listed, root)} must be one of its forms: {forms})"
        elif specific is not error:
            message += f" ({_key_path(error, root)} must match one of its allowed forms)"
        messages.append(message)
    return messages
