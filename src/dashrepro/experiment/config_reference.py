"""The configuration reference page, generated from the config schema and the default config.

Every property of ``config_schema()`` (``config_schema.yaml`` with the dataset spec) becomes one
row: its dotted key (``<name>`` for a mapping's free-named entries, ``[]`` for a list's items),
type, default (``workflow_config.yaml``'s value), allowed values and description. A property
without a description is an error, so the page cannot leave a key unexplained.

    python -m dashrepro.experiment.config_reference            # writes docs/reference/configuration.md
    python -m dashrepro.experiment.config_reference --check    # exits 1 if the page is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from dashrepro.experiment.config import config_schema
from dashrepro.layout import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "reference" / "configuration.md"
DEFAULTS = REPO_ROOT / "workflow_config.yaml"
#: Schema keywords whose value is a sub-schema or a list of them (walked for properties).
_BRANCHES = ("oneOf", "anyOf", "allOf")
_NO_DEFAULT = "—"


@dataclass(frozen=True)
class Entry:
    """One property of the schema, where it sits and what the schema says of it."""

    key: str  # dotted path: data.validation.n_problems, methods.<name>.params
    schema: Mapping
    required: bool


def _resolve(schema: Mapping, root: Mapping) -> Mapping:
    """``schema`` with a local ``$ref`` replaced by its target (its own keys win)."""
    ref = schema.get("$ref")
    if not ref:
        return schema
    target: Mapping = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**_resolve(target, root), **{k: v for k, v in schema.items() if k != "$ref"}}


def entries(schema: Mapping, root: Mapping, prefix: str = "") -> Iterator[Entry]:
    """Every property under ``schema``, depth first, in the schema's order."""
    schema = _resolve(schema, root)
    required = set(schema.get("required", ()))
    for name, sub in (schema.get("properties") or {}).items():
        key = f"{prefix}.{name}" if prefix else name
        yield Entry(key, sub, name in required)
        yield from entries(sub, root, key)
    free = schema.get("additionalProperties")
    if isinstance(free, Mapping) and free:
        key = f"{prefix}.<name>" if prefix else "<name>"
        yield Entry(key, free, False)
        yield from entries(free, root, key)
    if isinstance(schema.get("items"), Mapping):
        yield from entries(schema["items"], root, f"{prefix}[]")
    for branch in _BRANCHES:
        for sub in schema.get(branch, ()):
            yield from entries(sub, root, prefix)


def undescribed(schema: Mapping) -> list[str]:
    """The keys of every property that has no description (its own or its ``$ref``'s)."""
    return [
        e.key
        for e in entries(schema, schema)
        if not str(_resolve(e.schema, schema).get("description", "")).strip()
    ]


def _type(schema: Mapping, root: Mapping) -> str:
    schema = _resolve(schema, root)
    if "enum" in schema:
        return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    for branch in _BRANCHES:
        if branch in schema and "type" not in schema:
            return " | ".join(dict.fromkeys(_type(s, root) for s in schema[branch]))
    kind = schema.get("type", "object" if "properties" in schema else "any")
    kinds = kind if isinstance(kind, list) else [kind]
    text = " | ".join(str(k) for k in kinds)
    if "array" in kinds and isinstance(schema.get("items"), Mapping):
        text += f" of {_type(schema['items'], root)}"
    return text


def _allowed(schema: Mapping, root: Mapping) -> str:
    schema = _resolve(schema, root)
    parts = []
    for word, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
                       ("exclusiveMaximum", "<")):  # fmt: skip
        if word in schema:
            parts.append(f"{sign} {schema[word]}")
    for word, text in (("minItems", "at least {} item"), ("maxItems", "at most {} item"),
                       ("minLength", "at least {} character")):  # fmt: skip
        if word in schema:
            parts.append(text.format(schema[word]) + ("s" if schema[word] != 1 else ""))
    if "pattern" in schema:
        parts.append(f"matches `{schema['pattern']}`")
    if schema.get("uniqueItems"):
        parts.append("unique items")
    return ", ".join(parts)


def default_of(key: str, defaults: Mapping) -> str:
    """``key``'s value in the default config, as inline code; a dash where it is not set or
    where the key is a free-named entry's (each entry has its own value)."""
    if "<name>" in key or "[]" in key:
        return _NO_DEFAULT
    node: object = defaults
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _NO_DEFAULT
        node = node[part]
    if isinstance(node, Mapping) and len(json.dumps(node)) > 60:
        return "(a mapping: see `workflow_config.yaml`)"
    return f"`{json.dumps(node)}`"


def _prose(text: str) -> str:
    """``text`` on one line, with ``<`` and ``>`` outside code spans written as entities (a
    ``<experiment>`` would otherwise be read as an HTML tag and vanish)."""
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _entry_lines(entry: Entry, schema: Mapping, defaults: Mapping) -> list[str]:
    """One property: its key and facts on one line, its description below."""
    facts = [_type(entry.schema, schema)]
    facts += [x for x in (_allowed(entry.schema, schema),) if x]
    facts.append(f"default {default_of(entry.key, defaults)}")
    resolved = _resolve(entry.schema, schema)
    if "default" in resolved:  # what the code takes when the key is absent
        facts.append(f"absent: `{json.dumps(resolved['default'])}`")
    if entry.required:
        facts.append("required")
    description = _prose(_resolve(entry.schema, schema)["description"])
    return [f"- **`{entry.key}`** — {'; '.join(facts)}  ", f"  {description}"]


def render(schema: Mapping, defaults: Mapping) -> str:
    """The reference page: one section per top-level key, one list item per property."""
    missing = undescribed(schema)
    if missing:
        raise ValueError(f"config schema properties without a description: {missing}")
    lines = [
        "# Configuration reference",
        "",
        "Generated from the config schema (`src/dashrepro/experiment/config_schema.yaml`, with",
        "the dataset spec, and for the blocks of typed settings each key's description, default",
        "and allowed values from its field in `src/dashrepro/settings.py`) and the defaults in",
        "`workflow_config.yaml` by `python -m dashrepro.experiment.config_reference`; do not edit",
        "by hand. A test fails when this page is out of date or a property has no description.",
        "",
        "Keys are dotted paths; `<name>` stands for a name you choose (a method, a scale, a",
        "table) and `[]` for a list's items. Each key gives its type, the values allowed, the",
        "embedded default's value (— where it sets none, or where each named entry has its",
        "own), and whether it is required.",
    ]
    section = None
    for entry in entries(schema, schema):
        top = entry.key.split(".")[0].split("[")[0]
        if top != section:
            section = top
            lines += ["", f"## `{top}`", ""]
        lines += _entry_lines(entry, schema, defaults)
    return "\n".join(lines) + "\n"


def current_page() -> str:
    """The page as the schema and the default config say it should read now."""
    defaults = yaml.safe_load(DEFAULTS.read_text())
    return render(config_schema(), defaults)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=PAGE)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = parser.parse_args(argv)
    page = current_page()
    if args.check:
        if not args.output.is_file() or args.output.read_text() != page:
            print(f"{args.output} is out of date: run python -m {__spec__.name}", file=sys.stderr)
            return 1
        return 0
    from dashrepro.io import write_text

    write_text(args.output, page)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
