"""The audit's parts, each on a small results tree written here with real provenance records:
``chain`` follows a cell to its seeds' checkpoints, ``verify`` names a file changed since its
reader recorded it, ``report`` audits the tables it is given, ``cli`` answers as documented.
(The whole chain down to adapters and runs is audited on a real run in tests/workflow.)"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dashrepro.provenance.audit.chain import AuditError, cell_chain, render_chain
from dashrepro.provenance.audit.cli import run_cli
from dashrepro.provenance.audit.report import audit_report, score_cells
from dashrepro.provenance.audit.verify import check_hashes
from dashrepro.provenance.records import write_provenance

RESULTS = "results/x"


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


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


def test_the_chain_follows_each_seed_to_its_checkpoints(tree):
    chain = cell_chain(tree, RESULTS, "t", "dash", "s", "average")
    assert chain.value == 75.0 and chain.declared_seeds == [0] and len(chain.seeds) == 1
    seed = chain.seeds[0]
    # The step of each checkpoint comes from the selection job's params, beside its inputs.
    assert seed.selected_step == 4 and sorted(seed.samples) == [2, 4]
    assert seed.samples[4].endswith("step4/samples.parquet")
    text = render_chain(tree, chain)
    assert "seed 0: results/x/selection/dash/s/seed0.json" in text
    assert "every candidate's mean Avg@k: 2: 25.00, 4: 75.00 *" in text
    assert "training run: no provenance record" in text  # what is missing is said, not skipped
    copied = cell_chain(tree, RESULTS, "t", "base", "s", "average")
    assert copied.copied_from.startswith("Zhao et al.: copied") and not copied.seeds


def test_the_chain_names_what_it_cannot_follow(tree):
    with pytest.raises(AuditError, match=r"no table 'u' .*\['t'\]"):
        cell_chain(tree, RESULTS, "u", "dash", "s", "average")
    with pytest.raises(AuditError, match="no cell"):
        cell_chain(tree, RESULTS, "t", "opsd", "s", "average")
    record = tree / RESULTS / "tables/t.csv.provenance.json"
    data = json.loads(record.read_text())
    del data["params"]["context"]["input_keys"]
    record.write_text(json.dumps(data))
    with pytest.raises(AuditError, match="older version: rerun the table"):
        cell_chain(tree, RESULTS, "t", "dash", "s", "average")


def test_verify_names_an_input_changed_since_its_reader_recorded_it(tree):
    chain = cell_chain(tree, RESULTS, "t", "dash", "s", "average")
    assert not [f for f in check_hashes(tree, chain) if f.kind == "changed_input"]
    samples = tree / chain.seeds[0].samples[2]
    pd.read_parquet(samples).assign(correct=True).to_parquet(samples)
    changed = [f for f in check_hashes(tree, chain) if f.kind == "changed_input"]
    assert [f.path for f in changed] == [chain.seeds[0].samples[2]]


def test_the_report_audits_the_tables_it_is_given(tree):
    write(tree / RESULTS / "tables/stale.csv", "table,row,scale,column,value\n")
    assert {c[0] for c in score_cells(tree, RESULTS)} == {"t"}  # a table without a record: skipped
    assert score_cells(tree, RESULTS, tables=["t"]) == [
        ("t", "dash", "s", "average"),
        ("t", "base", "s", "average"),
    ]
    # A table of copied rows only: its cells need no graded samples to be audited.
    copied = tree / RESULTS / "tables/c.csv"
    frame = pd.read_csv(tree / RESULTS / "tables/t.csv")
    write(copied, frame[frame["row"] == "base"].assign(table="c").to_csv(index=False))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        write_provenance(copied, "table", params={"spec": {"kind": "method_scores"}})
    rows, markdown, page = audit_report(tree, RESULTS, tables=["c"])
    assert [(r["table"], r["row"], r["status"], r["source"]) for r in rows] == [
        ("c", "base", "ok", "Zhao et al.")
    ]
    assert markdown.startswith("# Audit of every table cell") and "1 cells, 0 flagged" in markdown
    assert "| c | base | s | average | 37.10 |" in markdown and "<table" in page


def test_the_command_line(tree, capsys):
    with pytest.raises(SystemExit) as stop:
        run_cli(["t", "dash", "--root", str(tree), "--results", RESULTS])
    assert stop.value.code == 2  # a cell is four words
    assert run_cli(["u", "dash", "s", "average", "--root", str(tree), "--results", RESULTS]) == 2
    assert "no table 'u'" in capsys.readouterr().out
    status = run_cli(
        ["t", "base", "s", "average", "--root", str(tree), "--results", RESULTS, "--verify"]
    )
    assert status == 0 and "nothing of ours to check" in capsys.readouterr().out


def test_a_regrade_tells_verdicts_at_a_limit_from_real_disagreements(tmp_path):
    """A verdict reached at a time limit (or by a grader error) may change with the machine's
    load: the regrade reports it as regrade_at_limit, apart from regrade_mismatch."""
    import pandas as pd

    from dashrepro.evaluation.grade import grade_samples
    from dashrepro.evaluation.responses import RESPONSE_COLUMNS
    from dashrepro.io import write_parquet
    from dashrepro.provenance.audit.verify import _regrade

    rows = [{"checkpoint": "m/s/seed0/step2", "benchmark": "b", "problem_id": f"p{i}",
             "sample_index": 0, "seed": 1, "prompt_role": "student",
             "response": f"\\boxed{{{i}}}", "n_tokens": 3, "finish_reason": "stop",
             "gold": str(i)} for i in range(3)]  # fmt: skip
    responses = pd.DataFrame(rows, columns=RESPONSE_COLUMNS)
    write_parquet(tmp_path / "responses.parquet", responses)
    samples = grade_samples(responses, grading_workers=1)
    assert samples["correct"].all()
    grading = {"grading_workers": 1, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0,
               "grading_memory_gib": 4.0}  # fmt: skip
    assert _regrade(tmp_path, "responses.parquet", "samples.parquet", samples, grading) == []
    samples.loc[0, "correct"] = False  # a disagreement
    samples.loc[1, ["correct", "grading_path"]] = [False, "timeout"]  # graded at the limit
    findings = _regrade(tmp_path, "responses.parquet", "samples.parquet", samples, grading)
    assert [f.kind for f in findings] == ["regrade_mismatch", "regrade_at_limit"]
    assert "'p0'" in findings[0].detail and "'p1'" in findings[1].detail
    assert findings[0].detail.startswith("1 grades") and findings[1].detail.startswith("1 grades")


def test_a_regrade_uses_the_configs_grading_settings_and_names_a_record_that_differs(tmp_path):
    """The settings come from the experiment's config; a samples record that says the samples
    were graded with other settings (records can be edited) is a finding of its own."""
    import pandas as pd

    from dashrepro.evaluation.grade import grade_samples
    from dashrepro.evaluation.responses import RESPONSE_COLUMNS
    from dashrepro.io import write_json, write_parquet
    from dashrepro.provenance.audit.verify import _regrade
    from dashrepro.provenance.records import record_path

    row = {"checkpoint": "m/s/seed0/step2", "benchmark": "b", "problem_id": "p0",
           "sample_index": 0, "seed": 1, "prompt_role": "student", "response": "\\boxed{1}",
           "n_tokens": 3, "finish_reason": "stop", "gold": "1"}  # fmt: skip
    responses = pd.DataFrame([row], columns=RESPONSE_COLUMNS)
    write_parquet(tmp_path / "responses.parquet", responses)
    samples = grade_samples(responses, grading_workers=1)
    config = {"grading_workers": 1, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0,
              "grading_memory_gib": 4.0}  # fmt: skip
    edited = {**config, "grading_timeout_s": 0.001}
    write_json(record_path(tmp_path / "samples.parquet"), {"params": {"grading": edited}})
    findings = _regrade(tmp_path, "responses.parquet", "samples.parquet", samples, config)
    assert [f.kind for f in findings] == ["changed_grading"]
    assert "'grading_timeout_s': 0.001" in findings[0].detail
