"""training.run_spec: a run's arguments, written for ``accelerate launch`` and read back."""

from __future__ import annotations

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.settings import LoraSettings, TrainSettings
from dashrepro.training.methods import MethodSpec
from dashrepro.training.run_spec import RunSpec


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
