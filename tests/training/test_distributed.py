"""Tests of dashrepro.training.distributed: the DeepSpeed config of a run."""

from training_helpers import ONE_STEP

from dashrepro.settings import TrainSettings


def test_deepspeed_config_gets_the_run_batch_sizes(repo_root):
    from dashrepro.training.distributed import deepspeed_config

    train = TrainSettings.from_config(
        {
            **ONE_STEP,
            "deepspeed_config": str(repo_root / "config/deepspeed/zero2_offload.json"),
            "micro_batch_size": 4,
            "grad_accumulation": 2,
        }
    )
    config = deepspeed_config(train, world_size=8)
    assert config["zero_optimization"]["stage"] == 2
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    # Paper, 1.7B: 4 per GPU x 2 accumulation x 8 GPUs = global batch 64.
    assert config["train_batch_size"] == 64
    assert config["gradient_accumulation_steps"] == 2 and config["gradient_clipping"] == 1.0
