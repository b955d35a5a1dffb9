"""The experiment matrix: which methods exist, and which (method, scale, seed) runs are trained.

Expanded here before validation: ``method_grids`` (one method per point of a grid, e.g.
``dash_k{kappa}``), ``method_defaults`` (keys every method takes unless it sets them) and
scales declared with ``derive_from`` (another scale's keys, and its base model). ``runs``
groups declare the seeds of (method, scale) pairs; a pair a table or figure reports on that no
group declares runs with the global ``seeds``. How each is written: docs/configuration.md.
Torch-free: Snakemake imports this while it parses the workflow.

    from dashrepro.experiment.run_matrix import expand_config, run_matrix
    expand_config(config)             # in place; raises ValueError naming a bad key
    run_matrix(config)[("dash", "qwen3_1p7b")]   # [0, 1, 2, 3]
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping

from dashrepro.layout import value_name

#: The config's output groups: entries that each name a kind, their scales and their methods.
GROUPS = ("tables", "figures")


def _fill(template: str, values: Mapping[str, object], name_form: bool) -> str:
    """``template`` with each ``{key}`` replaced (plain replacement, so LaTeX braces stay)."""
    for key, value in values.items():
        template = template.replace(f"{{{key}}}", value_name(value) if name_form else str(value))
    return template


def _set_path(entry: dict, path: str, value) -> None:
    *parents, leaf = path.split(".")
    node = entry
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def grid_methods(grid_id: str, grid: Mapping) -> dict[str, dict]:
    """The method entries of one ``method_grids`` entry, by name."""
    where = f"method_grids.{grid_id}"
    for key in ("name", "label", "method", "vary"):
        if key not in grid:
            raise ValueError(f"{where}: missing key {key!r}")
    vary = grid["vary"]
    if not isinstance(vary, Mapping) or not vary:
        raise ValueError(f"{where}.vary: a mapping of key paths to value lists")
    for path, values in vary.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}.vary.{path}: a non-empty list of values")
        if f"{{{path.rsplit('.', 1)[-1]}}}" not in grid["name"]:
            raise ValueError(
                f"{where}.name: {grid['name']!r} must contain {{{path.rsplit('.', 1)[-1]}}} "
                "so that each point of the grid has its own name"
            )
    methods = {}
    paths = list(vary)
    for point in itertools.product(*(vary[p] for p in paths)):
        values = {p.rsplit(".", 1)[-1]: v for p, v in zip(paths, point, strict=True)}
        entry = copy.deepcopy(dict(grid["method"]))
        entry.setdefault("params", {})
        for path, value in zip(paths, point, strict=True):
            _set_path(entry, path, value)
        entry["label"] = _fill(grid["label"], values, name_form=False)
        methods[_fill(grid["name"], values, name_form=True)] = entry
    return methods


def _training_keys(entry) -> dict:
    """A method entry without its display label (what training depends on)."""
    return {k: v for k, v in entry.items() if k != "label"} if isinstance(entry, dict) else entry


def expand_methods(config: dict) -> dict:
    """``config`` with ``method_grids`` expanded into ``methods`` and ``method_defaults`` filled
    into every method entry (in place; also returned). A generated name that a method already
    has keeps that entry (and its label) if it trains the same; otherwise ``ValueError``.
    Expanding an expanded config changes nothing."""
    methods = config.setdefault("methods", {})
    if not isinstance(methods, dict):
        return config  # the schema names the problem
    defaults = config.get("method_defaults") or {}
    for grid_id, grid in (config.get("method_grids") or {}).items():
        for name, entry in grid_methods(grid_id, grid).items():
            if name not in methods:
                methods[name] = entry
            elif _training_keys({**defaults, **methods[name]}) != _training_keys(
                {**defaults, **entry}
            ):
                raise ValueError(
                    f"method_grids.{grid_id}: generates method {name!r}, which methods.{name} "
                    "already declares with other training values"
                )
    for entry in methods.values():
        if isinstance(entry, dict):
            for key, value in defaults.items():
                entry.setdefault(key, copy.deepcopy(value))
    return config


#: What a derived scale shares with the scale it derives from: the base model.
BASE_MODEL_KEYS = ("source", "model", "architecture", "sft")


def _merged(base: Mapping, own: Mapping) -> dict:
    """``base`` with ``own``'s keys over it, nested mappings merged key by key."""
    merged = copy.deepcopy(dict(base))
    for key, value in own.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def expand_scales(config: dict) -> dict:
    """``config`` with every ``derive_from`` scale filled in from the scale it names (in place;
    also returned). A derived scale shares its base model: it may not set a different
    ``source``, ``model``, ``architecture`` or ``sft``; it may not derive from a derived scale.
    Expanding an expanded config changes nothing."""
    scales = config.get("scales")
    if not isinstance(scales, dict):
        return config  # the schema names the problem
    for name, entry in scales.items():
        if not isinstance(entry, dict) or "derive_from" not in entry:
            continue
        base_name = entry["derive_from"]
        base = scales.get(base_name)
        where = f"scales.{name}.derive_from"
        if not isinstance(base, dict):
            raise ValueError(f"{where}: unknown scale {base_name!r}")
        if "derive_from" in base:
            raise ValueError(
                f"{where}: scale {base_name!r} is itself derived (from "
                f"{base['derive_from']!r}); derive from that one"
            )
        for key in BASE_MODEL_KEYS:
            if key in entry and entry[key] != base.get(key):
                raise ValueError(
                    f"scales.{name}.{key}: a derived scale trains from scales.{base_name}'s "
                    f"base model, so it takes {key!r} from there; remove it"
                )
        inherited = {k: v for k, v in base.items() if k != "label"}
        scales[name] = _merged(inherited, entry)
    return config


