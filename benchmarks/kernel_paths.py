"""Does the embedded default's science survive a change of floating-point kernels?

Two machines of one kind can round differently (ATen and MKL choose kernels by instruction
set). The default's base model is the same bits everywhere (the shipped warm start,
``dashrepro.embedded.warm_start``), but the training and sampling after it round differently from
the first step. This script runs the embedded default's main table and base-model accuracies
twice on one machine -- with the default's pinned AVX2 kernels, and with
``config/experiments/tiny_scalar_kernels.yaml``'s scalar ATen kernels and MKL's compatible branch
(a second machine, emulated) -- and compares them:

- the base student and the privileged teacher (mean Avg@k with a 95 % interval clustered by
  problem): within ``--tolerance`` points of each other (default 3);
- every main-table cell (value and the statistics rule's 95 % interval, which resamples
  problems and seeds and redoes the checkpoint selection): do the two intervals overlap?
- the base models' sha256 (bitwise equal or not) and the SFT's seconds on each path (a few
  seconds where the rule copied the shipped warm start; with ``sft.reuse_shipped: false`` in an
  overlay both paths train it, and then the base model's bits differ).

    python benchmarks/kernel_paths.py                 # runs what is missing (2 cores), compares
    python benchmarks/kernel_paths.py --no-run        # compares the results that exist
    python benchmarks/kernel_paths.py --pinning-cost  # SFT steps under each setting: time, bits

``--pinning-cost`` measures what pinning costs on this machine instead: the same SFT steps of
the default's base model (its tokenizer and training set from ``results/tiny``) in a fresh
process per setting -- unpinned, the default's pins, the scalar path -- with the seconds of each
and whether its weights equal the unpinned ones bit for bit.

Prints a Markdown report; ``--out`` also writes it. Exit status 1 if a check fails. A
measurement, not a test: it trains and evaluates the main table twice (most of the time is the
scalar path's), so time it with nothing else running.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

from scipy import stats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dashrepro.analysis import per_problem as pp  # noqa: E402
from dashrepro.analysis import statistics as st  # noqa: E402
from dashrepro.analysis import statistics_report as sr  # noqa: E402
from dashrepro.experiment.config import load_config  # noqa: E402
from dashrepro.experiment.workflow import Experiment  # noqa: E402
from dashrepro.io import read_parquet  # noqa: E402
from dashrepro.layout import (  # noqa: E402
    BASE_ACCURACY,
    STUDENT_SAMPLES,
    TEACHER_SAMPLES,
    TRAIN_DATA,
    Results,
)

OVERLAY = "config/experiments/tiny_scalar_kernels.yaml"
PATHS = {"pinned AVX2": [], "scalar + MKL compatible": [OVERLAY]}
TABLE = "main_results"


def targets(config: dict) -> list[str]:
    layout = Results(config["experiment"])
    scale = config["tables"][TABLE]["scale"]
    return [layout.table(TABLE, "csv"), layout.base_eval_file(BASE_ACCURACY, scale)]


def run(overlays: list[str], cores: int) -> None:
    config = load_config(REPO / "workflow_config.yaml", *overlays)
    command = [sys.executable, "-m", "snakemake", *targets(config), "--cores", str(cores)]
    if overlays:
        command += ["--configfile", *overlays]
    subprocess.run(command, cwd=REPO, check=True)


def mean_interval(samples, benchmarks, confidence: float) -> tuple[float, float, float]:
    """Mean Avg@k over ``benchmarks`` and its normal interval (SE clustered by problem)."""
    per_problem = pp.per_problem_accuracy(samples[samples["benchmark"].isin(benchmarks)])
    per_problem = per_problem.assign(seed=0)[list(pp.SELECTED_COLUMNS)]
    se = st.clustered_standard_error(per_problem, benchmarks).set_index("column")
    value, error = float(se.at[pp.AVERAGE, "value"]), float(se.at[pp.AVERAGE, "se"])
    z = stats.norm.ppf(0.5 + confidence / 2)
    return value, value - z * error, value + z * error


def read_path(overlays: list[str]) -> dict:
    config = load_config(REPO / "workflow_config.yaml", *overlays)
    experiment = Experiment(config)
    layout = experiment.layout
    spec = config["tables"][TABLE]
    scale = spec["scale"]
    benchmarks = list(config["benchmarks"])
    confidence = config["statistics"]["confidence"]
    base = REPO / layout.base_eval(scale)
    teacher_benchmarks = json.loads((base / BASE_ACCURACY).read_text())["teacher_benchmarks"]
    teacher = read_parquet(base / TEACHER_SAMPLES)
    out = {
        "experiment": config["experiment"],
        "student": mean_interval(read_parquet(base / STUDENT_SAMPLES), benchmarks,
                                 confidence),
        "teacher": mean_interval(teacher[teacher["prompt_role"] == "teacher"],
                                 teacher_benchmarks, confidence),
        "model_sha256": hashlib.sha256(
            (REPO / experiment.base_model_dir(scale) / "model.safetensors").read_bytes()
        ).hexdigest(),
    }  # fmt: skip
    timing = REPO / layout.job_timing("sft_base_model", scale)
    with timing.open() as handle:
        out["sft_seconds"] = float(next(csv.DictReader(handle, delimiter="\t"))["s"])

    def per_problem_of(method, at_scale):
        keys = experiment.result_keys("samples", [at_scale], [method])
        return pp.checkpoint_problem_accuracy({
            (seed, step): read_parquet(REPO / experiment.result_file("samples", key),
                                       columns=["benchmark", "problem_id", "correct"])
            for key in keys for _, _, seed, step in [key]
        })  # fmt: skip

    settings = config["statistics"]
    cells, _ = sr.experiment_statistics(
        {TABLE: spec}, benchmarks, per_problem_of, reference=settings["reference"],
        n_resamples=settings["n_resamples"], seed=settings["seed"], confidence=confidence,
    )  # fmt: skip
    out["cells"] = {
        (row.row, row.column): (row.value, row.ci_low, row.ci_high) for row in cells.itertuples()
    }
    return out


def overlap(a: tuple, b: tuple) -> bool:
    return max(a[1], b[1]) <= min(a[2], b[2])


def report(first: dict, second: dict, tolerance: float) -> tuple[str, bool]:
    names = list(PATHS)
    fmt = lambda v: f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]"  # noqa: E731
    lines = [
        f"# Kernel paths: {names[0]} ({first['experiment']}) vs {names[1]} "
        f"({second['experiment']})",
        "",
        f"- base models bitwise equal: {first['model_sha256'] == second['model_sha256']} "
        f"({first['model_sha256'][:12]} / {second['model_sha256'][:12]})",
        f"- SFT seconds: {first['sft_seconds']:.0f} / {second['sft_seconds']:.0f} "
        f"({second['sft_seconds'] / first['sft_seconds']:.2f}x)",
        "",
        f"| quantity | {names[0]} | {names[1]} | difference | within {tolerance:g} points |",
        "|---|---|---|---|---|",
    ]
    ok = True
    for role in ("student", "teacher"):
        diff = second[role][0] - first[role][0]
        within = abs(diff) <= tolerance
        ok &= within
        lines.append(f"| base {role} | {fmt(first[role])} | {fmt(second[role])} | "
                     f"{diff:+.2f} | {within} |")  # fmt: skip
    lines += ["", f"| cell ({TABLE}) | {names[0]} | {names[1]} | difference | intervals overlap |",
              "|---|---|---|---|---|"]  # fmt: skip
    for key in sorted(first["cells"]):
        a, b = first["cells"][key], second["cells"].get(key)
        if b is None or any(math.isnan(x) for x in (*a, *b)):
            ok = False
            lines.append(f"| {key[0]} / {key[1]} | {fmt(a)} | missing | | False |")
            continue
        both = overlap(a, b)
        ok &= both
        lines.append(f"| {key[0]} / {key[1]} | {fmt(a)} | {fmt(b)} | {b[0] - a[0]:+.2f} | {both} |")
    lines += ["", f"all checks hold: {ok}"]
    return "\n".join(lines), ok


SFT_CHILD = """
import hashlib, json, os, sys, time
sys.path.insert(0, {src!r})
import torch
from transformers import AutoTokenizer
from dashrepro.experiment.config import load_config
from dashrepro.data.prompts import TeacherProtocol
from dashrepro.embedded.sft import build_sft_examples, run_sft
from dashrepro.embedded.tiny_model import build_tiny_qwen3
from dashrepro.io import read_parquet
from dashrepro.objectives.registry import teacher_views_of
torch.set_num_threads({threads})
config = load_config({config!r})
scale = config["scales"]["tiny"]
tokenizer = AutoTokenizer.from_pretrained({tokenizer!r})
model = build_tiny_qwen3(scale["architecture"], len(tokenizer), tokenizer.pad_token_id,
                         tokenizer.eos_token_id, scale["sft"]["seed"])
