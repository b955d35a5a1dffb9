"""Checks on the embedded default's own run (``bash scripts/demo.sh``), where it exists.

The end-to-end test (test_workflow.py) runs a far smaller DAG, too short to move any model.
These read ``results/tiny`` as the demo leaves it and skip, saying so, when it is not there (a
fresh clone, CI): what the README reports must hold on those files.
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pandas as pd
import pytest

RESULTS = Path(__file__).resolve().parents[2] / "results" / "tiny"

pytestmark = pytest.mark.skipif(
    not (RESULTS / "statistics" / "sample_changes.csv").is_file(),
    reason="no default run here (results/tiny): run `bash scripts/demo.sh` first",
)


def selected_samples() -> dict[tuple[str, str, int], pd.DataFrame]:
    """Every run's samples at its selected checkpoint, found from the selection records."""
    runs = {}
    for record in sorted((RESULTS / "selection").glob("*/*/seed*.json")):
        if record.name.endswith(".provenance.json"):
            continue
        method, scale, seed = record.parts[-3], record.parts[-2], int(record.stem[4:])
        step = json.loads(record.read_text())["selected_step"]
        path = RESULTS / "eval" / method / scale / f"seed{seed}" / f"step{step}" / "samples.parquet"
        frame = pd.read_parquet(
            path, columns=["benchmark", "problem_id", "sample_index", "response"]
        )
        runs[(method, scale, seed)] = frame.sort_values(
            ["benchmark", "problem_id", "sample_index"]
        ).reset_index(drop=True)
    return runs


@pytest.mark.xfail(
    strict=True,
    reason="known: on the default run, dash_grpo_eta0p3_k8 and dash_grpo_eta0p5_k8 write the same "
    "samples (at K = 8 one problem per 10-step micro-batch; the GRPO term is ~1e-4 of the loss)",
)
def test_no_two_distinct_methods_write_the_same_samples():
    runs = selected_samples()
    assert len(runs) > 10
    same = [
        (first, second)
        for first, second in combinations(sorted(runs), 2)
        if first[1:] == second[1:] and runs[first]["response"].equals(runs[second]["response"])
    ]
    assert not same, f"identical samples on every problem: {same}"


def test_every_run_moved_away_from_the_base_model():
    changes = pd.read_csv(RESULTS / "statistics" / "sample_changes.csv")
    comparable = changes[changes["comparable"]]
    assert len(comparable) == len(changes), "every run is compared with the base student"
    assert (comparable["differs_from_base"] > 0).all(), comparable.nsmallest(3, "differs_from_base")
