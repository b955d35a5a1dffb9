"""Loading and validating ``workflow_config.yaml`` (and experiment overlays merged over it).

The JSON schema (``config_schema.yaml`` beside this module) checks keys and types; the rules
across keys that a schema cannot say come next (``semantics.check_semantics``). Every error names
the offending key path, the files the configuration was merged from, and the file that set the
offending value. A file with a key given twice, an empty file and a non-UTF-8 one are errors too
(``read_config_file``), naming the file. Overlays merge the way Snakemake merges
``--configfile`` files (nested mappings key by key, anything else replaced); an overlay removes
an entry of a named group (``REMOVABLE``) by setting it to null.

    python -m dashrepro.experiment.config workflow_config.yaml   # "ok" or the errors
    python -m dashrepro.experiment.config workflow_config.yaml config/experiments/paper.yaml

Torch-free: Snakemake imports this module while it parses the workflow.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

import yaml

from dashrepro import config_sources
from dashrepro.data.spec import dataset_spec_schema
from dashrepro.experiment.run_matrix import expand_config
from dashrepro.experiment.semantics import check_semantics, non_finite_problems
from dashrepro.schema import schema_errors
from dashrepro.settings import GenerationSettings, annotate_schema

SCHEMA_PATH = Path(__file__).with_name("config_schema.yaml")
#: The blocks whose keys a job may find wrong at its start (a device the machine lacks): the
#: file that set each is recorded for the jobs (``config_sources``).
JOB_CHECKED_BLOCKS = ("evaluation",)
#: The groups of named entries an overlay may remove an entry of, by setting it to null (a
#: merge can add and change entries, never take one away).
REMOVABLE = ("benchmarks", "scales", "methods", "method_grids", "tables", "figures")


def drop_removed_entries(config: dict) -> dict:
    """``config`` without the entries of ``REMOVABLE`` groups that are null (in place)."""
    for group in REMOVABLE:
        entries = config.get(group)
        if isinstance(entries, dict):
            for name in [name for name, entry in entries.items() if entry is None]:
                del entries[name]
    return config


def config_schema() -> dict:
    """The JSON schema of a config: ``config_schema.yaml`` with the dataset spec's schema
    (``dashrepro.data.spec``) as its ``$defs.dataset``, and the typed settings' descriptions,
    defaults and allowed values (``settings.annotate_schema``)."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    dataset = dataset_spec_schema()
    dataset.pop("$schema")
    schema["$defs"]["dataset"] = dataset
    return annotate_schema(schema)


class ConfigError(ValueError):
    """An invalid workflow configuration; the message names every offending key."""


class DuplicateKeyError(ConfigError):
    """A key given twice in one mapping of a config file."""


def _origin(key_path: str, sources: Sequence[tuple[str, Mapping]]) -> str | None:
    """The last of ``sources`` (name, mapping) that sets ``key_path`` (``a.b.0.c``)."""
    found = None
    for name, mapping in sources:
        node: object = mapping
        for part in key_path.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                break
        else:
            found = name
    return found


def validate_config(
    config: Mapping,
    source: str = "<config>",
    sources: Sequence[tuple[str, Mapping]] = (),
) -> None:
    """Raise ``ConfigError`` listing every problem of ``config``, after expanding its method
    grids and defaults into ``methods`` and its derived scales in place
    (``run_matrix.expand_config``).

    ``source`` names what the configuration was merged from (the files loaded, in order);
    ``sources`` are those files' own contents as (name, mapping), so each problem can say which
    file set the offending value.
    """
    schema = config_schema()
    drop_removed_entries(config)
    # Before expansion: the key paths are then those of the files, so _origin finds the file.
    non_finite = non_finite_problems(config)
    try:
        expand_config(config)
    except ValueError as exc:
        raise ConfigError(f"invalid configuration in {source}:\n  - {exc}") from exc
    problems = schema_errors(config, schema)
    if not problems:
        problems = _settings_problems(config) or check_semantics(config)
    # A key already named (e.g. a NaN kappa, by its range) is not named twice.
    named = {problem.split(":", 1)[0] for problem in problems}
    problems += [p for p in non_finite if p.split(":", 1)[0] not in named]
    if problems:
        lines = []
        for problem in problems:
            key = problem.split(":", 1)[0]
            origin = _origin(key, sources) if sources else None
            lines.append(f"{problem} [set in {origin}]" if origin else problem)
        listing = "\n  - ".join(lines)
        raise ConfigError(f"invalid configuration in {source}:\n  - {listing}")


def _settings_problems(config: Mapping) -> list[str]:
    """What stops the evaluation's settings from being built (a key its backend does not read,
    such as ``dtype`` on ``hf``), as a problem naming the key, so that the file is named too;
    the cross-key checks build these settings and would otherwise end in a traceback."""
    try:
        GenerationSettings.from_config(config["evaluation"])
    except ValueError as exc:
        return [str(exc)]
    return []