frame = read_parquet({train!r})
examples = build_sft_examples(frame, tokenizer, TeacherProtocol.from_config(config["protocol"]),
                              scale["sft"]["teacher_fraction"], scale["sft"]["seed"],
                              teacher_views_of(config["methods"]))
settings = dict(scale["sft"], steps={steps})
started = time.perf_counter()
run_sft(model, examples, settings, scale["sft"]["seed"], log=lambda _: None)
seconds = time.perf_counter() - started
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print(json.dumps({{"seconds": seconds, "sha256": digest.hexdigest(),
                  "capability": torch.backends.cpu.get_cpu_capability()}}))
"""


def pinning_cost(steps: int, threads: int) -> str:
    """The same SFT steps unpinned, pinned as the default is, and on the scalar path."""
    import os

    config = load_config(REPO / "workflow_config.yaml")
    layout = Results(config["experiment"])
    settings = {
        "unpinned": {},
        "pinned (default)": config.get("cpu_kernels") or {},
        "scalar + MKL compatible": load_config(REPO / "workflow_config.yaml", OVERLAY)[
            "cpu_kernels"
        ],
    }
    code = SFT_CHILD.format(
        src=str(REPO / "src"), threads=threads, config=str(REPO / "workflow_config.yaml"),
        tokenizer=str((REPO / layout.tokenizer()).parent),
        train=str(REPO / layout.data(TRAIN_DATA)),
        steps=steps,
    )  # fmt: skip
    rows = {}
    for name, pins in settings.items():
        env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR",
                                                                 "ONEDNN_MAX_CPU_ISA")}  # fmt: skip
        env.update({k: str(v) for k, v in pins.items()})
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
    first = rows["unpinned"]
    lines = [
        f"# Pinning cost: {steps} SFT steps, {threads} thread(s), one process each", "",
        "| setting | ATen capability | seconds | vs unpinned | weights equal to unpinned |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['capability']} | {row['seconds']:.1f} | "
            f"{row['seconds'] / first['seconds']:.2f}x | {row['sha256'] == first['sha256']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true", help="compare existing results only")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=3.0)
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--pinning-cost", action="store_true", help="time SFT steps per setting")
    parser.add_argument("--steps", type=int, default=60, help="SFT steps (--pinning-cost)")
    parser.add_argument("--threads", type=int, default=2, help="threads (--pinning-cost)")
    args = parser.parse_args()
    if args.pinning_cost:
        print(pinning_cost(args.steps, args.threads))
        return
    if not args.no_run:
        for overlays in PATHS.values():
            run(overlays, args.cores)
    first, second = (read_path(overlays) for overlays in PATHS.values())
    text, ok = report(first, second, args.tolerance)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
