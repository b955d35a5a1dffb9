"""Tests for ``dashrepro.provenance.audit.verify``: it names a file changed since its reader
recorded it, and the regrade tells verdicts at a limit from real disagreements."""

from __future__ import annotations

import pandas as pd

from dashrepro.provenance.audit.chain import cell_chain
from dashrepro.provenance.audit.verify import check_hashes

from .audit_helpers import RESULTS


def test_verify_names_an_input_changed_since_its_reader_recorded_it(tree):
    chain = cell_chain(tree, RESULTS, "t", "dash", "s", "average")
    assert not [f for f in check_hashes(tree, chain) if f.kind == "changed_input"]
    samples = tree / chain.seeds[0].samples[2]
    pd.read_parquet(samples).assign(correct=True).to_parquet(samples)
    changed = [f for f in check_hashes(tree, chain) if f.kind == "changed_input"]
    assert [f.path for f in changed] == [chain.seeds[0].samples[2]]


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
