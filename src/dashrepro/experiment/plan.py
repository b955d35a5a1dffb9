"""What a target will cost before it is submitted: job counts and GPU-hours per rule and scale.

The jobs follow from the config the way the workflow's input functions derive them: a table or
figure needs, per its kind's input sets (``analysis.registry``), the training runs of its
(method, scale) pairs (``run_matrix``), every checkpoint's generation and grading, each run's
selection, or the base model's evaluation (``all_tables`` and ``all`` evaluate it at every
reported scale). Data preparation (a few CPU jobs) is not counted. GPU-hours come from
``costs`` per scale in the config (the paper's appendix gives the training times: 45 min x 8 GPUs at 1.7B, 2.3 h x 8 at 4B,
15 h x 4 at 8B; the evaluation costs are estimates to be replaced by measured ones).

    python -m dashrepro.experiment.plan workflow_config.yaml config/experiments/paper.yaml
    snakemake --configfile=config/experiments/paper.yaml plan   # results/paper/plan.md

Torch-free.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping

from dashrepro.analysis.registry import kind_needs
from dashrepro.experiment.run_matrix import (
    GROUPS,
    base_scale,
    run_matrix,
    spec_scales,
)
from dashrepro.settings import TrainSettings

#: Input sets that need each checkpoint evaluated (generation + grading), and selection.
EVALUATED = {"selections", "summaries", "samples"}
TRAINED = {"traces", "metrics"}
#: Rules that hold GPUs, and the ``costs`` key of their GPU-hours per job.
GPU_COSTS = {
    "train": "train",
    "generate": "generation",
    "evaluate_base_model": "base_evaluation",
    "premise_probe": "premise_probe",
}


def target_jobs(config: Mapping, groups: tuple[str, ...]) -> Counter:
    """(rule, scale) -> jobs, for every entry of ``groups`` ("tables", "figures"); a job that
    several entries need counts once. A derived scale's base model is evaluated once, as its
    base scale's."""
    runs = run_matrix(config)
    trained, evaluated, base = set(), set(), set()
    entries = [(group, spec) for group in groups for spec in config[group].values()]
    for group, spec in entries:
        needs = set(kind_needs(group, dict(spec)))
        for scale in spec_scales(spec):
            pairs = [(method, scale) for method in spec["methods"]]
            if needs & (EVALUATED | TRAINED):
                trained.update((m, s, seed) for m, s in pairs for seed in runs[(m, s)])
            if needs & EVALUATED:
                evaluated.update((m, s, seed) for m, s in pairs for seed in runs[(m, s)])
            if "base_accuracy" in needs:
                base.add(base_scale(config, scale))
    jobs = Counter()
    for _, scale, _ in trained:
        jobs[("train", scale)] += 1
    for _, scale, _ in evaluated:
        checkpoints = len(
            TrainSettings.from_config(config["scales"][scale]["train"]).checkpoint_steps()
        )
        jobs[("generate", scale)] += checkpoints
        jobs[("grade", scale)] += checkpoints
        jobs[("select", scale)] += 1
    if "tables" in groups:  # the tables' targets add the base model's row at every scale
        base.update(
            base_scale(config, s)
            for group in GROUPS
            for spec in config[group].values()
            for s in spec_scales(spec)
        )
    for scale in base:
        jobs[("evaluate_base_model", scale)] += 1
    for group in groups:
        jobs[(group[:-1], "-")] += len(config[group])
    if groups == GROUPS and config.get("premise_probe") is not None:
        # Target `all` probes every base model the tables and figures train from.
        for scale in {base_scale(config, s) for g in GROUPS for spec in config[g].values()
                      for s in spec_scales(spec)}:  # fmt: skip
            jobs[("premise_probe", scale)] += 1
    return jobs


def gpu_hours(config: Mapping, jobs: Counter) -> dict[tuple[str, str], float]:
    """GPU-hours of each (rule, scale) with a cost in ``costs``."""
    costs = config.get("costs") or {}
    hours = {}
    for (rule, scale), count in jobs.items():
        key = GPU_COSTS.get(rule)
        if key and key in (costs.get(scale) or {}):
            hours[(rule, scale)] = count * float(costs[scale][key])
    return hours


def plan_markdown(config: Mapping) -> str:
    """The plan of ``all_tables``, ``all_figures`` and ``all`` as Markdown tables."""
    lines = [f"# Plan of experiment {config['experiment']}", ""]
    targets = {"all_tables": ("tables",), "all_figures": ("figures",), "all": GROUPS}
    for target, groups in targets.items():
        jobs = target_jobs(config, groups)
        hours = gpu_hours(config, jobs)
        lines += [f"## {target}", "", "| rule | scale | jobs | GPU-hours |", "|---|---|---|---|"]
        for (rule, scale), count in sorted(jobs.items()):
            cost = hours.get((rule, scale))
            lines.append(
                f"| {rule} | {scale} | {count} | {'' if cost is None else f'{cost:,.1f}'} |"
            )
        by_scale = Counter()
        for (_, scale), value in hours.items():
            by_scale[scale] += value
        total = sum(hours.values())
        per_scale = ", ".join(f"{s} {v:,.1f}" for s, v in sorted(by_scale.items()))
        lines += [
            "",
            f"Total: {sum(jobs.values())} jobs, {total:,.1f} GPU-hours ({per_scale}).",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    from dashrepro.experiment.config import load_config

    files = sys.argv[1:] or ["workflow_config.yaml"]
    print(plan_markdown(load_config(files[0], *files[1:])))


if __name__ == "__main__":
    main()
