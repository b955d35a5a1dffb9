"""The factorial study's registration: its free values from OPSD's pilot, the probe and the base
evaluation alone, and the study's overlay written from them (docs/factorial-study.md).

Reads the base evaluation (which cells are accepted), the probe's tokens (κ), OPSD's pilot runs
on the ``PILOT_SCALES`` (the learning rate and read step, the endpoint's spread between seeds,
the cost of a run) and writes a record naming every file read with its sha256, and the study's
overlay. No DASH run is read, and none exists when this runs.

    python -m dashrepro.premise.factorial_pilot task_families \\
        --out docs/factorial-pilot.json --overlay config/experiments/factorial_study.yaml
    python -m dashrepro.premise.factorial_pilot task_families --check   # the committed pair
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dashrepro import layout
from dashrepro.io import read_json, read_parquet, sha256_file
from dashrepro.premise import factorial
from dashrepro.premise.pilot import checkpoint_scores

#: OPSD's pilot schedules (config/experiments/factorial_pilot.yaml): the learning rate of each.
PILOT_SCALES = {"families_lr5e4": 5.0e-4, "families_lr1e3": 1.0e-3, "families_lr2e3": 2.0e-3}
#: The study's wall-clock budget on 2 cores for its runs (the rest of 90 minutes: its page).
BUDGET_SECONDS = 85 * 60
#: The study's schedule: the read step's checkpoints (the paper's selection has two to choose).
STUDY_SCALE = "factorial"
RECORD = Path("docs") / "factorial-pilot.json"
OVERLAY = Path("config") / "experiments" / "factorial_study.yaml"


def kappa_name(kappa: float) -> str:
    """κ as method names write it (``10`` not ``10.0``)."""
    return layout.value_name(int(kappa) if float(kappa).is_integer() else kappa)


def study_arms(kappa: float) -> dict[str, str]:
    """The study's methods by role: the factorial at ``kappa`` (the configured names where it is
    the paper's 5), the first study's DASH, and OPSD and DASH at the paper's clip."""
    if kappa == 5.0:
        arms = {"opsd": "opsd", "scale_matched": "scale_matched_opsd",
                "normalized": "normalized_dash", "dash": "dash"}  # fmt: skip
    else:
        arms = {role: name.format(kappa=kappa_name(kappa))
                for role, name in factorial.FACTORIAL.items()}  # fmt: skip
    arms.update({"repeat": factorial.REPEAT, "clipped_opsd": factorial.CLIPPED_OPSD,
                 "clipped_dash": factorial.CLIPPED_DASH})  # fmt: skip
    return arms


def run_seconds(directory: Path, experiment: str, scales: list[str]) -> float:
    """Wall seconds of one pilot run on 2 cores: its training and its checkpoints' generation and
    grading (job-seconds from Snakemake's benchmark files), over the runs, halved (2 jobs run at
    once on 2 cores)."""
    timings = directory / layout.Results(experiment).root / "job_timings"
    from dashrepro.io import read_job_seconds

    total, runs = 0.0, set()
    for rule in ("train_lora", "generate_checkpoint_responses", "grade_checkpoint"):
        for scale in scales:
            for path in sorted((timings / rule / "opsd" / scale).rglob("*.tsv")):
                total += read_job_seconds(path)
                seed = path.relative_to(timings / rule / "opsd" / scale).parts[0]
                runs.add((scale, seed.removesuffix(".tsv")))
    if not runs:
        raise FileNotFoundError(f"no job timings of OPSD's pilot runs under {timings}")
    return total / len(runs) / 2


