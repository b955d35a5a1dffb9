"""The typed settings (``dashrepro.settings``): they match the config schema key for key and
default for default, round-trip through JSON, give the jobs the params the config writes, and
name the key a bad mapping gets wrong."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import REPO_ROOT

from dashrepro.experiment.config import config_schema, load_config
from dashrepro.sampling import SamplingSettings
from dashrepro.settings import (
    TRACKER_PACKAGES,
    GenerationSettings,
    GradingSettings,
    LoraSettings,
    TrackingSettings,
    TrainSettings,
)

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


def test_the_lora_alpha_stays_as_written(default_config):
    """peft writes it into every adapter_config.json: 16 stays 16, not 16.0."""
    lora = default_config["scales"]["tiny"]["lora"]
    assert type(lora["alpha"]) is int
    assert type(LoraSettings.from_config(lora).alpha) is int
    assert LoraSettings.from_config({**lora, "alpha": 16.5}).alpha == 16.5


def test_a_float_written_as_an_integer_is_a_float(default_config):
    train = {**default_config["scales"]["tiny"]["train"], "temperature": 1, "lr": 1}
    settings = TrainSettings.from_config(train)
    assert type(settings.temperature) is float and type(settings.lr) is float
    assert type(settings.steps) is int


def fields_and_defaults(settings) -> tuple[dict, set]:
    fields = {f.name: f for f in dataclasses.fields(settings)}
    required = {
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return fields, required


def test_the_evaluation_settings_and_the_schema_declare_the_same_keys_and_defaults():
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
def test_the_job_params_read_back_as_the_configs_evaluation_settings(overlays):
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


def test_the_fast_settings_reach_only_hf_compiled_and_vllm_runs_on_cuda(default_config):
    evaluation = {**default_config["evaluation"], "backend": "hf_compiled", "device": "cuda",
                  "dtype": "bfloat16", "kv_cache_budget_gib": 8}  # fmt: skip
    fast = GenerationSettings.from_config(evaluation)
    assert fast.needs_gpu and fast.kv_cache_budget_gib == 8.0
    assert fast.engine_options() == {"device": "cuda", "dtype": "bfloat16",
        "kv_cache_budget_gib": 8.0, "response_cap": evaluation["max_new_tokens"]}  # fmt: skip
    with pytest.raises(ValueError, match="evaluation.kv_cache_budget_gib: only the hf_compiled"):
        GenerationSettings.from_config({**evaluation, "backend": "hf", "dtype": "float32"})
    assert GenerationSettings.from_config({**evaluation, "backend": "vllm", "dtype": "float32",
        "kv_cache_budget_gib": None}).needs_gpu  # fmt: skip
    assert not GenerationSettings.from_config(default_config["evaluation"]).needs_gpu


def test_engine_options_reach_only_the_vllm_backend(default_config):
    evaluation = {**default_config["evaluation"], "vllm": {"dtype": "float32"}}
    assert GenerationSettings.from_config(evaluation).engine_options() == {"device": "cpu"}
    vllm = GenerationSettings.from_config({**evaluation, "backend": "vllm"})
    assert vllm.engine_options() == {"dtype": "float32"}
    bare = {k: v for k, v in default_config["evaluation"].items() if k != "vllm"}
    no_options = GenerationSettings.job_params({**bare, "backend": "vllm"})
    assert no_options["vllm"] is None  # as the config writes it: no engine options
    assert GenerationSettings.from_config(no_options).engine_options() == {}


def test_a_missing_evaluation_key_is_named(default_config):
    evaluation = {k: v for k, v in default_config["evaluation"].items() if k != "grading_workers"}
    with pytest.raises(ValueError, match=r"evaluation: missing key\(s\) grading_workers"):
        GradingSettings.from_config(evaluation)


def test_the_tracking_settings_and_their_schema_block_agree():
    """Every key of the optional ``tracking`` block is a field with the schema's default."""
    schema = config_schema()["properties"]["tracking"]
    fields = {f.name: f for f in dataclasses.fields(TrackingSettings)}
    assert set(schema["properties"]) == set(fields)
    assert schema["default"] == {} and TrackingSettings.from_config({}) == TrackingSettings()
    for name, f in fields.items():
        assert f.metadata.get("help"), name
        assert schema["properties"][name]["default"] == TrackingSettings().to_dict()[name], name
    assert set(schema["properties"]["report_to"]["items"]["enum"]) == set(TRACKER_PACKAGES)
    with pytest.raises(ValueError, match=r"tracking: unknown key\(s\) entity"):
        TrackingSettings.from_config({"entity": "me"})


