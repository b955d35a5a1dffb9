"""Stage ``deepspeed``: OPSD under the scale's ZeRO-2 config through the trainer's command line, an
uninterrupted run and one SIGKILLed after a state and run again, which must end at the same
adapter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ..common import base_model_dir, paper_config, train_settings, training_parquet
from ..shapes import SHAPES


def trainer_spec(args, folder: Path, shape: str) -> Path:
    """A ``python -m dashrepro.training.trainer --spec`` file: OPSD under the scale's ZeRO-2
    config, at the shape's DeepSpeed steps and rollout length, a state after every step."""
    config = paper_config(args)
    train_cfg, lora, protocol = train_settings(args, shape, deepspeed=True)
    train_cfg["max_new_tokens"] = SHAPES[shape]["deepspeed_max_new_tokens"]
    spec = {
        "base_model_dir": str(base_model_dir(args, shape)),
        "train_parquet": str(training_parquet(args)),
        "out_dir": str(folder / "out"),
        "method_name": "opsd",
        "method": {k: v for k, v in config["methods"]["opsd"].items() if k != "label"},
        "train": train_cfg, "lora": lora, "protocol": protocol, "seed": 0,
    }  # fmt: skip
    path = folder / "run.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1))
    return path


def run_trainer(spec: Path, log: Path, *, kill_after_state: int | None = None) -> dict:
    """The trainer's command line on ``spec``; with ``kill_after_state``, SIGKILLed as soon as
    the training state of that step is complete (as the resume tests do on CPU)."""
    out = Path(json.loads(spec.read_text())["out_dir"])
    command = [sys.executable, "-m", "dashrepro.training.trainer", "--spec", str(spec)]
    t0 = time.perf_counter()
    with open(log, "a") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
        if kill_after_state is not None:
            marker = out / ".resume" / f"step-{kill_after_state:06d}" / "trainer_state.json"
            while not marker.exists() and process.poll() is None:
                time.sleep(0.05)
            if process.poll() is None:
                process.kill()
        code = process.wait()
    if code and not (kill_after_state is not None and code == -9):
        raise RuntimeError(f"the trainer exited {code}; see {log}")
    return {"exit": code, "seconds": round(time.perf_counter() - t0, 1)}


def stage_deepspeed(args) -> dict:
    """ZeRO-2 with the optimizer offloaded: an uninterrupted run, and a run killed (SIGKILL)
    after a state and run again, which must end at the same adapter."""
    import pandas as pd
    import torch
    from safetensors.torch import load_file

    from dashrepro.adapters import ADAPTER_WEIGHTS
    from dashrepro.layout import TRAIN_METRICS, checkpoint_folder

    shape = args.shape
    steps = SHAPES[shape]["deepspeed_steps"]
    root = Path(args.out) / f"deepspeed_{shape}"
    whole = trainer_spec(args, root / "uninterrupted", shape)
    cut = trainer_spec(args, root / "killed", shape)
    log = root / "trainer.log"
    timings = {"uninterrupted": run_trainer(whole, log)}
    timings["killed"] = run_trainer(cut, log, kill_after_state=steps - 1)
    timings["resumed"] = run_trainer(cut, log)
    resumed_line = [line for line in log.read_text(errors="replace").splitlines()
                    if "resuming" in line]  # fmt: skip

    def adapter(spec: Path) -> dict:
        out = Path(json.loads(spec.read_text())["out_dir"])
        return load_file(out / checkpoint_folder(steps) / ADAPTER_WEIGHTS)

    first, second = adapter(whole), adapter(cut)
    differences = [(first[k].float() - second[k].float()).abs().max().item() for k in first]
    metrics = pd.read_parquet(Path(json.loads(whole.read_text())["out_dir"]) / TRAIN_METRICS)
    resumed = pd.read_parquet(Path(json.loads(cut.read_text())["out_dir"]) / TRAIN_METRICS)
    steady = metrics.iloc[1:] if len(metrics) > 1 else metrics
    phases = ["rollout", "teacher", "student", "optimizer"]
    result = {
        "method": "opsd", "shape": shape, "deepspeed": True, "steps": len(metrics),
        "rollout_backend": json.loads(whole.read_text())["train"]["rollout_backend"],
        "max_new_tokens": SHAPES[shape]["deepspeed_max_new_tokens"],
        "killed_after_state": steps - 1, "runs": timings,
        # From "resuming" on (the line names the resumed state's folder, a long path).
        "resume_logged": (resumed_line[-1][resumed_line[-1].index("resuming"):][:400]
                          if resumed_line else None),
        "same_adapter": all(torch.equal(first[k], second[k]) for k in first) and first.keys() == second.keys(),
        "max_abs_difference": max(differences) if differences else None,
        "adapter_tensors": len(first),
        "resumed_steps": [int(s) for s in resumed["step"]],
        "same_losses": [float(x) for x in metrics["loss"]] == [float(x) for x in resumed["loss"]],
        "checkpoint": str(Path(json.loads(whole.read_text())["out_dir"]) / f"checkpoint-{steps}"),
    }  # fmt: skip
    for phase in phases:
        result[f"mean_s_{phase}"] = round(float(steady[f"seconds_{phase}"].mean()), 3)
    result["mean_step_s"] = round(sum(result[f"mean_s_{p}"] for p in phases), 3)
    return result