def snakemake_config_sources(
    workflow_file: str | Path, overlay_files: Sequence[str | Path], overrides: Mapping
) -> tuple[str, list[tuple[str, Mapping]]]:
    """What Snakemake merged ``config`` from, in its order: the workflow's ``configfile:``, each
    ``--configfile`` overlay, then ``--config`` values. Returns the label for messages and the
    (name, contents) pairs ``validate_config`` uses to say which source set a bad value.

    The jobs this Snakemake starts are told too (``config_sources.record``): which file set each
    key of ``JOB_CHECKED_BLOCKS``, so that a job's own check names it."""
    sources: list[tuple[str, Mapping]] = []
    for path in [workflow_file, *overlay_files]:
        try:
            sources.append((str(path), read_config_file(path)))
        except DuplicateKeyError:
            raise  # Snakemake kept the last value silently: stop before any job
        except ConfigError:
            sources.append((str(path), {}))  # Snakemake has already read it; no attribution
    if overrides:
        sources.append(("--config", dict(overrides)))
    label = " + ".join(name for name, _ in sources)
    keys = {
        f"{block}.{key}"
        for _, mapping in sources
        for block in JOB_CHECKED_BLOCKS
        if isinstance(mapping.get(block), Mapping)
        for key in mapping[block]
    }
    config_sources.record(label, {key: _origin(key, sources) for key in sorted(keys)})
    return label, sources


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key_path: str, first: int, second: int):
        super().__init__(f"{key_path} (lines {first} and {second})")
        self.key_path, self.first, self.second = key_path, first, second


def _node_path(node: yaml.Node, target: yaml.Node, path: tuple = (), seen=None) -> tuple | None:
    """The keys and list indices from ``node`` down to ``target``, or None if not below it."""
    seen = set() if seen is None else seen
    if node is target:
        return path
    if id(node) in seen:  # an alias met again (YAML allows recursive ones)
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        children = [(key.value, value) for key, value in node.value]
    elif isinstance(node, yaml.SequenceNode):
        children = list(enumerate(node.value))
    else:
        return None
    for part, child in children:
        found = _node_path(child, target, (*path, part), seen)
        if found is not None:
            return found
    return None


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

    PyYAML (and so Snakemake) keeps the last of them silently: a block pasted twice, or a key
    set again further down, would override the first without a word.
    """

    def construct_document(self, node):
        self._root = node  # for the key path of a duplicate
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        lines: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` then an explicit key is an override, not a duplicate
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base class refuses it with its own message
            line = key_node.start_mark.line + 1
            if key in lines:
                path = (*(_node_path(self._root, node) or ()), key)
                raise _DuplicateKey(".".join(map(str, path)), lines[key], line)
            lines[key] = line
        return super().construct_mapping(node, deep)


def read_config_file(path: str | Path) -> dict:
    """One YAML (or JSON) config file as a mapping; a bad file raises ``ConfigError`` naming it.

    Stricter than Snakemake's loader: a duplicate key is an error, and so is an empty file
    (Snakemake refuses an empty ``--configfile`` too, but without naming it).
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} on line {line}); "
            "save it as UTF-8"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from exc
    try:
        config = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: plain data only
    except _DuplicateKey as exc:
        raise DuplicateKeyError(
            f"{path}: duplicate key {exc.key_path} (lines {exc.first} and {exc.second}); "
            "YAML would keep only the last, silently: keep one"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if config is None:
        raise ConfigError(f"{path}: empty config file (no keys; Snakemake refuses it too)")
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return config


def merge_configs(base: Mapping, *overlays: Mapping) -> dict:
    """``base`` with each overlay merged over it, exactly as Snakemake merges ``--configfile``s."""
    from snakemake.utils import update_config

    merged = copy.deepcopy(dict(base))
    for overlay in overlays:
        update_config(merged, copy.deepcopy(dict(overlay)))
    return merged


def load_config(path: str | Path, *overlays: str | Path) -> dict:
    """The configuration of ``path`` with ``overlays`` merged over it, validated."""
    files = [Path(path), *map(Path, overlays)]
    contents = [read_config_file(f) for f in files]
    config = merge_configs(*contents)
    validate_config(
        config,
        " + ".join(map(str, files)),
        sources=list(zip(map(str, files), contents, strict=True)),
    )
    return config


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description="Validate a workflow configuration without running anything.",
    )
    parser.add_argument("base", nargs="?", default="workflow_config.yaml")
    parser.add_argument("overlays", nargs="*", help="experiment overlays, merged in order")
    args = parser.parse_args()
    try:
        load_config(args.base, *args.overlays)
    except ConfigError as exc:
        sys.exit(str(exc))
    print("ok")


if __name__ == "__main__":
    main()
