"""Tests for dashrepro.analysis.run_samples: ``RunSamples`` reads each run's checkpoints by the
keys beside them, the base students by scale, and compares the selected checkpoints' texts."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dashrepro.analysis.run_samples import RunSamples
from dashrepro.io import write_parquet

BENCH = ["b1", "b2"]
BASE_TEXTS = {("b1", 0): "x", ("b1", 1): "y", ("b2", 0): "z", ("b2", 1): "w"}
CHANGED = {**BASE_TEXTS, ("b2", 1): "changed"}  # 1 of the 4 samples differs from the base
OTHER = {key: "other" for key in BASE_TEXTS}  # every sample differs

# (method, seed, step): (correct per benchmark, two samples of one problem each; texts)
#   dash:  step 10: b1 50%, b2 0%  (mean 25);  step 20: b1 100%, b2 50% (mean 75): picks 20
#   opsd:  step 10: 100%, 100%     (mean 100); step 20: 0%, 0%          (mean 0):  picks 10
#   avsd:  step 10 only, every text unlike the base's
RUNS = {
    ("dash", 0, 10): ({"b1": [True, False], "b2": [False, False]}, OTHER),
    ("dash", 0, 20): ({"b1": [True, True], "b2": [True, False]}, CHANGED),
    ("opsd", 0, 10): ({"b1": [True, True], "b2": [True, True]}, CHANGED),
    ("opsd", 0, 20): ({"b1": [False, False], "b2": [False, False]}, OTHER),
    ("avsd", 0, 10): ({"b1": [True, False], "b2": [True, False]}, OTHER),
}


def _frame(correct: dict[str, list[bool]], texts: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"benchmark": b, "problem_id": f"{b}-p1", "sample_index": i, "seed": 7,
             "response": texts.get((b, i), "?"), "correct": c}
            for b, flags in correct.items() for i, c in enumerate(flags)
        ]
    )  # fmt: skip


@pytest.fixture
def runs(tmp_path) -> RunSamples:
    """The runs above at scale ``s`` (files with flat names: the keys say what they are) and
    the base student ``tiny_base`` that ``s`` trains from, which also holds an extra benchmark."""
    samples, keys = [], []
    for (method, seed, step), (correct, texts) in RUNS.items():
        path = tmp_path / f"samples-{len(samples)}.parquet"
        write_parquet(path, _frame(correct, texts))
        samples.append(str(path))
        keys.append([method, "s", str(seed), str(step)])  # as strings: read as integers
    base = tmp_path / "base.parquet"
    base_correct = {"b1": [False, False], "b2": [True, False], "extra": [True, True]}
    write_parquet(base, _frame(base_correct, BASE_TEXTS))
    return RunSamples(samples, keys, [str(base)], ["tiny_base"], {"s": "tiny_base"}, BENCH)


def test_files_are_filed_by_their_keys(runs, tmp_path):
    assert set(runs.paths) == {("dash", "s"), ("opsd", "s"), ("avsd", "s")}
    assert runs.paths[("dash", "s")] == {
        (0, 10): str(tmp_path / "samples-0.parquet"), (0, 20): str(tmp_path / "samples-1.parquet")
    }  # fmt: skip
    assert runs.base_files == {"tiny_base": str(tmp_path / "base.parquet")}
    assert runs.base_scales == {"s": "tiny_base"} and runs.benchmarks == BENCH


def test_keys_and_files_must_pair_up():
    with pytest.raises(ValueError):
        RunSamples(["a.parquet", "b.parquet"], [["dash", "s", 0, 10]], [], [], {}, BENCH)
    with pytest.raises(ValueError):
        RunSamples([], [], ["base.parquet"], [], {}, BENCH)


def test_per_problem_is_each_checkpoints_accuracy_read_once(runs):
    frame = runs.per_problem("dash", "s")
    accuracy = frame.set_index(["seed", "step", "benchmark"])["accuracy"]
    assert accuracy.to_dict() == {
        (0, 10, "b1"): 0.5, (0, 10, "b2"): 0.0, (0, 20, "b1"): 1.0, (0, 20, "b2"): 0.5
    }  # fmt: skip
    assert runs.per_problem("dash", "s") is frame  # cached: the files are read once


def test_base_student_is_the_scales_base_on_the_benchmarks_only(runs):
    base = runs.base_student("s")
    assert base["benchmark"].tolist() == ["b1", "b2"]  # not the extra benchmark
    assert base["accuracy"].tolist() == [0.0, 0.5]


def test_sample_changes_compare_each_selected_checkpoint_with_the_base(runs):
    changes = runs.sample_changes().set_index("method")
    assert sorted(changes.index) == ["avsd", "dash", "opsd"]
    assert (changes["scale"] == "s").all() and (changes["seed"] == 0).all()
    assert changes["comparable"].all() and (changes["n_samples"] == 4).all()
    # The selected checkpoints (dash step 20, opsd step 10) changed 1 sample in 4; had the
    # other checkpoint been read, every sample would differ.
    assert changes.loc["dash", "differs_from_base"] == 0.25
    assert changes.loc["opsd", "differs_from_base"] == 0.25
    assert changes.loc["avsd", "differs_from_base"] == 1.0
    # dash and opsd wrote the same texts at their selected checkpoints; avsd like neither.
    assert changes.loc["dash", "identical_to"] == "opsd"
    assert changes.loc["opsd", "identical_to"] == "dash"
    assert changes.loc["avsd", "identical_to"] == ""


def test_sample_changes_of_samples_drawn_otherwise_are_not_comparable(tmp_path):
    run = tmp_path / "run.parquet"
    write_parquet(run, _frame({"b1": [True], "b2": [True]}, BASE_TEXTS).assign(seed=8))
    base = tmp_path / "base.parquet"
    write_parquet(base, _frame({"b1": [True], "b2": [True]}, BASE_TEXTS))
    runs = RunSamples([str(run)], [["dash", "s", 0, 10]], [str(base)], ["b"], {"s": "b"}, BENCH)
    (row,) = runs.sample_changes().to_dict("records")
    assert not row["comparable"]  # another generation seed: a difference would mean nothing
    assert math.isnan(row["differs_from_base"])