def test_each_settings_key_is_described_once_in_its_field():
    """The schema file holds a settings block's types and ranges only; the description, default
    and allowed values of each key, and the required keys, come from the fields."""
    import typing

    import yaml

    from dashrepro.experiment.config import SCHEMA_PATH
    from dashrepro.settings import FIELD_KEYWORDS, SCHEMA_BLOCKS, schema_block

    raw, annotated = yaml.safe_load(SCHEMA_PATH.read_text()), config_schema()
    for path, types in SCHEMA_BLOCKS.items():
        block = schema_block(raw, path)
        assert "required" not in block, path
        for cls in types:
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                written = block["properties"][f.name]
                assert not set(FIELD_KEYWORDS) & set(written), (path, f.name)
                assert "enum" not in written.get("items", {}), (path, f.name)
                got = schema_block(annotated, path)["properties"][f.name]
                assert got["description"] == f.metadata["help"]
                hint = hints[f.name]
                if typing.get_origin(hint) is tuple:
                    hint = typing.get_args(hint)[0]
                    got = got["items"]
                if typing.get_origin(hint) is typing.Literal:
                    assert got["enum"] == list(typing.get_args(hint)), (path, f.name)


def test_a_choice_outside_its_allowed_values_is_named(default_config):
    train = default_config["scales"]["tiny"]["train"]
    with pytest.raises(ValueError, match=r"scales.tiny.train.precision: 'fp16' is not one of fp32, bf16"):  # fmt: skip
        TrainSettings.from_config({**train, "precision": "fp16"}, "scales.tiny.train")
    with pytest.raises(ValueError, match=r"tracking.report_to: 'comet' is not one of tensorboard"):
        TrackingSettings.from_config({"report_to": ["tensorboard", "comet"]})


def test_the_trackers_with_packages_are_the_trackers_allowed():
    import typing

    from dashrepro.settings import Tracker

    assert tuple(TRACKER_PACKAGES) == typing.get_args(Tracker)


def test_the_grpo_block_fills_in_its_defaults_and_names_a_bad_key():
    from dashrepro.settings import GrpoSettings
    from dashrepro.training.methods import MethodSpec

    grpo = GrpoSettings.from_config({"eta": 0.3, "group_size": 4, "aggregate": True})
    assert (grpo.gamma, grpo.lam) == (0.95, 0.95)
    assert GrpoSettings.from_config(json.loads(json.dumps(grpo.to_dict()))) == grpo
    entry = {"aggregation": "dash", "divergence": "forward_kl", "tau": 0.05, "params": {},
             "grpo": {"eta": 1, "group_size": 4, "aggregate": False}}  # fmt: skip
    method = MethodSpec.from_config("m", entry)
    assert method.grpo.eta == 1.0 and type(method.grpo.eta) is float and method.group_size == 4
    with pytest.raises(ValueError, match=r"methods.m.grpo: unknown key\(s\) beta"):
        MethodSpec.from_config("m", {**entry, "grpo": {**entry["grpo"], "beta": 0.1}})


def test_every_evaluation_prompt_allowed_has_its_instruction():
    import typing

    from dashrepro.data.prompts import EVALUATION_INSTRUCTIONS
    from dashrepro.settings import EvaluationPrompt

    assert tuple(EVALUATION_INSTRUCTIONS) == typing.get_args(EvaluationPrompt)


def test_the_samplers_are_the_backends_a_config_may_name():
    import typing

    from dashrepro.sampling import BACKENDS
    from dashrepro.settings import Backend

    assert tuple(BACKENDS) == typing.get_args(Backend)


# --------------------------------------------------------------------------- issue 66, item 3d


@pytest.mark.parametrize(
    "explicit",
    [{"dtype": "float32"}, {"device": "cpu"}, {"prompt": "problem"},
     {"dtype": "float32", "device": "cpu", "prompt": "problem"}],
    ids=["dtype", "device", "prompt", "all"],
)  # fmt: skip
def test_a_key_set_to_its_default_leaves_the_job_params_as_the_key_absent(
    repo_root, tmp_path, explicit
):
    """Explicit defaults once reran 142 jobs of the default (their params changed); now each
    generating job's params, and so the DAG, are those of the config without them."""
    import yaml

    from dashrepro.experiment.workflow import Experiment

    overlay = tmp_path / "defaults.yaml"
    overlay.write_text(yaml.safe_dump({"evaluation": explicit}))
    plain = Experiment(load_config(repo_root / "workflow_config.yaml"))
    spelled = Experiment(load_config(repo_root / "workflow_config.yaml", overlay))
    assert spelled.generation == plain.generation
    for scale in plain.config["scales"]:
        assert spelled.generation_of(scale) == plain.generation_of(scale)
    assert (spelled.generation_env, spelled.evaluation_gpus) == (
        plain.generation_env, plain.evaluation_gpus)  # fmt: skip
    # A value other than the default is a change, and is in the params.
    other = {**plain.config["evaluation"], "backend": "hf_compiled", "dtype": "bfloat16"}
    assert GenerationSettings.job_params(other)["dtype"] == "bfloat16"
    assert "kv_cache_budget_gib" not in GenerationSettings.job_params(other)


def test_no_vllm_engine_options_written_as_an_empty_mapping_are_no_options(default_config):
    bare = {k: v for k, v in default_config["evaluation"].items() if k != "vllm"}
    absent = GenerationSettings.job_params({**bare, "backend": "vllm"})
    assert GenerationSettings.job_params({**bare, "backend": "vllm", "vllm": {}}) == absent
    assert absent["vllm"] is None
