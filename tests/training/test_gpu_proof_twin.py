"""``benchmarks/gpu_proof.py``'s CPU twin: every stage of the GPU proof at the small shape.

The script is what a lent GPU runs (README, "On a GPU"); here its stages run on the CPU so that
it cannot rot between leases. As on a bare GPU machine, Snakemake is kept out of the stages'
interpreter (the merged paper config travels as JSON), which is how the first GPU run failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks/gpu_proof.py"


def test_gpu_proof_runs_every_stage_at_the_small_shape(tmp_path):
    config = tmp_path / "paper_config.json"
    subprocess.run([sys.executable, str(SCRIPT), "--write-config", str(config)], check=True)

    # A bare GPU machine has no Snakemake: any stage that still needs it fails here too.
    blocker = tmp_path / "no_snakemake"
    blocker.mkdir()
    (blocker / "snakemake.py").write_text("raise ImportError('no Snakemake here')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    out = tmp_path / "out"
    command = [sys.executable, str(SCRIPT), "--shape", "tiny", "--out", str(out),
               "--backend", "hf", "--config-json", str(config)]  # fmt: skip
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    summary = json.loads((out / "summary.json").read_text())
    failed = {k: v.get("log_tail", v)[-800:] for k, v in summary.items() if not v["ok"]}
    assert completed.returncode == 0 and not failed, failed

    assert list(summary) == ["env", "smoke", "build", "objectives", "train_opsd", "train_dash",
                             "deepspeed", "evaluate"]  # fmt: skip
    assert summary["env"]["rollout_backend_auto"] == "hf"  # no vLLM in .venv
    for stage in ("train_opsd", "train_dash", "deepspeed"):
        run = summary[stage]
        assert run["steps"] == (1 if stage == "deepspeed" else 2)
        # The step's phases are the trainer's own timings, and they add up to the step.
        phases = [run[f"mean_s_{p}"] for p in ("rollout", "teacher", "student", "optimizer")]
        assert all(p >= 0 for p in phases) and run["mean_step_s"] == round(sum(phases), 3)
        assert (Path(run["checkpoint"]) / "adapter_config.json").exists()
    assert summary["deepspeed"]["deepspeed"] and not summary["train_opsd"]["deepspeed"]
    # The evaluation writes and grades records as the rules do: 2 problems x 3 samples.
    evaluation = summary["evaluate"]
    assert evaluation["responses"] == 6 and evaluation["finish_reasons"] == {"length": 6}
    # It read the newest of the checkpoints train_opsd saved after each step.
    assert evaluation["checkpoint"] == summary["train_opsd"]["checkpoint"]
    assert (Path(summary["train_opsd"]["checkpoint"]).parent / "checkpoint-1").exists()
    assert {"correct", "extracted", "grading_path", "n_tokens"} <= set(evaluation["columns"])
    assert evaluation["tokens"] == 6 * 16
    assert [r["path"] for r in summary["objectives"]["T128"]["results"]] == ["naive", "chunked"]
    # The printed table names every stage.
    assert all(f"| {stage} | True |" in completed.stdout for stage in summary)
