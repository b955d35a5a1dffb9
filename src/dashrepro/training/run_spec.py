"""One training run's arguments as a value: ``RunSpec``, and the part of it a state must match.

``RunSpec`` is what ``train_run`` takes and what ``accelerate launch`` hands each process as a
JSON file (``to_json`` / ``from_json``); ``run_fingerprint_config`` is the config a kept
training state was written under, compared on resume.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.io import write_json
from dashrepro.settings import LoraSettings, TrainSettings
from dashrepro.tracking import TrackedRun
from dashrepro.training.methods import MethodSpec


@dataclass(frozen=True)
class RunSpec:
    """One run: ``train_run``'s arguments (``log`` aside). ``train`` and ``lora`` may be given
    as their config mappings; they are held as ``TrainSettings`` and ``LoraSettings``."""

    base_model_dir: str | Path
    train_parquet: str | Path
    out_dir: str | Path
    method: MethodSpec
    train: TrainSettings
    lora: LoraSettings
    protocol: TeacherProtocol
    seed: int
    trace_rollouts: int = 4
    progress: bool = False
    # The experiment trackers the run's steps go to (None: none); never part of the run's
    # fingerprint, so changing them resumes a kept state as before.
    tracked: TrackedRun | None = None

    def __post_init__(self):
        # Frozen: the settings types are set once, here, from whatever mapping was given.
        object.__setattr__(self, "train", TrainSettings.from_config(self.train))
        object.__setattr__(self, "lora", LoraSettings.from_config(self.lora))

    @classmethod
    def from_json(cls, path: str | Path) -> RunSpec:
        """The run of a JSON file holding train_run's keyword arguments (the method as
        ``method_name`` + its config entry ``method``, the protocol as its mapping), as
        ``to_json`` writes it."""
        spec = json.loads(Path(path).read_text())
        return cls(
            base_model_dir=spec["base_model_dir"],
            train_parquet=spec["train_parquet"],
            out_dir=spec["out_dir"],
            method=MethodSpec.from_config(spec["method_name"], spec["method"]),
            train=spec["train"],
            lora=spec["lora"],
            protocol=TeacherProtocol.from_config(spec["protocol"]),
            seed=int(spec["seed"]),
            trace_rollouts=int(spec.get("trace_rollouts", 4)),
            progress=bool(spec.get("progress", False)),
            tracked=TrackedRun.from_dict(spec["tracked"]) if spec.get("tracked") else None,
        )

    def to_json(self, path: str | Path) -> Path:
        """Write the run for ``from_json`` (atomically); returns ``path``."""
        spec = {
            "base_model_dir": str(self.base_model_dir),
            "train_parquet": str(self.train_parquet),
            "out_dir": str(self.out_dir),
            "method_name": self.method.name,
            "method": self.method.training_config(),
            "train": self.train.to_dict(),
            "lora": self.lora.to_dict(),
            "protocol": self.protocol.to_config(),
            "seed": self.seed,
            "trace_rollouts": self.trace_rollouts,
            "progress": self.progress,
            "tracked": self.tracked.to_dict() if self.tracked else None,
        }
        write_json(path, spec)
        return Path(path)


def run_fingerprint_config(
    method: MethodSpec,
    train: TrainSettings,
    lora: LoraSettings,
    protocol: TeacherProtocol,
    seed: int,
) -> dict:
    """Everything in the config that determines the trained adapter (the trainer adds the
    content hashes of its inputs): a state written under other values is not resumed."""
    return {
        "method": method.training_config(),
        "train": train.to_dict(),
        "lora": lora.to_dict(),
        "protocol": dataclasses.asdict(protocol),
        "seed": seed,
    }
