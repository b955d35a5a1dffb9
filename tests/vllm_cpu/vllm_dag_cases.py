"""The workflow with both vLLM backends on CPU: ``all_tables`` through Snakemake, against HF.

Issue 22, item 5. Snakemake runs every job with its own interpreter, so running it from
.venv-vllm runs the whole DAG there: ``evaluation.backend: vllm`` (every checkpoint and the base
model evaluated by a vLLM engine, adapters as LoRA requests) and ``rollout_backend: vllm`` (each
training run samples its rollouts from a colocated engine, adapter synced every step). The same
DAG with both backends ``hf`` runs beside it, from the same interpreter and the same base model, so
that the backend is the only difference:

1. ``base``: a warm start on the student's layout only (``SFT``), built once;
2. ``hf`` and ``vllm``: the main table's five methods, one seed, four steps, one checkpoint,
   at lr ``TRAIN_LR``, each scale ``pretrained`` from that base model's folder; ``--replace-workflow-config`` so that
   the other tables and the ablation schedule are not merged back in.

Sampling differs between the backends (their random streams are their own), so the tables agree
in distribution, not in digits: every method's paired difference vLLM - HF on the average column
(the same problems, samples and seeds; ``analysis.statistics.paired_difference``) has an
interval that covers 0. The intervals are Bonferroni-adjusted over the five methods (99 % each,
95 % for the family), so that a correct backend fails this test 5 % of the time at most.

    .venv-vllm/bin/python -m pytest -s tests/vllm_cpu/vllm_dag_cases.py   # ~12 min on 2 cores
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dashrepro.analysis import statistics as st
from dashrepro.embedded.smoke_config import smoke_config
from dashrepro.experiment.run_matrix import expand_config
from dashrepro.io import read_json
from dashrepro.provenance import record_path

REPO_ROOT = Path(__file__).resolve().parents[2]
METHODS = ["opsd", "eopd", "avsd", "pw_opsd", "dash"]
BENCHMARKS = ["aime2024", "aime2025", "hmmt_feb2025"]
#: A warm start on the student's layout only, always reasoning, on the default's 10,000 training
#: problems: enough that the student solves problems (a table of zeros would agree whatever the
#: backends did) in a fraction of the default's 8 minutes. Measured here: 200 steps on the smoke
#: run's 200 problems and 400 steps of the default's mix (teacher layouts 70 %) solved ~0-1 %,
#: 400 steps of this one 3-4 %. The teacher is not taught to read its context, so the methods
#: barely move the student in four steps: this compares the samplers, not the methods.
SFT = {"steps": 1000, "teacher_fraction": 0.0, "no_thinking_fraction": 0.0}
#: That teacher cannot teach: at the default's lr (2e-3) four steps took the student from ~90 %
#: to 14-52 %, each run its own way, so the two tables differed by more than the problems'
#: sampling noise that the paired intervals measure (EOPD +12.5 points on the average, at 99 %
#: [0.8, 24.2]). A small step keeps the students near the base model, where the rows compare
#: the two backends' sampling (rollouts and evaluation) and not the luck of a collapse.
TRAIN_LR = 1e-4
STEPS = 4
#: The engines' CPU options (fp32, no torch.compile, a fixed KV cache), as the README's command
#: gives them to the whole default.
VLLM_OVERLAY = REPO_ROOT / "config/experiments/tiny_vllm_cpu.yaml"
FAMILY_CONFIDENCE = 0.95


def dag_config(default: dict, experiment: str, backend: str, base_model: Path | None) -> dict:
    """The smoke run's config cut to the main table at one seed; scale ``tiny`` pretrained from
    ``base_model`` (None: embedded, warm-started here), both samplers ``backend``."""
    config = smoke_config(default, experiment)
    config["data"]["n_train"] = default["data"]["n_train"]
    config["tables"] = {"main_results": config["tables"]["main_results"]}
    config["figures"] = {}
    config["scales"].pop("tiny_ablation")
    config["seeds"] = [0]
    config["runs"] = [{"methods": METHODS, "scales": ["tiny"], "seeds": [0]}]
    for bench in config["benchmarks"].values():
        bench["n_problems"] = 10
    config["evaluation"].update(samples_per_problem=4, max_new_tokens=96, backend=backend)
    tiny = config["scales"]["tiny"]
    tiny["sft"].update(SFT)
    tiny["train"].update(
        steps=STEPS, checkpoint_every=STEPS, max_new_tokens=96, rollout_backend=backend,
        lr=TRAIN_LR,
    )  # fmt: skip
    config["data"]["validation"] = None  # no selection on it here: half the generation
    if backend == "vllm":
        # The README's overlay, as a user runs it on the whole default.
        overlay = yaml.safe_load(VLLM_OVERLAY.read_text())
        config["evaluation"]["vllm"] = overlay["evaluation"]["vllm"]
        tiny["train"]["vllm"] = overlay["scales"]["tiny"]["train"]["vllm"]
        assert overlay["evaluation"]["backend"] == "vllm"
        assert overlay["scales"]["tiny"]["train"]["rollout_backend"] == "vllm"
    if base_model is not None:
        for key in ("architecture", "sft"):
            tiny.pop(key)
        tiny.update(source="pretrained", model=str(base_model))
    return config


def snakemake(workdir: Path, config: dict, *targets: str) -> float:
    """Run ``targets`` with ``config`` alone (no workflow_config.yaml merged in); seconds."""
    path = workdir / f"{config['experiment']}.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"),
               "--directory", str(workdir), "--configfile", str(path),
               "--replace-workflow-config", "--cores", "2", *targets]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    return time.monotonic() - started


def selected(results: Path, method: str) -> pd.DataFrame:
    samples = pd.read_parquet(results / f"eval/{method}/tiny/seed0/step{STEPS}/samples.parquet")
    per_problem = st.checkpoint_problem_accuracy({(0, STEPS): samples})
    return st.selected_problem_accuracy(per_problem, BENCHMARKS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("vllm_dag")
    default = expand_config(yaml.safe_load((REPO_ROOT / "workflow_config.yaml").read_text()))
    base = dag_config(default, "base", "hf", None)
    seconds = {"base": snakemake(workdir, base, "results/base/base_model/tiny/model.safetensors")}
    base_model = workdir / "results/base/base_model/tiny"
    for backend in ("hf", "vllm"):
        config = dag_config(default, backend, backend, base_model)
        seconds[backend] = snakemake(workdir, config, "all_tables")
    print(f"\n[vllm dag] seconds: {json.dumps({k: round(v) for k, v in seconds.items()})}")
    return workdir / "results"


def test_the_vllm_dag_ran_every_sampler_through_vllm(runs):
    """Not a silent fallback: each experiment's records name its backend, and only the vLLM
    experiment's job logs hold vLLM's engine lines."""
    for backend in ("hf", "vllm"):
        results = runs / backend
        checkpoint = f"tiny/seed0/step{STEPS}"
        responses = read_json(record_path(results / f"eval/dash/{checkpoint}/responses.parquet"))
        assert responses["params"]["generation"]["backend"] == backend
        adapter = results / f"runs/dash/tiny/seed0/checkpoint-{STEPS}/adapter_model.safetensors"
        assert read_json(record_path(adapter))["params"]["train"]["rollout_backend"] == backend
        for log in ("train_lora/dash/tiny/seed0.log",
                    f"generate_checkpoint_responses/dash/{checkpoint}.log"):  # fmt: skip
            text = (results / "logs" / log).read_text()
            assert ("vllm" in text.lower()) == (backend == "vllm"), (log, text[-2000:])


def test_the_vllm_main_table_equals_the_hf_one_within_sampling_noise(runs):
    tables = {b: pd.read_csv(runs / b / "tables/main_results.csv") for b in ("hf", "vllm")}
    cells = tables["hf"].merge(tables["vllm"], on=["row", "column"], suffixes=("_hf", "_vllm"))
    confidence = 1 - (1 - FAMILY_CONFIDENCE) / len(METHODS)
    rows = []
    for method in METHODS:
        diff = st.paired_difference(
            selected(runs / "vllm", method), selected(runs / "hf", method), BENCHMARKS,
            confidence=confidence, n_resamples=2000, seed=0,
        )  # fmt: skip
        for record in diff.to_dict("records"):
            rows.append({"method": method, **record})
    frame = pd.DataFrame(rows)
    print("\n| method | column | HF | vLLM | vLLM - HF | interval |\n|---|---|---|---|---|---|")
    for r in frame.itertuples():
        print(f"| {r.method} | {r.column} | {r.reference_value:.2f} | {r.method_value:.2f} | "
              f"{r.difference:+.2f} | [{r.ci_low:.2f}, {r.ci_high:.2f}] |")  # fmt: skip
    for backend in ("hf", "vllm"):
        base = read_json(runs / backend / "eval/base/tiny/accuracy.json")
        print(f"base model, {backend}: {json.dumps(base)[:300]}")
    # The tables are the ones the pipeline wrote, and they hold what the samples say.
    assert len(cells) == len(tables["hf"]) == len(tables["vllm"])
    assert frame["reference_value"].max() > 0, "the HF table is all zeros: nothing compared"
    average = frame[frame["column"] == st.AVERAGE]
    covers = average[(average["ci_low"] <= 0) & (average["ci_high"] >= 0)]
    assert len(covers) == len(METHODS), average.to_string()
