"""``benchmarks/gpu_proof``'s CPU twin: every stage of the GPU proof at the small shape.

The package is what a lent GPU runs (docs/performance.md, "On a GPU"); here its stages run on the CPU so that
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
SCRIPT = ROOT / "benchmarks/gpu_proof"  # a package run as a script: its __main__.py
PERFORMANCE_PAGE = (ROOT / "docs/performance.md").read_text()
sys.path.insert(0, str(SCRIPT.parent))
from gpu_proof import runner  # noqa: E402
from gpu_proof.__main__ import build_parser  # noqa: E402
from gpu_proof.stages.fast_generation import SECTIONS  # noqa: E402

#: The tiny shape's key/value cache of 4 rows x 256 positions (2 layers x 1 head x 32 x 2 x
#: bf16 = 256 bytes a position): the budget of the twin's compiled and continuous sections.
TWIN_BUDGET_GIB = 4 * 256 * 256 / 2**30


def check_fast_generation(fast: dict) -> None:
    """Stage fast_generation at the tiny shape: every section ran, in order of value, and each
    measured what it says."""
    assert fast["sections"] == list(SECTIONS)
    errors = {name: fast[name]["error"] for name in SECTIONS if "error" in fast[name]}
    assert not errors, errors
    # The compiled rollouts compile once, and not again after three adapter updates or for
    # their 32-step profiled window at the same cache.
    compiled = fast["compiled_rollouts"]
    graphs = compiled["compiled_graphs"]
    assert graphs["after_updates"] == graphs["after_first_call"] >= 1
    assert compiled["profile"]["compiled_graphs"] == graphs["after_first_call"]
    assert compiled["profile"]["profiled_steps"] == 32
    assert [u["tokens"] for u in compiled["after_updates"]] == [4 * 16] * 3
    # The synchronous stop check beside the backend's (deferred on a GPU; on a CPU the same).
    assert compiled["synchronous_stop_check"]["tokens"] == 4 * 16
    assert not compiled["stop_check_deferred"]
    # Eager on the PEFT model, and on the merged copy in bf16 and fp32: the ratios' parts.
    assert fast["eager_rollouts"]["tokens"] == 4 * 16
    assert fast["eager_merged"]["bf16"]["tokens"] == fast["eager_merged"]["fp32"]["tokens"] == 64
    assert all(value is not None for value in fast["ratios"].values()), fast["ratios"]
    for name in ("hf_fp32", "hf_compiled_bf16"):
        assert fast["evaluation"][name]["tokens"] == 4 * 16
    # The continuous evaluation: 12 requests of the stated mix, 4 blocks of cache, all done.
    continuous = fast["continuous_evaluation"]
    assert continuous["num_blocks"] == 4 and continuous["finished"] == 12
    assert continuous["tokens"] == continuous["asked_tokens"] and not continuous["stopped_at_limit"]
    assert [w["rows"] for w in fast["long_context"]["lengths"]] == [4]


def test_gpu_proof_runs_every_stage_at_the_small_shape(tmp_path):
    config = tmp_path / "paper_config.json"
    subprocess.run([sys.executable, str(SCRIPT), "--write-config", str(config)], check=True)

    # A bare GPU machine has no Snakemake: any stage that still needs it fails here too.
    blocker = tmp_path / "no_snakemake"
    blocker.mkdir()
    (blocker / "snakemake.py").write_text("raise ImportError('no Snakemake here')\n")
    # One thread a stage: on 2 cores shared with the vLLM cases and with the lanes beside each
    # other, two threads a process wait on each other at every operation of the tiny shape.
    env = {**os.environ, "PYTHONPATH": str(blocker), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "out"
    # As a lease runs it: the profile alone, then three lanes side by side. The limits are a
    # GPU's; on 2 cores shared with the vLLM cases (run beside the suite) four lanes need more.
    # The budget holds 4 rows of 256 positions (TWIN_BUDGET_GIB): every compiled section runs
    # at the rollouts' shape and compiles once.
    command = [sys.executable, str(SCRIPT), "--shape", "tiny", "--out", str(out),
               "--backend", "hf", "--config-json", str(config), "--limit-factor", "3",
               "--kv-budget-gib", str(TWIN_BUDGET_GIB),
               # No smoke stage: at the tiny shape it is build, train_opsd and evaluate again.
               "--stages", "env,build,objectives,profile,fast_generation",
               "--lanes", "train_opsd|evaluate|train_dash|deepspeed"]  # fmt: skip
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    summary = json.loads((out / "summary.json").read_text())
    failed = {k: v.get("log_tail", v)[-800:] for k, v in summary.items() if not v["ok"]}
    assert completed.returncode == 0 and not failed, failed

    assert list(summary) == ["env", "build", "objectives", "profile", "fast_generation",
                             "train_opsd", "evaluate", "train_dash", "deepspeed"]  # fmt: skip
    assert summary["env"]["rollout_backend_auto"] == "hf"  # no vLLM in .venv
    # Each lane's results name the stages that shared the device with them.
    assert summary["train_dash"]["beside"] == ["train_opsd", "evaluate", "deepspeed"]
    assert "beside" not in summary["profile"]
    for stage in ("train_opsd", "train_dash", "deepspeed"):
        run = summary[stage]
        assert run["steps"] == 2
        # The step's phases are the trainer's own timings, and they add up to the step.
        phases = [run[f"mean_s_{p}"] for p in ("rollout", "teacher", "student", "optimizer")]
        assert all(p >= 0 for p in phases) and run["mean_step_s"] == round(sum(phases), 3)
        assert (Path(run["checkpoint"]) / "adapter_config.json").exists()
    assert summary["deepspeed"]["deepspeed"] and not summary["train_opsd"]["deepspeed"]
    # ZeRO-2 with offload, SIGKILLed after the state of step 1 and run again: the resumed run
    # says so, logs every step once, and ends at the uninterrupted run's adapter, bit for bit.
    resume = summary["deepspeed"]
    assert resume["runs"]["killed"]["exit"] == -9 and resume["runs"]["resumed"]["exit"] == 0
    assert "resuming opsd seed 0 after step 1" in resume["resume_logged"]
    assert resume["resumed_steps"] == [1, 2] and resume["same_losses"]
    assert resume["same_adapter"] and resume["max_abs_difference"] == 0.0
    # The profile times the trainer's rollout call with and without the adapter, and profiles
    # a 32-step window (kernel shares need a GPU: None here).
    for variant in ("lora", "base"):
        profiled = summary["profile"][variant]
        assert profiled["generated_tokens"] == 4 * 8 and profiled["kernel_share"] is None
        assert profiled["profiled_tokens"] == 32 and profiled["top_cpu_ops"]
    # Every measurement is a JSON line of its own, written when it was made.
    lines = [json.loads(line) for line in (out / "measurements.jsonl").read_text().splitlines()]
    assert [e["section"] for e in lines if e["stage"] == "profile"] == ["lora", "base"]
    fast_sections = [e["section"] for e in lines if e["stage"] == "fast_generation"]
    assert list(dict.fromkeys(fast_sections)) == [*SECTIONS, "ratios"]
    check_fast_generation(summary["fast_generation"])
    # The evaluation writes and grades records as the rules do: 2 problems x 2 samples.
    evaluation = summary["evaluate"]
    assert evaluation["responses"] == 4 and evaluation["finish_reasons"] == {"length": 4}
    # In its own lane it waited for train_opsd's first checkpoint (one is saved after each step).
    assert Path(evaluation["checkpoint"]).parent == Path(summary["train_opsd"]["checkpoint"]).parent
    assert (Path(summary["train_opsd"]["checkpoint"]).parent / "checkpoint-1").exists()
    assert {"correct", "extracted", "grading_path", "n_tokens"} <= set(evaluation["columns"])
    assert evaluation["tokens"] == 4 * 16
    assert [r["path"] for r in summary["objectives"]["T128"]["results"]] == ["naive", "chunked"]
    # The printed table names every stage.
    assert all(f"| {stage} | True |" in completed.stdout for stage in summary)

    # GPU-hours from the measured speeds: each scale's training runs and evaluated checkpoints,
    # and plan's totals under the config's costs and under these.
    costs_run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--costs",
                                "--config-json", str(config)],
                               env=env, capture_output=True, text=True, check=True)  # fmt: skip
    costs = json.loads((out / "costs.json").read_text())
    assert set(costs["scales"]) == {"qwen3_1p7b", "qwen3_4b", "qwen3_8b"}
    small = costs["scales"]["qwen3_1p7b"]
    assert small["assumed"]["train"] == 6.0 and small["train_opsd"] > 0 and small["generation"] > 0
    assert costs["plan"]["all_tables"][0] > 0 and "| all_tables |" in costs_run.stdout


def test_the_measured_gpu_report_is_what_its_summary_gives(tmp_path):
    """The command on docs/performance.md rewrites a lease's report and GPU-hours from its summary.json: the
    committed ones are what it writes."""
    measured = ROOT / "benchmarks/measured/gpu_proof_h200_2026-11-27"
    copy = tmp_path / measured.name
    copy.mkdir()
    (copy / "summary.json").write_bytes((measured / "summary.json").read_bytes())
    command = f"python benchmarks/gpu_proof --out {copy} --costs"
    assert command.replace(str(copy), str(measured.relative_to(ROOT))) in PERFORMANCE_PAGE
    subprocess.run([sys.executable, *command.split()[1:]], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    for name in ("report.md", "costs.json"):
        assert (copy / name).read_text() == (measured / name).read_text(), name
    summary = json.loads((measured / "summary.json").read_text())
    assert summary["deepspeed"]["same_adapter"] and summary["evaluate"]["responses"] == 48


def test_a_killed_stage_keeps_what_it_measured(tmp_path, monkeypatch):
    """A stage's measurements are lines of measurements.jsonl the moment they are made: one
    killed at its limit, after its first measurement, still returns it."""
    worker = tmp_path / "stage.py"
    worker.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(SCRIPT.parent)!r})\n"
        "from gpu_proof.runner import record\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "record(out, 'fast_generation', 'compiled_rollouts', {'tokens_per_second': 1.5})\n"
        "time.sleep(60)\n"
    )
    # The runner re-invokes STAGE_COMMAND with ``--stage NAME``: here, the worker above.
    monkeypatch.setattr(runner, "STAGE_COMMAND", (sys.executable, str(worker)))
    args = build_parser().parse_args(["--out", str(tmp_path)])
    result = runner.run_stage(args, "fast_generation", dict(os.environ), limit=8)
    assert not result["ok"] and result["exit"] == "timeout"
    [measured] = result["measurements"]
    assert measured["section"] == "compiled_rollouts" and measured["tokens_per_second"] == 1.5
