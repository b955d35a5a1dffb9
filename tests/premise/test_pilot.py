"""premise.pilot: the checkpoint the study evaluates and the seeds it needs, from one method's
evaluated checkpoints (synthetic summaries in the results layout)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dashrepro import layout
from dashrepro.premise.pilot import checkpoint_scores, main, pilot_summary
from dashrepro.premise.study import seeds_for_power


def write_run(directory, seeds=6, steps=(20, 40)):
    rng = np.random.default_rng(0)
    results = layout.Results("fam")
    for seed in range(seeds):
        for step in steps:
            base = 30 + (5 if step == 40 else 0)
            summary = {"seed": seed, "step": step, "benchmarks": {
                cell: {"avg_at_k": base + rng.normal(0, 2)} for cell in ("a", "b", "c")}}  # fmt: skip
            path = directory / results.checkpoint_file(layout.SUMMARY, "opsd", "tiny", seed, step)
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(summary))


def test_the_best_mean_checkpoint_and_the_seeds_its_spread_needs(tmp_path):
    write_run(tmp_path)
    scores = checkpoint_scores("fam", "opsd", "tiny", tmp_path)
    assert len(scores) == 6 * 2 * 3 and set(scores["cell"]) == {"a", "b", "c"}
    summary = pilot_summary(scores, "opsd")
    assert summary["step"] == 40 and summary["seeds"] == list(range(6))
    assert len(summary["split_tests"]) == 3
    assert summary["seeds_needed"] == seeds_for_power(summary["difference_sd"], cells=3)
    assert summary["difference_sd"] == max(t["sd"] for t in summary["split_tests"])


def test_main_writes_the_summary_and_a_missing_run_is_named(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="no evaluated checkpoint of 'opsd'"):
        main(["fam", "--directory", str(tmp_path)])
    write_run(tmp_path)
    out = tmp_path / "pilot.json"
    assert main(["fam", "--directory", str(tmp_path), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["step"] == 40
    assert json.loads(capsys.readouterr().out)["method"] == "opsd"
