"""How a settings dataclass is declared and built: a field with its meaning beside its default
(``help_field``), and construction from a config mapping that names a bad key
(``settings_from_mapping``). The settings types themselves live with their stage
(``training.settings``, ``evaluation.settings``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


def help_field(text: str, **kwargs):
    """A dataclass field whose meaning travels with it (the configuration reference reads it)."""
    return dataclasses.field(metadata={"help": text}, **kwargs)


def settings_from_mapping(cls, values: Mapping, where: str, pick: bool = False):
    """``cls`` built from ``values``. Unknown keys raise ``ValueError`` naming them, unless
    ``pick`` (``values`` is a larger block whose other keys belong elsewhere); missing required
    keys always do. An integer given for a float field becomes a float (YAML writes 1 for 1.0)."""
    if not isinstance(values, Mapping):
        raise ValueError(f"{where}: a mapping of settings, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown and not pick:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
    missing = [
        name
        for name, f in fields.items()
        if name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    given = {name: values[name] for name in fields if name in values}
    for name, value in given.items():
        if fields[name].type.startswith("float") and type(value) is int:
            given[name] = float(value)
    return cls(**given)
