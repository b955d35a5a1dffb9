"""The typed evaluation settings: generation and grading together declare the schema's
``evaluation`` block key for key and default for default, and give the jobs the params the
config writes."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import REPO_ROOT

from dashrepro.evaluation.settings import GenerationSettings, GradingSettings
from dashrepro.experiment.config import config_schema, load_config
from dashrepro.sampling import SamplingSettings

CONFIGS = [(), *((p,) for p in sorted((REPO_ROOT / "config/experiments").glob("*.yaml")))]


def fields_and_defaults(settings) -> tuple[dict, set]:
    fields = {f.name: f for f in dataclasses.fields(settings)}
    required = {
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return fields, required


def test_the_settings_and_the_schema_declare_the_same_keys_and_defaults():
    schema = config_schema()["properties"]["evaluation"]
    generation, generation_required = fields_and_defaults(GenerationSettings)
    grading, grading_required = fields_and_defaults(GradingSettings)
    assert not set(generation) & set(grading), "one key, one home"
    assert set(schema["properties"]) == set(generation) | set(grading)
    assert set(schema["required"]) == generation_required | grading_required
    for name, f in {**generation, **grading}.items():
        assert f.metadata.get("help"), f"{name} has no help text"
        if name in generation_required | grading_required:
            assert "default" not in schema["properties"][name], name
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        assert schema["properties"][name].get("default", "(none)") == default, name


@pytest.mark.parametrize("overlays", CONFIGS, ids=lambda o: o[0].stem if o else "default")
def test_the_job_params_read_back_as_the_configs_settings(overlays):
    evaluation = load_config(REPO_ROOT / "workflow_config.yaml", *overlays)["evaluation"]
    generation = GenerationSettings.from_config(evaluation)
    params = GenerationSettings.job_params(evaluation)
    assert GenerationSettings.from_config(params) == dataclasses.replace(
        generation, vllm=generation.vllm if generation.backend == "vllm" else {}
    )
    assert ("vllm" in params) == (generation.backend == "vllm")
    assert ("prompt" in params) == ("prompt" in evaluation)
    grading = GradingSettings.job_params(evaluation)
    assert GradingSettings.from_config(grading) == GradingSettings.from_config(evaluation)
    assert list(grading) == [f.name for f in dataclasses.fields(GradingSettings)]
    assert generation.sampling() == SamplingSettings(
        evaluation["temperature"], evaluation["top_p"], None, evaluation["max_new_tokens"]
    )


def test_engine_options_reach_only_the_vllm_backend(default_config):
    evaluation = {**default_config["evaluation"], "vllm": {"dtype": "float32"}}
    assert GenerationSettings.from_config(evaluation).engine_options() == {}
    vllm = GenerationSettings.from_config({**evaluation, "backend": "vllm"})
    assert vllm.engine_options() == {"dtype": "float32"}
    bare = {k: v for k, v in default_config["evaluation"].items() if k != "vllm"}
    no_options = GenerationSettings.job_params({**bare, "backend": "vllm"})
    assert no_options["vllm"] is None  # as the config writes it: no engine options
    assert GenerationSettings.from_config(no_options).engine_options() == {}


def test_a_missing_key_is_named(default_config):
    evaluation = {k: v for k, v in default_config["evaluation"].items() if k != "grading_workers"}
    with pytest.raises(ValueError, match=r"evaluation: missing key\(s\) grading_workers"):
        GradingSettings.from_config(evaluation)
