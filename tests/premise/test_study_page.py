"""premise.study_page: the study's record and page from synthetic runs in the results layout,
read at the registered step and seeds, with the registered tests."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dashrepro import layout
from dashrepro.premise.pilot import checkpoint_scores
from dashrepro.premise.statistics import STATISTICS
from dashrepro.premise.study import cell_tests
from dashrepro.premise.study_page import main, study_methods

CELLS = ("chain_p0", "chain_p1", "style")
LIFT = {"opsd": 0.0, "fixed_lambda_0p5": 1.0, "dash": 6.0}  # DASH far above OPSD


def write_runs(directory, seeds=4, steps=(20, 40)):
    rng = np.random.default_rng(1)
    results = layout.Results("fam")
    for method, lift in LIFT.items():
        for seed in range(seeds):
            for step in steps:
                summary = {"seed": seed, "step": step, "benchmarks": {
                    cell: {"avg_at_k": 40 + lift + rng.normal(0, 1)} for cell in CELLS}}  # fmt: skip
                path = directory / results.checkpoint_file(
                    layout.SUMMARY, method, "tiny", seed, step
                )
                path.parent.mkdir(parents=True)
                path.write_text(json.dumps(summary))
    rows = [{"probe": probe, **{key: float(i) for key in STATISTICS}}
            for i, probe in enumerate(("all", *CELLS))]  # fmt: skip
    statistics = directory / results.premise_file(f"{layout.PREMISE_STATISTICS}.csv", "tiny")
    statistics.parent.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(statistics, index=False)
    timing = directory / results.job_timing("train_lora", "opsd/tiny/seed0")
    timing.parent.mkdir(parents=True)
    timing.write_text("s\th:m:s\n30.5\t0:00:30\n")


REGISTRATION = {"method": "opsd", "step": 40, "study_seeds": [0, 1, 2], "fixed_lambda": 0.5,
                "kappa": 5.0, "false_alarms": 0}  # fmt: skip


def test_the_record_holds_the_registered_tests_at_the_registered_step_and_seeds(tmp_path):
    write_runs(tmp_path)
    registration = tmp_path / "pilot.json"
    registration.write_text(json.dumps(REGISTRATION))
    record, page = tmp_path / "study.json", tmp_path / "study.md"
    argv = ["fam", "--directory", str(tmp_path), "--registration", str(registration),
            "--record", str(record), "--page", str(page)]  # fmt: skip
    assert main(argv) == 0
    written = json.loads(record.read_text())
    scores = pd.concat([checkpoint_scores("fam", m, "tiny", tmp_path) for m in LIFT])
    scores = scores[(scores["step"] == 40) & (scores["seed"] < 3)]
    expected = cell_tests(scores, "dash", "opsd")
    pd.testing.assert_frame_equal(pd.DataFrame(written["tests"]["dash - opsd"]), expected)
    assert set(expected["verdict"]) == {"better"}
    assert set(written["tests"]) == {"dash - opsd", "dash - fixed_lambda_0p5"}
    # Each cell's statistics are the probe's row for its task, the within excess derived.
    assert written["statistics"]["chain_p1"]["gate_iqr"] == 2.0
    assert written["statistics"]["style"]["spearman_within_excess"] == 0.0
    assert written["cost"] == {"job_seconds": 30.5, "by_rule": {"train_lora": [1, 30.5]}}
    assert len(written["inputs"]) == 3 * 3 + 1
    text = page.read_text()
    assert "### dash - opsd" in text and "**better**" in text and "Cost: 30 job-seconds" in text
    assert "step 40, seeds [0, 1, 2]" in text


def test_a_missing_seed_or_cell_is_named_and_a_moved_kappa_adds_its_dash(tmp_path):
    write_runs(tmp_path, seeds=2)
    registration = tmp_path / "pilot.json"
    registration.write_text(json.dumps(REGISTRATION))
    argv = ["fam", "--directory", str(tmp_path), "--registration", str(registration),
            "--record", str(tmp_path / "r.json"), "--page", str(tmp_path / "p.md")]  # fmt: skip
    with pytest.raises(FileNotFoundError, match=r"'opsd' has no evaluated step 40 for seeds \[2\]"):
        main(argv)
    moved = study_methods({**REGISTRATION, "kappa": 15.849})
    assert moved["dash_kappa"] == "dash_k15p849" and moved["fixed"] == "fixed_lambda_0p5"
