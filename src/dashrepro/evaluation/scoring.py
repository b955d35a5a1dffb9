"""Avg@k summaries of graded samples, and the check that a stored summary matches its samples.

Torch-free, so that selection and reporting jobs (and Snakemake's parse) never import a model
library. ``summarize_samples`` turns one checkpoint's graded samples into its summary (per
benchmark Avg@k, clustered stderr, pass@k, flag counts); ``load_checked_summary`` reads a
stored ``summary.json`` *and* recomputes it from the ``samples.parquet`` beside it, stopping
with both files named when they disagree -- an edited grade, an edited summary, a samples file
swapped in from another checkpoint -- so no table is built from a summary its samples do not
support.

    summary = load_checked_summary("eval/.../summary.json", "eval/.../samples.parquet",
                                   ["aime2024", "aime2025", "hmmt_feb2025"])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from dashrepro.grading.answer_forms import NORMALISATION_NAMES, count_normalisations
from dashrepro.io import read_json, read_parquet, read_parquet_columns

#: The sample columns a summary is computed from (a projection: responses are not read).
SUMMARY_INPUT_COLUMNS = [
    "checkpoint",
    "benchmark",
    "problem_id",
    "correct",
    "finish_reason",
    "grading_path",
]
#: Read too where present: samples graded before the answer-form normalisations had none.
OPTIONAL_SUMMARY_COLUMNS = ["grading_normalisation"]

#: Grading paths counted in the summary, by the summary's key.
PATH_COUNTS = {
    "n_no_boxed": "no_boxed",
    "n_grader_timeout": "timeout",
    "n_fallback": "exact_fallback",
    "n_partial_parse": "partial_parse",
    "n_grader_error": "error",
}


class SummaryMismatchError(ValueError):
    """A stored summary that its samples do not reproduce; the message names both files."""


def unbiased_pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021): 1 - C(n - c, k) / C(n, k) for n samples with c correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def normalisation_counts(rows: pd.DataFrame) -> dict[str, int]:
    """``n_normalised`` (verdicts an answer-form normalisation turned right) and, per
    normalisation, ``n_normalised_<name>`` (a chain counts for each of its names)."""
    if "grading_normalisation" not in rows:
        counts = dict.fromkeys([*NORMALISATION_NAMES, "any"], 0)
    else:
        counts = count_normalisations(rows[["grading_normalisation"]])
    return {
        "n_normalised": counts["any"],
        **{f"n_normalised_{name}": counts[name] for name in NORMALISATION_NAMES},
    }


def summarize_samples(samples: pd.DataFrame, benchmark_order: list[str]) -> dict:
    """Per-benchmark Avg@k (percent), clustered stderr, pass@k and flag counts."""
    per_benchmark = {}
    for bench in benchmark_order:
        rows = samples[samples["benchmark"] == bench]
        if rows.empty:
            raise ValueError(f"no samples for benchmark {bench!r}")
        per_problem = rows.groupby("problem_id")["correct"].agg(["mean", "sum", "count"])
        k = int(per_problem["count"].min())
        n_problems = len(per_problem)
        std = float(per_problem["mean"].std(ddof=1)) if n_problems > 1 else 0.0
        per_benchmark[bench] = {
            "avg_at_k": 100.0 * float(per_problem["mean"].mean()),
            "stderr": 100.0 * std / math.sqrt(n_problems),
            "pass_at_k": 100.0
            * float(
                sum(
                    unbiased_pass_at_k(int(r["count"]), int(r["sum"]), k)
                    for _, r in per_problem.iterrows()
                )
                / n_problems
            ),
            "k": k,
            "n_problems": n_problems,
            "n_samples": len(rows),
            "n_truncated": int((rows["finish_reason"] == "length").sum()),
            **{key: int((rows["grading_path"] == path).sum()) for key, path in PATH_COUNTS.items()},
            **normalisation_counts(rows),
        }
    return {
        "benchmarks": per_benchmark,
        "mean_over_benchmarks": sum(b["avg_at_k"] for b in per_benchmark.values())
        / len(per_benchmark),
    }


def _same(a, b) -> bool:
    if isinstance(a, bool | int | str) or isinstance(b, bool | int | str):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def summary_differences(stored: dict, recomputed: dict, benchmarks: Sequence[str]) -> list[str]:
    """Every value of ``stored`` that ``recomputed`` does not reproduce, as readable lines."""
    lines = []
    for bench in benchmarks:
        have = stored.get("benchmarks", {}).get(bench)
        if have is None:
            lines.append(f"{bench}: not in the summary")
            continue
        for key, value in recomputed["benchmarks"][bench].items():
            if key not in have:
                if key in ("avg_at_k", "k", "n_problems", "n_samples"):
                    lines.append(f"{bench}.{key}: missing from the summary")
                continue
            if not _same(have[key], value):
                lines.append(f"{bench}.{key}: {have[key]} in the summary, {value} from the samples")
    mean = stored.get("mean_over_benchmarks")
    if mean is None or not _same(mean, recomputed["mean_over_benchmarks"]):
        lines.append(
            f"mean_over_benchmarks: {mean} in the summary, "
            f"{recomputed['mean_over_benchmarks']} from the samples"
        )
    return lines


def load_checked_summary(
    summary_path: str | Path, samples_path: str | Path, benchmarks: Sequence[str]
) -> dict:
    """The stored summary, after checking that its samples reproduce every number in it."""
    stored = read_json(summary_path)
    present = set(read_parquet_columns(samples_path))
    optional = [c for c in OPTIONAL_SUMMARY_COLUMNS if c in present]
    samples = read_parquet(samples_path, columns=[*SUMMARY_INPUT_COLUMNS, *optional])
    try:
        recomputed = summarize_samples(samples, list(benchmarks))
    except (KeyError, TypeError, ValueError) as exc:
        raise SummaryMismatchError(
            f"{samples_path}: cannot recompute the summary of {summary_path} ({exc})"
        ) from None
    problems = summary_differences(stored, recomputed, benchmarks)
    checkpoints = sorted(set(samples["checkpoint"]))
    if "checkpoint" in stored and checkpoints != [stored["checkpoint"]]:
        problems.append(
            f"checkpoint: {stored['checkpoint']!r} in the summary, {checkpoints} in the samples"
        )
    if problems:
        listing = "\n  - ".join(problems)
        raise SummaryMismatchError(
            f"{summary_path} does not match the samples it was made from, {samples_path}:\n"
            f"  - {listing}\n"
            "Regrade the checkpoint (delete both files and rerun) or restore the edited file."
        )
    return stored
