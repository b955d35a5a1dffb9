"""A run config's fingerprint, and the keys in which two configs differ.

A training state records the config it was written under (``run_config``) and its
``config_fingerprint``: the sha256 of the config as canonical JSON (sorted keys, no
whitespace). When a kept state's fingerprint is not the current config's, ``config_diff`` names
every differing leaf, so the checkpointer's decision to discard the kept states says exactly
what changed, e.g. ``train.lr: 0.003 (checkpoint) != 0.001 (now)``. The comparison itself is
``_folder.config_differences``'s, the one config check of a resume.

    config_fingerprint({"train": {"lr": 1e-3}, "seed": 3}) == config_fingerprint(
        {"seed": 3, "train": {"lr": 1e-3}})          # True: key order does not matter
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np


def _json_default(obj: Any) -> Any:
    # Configs arrive as dicts, but also as read-only Mappings, tuples, Paths or numpy scalars;
    # each has exactly one JSON spelling. Anything else is an error rather than a str() guess,
    # because a guessed spelling could make two different configs share a fingerprint.
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON-serialisable in a run config: {type(obj).__name__} {obj!r}")


def canonical_json(obj: Any) -> str:
    return json.dumps(
        obj,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_json_default,
    )


def config_fingerprint(run_config: Mapping) -> str:
    """sha256 (hex) of ``run_config`` as canonical JSON: sorted keys, no whitespace.

    Key order does not matter; values do, including their JSON type (``1`` differs from ``1.0``).
    """
    return hashlib.sha256(canonical_json(run_config).encode("utf-8")).hexdigest()


def normalised_config(run_config: Mapping) -> Any:
    """The config as it reads back from trainer_state.json (tuples -> lists, Mappings -> dicts)."""
    return json.loads(canonical_json(run_config))


def _show(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def config_diff(old: Any, new: Any, path: str = "") -> list[str]:
    """One line per differing leaf: ``a.b[2]: <old> (checkpoint) != <new> (now)``."""
    where = path or "<whole config>"
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in sorted(set(old) | set(new)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old:
                lines.append(f"{sub}: <absent> (checkpoint) != {_show(new[key])} (now)")
            elif key not in new:
                lines.append(f"{sub}: {_show(old[key])} (checkpoint) != <absent> (now)")
            else:
                lines += config_diff(old[key], new[key], sub)
        return lines
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            line
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for line in config_diff(a, b, f"{path}[{i}]")
        ]
    # Compare spellings, not values: 1 == 1.0 in Python but they fingerprint differently.
    if canonical_json(old) != canonical_json(new):
        return [f"{where}: {_show(old)} (checkpoint) != {_show(new)} (now)"]
    return []
