"""Tests of dashrepro.training.run_state: the records a run keeps, and what a resume keeps of
them."""

import pandas as pd

from dashrepro.training.run_state import RunRecords, TrainingState
from dashrepro.training.teacher import CONTEXT_COLUMNS


def test_empty_records_write_no_traces_and_the_context_columns_alone():
    records = TrainingState(policy=None, optimizer=None, scheduler=None).records
    assert records.token_traces() is None
    assert list(records.teacher_contexts().columns) == list(CONTEXT_COLUMNS)
    assert records.metrics().empty


def test_a_resume_keeps_the_records_up_to_its_step_only():
    metrics = pd.DataFrame({"step": [1, 2, 3], "loss": [3.0, 2.0, 1.0]})
    traces = pd.DataFrame({"step": [1, 1, 3], "r": [0.1, 0.2, 0.3]})
    contexts = pd.DataFrame({"step": [1, 3], "context": ["a", "b"]})
    records = RunRecords.up_to(2, metrics, traces, contexts)
    assert records.rows == [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}]
    assert list(records.token_traces()["r"]) == [0.1, 0.2]
    assert list(records.teacher_contexts()["context"]) == ["a"]
    nothing = RunRecords.up_to(2, None, None, None)  # a state written before any record
    assert nothing == RunRecords()
