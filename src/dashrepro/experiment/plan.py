"""What a target will cost before it is submitted: job counts and GPU-hours per rule and scale.

The jobs follow from the config the way the workflow's input functions derive them: a table or
figure needs, per its kind's input sets (``analysis.registry``), the training runs of its
(method, scale) pairs (``run_matrix``), every checkpoint's generation and grading, each run's
selection, or the base model's evaluation (``all_tables`` and ``all`` evaluate it at every
reported scale). Data preparation (a few CPU jobs) is not counted. GPU-hours come from
``costs`` per scale in the config (the paper's appendix gives the training times: 45 min x 8 GPUs at 1.7B, 2.3 h x 8 at 4B,
15 h x 4 at 8B; the evaluation costs are estimates), or from a GPU proof's measured speeds
(``measured_costs``, ``plan_with_costs``: benchmarks/gpu_proof --costs).

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


# GPU-hours from a GPU proof's measured speeds (benchmarks/gpu_proof --costs)

#: Qwen3's published sizes (model cards): parameters (billions) and decoder layers.
QWEN3_SIZES = {"qwen3_1p7b": (1.7, 28), "qwen3_4b": (4.0, 36), "qwen3_8b": (8.2, 36)}
#: A profiled rollout whose kernels fill less than this share of its time is host-bound: its
#: time per decode step then follows the layer count (kernel launches), not the parameters.
HOST_BOUND_SHARE = 0.5


def measured_costs(summary: dict, config: dict, mean_response_tokens: float | None) -> dict:
    """GPU-hours per training run (each method measured) and per evaluated checkpoint at each
    scale, from the 1.7B shape's measured speeds; what is extrapolated says how."""
    measured_params, measured_layers = QWEN3_SIZES["qwen3_1p7b"]
    share = (summary.get("profile", {}).get("lora") or {}).get("kernel_share")
    host_bound = share is not None and share < HOST_BOUND_SHARE
    evaluation = summary.get("evaluate", {})
    problems = sum(int(b["n_problems"]) for b in config["benchmarks"].values())
    samples = int(config["evaluation"]["samples_per_problem"])
    tokens = float(mean_response_tokens or config["evaluation"]["max_new_tokens"])
    result = {"kernel_share": share, "host_bound": host_bound, "mean_response_tokens": tokens,
              "problems_per_checkpoint": problems, "samples_per_problem": samples,
              "scales": {}}  # fmt: skip
    for scale, (params, layers) in QWEN3_SIZES.items():
        if scale not in config["scales"]:
            continue
        train = config["scales"][scale]["train"]
        size = params / measured_params
        # A rollout call's time: per layer where the host sets it, per parameter where the GPU does.
        rollout_size = layers / measured_layers if host_bound else size
        row = {"assumed": dict(config.get("costs", {}).get(scale, {})),
               "parameters_ratio": round(size, 3), "rollout_ratio": round(rollout_size, 3)}  # fmt: skip
        for stage in ("train_opsd", "train_dash"):
            run = summary.get(stage, {})
            if not run.get("ok"):
                continue
            per_sequence = (run["mean_s_teacher"] + run["mean_s_student"]) / run[
                "rollouts_per_step"
            ]
            # The measured rollouts ran to ``max_new_tokens`` of the shape; the scale's cap may differ.
            rollout = run["mean_s_rollout"] * train["max_new_tokens"] / run["max_new_tokens"]
            micro = int(train["micro_batch_size"])
            step = (
                int(train["grad_accumulation"])
                * (rollout * rollout_size + per_sequence * micro * size)
                + run["mean_s_optimizer"] * size
            )
            row[f"train_{stage.removeprefix('train_')}"] = round(
                int(train["steps"]) * step * int(train.get("num_processes", 1)) / 3600, 1
            )
        if evaluation.get("ok") and evaluation.get("tokens_per_second"):
            seconds = problems * samples * tokens / evaluation["tokens_per_second"]
            row["generation"] = round(seconds * rollout_size / 3600, 1)
        result["scales"][scale] = row
    return result


def costs_markdown(costs: dict, plan_hours: dict | None = None) -> str:
    lines = [
        "| scale | train GPU-h a run (assumed) | OPSD measured | DASH measured "
        "| generation GPU-h a checkpoint (assumed) | measured |",
        "|---|---|---|---|---|---|",
    ]
    for scale, row in costs["scales"].items():
        assumed = row["assumed"]
        lines.append(f"| {scale} | {assumed.get('train')} | {row.get('train_opsd')} | "
                     f"{row.get('train_dash')} | {assumed.get('generation')} | "
                     f"{row.get('generation')} |")  # fmt: skip
    lines += ["", f"Rollouts {'host' if costs['host_bound'] else 'device'}-bound (kernels "
              f"{costs['kernel_share']} of a profiled rollout's time); responses of "
              f"{costs['mean_response_tokens']:,.0f} tokens, "
              f"{costs['problems_per_checkpoint']} problems x {costs['samples_per_problem']} samples."]  # fmt: skip
    lines += ["", "Extrapolated: 4B and 8B from the 1.7B shape (rollout calls by their layer count "
              "where the host sets their speed, else by parameters; the teacher, student and "
              "optimizer phases by parameters and by the scale's micro batch); the evaluation's "
              "measured tokens/s held at every response length; HF rollouts and evaluation "
              "throughout (no vLLM speed-up assumed). Training: each method's measured phases at "
              "the scale's accumulation, steps and GPUs; plan: the dearer method for every run."]  # fmt: skip
    if plan_hours:
        lines += ["", "| plan target | GPU-hours (assumed costs) | GPU-hours (measured costs) |",
                  "|---|---|---|"]  # fmt: skip
        lines += [f"| {t} | {a:,.0f} | {m:,.0f} |" for t, (a, m) in plan_hours.items()]
    return "\n".join(lines)


def plan_with_costs(config: dict, costs: dict) -> dict:
    """``plan``'s GPU-hours of each target under the config's costs and under the measured ones
    (DASH's training cost for every method: the dearest measured)."""
    measured = {}
    for scale, row in costs["scales"].items():
        trains = [row[k] for k in ("train_opsd", "train_dash") if k in row]
        entry = dict(config.get("costs", {}).get(scale, {}))
        if trains:
            entry["train"] = max(trains)
        if "generation" in row:
            entry.update(generation=row["generation"], base_evaluation=row["generation"])
        measured[scale] = entry
    targets = {"all_tables": ("tables",), "all_figures": ("figures",)}
    hours = {}
    for target, groups in targets.items():
        jobs = target_jobs(config, groups)
        hours[target] = (sum(gpu_hours(config, jobs).values()),
                         sum(gpu_hours({**config, "costs": measured}, jobs).values()))  # fmt: skip
    return hours


def main() -> None:
    from dashrepro.experiment.config import load_config

    files = sys.argv[1:] or ["workflow_config.yaml"]
    print(plan_markdown(load_config(files[0], *files[1:])))


if __name__ == "__main__":
    main()
