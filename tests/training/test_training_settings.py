"""The typed training settings: they match the config schema key for key and default for
default, round-trip through JSON, and name the key a bad mapping gets wrong."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import REPO_ROOT

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.experiment.config import config_schema, load_config
from dashrepro.training.methods import MethodSpec
from dashrepro.training.run_spec import RunSpec
from dashrepro.training.settings import LoraSettings, TrainSettings

#: Every shipped configuration: the embedded default alone and under each overlay.
CONFIGS = [(), *((p,) for p in sorted((REPO_ROOT / "config/experiments").glob("*.yaml")))]


def scale_schema(block: str) -> dict:
    return config_schema()["properties"]["scales"]["additionalProperties"]["properties"][block]


@pytest.mark.parametrize(("block", "settings"), [("train", TrainSettings), ("lora", LoraSettings)])
def test_the_settings_and_the_schema_declare_the_same_keys_and_defaults(block, settings):
    """A key the schema accepts is a field, a required key a field without a default, and an
    optional key's schema ``default`` is the field's default (null: absent)."""
    schema = scale_schema(block)
    fields = {f.name: f for f in dataclasses.fields(settings)}
    assert set(schema["properties"]) == set(fields)
    no_default = {
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    assert set(schema["required"]) == no_default
    for name, f in fields.items():
        assert f.metadata.get("help"), f"{settings.__name__}.{name} has no help text"
        if name in no_default:
            assert "default" not in schema["properties"][name], name
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert "default" in schema["properties"][name], f"{block}.{name}: no schema default"
        assert schema["properties"][name]["default"] == default, name


@pytest.mark.parametrize("overlays", CONFIGS, ids=lambda o: o[0].stem if o else "default")
def test_every_shipped_scale_round_trips_through_json(overlays):
    config = load_config(REPO_ROOT / "workflow_config.yaml", *overlays)
    for name, scale in config["scales"].items():
        train = TrainSettings.from_config(scale["train"], f"scales.{name}.train")
        lora = LoraSettings.from_config(scale["lora"])
        assert TrainSettings.from_config(json.loads(json.dumps(train.to_dict()))) == train
        assert LoraSettings.from_config(json.loads(json.dumps(lora.to_dict()))) == lora
        for key, value in scale["train"].items():  # what was written is what is held
            assert getattr(train, key) == value, key
        assert train.checkpoint_steps()[-1] == train.steps


def test_a_bad_mapping_names_the_key():
    with pytest.raises(ValueError, match=r"scales.x.train: unknown key\(s\) warmup"):
        TrainSettings.from_config({"warmup": 5}, "scales.x.train")
    with pytest.raises(ValueError, match=r"lora: missing key\(s\) alpha, dropout"):
        LoraSettings.from_config({"r": 8, "target_modules": ["q_proj"]})


def test_a_float_written_as_an_integer_is_a_float(default_config):
    train = {**default_config["scales"]["tiny"]["train"], "temperature": 1, "lr": 1}
    settings = TrainSettings.from_config(train)
    assert type(settings.temperature) is float and type(settings.lr) is float
    assert type(settings.steps) is int


def test_a_run_spec_round_trips_through_json(tmp_path, default_config):
    scale = default_config["scales"]["tiny"]
    entry = {k: v for k, v in default_config["methods"]["dash"].items() if k != "label"}
    spec = RunSpec(
        base_model_dir="base",
        train_parquet="train.parquet",
        out_dir=str(tmp_path / "run"),
        method=MethodSpec.from_config("dash", entry),
        train=scale["train"],
        lora=scale["lora"],
        protocol=TeacherProtocol.from_config(default_config["protocol"]),
        seed=3,
        trace_rollouts=2,
    )
    assert isinstance(spec.train, TrainSettings) and isinstance(spec.lora, LoraSettings)
    assert RunSpec.from_json(spec.to_json(tmp_path / "run.json")) == spec