def registration(experiment: str, directory: Path, scale: str = "tiny") -> dict:
    """Every value the study fixes, and the files they come from."""
    results = layout.Results(experiment)
    base_path = directory / results.base_eval_file(layout.BASE_ACCURACY, scale)
    tokens_path = directory / results.premise_file(layout.PREMISE_TOKENS, scale)
    for path in (base_path, tokens_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing (run the task families' base evaluation "
                                    "and premise probe first)")  # fmt: skip
    base = read_json(base_path)
    acceptance = factorial.accepted_cells(base)
    cells = [c for c, reason in acceptance.items() if reason is None]
    if not cells:
        raise ValueError(f"{base_path}: no cell passes the acceptance criterion: {acceptance}")
    parts = []
    for pilot_scale, lr in PILOT_SCALES.items():
        parts.append(checkpoint_scores(experiment, "opsd", pilot_scale, directory).assign(lr=lr))
    scores = pd.concat(parts, ignore_index=True)
    schedule = factorial.pilot_schedule(scores, cells)
    learned = factorial.learned_cells(scores, base, schedule["lr"], schedule["step"], cells)
    cells = [c for c in cells if learned[c]]
    if not cells:
        raise ValueError(f"OPSD learned no accepted cell in the pilot: {learned}")
    # The spread and κ are read on the cells that count (accepted and learned).
    schedule = factorial.pilot_schedule(scores, cells)
    kappa = factorial.kappa_from_probe(read_parquet(tokens_path), cells)
    arms = study_arms(kappa["kappa"])
    power = factorial.seeds_for_endpoint(schedule["endpoint_sd"])
    per_run = run_seconds(directory, experiment, list(PILOT_SCALES))
    fit = max(3, math.floor(BUDGET_SECONDS / per_run / len(set(arms.values()))))
    n = min(power["seeds_needed"], fit)
    read = sorted({str(p) for p in scores["summary_file"]}) + [str(base_path), str(tokens_path)]
    return {
        "experiment": experiment,
        "acceptance": acceptance,
        "learned": learned,
        "cells": cells,
        "schedule": schedule,
        "kappa": kappa,
        "arms": arms,
        "power": {**power, "effect": factorial.EFFECT, "power": factorial.POWER,
                  "alpha": factorial.ALPHA, "seeds_fitting_budget": fit,
                  "run_seconds": per_run, "budget_seconds": BUDGET_SECONDS},  # fmt: skip
        "study_seeds": list(range(n)),
        "detectable_effect": factorial.detectable(power["contrast_sd"], n),
        "inputs": {str(Path(p).relative_to(directory)): sha256_file(p) for p in read},
    }


def overlay_text(record: Mapping) -> str:
    """The study's overlay (merged over the task families'), from a registration record."""
    kappa, lr, step = record["kappa"]["kappa"], record["schedule"]["lr"], record["schedule"]["step"]
    arms = record["arms"]
    lines = [
        "# The factorial study (docs/factorial-study.md), written by",
        "# `python -m dashrepro.premise.factorial_pilot` from its registration record",
        "# (docs/factorial-pilot.json): do not edit. Merged over the task families' overlay:",
        "#",
        "#   snakemake --cores 2 --rerun-incomplete evaluate_all_runs \\",
        "#       --configfile config/experiments/task_families.yaml \\",
        "#           config/experiments/factorial_study.yaml \\",
        "#     && python -m dashrepro.premise.factorial_page task_families",
        "scales:",
        f"  {STUDY_SCALE}:",
        f'    label: "Factorial study, lr {lr:g}, {step} steps"',
        "    derive_from: tiny",
        f"    train: {{steps: {step}, checkpoint_every: {step // 2}, lr: {lr!r}}}",
        "methods:",
    ]
    if kappa != 5.0:
        for role, aggregation in (("scale_matched", "scale_matched_opsd"),
                                  ("normalized", "normalized_dash"), ("dash", "dash")):  # fmt: skip
            lines += [f"  {arms[role]}:", f'    label: "{aggregation} (kappa = {kappa:g})"',
                      f"    aggregation: {aggregation}", "    divergence: forward_kl",
                      f"    params: {{kappa: {kappa!r}}}"]  # fmt: skip
    lines += [f"  {arms['clipped_opsd']}:", '    label: "OPSD (tau = 0.05)"',
              "    aggregation: opsd", "    divergence: forward_kl", "    params: {}",
              "    tau: 0.05", f"  {arms['clipped_dash']}:", '    label: "DASH (tau = 0.05)"',
              "    aggregation: dash", "    divergence: forward_kl", "    params: {kappa: 5.0}",
              "    tau: 0.05"]  # fmt: skip
    methods = ", ".join(dict.fromkeys(arms.values()))
    lines += ["tables:", "  main_results:", f"    scale: {STUDY_SCALE}", f"    methods: [{methods}]",
              f"    options: {{sections: [{{methods: [{methods}]}}]}}",
              "figures: {checkpoint_curves: null, training_dynamics: null}",
              f"seeds: {record['study_seeds']}", "runs: []"]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("--directory", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=RECORD)
    parser.add_argument("--overlay", type=Path, default=OVERLAY)
    parser.add_argument("--check", action="store_true",
                        help="compare the committed record and overlay with what the inputs give")  # fmt: skip
    args = parser.parse_args(argv)
    from dashrepro.premise.checks import write_or_check

    return write_or_check(args.out, lambda: registration(args.experiment, args.directory),
                          lambda record: {args.overlay: overlay_text(record)}, args.check)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
