"""premise.factorial_page: the factorial study's record, page and figures, as registered, and
--check, on synthetic study runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dashrepro import layout
from dashrepro.io import write_parquet
from dashrepro.premise.factorial_pilot import STUDY_SCALE
from dashrepro.premise.factorial_pilot import main as pilot_main

from .factorial_fixtures import CELLS, RESULTS, write_experiment, write_summary


def test_the_page_applies_the_registered_tests_and_check_holds_it_to_its_files(tmp_path, capsys):
    from dashrepro.premise.factorial_page import main as page_main

    write_experiment(tmp_path)
    registration = tmp_path / "docs" / "pilot.json"
    assert pilot_main(["fam", "--directory", str(tmp_path), "--out", str(registration),
                       "--overlay", str(tmp_path / "study.yaml")]) == 0  # fmt: skip
    record = json.loads(registration.read_text())
    rng = np.random.default_rng(7)
    lift = {"opsd": 0, record["arms"]["scale_matched"]: 0, record["arms"]["normalized"]: 4,
            record["arms"]["dash"]: 4, "dash": -20, "opsd_tau0p05": -19, "dash_tau0p05": -15}  # fmt: skip
    for method, up in lift.items():
        for seed in record["study_seeds"]:
            for step in (20, 40):
                write_summary(tmp_path, method, STUDY_SCALE, seed, step, {
                    "seed": seed, "step": step, "benchmarks": {
                        c: {"avg_at_k": 60 + up + rng.normal(0, 1)} for c in CELLS}})  # fmt: skip
            adapter = tmp_path / RESULTS.adapter(method, STUDY_SCALE, seed, 40)
            adapter.parent.mkdir(parents=True, exist_ok=True)
            Path(f"{adapter}.provenance.json").write_text(json.dumps({"threads": 1, "numerics": {
                "cpu": "Test CPU", "aten_cpu_capability": "AVX2"}}))  # fmt: skip
            metrics = tmp_path / RESULTS.run_file(layout.TRAIN_METRICS, method, STUDY_SCALE, seed)
            metrics.parent.mkdir(parents=True, exist_ok=True)
            write_parquet(metrics, pd.DataFrame({"step": [1, 2], "update_norm": [0.1, 0.2]}))
    argv = ["fam", "--directory", str(tmp_path), "--registration", str(registration),
            "--record", str(tmp_path / "docs" / "results.json"),
            "--page", str(tmp_path / "docs" / "results.md")]  # fmt: skip
    assert page_main(argv) == 0
    result = json.loads((tmp_path / "docs" / "results.json").read_text())
    assert [r["verdict"] for r in result["coprimary"]] == ["supported", "supported"]
    assert result["secondary"]["repeat - opsd"]["difference"] < -15
    # OPSD at tau 0.05 stays at the base student's 41: DASH at tau 0.05 is not compared.
    assert result["clip_learns"] is False
    assert "clipped_dash - clipped_opsd" not in result["secondary"]
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "so DASH at τ = 0.05 is not compared" in text
    assert "## Co-primary" in text and "assets/results-forest.png" in text
    assert "Measured on Test CPU (AVX2 kernels, 1 thread(s) a job), 2 cores." in text
    assert (tmp_path / "docs" / "assets" / "results-arms.png").is_file()
    assert page_main([*argv, "--check"]) == 0
    write_summary(tmp_path, "opsd", STUDY_SCALE, 0, 40, {"seed": 0, "step": 40, "benchmarks": {
        c: {"avg_at_k": 99.0} for c in CELLS}})  # fmt: skip
    capsys.readouterr()
    assert page_main([*argv, "--check"]) == 1
    assert "eval/opsd/factorial/seed0/step40/summary.json: sha256" in capsys.readouterr().out


