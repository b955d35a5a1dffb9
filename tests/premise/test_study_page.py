"""premise.study_page: the study's record and page from synthetic runs in the results layout,
read at the registered step and seeds, with the registered tests."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

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


def test_a_missing_seed_or_cell_is_named_and_a_moved_kappa_adds_its_dash(tmp_path, capsys):
    write_runs(tmp_path, seeds=2)
    registration = tmp_path / "pilot.json"
    registration.write_text(json.dumps(REGISTRATION))
    argv = ["fam", "--directory", str(tmp_path), "--registration", str(registration),
            "--record", str(tmp_path / "r.json"), "--page", str(tmp_path / "p.md")]  # fmt: skip
    assert main(argv) == 3  # a clear error, not a traceback (premise.checks' statuses)
    assert "'opsd' has no evaluated step 40 for seeds [2]" in capsys.readouterr().out
    moved = study_methods({**REGISTRATION, "kappa": 15.849})
    assert moved["dash_kappa"] == "dash_k15p849" and moved["fixed"] == "fixed_lambda_0p5"


def _argv(tmp_path, *extra):
    return ["fam", "--directory", str(tmp_path), "--registration", str(tmp_path / "pilot.json"),
            "--record", str(tmp_path / "docs" / "study.json"),
            "--page", str(tmp_path / "docs" / "study.md"), *extra]  # fmt: skip


def test_check_passes_on_what_it_wrote_and_names_an_edited_summary(tmp_path, capsys):
    write_runs(tmp_path)
    (tmp_path / "pilot.json").write_text(json.dumps(REGISTRATION))
    assert main(_argv(tmp_path)) == 0
    figure = tmp_path / "docs" / "assets" / "study-forest.png"
    assert figure.read_bytes()[:4] == b"\x89PNG"
    assert "![Each comparison per cell](assets/study-forest.png)" in (
        tmp_path / "docs" / "study.md"
    ).read_text()
    assert main(_argv(tmp_path, "--check")) == 0
    summary = tmp_path / layout.Results("fam").checkpoint_file(layout.SUMMARY, "dash", "tiny", 1, 40)
    edited = json.loads(summary.read_text())
    edited["benchmarks"]["style"]["avg_at_k"] = 99.0
    summary.write_text(json.dumps(edited))
    capsys.readouterr()
    assert main(_argv(tmp_path, "--check")) == 1
    out = capsys.readouterr().out
    assert "study.json: differs" in out and "eval/dash/tiny/seed1/step40/summary.json: sha256" in out


def test_without_its_inputs_check_holds_the_page_to_the_committed_record(tmp_path, capsys):
    write_runs(tmp_path)
    (tmp_path / "pilot.json").write_text(json.dumps(REGISTRATION))
    assert main(_argv(tmp_path)) == 0
    import shutil

    shutil.rmtree(tmp_path / "results")
    assert main(_argv(tmp_path, "--check")) == 0
    assert "inputs absent" in capsys.readouterr().out
    page = tmp_path / "docs" / "study.md"
    page.write_text(page.read_text().replace("**better**", "**worse**", 1))
    assert main(_argv(tmp_path, "--check")) == 1
    assert main(_argv(tmp_path, "--from-record")) == 0
    assert main(_argv(tmp_path, "--check")) == 0


def test_an_empty_experiment_or_a_moved_pinned_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "pilot.json").write_text(json.dumps(REGISTRATION))
    assert main(_argv(tmp_path)) == 3
    assert "no evaluated checkpoint of 'opsd'" in capsys.readouterr().out
    write_runs(tmp_path)
    name = layout.Results("fam").checkpoint_file(layout.SUMMARY, "opsd", "tiny", 0, 40)
    pinned = {**REGISTRATION, "inputs": {name: "0" * 64}}
    (tmp_path / "pilot.json").write_text(json.dumps(pinned))
    assert main(_argv(tmp_path)) == 3
    assert f"files the registration pins have changed since it was written: ['{name}']" in (
        capsys.readouterr().out
    )


def test_the_committed_results_page_and_figure_are_what_the_committed_record_gives(
    repo_root, monkeypatch
):
    """On a machine with the study's files this checks the record against them too; here (no
    files) the page and its forest plot against the committed record."""
    monkeypatch.chdir(repo_root)
    assert main(["task_families", "--check"]) == 0
