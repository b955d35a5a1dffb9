"""premise.pilot: the checkpoint the study evaluates and the seeds it needs, from one method's
evaluated checkpoints (synthetic summaries in the results layout)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

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
    assert main(["fam", "--directory", str(tmp_path)]) == 3  # named, not a traceback
    assert "no evaluated checkpoint of 'opsd'" in capsys.readouterr().out
    write_run(tmp_path)
    out = tmp_path / "pilot.json"
    assert main(["fam", "--directory", str(tmp_path), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["step"] == 40
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert main(["fam", "--directory", str(tmp_path)]) == 0  # no --out: the record on stdout
    assert json.loads(capsys.readouterr().out)["method"] == "opsd"
    needed = json.loads(out.read_text())["seeds_needed"]
    assert json.loads(out.read_text())["study_seeds"] == list(range(needed))
    assert main(["fam", "--directory", str(tmp_path), "--out", str(out), "--most-seeds", "2"]) == 0
    held = json.loads(out.read_text())
    assert held["study_seeds"] == [0, 1] and held["detectable_effect"] > held["effect"]


def probe_tokens(scale: float) -> pd.DataFrame:
    """A probe's signal r: exponential, ``scale`` nats on average, 20 rollouts of 30 tokens."""
    rng = np.random.default_rng(5)
    rows = [{"rollout": b, "position": t, "r": scale * rng.exponential()}
            for b in range(20) for t in range(30)]  # fmt: skip
    return pd.DataFrame(rows)


def test_the_control_and_kappa_come_from_the_probes_gates_and_the_record_names_its_inputs(
    tmp_path,
):
    from dashrepro.io import write_parquet
    from dashrepro.premise.pilot import PAPER_KAPPA, probe_choices
    from dashrepro.premise.study import gate_iqr

    flat = probe_tokens(1e-6)  # no κ on the grid spreads these gates: κ stays the paper's
    assert probe_choices(flat)["kappa_for_gate_spread"] is None
    assert (
        probe_choices(flat)["kappa"] == PAPER_KAPPA and probe_choices(flat)["fixed_lambda"] == 0.5
    )
    spread = probe_choices(probe_tokens(0.01))
    assert spread["kappa"] == spread["kappa_for_gate_spread"] > PAPER_KAPPA
    assert gate_iqr(probe_tokens(0.01), spread["kappa"]) >= 0.25
    # Gates that spread at the paper's κ keep it, though a smaller κ would spread them too.
    wide = probe_choices(probe_tokens(1.0))
    assert wide["gate_iqr_at_paper_kappa"] >= 0.25 and wide["kappa"] == PAPER_KAPPA
    assert wide["kappa_for_gate_spread"] is None
    write_run(tmp_path)
    tokens = tmp_path / layout.Results("fam").premise_file(layout.PREMISE_TOKENS, "tiny")
    tokens.parent.mkdir(parents=True)
    write_parquet(tokens, probe_tokens(1.0))
    out = tmp_path / "pilot.json"
    assert main(["fam", "--directory", str(tmp_path), "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["fixed_lambda"] == probe_choices(probe_tokens(1.0))["fixed_lambda"]
    assert (
        len(record["inputs"]) == 6 * 2 + 1 and str(tokens.relative_to(tmp_path)) in record["inputs"]
    )


def test_check_holds_the_record_to_its_inputs_and_an_empty_experiment_is_named(tmp_path, capsys):
    write_run(tmp_path)
    out = tmp_path / "pilot.json"
    argv = ["fam", "--directory", str(tmp_path), "--out", str(out), "--most-seeds", "4"]
    assert main(argv) == 0 and json.loads(out.read_text())["study_seeds"] == [0, 1, 2, 3]
    assert main([*argv, "--check"]) == 0
    assert main([*argv[:-1], "5", "--check"]) == 1  # other registered values: named as differing
    path = tmp_path / layout.Results("fam").checkpoint_file(layout.SUMMARY, "opsd", "tiny", 2, 20)
    path.write_text(path.read_text().replace('"step": 20', '"step": 20 '))
    capsys.readouterr()
    assert main([*argv, "--check"]) == 1
    assert "eval/opsd/tiny/seed2/step20/summary.json: sha256" in capsys.readouterr().out
    assert main(["nothing", "--directory", str(tmp_path), "--out", str(out), "--check"]) == 3
    assert "no evaluated checkpoint of 'opsd'" in capsys.readouterr().out
