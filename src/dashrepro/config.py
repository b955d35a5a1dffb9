"""Loading and validating ``workflow_config.yaml``.

The JSON schema (``config_schema.yaml`` beside this module) checks keys and types; ``check_semantics`` then checks
what a schema cannot: that the report names methods and scales that exist, that checkpoints divide
the step budget, and that each method's ``params`` are exactly the keys its aggregation takes
(so a key that does not apply to the chosen method stops the run instead of being ignored).
Every error names the offending key path and the file.

    python -m dashrepro.config workflow_config.yaml   # prints "ok" or the errors
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).with_name("config_schema.yaml")


# The keys each training objective's `objective_params` may hold (objectives.eopd_token_loss).
OBJECTIVE_PARAMS = {"distill": set(), "eopd": {"entropy_threshold", "top_k"}, "avsd": set()}


REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_repo_path(path: str | Path) -> Path:
    """A config path as given if it exists (absolute, or relative to the working directory),
    else relative to the repository (files shipped with it, e.g. config/deepspeed/*.json)."""
    path = Path(path)
    return path if path.is_absolute() or path.exists() else REPO_ROOT / path


class ConfigError(ValueError):
    """An invalid workflow configuration; the message names every offending key."""


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "<top level>"


def schema_errors(config: Mapping, schema: Mapping) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    messages = []
    for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.path))):
        messages.append(f"{_key_path(error)}: {error.message}")
    return messages


def check_semantics(config: Mapping) -> list[str]:
    from dashrepro.objectives import AGGREGATIONS, aggregation_param_names

    problems = []
    for scale, spec in config["scales"].items():
        train = spec["train"]
        if train["steps"] % train["checkpoint_every"]:
            problems.append(
                f"scales.{scale}.train.checkpoint_every: {train['checkpoint_every']} does not "
                f"divide steps={train['steps']}"
            )
        if (
            train.get("deepspeed_config")
            and not resolve_repo_path(train["deepspeed_config"]).is_file()
        ):
            problems.append(
                f"scales.{scale}.train.deepspeed_config: no such file {train['deepspeed_config']!r}"
            )
        if spec["source"] != "embedded":
            continue
        arch = spec["architecture"]
        if arch["hidden_size"] % arch["num_attention_heads"]:
            problems.append(
                f"scales.{scale}.architecture.hidden_size: not divisible by num_attention_heads"
            )
        if arch["num_attention_heads"] % arch["num_key_value_heads"]:
            problems.append(
                f"scales.{scale}.architecture.num_key_value_heads: must divide num_attention_heads"
            )
    for name, method in config["methods"].items():
        aggregation = method["aggregation"]
        if aggregation not in AGGREGATIONS:
            problems.append(
                f"methods.{name}.aggregation: unknown aggregation {aggregation!r}; "
                f"known: {sorted(AGGREGATIONS)}"
            )
            continue
        objective = method.get("objective", "distill")
        allowed_objective = OBJECTIVE_PARAMS[objective]
        for key in method.get("objective_params") or {}:
            if key not in allowed_objective:
                problems.append(
                    f"methods.{name}.objective_params.{key}: does not apply to objective "
                    f"{objective!r} (it takes {sorted(allowed_objective) or 'no params'})"
                )
        if objective != "distill" and (aggregation != "opsd" or method["params"]):
            problems.append(
                f"methods.{name}.aggregation: objective {objective!r} has its own per-token "
                "loss; set `aggregation: opsd` and `params: {}`"
            )
        grpo = method.get("grpo")
        if grpo:
            for scale, spec in config["scales"].items():
                per_process = spec["train"]["micro_batch_size"] * spec["train"]["grad_accumulation"]
                if per_process % grpo["group_size"]:
                    problems.append(
                        f"methods.{name}.grpo.group_size: {grpo['group_size']} does not divide "
                        f"the rollouts per process and step of scale {scale} "
                        f"(micro_batch_size x grad_accumulation = {per_process})"
                    )
        allowed = aggregation_param_names(aggregation)
        for key in method["params"]:
            if key not in allowed:
                problems.append(
                    f"methods.{name}.params.{key}: does not apply to aggregation "
                    f"{aggregation!r} (it takes {sorted(allowed) or 'no params'})"
                )
    for name, bench in config["benchmarks"].items():
        if bench["dataset"] is None and "task" not in bench:
            problems.append(
                f"benchmarks.{name}: needs a `task` (its synthetic stand-in) when `dataset` is null"
            )
        if bench["dataset"] is not None and bench["dataset"]["layout"] == "opsd_train":
            problems.append(
                f"benchmarks.{name}.dataset.layout: 'opsd_train' is the training-set layout"
            )
    training_set = config["data"]["training_set"]
    if training_set is not None and training_set["layout"] != "opsd_train":
        problems.append(
            f"data.training_set.layout: {training_set['layout']!r} is a benchmark layout; "
            "the training set needs problems with reference solutions ('opsd_train')"
        )
    table = config["report"]["main_table"]
    if table["scale"] not in config["scales"]:
        problems.append(f"report.main_table.scale: unknown scale {table['scale']!r}")
    for method in table["methods"]:
        if method not in config["methods"]:
            problems.append(f"report.main_table.methods: unknown method {method!r}")
    return problems


def validate_config(config: Mapping, source: str = "<config>") -> None:
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    problems = schema_errors(config, schema)
    if not problems:
        problems = check_semantics(config)
    if problems:
        listing = "\n  - ".join(problems)
        raise ConfigError(f"invalid configuration in {source}:\n  - {listing}")


def load_config(path: str | Path) -> dict:
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    validate_config(config, str(path))
    return config


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "workflow_config.yaml"
    try:
        load_config(path)
    except ConfigError as exc:
        sys.exit(str(exc))
    print("ok")


if __name__ == "__main__":
    main()
