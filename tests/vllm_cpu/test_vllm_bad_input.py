"""Bad input for the vLLM backend stops early, naming the key and the fix (runs in .venv)."""

from __future__ import annotations

import copy

import pytest

from dashrepro.experiment.config import ConfigError, read_config_file, validate_config


@pytest.fixture
def config(repo_root):
    config = read_config_file(repo_root / "workflow_config.yaml")
    assert config["scales"]["tiny"]["lora"]["r"] == 8
    config["evaluation"]["backend"] = "vllm"
    validate_config(copy.deepcopy(config))  # rank 8 under max_lora_rank 64: fine
    return config


def test_a_lora_rank_above_evaluation_max_lora_rank_names_both_keys(config):
    config["evaluation"]["vllm"]["max_lora_rank"] = 8
    config["scales"]["tiny"]["lora"]["r"] = 12
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    message = str(error.value)
    assert "scales.tiny.lora.r: rank 12 is above evaluation.vllm.max_lora_rank=8" in message
    assert "set evaluation.vllm.max_lora_rank to 16" in message


def test_vllm_rollouts_need_a_rank_vllm_accepts(config):
    config["evaluation"]["backend"] = "hf"
    config["scales"]["tiny"]["train"]["rollout_backend"] = "vllm"
    validate_config(copy.deepcopy(config))  # 8 is one
    config["scales"]["tiny"]["lora"]["r"] = 4
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert "scales.tiny.lora.r: 4 is not a rank vLLM accepts" in str(error.value)
    assert "scales.tiny.train.rollout_backend" in str(error.value)


def vllm_importable() -> bool:
    # An import, not importlib.util.find_spec("vllm"): a folder named vllm on sys.path would be
    # found as a namespace package (this folder is tests/vllm_cpu for that reason).
    try:
        from vllm import LLM  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(vllm_importable(), reason="vLLM is importable here")
def test_the_vllm_backend_without_vllm_says_how_to_get_it():
    from dashrepro.sampling import make_sampler

    with pytest.raises(ImportError) as error:
        make_sampler("vllm", base_model="unused", tokenizer=object())
    message = str(error.value)
    assert "needs vLLM" in message and "envs/gpu.yaml" in message
    assert "setup_env.sh --vllm-cpu" in message and "evaluation.backend" in message
