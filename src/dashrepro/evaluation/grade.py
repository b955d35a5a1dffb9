"""Grading one checkpoint's stored responses and summarising them (no model, no generation).

``grade_samples`` adds the grader's verdict (``dashrepro.grading.grade_batch``: last
``\\boxed{}``, math-verify with a timeout, the exact-match fallback) to every stored response;
``grade_and_summarize`` also returns the checkpoint's summary (``evaluation.scoring``). A grader
change reruns this stage only: the responses stay. The graded frame holds verdicts only: the
seconds the grader took go into the ``timing`` mapping a caller passes (the rule puts them in
the output's provenance record), so the same grading done twice writes the same bytes.

    grading = {"grading_workers": 2, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0,
               "grading_memory_gib": 4.0}  # fmt: skip
    samples, summary = grade_and_summarize(responses, ["aime2024"], grading)
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dashrepro.evaluation.responses import RESPONSE_COLUMNS, SAMPLE_COLUMNS
from dashrepro.evaluation.scoring import summarize_samples
from dashrepro.grading import grade_batch
from dashrepro.settings import GradingSettings


def grade_samples(
    responses: pd.DataFrame,
    *,
    grading_workers: int = 2,
    grading_timeout_s: float = 5.0,
    grading_item_timeout_s: float = 10.0,
    grading_memory_gib: float | None = None,
    timing: dict | None = None,
) -> pd.DataFrame:
    """Add the grader's verdict to stored responses (no generation: a grader change reruns only
    this). ``timing``: receives the grader's seconds (``add_grading_seconds``)."""
    missing = [c for c in RESPONSE_COLUMNS if c not in responses.columns]
    if missing:
        raise ValueError(f"responses are missing columns {missing}")
    grades = grade_batch(
        list(responses["response"]),
        list(responses["gold"]),
        workers=grading_workers,
        timeout_s=grading_timeout_s,
        item_timeout_s=grading_item_timeout_s,
        memory_gib=grading_memory_gib,
    )
    graded = responses[RESPONSE_COLUMNS].copy()
    graded["extracted"] = [g["extracted"] for g in grades]
    graded["correct"] = [bool(g["correct"]) for g in grades]
    graded["grading_path"] = [g["path"] for g in grades]
    # Which answer-form normalisations turned a wrong verdict right (None: the plain verdict).
    graded["grading_normalisation"] = [g["normalisation"] for g in grades]
    if timing is not None:
        add_grading_seconds(timing, [float(g["seconds"]) for g in grades])
    # Nothing of the responses' in-memory attrs: a data file holds no measured times.
    graded = graded[SAMPLE_COLUMNS]
    graded.attrs.clear()
    return graded


def add_grading_seconds(timing: dict, seconds: list[float]) -> None:
    """Add one grading's seconds to ``timing``: their sum (``grading_seconds``), the slowest
    answer's (``grading_seconds_max``) and the count of answers (``graded_answers``)."""
    timing["grading_seconds"] = timing.get("grading_seconds", 0.0) + sum(seconds)
    timing["grading_seconds_max"] = max([timing.get("grading_seconds_max", 0.0), *seconds])
    timing["graded_answers"] = timing.get("graded_answers", 0) + len(seconds)


def grade_and_summarize(
    responses: pd.DataFrame,
    benchmark_order: list[str],
    grading: GradingSettings | Mapping,
    validation: str | None = None,
    timing: dict | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Graded per-sample records and their summary (Avg@k, stderr, pass@k, flags).

    ``validation`` names the held-out split among the responses, if any: it is graded like a
    benchmark and summarised apart (``summary["validation"]``), outside the benchmarks' mean.
    ``timing``: receives the grader's seconds (``grade_samples``)."""
    samples = grade_samples(
        responses, **GradingSettings.from_config(grading).to_dict(), timing=timing
    )
    known = {*benchmark_order, *([validation] if validation else [])}
    unknown = sorted(set(samples["benchmark"]) - known)
    if unknown:
        raise ValueError(f"responses for {unknown}, which are not among {sorted(known)}")
    summary = summarize_samples(samples, benchmark_order)
    if validation:
        summary["validation"] = {
            "name": validation,
            **summarize_samples(samples, [validation])["benchmarks"][validation],
        }
    checkpoints = sorted(set(samples["checkpoint"]))
    roles = sorted(set(samples["prompt_role"]))
    summary["checkpoint"] = checkpoints[0] if len(checkpoints) == 1 else checkpoints
    summary["prompt_role"] = roles[0] if len(roles) == 1 else roles
    return samples, summary
