"""Cheap helpers shared by the analysis tests: the hand-computed per-problem fixture (statistics,
per_problem, statistics_report) and the paper's configuration and published numbers (tables)."""

from __future__ import annotations

import pandas as pd
import pytest

from dashrepro.analysis import per_problem as pp
from dashrepro.experiment.config import load_config
from dashrepro.experiment.workflow import Experiment
from dashrepro.io import read_csv

BENCH = ["b1", "b2"]

# Per-problem accuracy of the small fixture, k = 2 samples a problem (so 0, 0.5 or 1):
#   (seed, step): {benchmark: [problem 1, problem 2]}    Avg@k               mean over benchmarks
HAND = {
    (1, 10): {"b1": [1.0, 0.5], "b2": [0.0, 0.5]},  # b1 75,  b2 25          50
    (1, 20): {"b1": [0.5, 0.5], "b2": [0.5, 0.5]},  # b1 50,  b2 50          50 (tie: step 10)
    (2, 10): {"b1": [0.0, 0.5], "b2": [0.0, 0.0]},  # b1 25,  b2 0           12.5
    (2, 20): {"b1": [1.0, 1.0], "b2": [0.5, 0.0]},  # b1 100, b2 25          62.5 (step 20)
}


def _samples(accuracies: dict[str, list[float]]) -> pd.DataFrame:
    """Two graded samples per problem realising the given accuracies."""
    rows = []
    for bench, per_problem in accuracies.items():
        for p, acc in enumerate(per_problem, start=1):
            for i, correct in enumerate([acc >= 0.5, acc == 1.0]):
                rows.append(
                    {"checkpoint": "c", "benchmark": bench, "problem_id": f"{bench}-p{p}",
                     "sample_index": i, "seed": 987654, "correct": bool(correct),
                     "finish_reason": "stop", "grading_path": "math_verify"}
                )  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture
def hand_per_problem() -> pd.DataFrame:
    return pp.checkpoint_problem_accuracy({key: _samples(acc) for key, acc in HAND.items()})


@pytest.fixture(scope="module")
def paper_config(repo_root):
    return load_config(
        repo_root / "workflow_config.yaml", repo_root / "config/experiments/paper.yaml"
    )


@pytest.fixture(scope="module")
def published(repo_root, paper_config):
    return read_csv(repo_root / paper_config["published_numbers"])


def context_of(config, name: str) -> dict:
    """What the table rule's params give a table's kind (``Experiment.report_context``)."""
    return Experiment(config).report_context("tables", name)