def base_scale(config: Mapping, scale: str) -> str:
    """The scale whose base model ``scale`` trains from: itself, or the one it derives from."""
    return config["scales"][scale].get("derive_from", scale)


def scale_evaluation(config: Mapping, scale: str) -> dict:
    """The evaluation settings of ``scale``'s checkpoints: ``evaluation`` with the scale's own
    ``evaluation`` keys (e.g. fewer samples per problem for an ablation schedule) over it."""
    return {**config["evaluation"], **(config["scales"][scale].get("evaluation") or {})}


def expand_config(config: dict) -> dict:
    """Method grids and defaults, then derived scales, expanded in place (also returned)."""
    return expand_scales(expand_methods(config))


def spec_scales(spec: Mapping) -> list[str]:
    """The scales of a ``tables``/``figures`` entry: its ``scale``, one name or a list."""
    scale = spec["scale"]
    return [scale] if isinstance(scale, str) else list(scale)


def run_matrix(config: Mapping) -> dict[tuple[str, str], list[int]]:
    """(method, scale) -> the seeds it is trained with, for every declared or reported pair."""
    matrix: dict[tuple[str, str], set[int]] = {}
    for group in config.get("runs") or []:
        for method in group["methods"]:
            for scale in group["scales"]:
                matrix.setdefault((method, scale), set()).update(int(s) for s in group["seeds"])
    default = [int(s) for s in config["seeds"]]
    for group in GROUPS:
        for spec in (config.get(group) or {}).values():
            for scale in spec_scales(spec):
                for method in spec["methods"]:
                    matrix.setdefault((method, scale), set(default))
    return {pair: sorted(seeds) for pair, seeds in matrix.items()}


def matrix_problems(config: Mapping) -> list[str]:
    """``runs`` groups naming methods or scales that do not exist."""
    problems = []
    for i, group in enumerate(config.get("runs") or []):
        for method in group["methods"]:
            if method not in config["methods"]:
                problems.append(f"runs.{i}.methods: unknown method {method!r}")
        for scale in group["scales"]:
            if scale not in config["scales"]:
                problems.append(f"runs.{i}.scales: unknown scale {scale!r}")
    return problems
