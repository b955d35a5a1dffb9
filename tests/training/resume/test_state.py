"""Tests of dashrepro.training.resume._state: the records a run keeps, their files written and
read back by the records alone, and what a resume keeps of them."""

import pandas as pd

from dashrepro.layout import ROLLOUT_WEIGHTS, TEACHER_CONTEXTS, TOKEN_TRACES, TRAIN_METRICS
from dashrepro.training.metrics import ROLLOUT_COLUMNS
from dashrepro.training.resume import RunRecords, TrainingState
from dashrepro.training.teacher import CONTEXT_COLUMNS


def test_empty_records_write_no_traces_and_the_context_columns_alone():
    records = TrainingState(policy=None, optimizer=None, scheduler=None).records
    assert records.token_traces() is None
    assert list(records.teacher_contexts().columns) == list(CONTEXT_COLUMNS)
    assert list(records.rollout_weights().columns) == list(ROLLOUT_COLUMNS)
    assert records.metrics().empty


def test_a_resume_keeps_the_records_up_to_its_step_only():
    metrics = pd.DataFrame({"step": [1, 2, 3], "loss": [3.0, 2.0, 1.0]})
    traces = pd.DataFrame({"step": [1, 1, 3], "r": [0.1, 0.2, 0.3]})
    contexts = pd.DataFrame({"step": [1, 3], "context": ["a", "b"]})
    weights = pd.DataFrame({"step": [2, 3], "weight_total": [1.5, 2.5]})
    records = RunRecords.up_to(2, metrics, traces, contexts, weights)
    assert records.rows == [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}]
    assert list(records.token_traces()["r"]) == [0.1, 0.2]
    assert list(records.teacher_contexts()["context"]) == ["a"]
    assert list(records.rollout_weights()["weight_total"]) == [1.5]
    nothing = RunRecords.up_to(2, None, None, None)  # a state written before any record
    assert nothing == RunRecords()


def test_the_records_write_their_files_and_read_back_the_steps_asked_for(tmp_path):
    records = RunRecords()
    for step in (1, 2, 3):
        records.rows.append({"step": step, "loss": float(step)})
        records.traces.append(pd.DataFrame({"step": [step], "r": [0.5 * step]}))
        records.contexts.append(pd.DataFrame({"step": [step], "context": [f"c{step}"]}))
        records.weights.append(pd.DataFrame({"step": [step], "weight_total": [step + 0.5]}))
    records.write(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([TRAIN_METRICS, TOKEN_TRACES, TEACHER_CONTEXTS, ROLLOUT_WEIGHTS])
    back = RunRecords.read(tmp_path, 2)
    assert [row["step"] for row in back.rows] == [1, 2]
    assert list(back.token_traces()["r"]) == [0.5, 1.0]
    assert list(back.teacher_contexts()["context"]) == ["c1", "c2"]
    assert list(back.rollout_weights()["weight_total"]) == [1.5, 2.5]
    # What write wrote of all three steps reads back whole.
    whole = RunRecords.read(tmp_path, 3)
    pd.testing.assert_frame_equal(whole.metrics(), records.metrics())


def test_a_run_without_traces_writes_no_trace_file_and_reads_none(tmp_path):
    records = RunRecords(rows=[{"step": 1, "loss": 1.0}])
    records.write(tmp_path)
    assert not (tmp_path / TOKEN_TRACES).exists()
    back = RunRecords.read(tmp_path, 1)
    assert back.token_traces() is None and back.teacher_contexts().empty
    assert RunRecords.read(tmp_path / "missing", 5) == RunRecords()
