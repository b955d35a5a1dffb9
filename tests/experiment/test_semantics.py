"""Tests for ``dashrepro.experiment.semantics``: the rules across a config's keys that its schema
cannot say (lengths, GRPO groups, the validation split, vLLM's head sizes, embedded outputs),
checked through ``validate_config`` as a run checks them."""

import copy
import json

import pytest

from dashrepro.experiment.config import ConfigError, load_config, validate_config


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda c: c["scales"]["tiny"]["train"].update(max_total_length=90), "scales.tiny.train.max_total_length"),
        (lambda c: c["scales"]["tiny"]["train"].update(max_new_tokens=600, max_total_length=700), "scales.tiny.train.max_total_length"),
        (lambda c: c["evaluation"].update(max_new_tokens=512), "evaluation.max_new_tokens"),
        (lambda c: c["evaluation"].update(backend="vllm", vllm={"max_model_len": 64}), "evaluation.vllm.max_model_len"),
    ],
)  # fmt: skip
def test_lengths_that_cannot_fit_are_stopped(default_config, change, key):
    config = copy.deepcopy(default_config)
    change(config)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(config, source="test.yaml")


def test_an_output_left_at_an_embedded_scale_under_the_paper_experiment_is_named(
    repo_root, tmp_path
):
    """A table added to workflow_config.yaml is inherited by the paper overlay at the default's
    tiny scale unless the overlay sets its scale: that stops the run, naming the entry."""
    import yaml

    base = yaml.safe_load((repo_root / "workflow_config.yaml").read_text())
    base["tables"]["my_table"] = {**base["tables"]["vocabulary_support"]}
    (tmp_path / "workflow_config.yaml").write_text(yaml.safe_dump(base))
    paper = repo_root / "config/experiments/paper.yaml"
    with pytest.raises(
        ConfigError,
        match=r"tables\.my_table\.scale: 'tiny_ablation' is an embedded scale.*qwen3_1p7b",
    ):
        load_config(tmp_path / "workflow_config.yaml", paper)
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"tables": {"my_table": {"scale": "qwen3_1p7b"}}}))
    load_config(tmp_path / "workflow_config.yaml", paper, overlay)  # explicit: valid
    load_config(tmp_path / "workflow_config.yaml")  # the embedded default alone: valid


def test_a_grpo_group_must_fit_the_batches_of_the_scales_it_runs_at(default_config_file):
    config = json.loads(json.dumps(default_config_file))
    config["scales"]["tiny_ablation"]["train"]["micro_batch_size"] = 4  # the K = 8 grid points
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    lines = [line for line in str(info.value).splitlines() if "grpo.group_size" in line]
    assert len(lines) == 4 and all("scale tiny_ablation" in line for line in lines)
    assert all("_k8" in line for line in lines)  # K = 4 fits; tiny (micro 16) runs no GRPO


def test_the_validation_split_is_checked(default_config_file):
    config = json.loads(json.dumps(default_config_file))
    config["benchmarks"]["validation"] = config["benchmarks"].pop("aime2024")
    with pytest.raises(ConfigError, match="benchmarks.validation: the name is the validation"):
        validate_config(config)
    config = json.loads(json.dumps(default_config_file))
    config["data"]["validation"] = {"n_problems": 0, "seed": 1}
    with pytest.raises(ConfigError, match="data.validation"):
        validate_config(config)
    config["data"]["validation"] = None  # none: selection on the test benchmarks only
    validate_config(config)


@pytest.mark.parametrize(
    ("mutate", "named_by"),
    [
        # the embedded model's per-head width 24 (96 / 4) with vLLM evaluation
        (
            lambda c: (
                c["scales"]["tiny"]["architecture"].pop("head_dim"),
                c["evaluation"].update(backend="vllm"),
            ),
            "evaluation.backend",
        ),
        # an explicit width vLLM's CPU attention rejects, with vLLM rollouts at one scale
        (
            lambda c: (
                c["scales"]["tiny"]["architecture"].update(head_dim=48),
                c["scales"]["tiny"]["train"].update(rollout_backend="vllm"),
            ),
            "scales.tiny.train.rollout_backend",
        ),
    ],
)
def test_a_vllm_backend_needs_a_head_size_vllm_supports(repo_root, mutate, named_by):
    from dashrepro.experiment.config import read_config_file

    config = read_config_file(repo_root / "workflow_config.yaml")
    assert config["scales"]["tiny"]["architecture"]["head_dim"] == 32
    config["evaluation"]["backend"] = "vllm"
    validate_config(copy.deepcopy(config))  # 32 is one: fine
    config["evaluation"]["backend"] = "hf"
    mutate(config)
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    message = str(error.value)
    assert "scales.tiny.architecture.head_dim" in message and named_by in message
    assert "(32, 64, 80" in message  # the sizes that would do


def test_vllm_backend_problems_name_the_keys_of_the_jobs_about_to_run(default_config):
    from dashrepro.experiment.semantics import vllm_backend_problems

    config = copy.deepcopy(default_config)
    assert vllm_backend_problems(config, {"generate_checkpoint_responses"}, "py") == []
    config["evaluation"]["backend"] = "vllm"
    config["scales"]["tiny"]["train"]["rollout_backend"] = "vllm"
    # Only the rules about to run count: a table from existing generations needs no vLLM.
    assert vllm_backend_problems(config, {"table", "grade_checkpoint"}, "py") == []
    problems = vllm_backend_problems(config, {"evaluate_base_model", "train_lora_tiny"}, "py")
    assert [p.split(":")[0] for p in problems] == [
        "evaluation.backend",
        "scales.tiny.train.rollout_backend",
    ]
    assert all("would run in py, which cannot import vllm" in p for p in problems)
    only_ablation = vllm_backend_problems(config, {"train_lora_tiny_ablation"}, "py")
    assert only_ablation == []  # tiny_ablation's own train block keeps the hf default


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ("dasch", "unknown method 'dasch'"),
        ("opsd", "'opsd' aggregates by 'opsd', which has no gates to measure"),
        ("eopd", "'eopd' is not a distillation method without a grpo term"),
        ("dash_grpo_eta0p3_k4", "not a distillation method without a grpo term"),
    ],
)
def test_the_premise_probe_needs_a_gated_distillation_method(default_config_file, method, message):
    config = copy.deepcopy(default_config_file)
    config["premise_probe"]["method"] = method
    with pytest.raises(ConfigError, match=r"premise_probe\.method: .*" + message):
        validate_config(config)
    config["premise_probe"]["method"] = "fixed_lambda_0p5"
    validate_config(config)
