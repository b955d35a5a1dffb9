"""premise.factorial_pilot: the registration's record and the study's overlay from synthetic
base evaluation, probe and OPSD pilot runs."""

from __future__ import annotations

import json
import math

import pytest

from dashrepro.experiment.config import load_config, read_config_file
from dashrepro.experiment.run_matrix import expand_config, run_matrix
from dashrepro.premise.factorial_pilot import PILOT_SCALES, STUDY_SCALE, overlay_text
from dashrepro.premise.factorial_pilot import main as pilot_main

from .factorial_fixtures import write_experiment


def test_the_registration_fixes_every_value_from_opsd_the_probe_and_the_base_alone(tmp_path):
    write_experiment(tmp_path)
    record_path, overlay = tmp_path / "docs" / "pilot.json", tmp_path / "study.yaml"
    argv = ["fam", "--directory", str(tmp_path), "--out", str(record_path),
            "--overlay", str(overlay)]  # fmt: skip
    assert pilot_main(argv) == 0
    record = json.loads(record_path.read_text())
    assert record["cells"] == ["a", "b"] and record["acceptance"]["floor"].startswith("student")
    assert (record["schedule"]["lr"], record["schedule"]["step"]) == (1.0e-3, 40)
    assert record["kappa"]["kappa"] == 10.0
    assert record["arms"]["dash"] == "dash_k10" and record["arms"]["repeat"] == "dash"
    # 60 s of training and 2 x 50 s of generation a run, two jobs at once: 80 s a run.
    assert record["power"]["run_seconds"] == pytest.approx(80.0)
    fit = record["power"]["seeds_fitting_budget"]
    assert fit == math.floor(85 * 60 / 80 / 7)
    assert len(record["study_seeds"]) == min(record["power"]["seeds_needed"], fit)
    assert all(name.startswith("results/fam/") for name in record["inputs"])
    assert pilot_main([*argv, "--check"]) == 0
    # The overlay is a valid config over the families' and trains each arm at the study's scale.
    config = expand_config(load_config("workflow_config.yaml",
                                       "config/experiments/task_families.yaml", overlay))  # fmt: skip
    matrix = run_matrix(config)
    arms = set(record["arms"].values())
    assert {m for m, s in matrix if s == STUDY_SCALE} == arms and len(matrix) == len(arms)
    assert config["methods"]["dash_tau0p05"]["tau"] == 0.05
    assert config["scales"][STUDY_SCALE]["train"]["lr"] == 1.0e-3
    assert read_config_file(overlay) == read_config_file(overlay)  # no duplicate keys
    assert overlay.read_text() == overlay_text(record)


def test_the_pilot_overlay_trains_opsd_alone_at_each_pilot_rate():
    config = expand_config(load_config("workflow_config.yaml",
                                       "config/experiments/task_families.yaml",
                                       "config/experiments/factorial_pilot.yaml"))  # fmt: skip
    matrix = run_matrix(config)
    assert set(matrix) == {("opsd", scale) for scale in PILOT_SCALES}
    assert all(seeds == [0, 1, 2, 3] for seeds in matrix.values())
    for scale, lr in PILOT_SCALES.items():
        assert config["scales"][scale]["train"]["lr"] == lr


