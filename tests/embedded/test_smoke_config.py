"""Tests of dashrepro.embedded.smoke_config: the embedded default cut to a few-minute run, every
stage kept, on a copy that still validates and leaves the default untouched."""

import copy
import json

import pytest

from dashrepro.embedded.smoke_config import smoke_config
from dashrepro.experiment.config import validate_config
from dashrepro.experiment.run_matrix import BASE_MODEL_KEYS, expand_config
from dashrepro.settings import TrainSettings


def test_the_smoke_config_sets_the_documented_small_values(default_config):
    config = smoke_config(default_config)
    assert config["experiment"] == "e2e"
    assert config["data"]["n_train"] == 200
    assert set(config["benchmarks"]) == set(default_config["benchmarks"])
    assert {bench["n_problems"] for bench in config["benchmarks"].values()} == {6}
    tiny = config["scales"]["tiny"]
    assert tiny["sft"]["steps"] == 10
    assert {k: tiny["train"][k] for k in ("steps", "checkpoint_every", "micro_batch_size")} == {
        "steps": 4,
        "checkpoint_every": 2,
        "micro_batch_size": 4,
    }
    assert tiny["train"]["max_new_tokens"] == 40
    assert config["evaluation"]["samples_per_problem"] == 2
    assert config["evaluation"]["max_new_tokens"] == 40
    assert "evaluation" not in tiny  # the global evaluation above applies, not Avg@12
    assert config["statistics"]["n_resamples"] == 200
    # Checkpoints at steps 2 and 4 (main schedule), 2 (ablation schedule).
    assert TrainSettings.from_config(tiny["train"]).checkpoint_steps() == [2, 4]
    ablation = config["scales"]["tiny_ablation"]
    assert TrainSettings.from_config(ablation["train"]).checkpoint_steps() == [2]
    assert ablation["train"]["micro_batch_size"] == 8  # GRPO's largest group (K = 8) fits
    assert ablation["train"]["max_new_tokens"] == 40
    assert ablation["evaluation"] == {"samples_per_problem": 1}


def test_keys_it_does_not_cut_keep_the_defaults_values(default_config):
    config = smoke_config(default_config)
    assert config["methods"] == default_config["methods"]
    assert config["tables"] == default_config["tables"]
    assert config["figures"] == default_config["figures"]
    for key in ("lr", "temperature", "top_p", "top_k", "grad_accumulation"):
        assert (
            config["scales"]["tiny"]["train"][key] == default_config["scales"]["tiny"]["train"][key]
        )
    assert config["scales"]["tiny"]["lora"] == default_config["scales"]["tiny"]["lora"]
    assert config["evaluation"]["seed"] == default_config["evaluation"]["seed"]


def test_the_experiment_name_is_the_argument(default_config):
    assert smoke_config(default_config, "tiny")["experiment"] == "tiny"
    assert smoke_config(default_config, experiment="vllm")["experiment"] == "vllm"


def test_the_default_is_copied_not_changed(default_config):
    before = json.dumps(default_config, sort_keys=True)
    config = smoke_config(default_config)
    config["scales"]["tiny"]["train"]["lr"] = -1.0
    config["benchmarks"][next(iter(config["benchmarks"]))]["n_problems"] = -1
    assert json.dumps(default_config, sort_keys=True) == before


def test_the_ablation_scale_takes_tinys_cut_base_model_when_expanded(default_config):
    """The expanded default copied tiny's base-model keys (its 40-step SFT) into the ablation
    scale; the smoke config drops them, so the ablation trains from tiny's 10-step SFT model."""
    assert (
        default_config["scales"]["tiny_ablation"]["sft"] == default_config["scales"]["tiny"]["sft"]
    )
    config = smoke_config(default_config)
    ablation = config["scales"]["tiny_ablation"]
    assert not set(BASE_MODEL_KEYS) & set(ablation)
    expanded = expand_config(copy.deepcopy(config))
    tiny, derived = expanded["scales"]["tiny"], expanded["scales"]["tiny_ablation"]
    for key in BASE_MODEL_KEYS:
        assert derived.get(key) == tiny.get(key), key
    assert derived["sft"]["steps"] == 10


@pytest.mark.parametrize("fixture", ["default_config_file", "default_config"])
def test_the_smoke_config_validates(fixture, request):
    """From the file as written, and from the expanded default the workflow tests cut (where a
    kept copy of tiny's 40-step SFT in the ablation scale would contradict the cut one)."""
    config = smoke_config(request.getfixturevalue(fixture))
    validate_config(config, source="smoke")  # raises ConfigError listing any problem
    assert config["scales"]["tiny_ablation"]["sft"]["steps"] == 10  # filled in by expansion
