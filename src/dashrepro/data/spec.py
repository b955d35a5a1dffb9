"""A real dataset's spec: the one schema (``dataset_spec.yaml`` beside this module) that the
workflow config's ``dataset:`` entries and the loaders of ``dashrepro.data.datasets`` both check.

A local file is pinned by the sha256 of its bytes and a Hugging Face dataset by its revision, so
the data cannot change under a run. The allowed layouts are the names of ``layouts.LAYOUTS``.
Torch- and pandas-free: the config's validation imports it while Snakemake parses.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from dashrepro.data.layouts import LAYOUTS
from dashrepro.schema import schema_errors

SCHEMA_PATH = Path(__file__).with_name("dataset_spec.yaml")


@functools.cache
def _schema() -> dict:
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    schema["properties"]["layout"]["enum"] = sorted(LAYOUTS)
    return schema


def dataset_spec_schema() -> dict:
    """The JSON schema of a dataset spec, its layouts filled in (a copy: callers may embed it)."""
    return copy.deepcopy(_schema())


def dataset_spec_problems(spec: object, where: str = "spec") -> list[str]:
    """Every way ``spec`` breaks the schema, one ``where.key: message`` line each."""
    if not isinstance(spec, Mapping):
        return [f"{where}: must be a mapping, got {type(spec).__name__}"]
    # A path given as a pathlib.Path (a caller's, not a config's) is a path all the same.
    spec = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in spec.items()}
    return schema_errors(spec, _schema(), root=where)
