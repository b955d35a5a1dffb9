"""The audit's small results tree, written with real provenance records, shared by the tests of
``dashrepro.provenance.audit``'s modules. (The whole chain down to adapters and runs is audited
on a real run in tests/workflow.)"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dashrepro.provenance.records import write_provenance

from .audit_helpers import RESULTS, write


@pytest.fixture
def tree(tmp_path):
    """One scores table ``t`` with a row of ours (DASH, one seed, checkpoints at steps 2 and 4)
    and a copied row (Base, from Zhao et al.), each file with the record its job would write."""
    results = tmp_path / RESULTS
    steps, samples, summaries = [2, 4], [], []
    for step, right in zip(steps, (1, 3), strict=True):
        folder = results / f"eval/dash/s/seed0/step{step}"
        folder.mkdir(parents=True)
        frame = pd.DataFrame({"benchmark": ["b"] * 4, "problem_id": ["p1", "p1", "p2", "p2"],
                              "correct": [i < right for i in range(4)]})  # fmt: skip
        frame.to_parquet(folder / "samples.parquet")
        write(folder / "summary.json", json.dumps({"step": step}))
        samples.append(f"{RESULTS}/eval/dash/s/seed0/step{step}/samples.parquet")
        summaries.append(f"{RESULTS}/eval/dash/s/seed0/step{step}/summary.json")
    selection = write(
        results / "selection/dash/s/seed0.json",
        json.dumps(
            {
                "method": "dash",
                "scale": "s",
                "seed": 0,
                "selected_step": 4,
                "scores_by_step": {"2": 25.0, "4": 75.0},
            }
        ),  # fmt: skip
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)  # records name their inputs as the workflow does: relative paths
        write_provenance(selection, "select_best_checkpoint",
                         inputs={"summaries": summaries, "samples": samples},
                         params={"steps": steps})  # fmt: skip
        cells = pd.DataFrame([
            {"table": "t", "row": "dash", "label": "DASH", "scale": "s", "column": "average",
             "value": 75.0, "std": math.nan, "source": "this run"},
            {"table": "t", "row": "base", "label": "Base", "scale": "s", "column": "average",
             "value": 37.1, "std": math.nan, "source": "Zhao et al."},
        ])  # fmt: skip
        csv = write(results / "tables/t.csv", cells.to_csv(index=False))
        context = {"benchmarks": ["b"], "runs": {"dash/s": [0]},
                   "input_keys": {"selections": [["dash", "s", 0]]}}  # fmt: skip
        write_provenance(csv, "table", inputs={"selections": [f"{RESULTS}/selection/dash/s/seed0.json"]},
                         params={"spec": {"kind": "method_scores"}, "context": context})  # fmt: skip
    return tmp_path
