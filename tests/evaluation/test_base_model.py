"""Tests of dashrepro.evaluation.base_model: which roles sample which benchmarks from one shared
sampler, and the accuracy record (student, teacher, teacher views, their gap), with generation
stubbed and the real grader on hand-written responses."""

import pandas as pd
import pytest

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.evaluation.base_model import evaluate_base_model, sample_roles
from dashrepro.evaluation.responses import RESPONSE_COLUMNS, SAMPLE_COLUMNS
from dashrepro.io import UnreadableFileError

GRADING = {"grading_workers": 0, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0,
           "grading_memory_gib": 4.0}  # fmt: skip
GENERATION = {"samples_per_problem": 2}
PROTOCOL = TeacherProtocol("{problem} {reference_solution}", "analyse", "go on")

#: Which of a problem's two samples each role answers correctly, per benchmark: the student
#: gets half of ``syn`` and all of ``real`` right; the teacher all of ``syn``; the answer-only
#: view only ``syn``'s first problem.
CORRECT = {
    ("student", "syn"): lambda problem, sample: sample == 0,
    ("student", "real"): lambda problem, sample: True,
    ("teacher", "syn"): lambda problem, sample: True,
    ("teacher:answer_only", "syn"): lambda problem, sample: problem == "p0",
}


class FakeSampler:
    def __init__(self):
        self.shutdowns = 0

    def shutdown(self):
        self.shutdowns += 1


class FakeGeneration:
    """Stands in for make_generation_sampler and generate_policy_responses: rows as the
    generation stage writes them, each answer boxed right or wrong as CORRECT says."""

    def __init__(self, monkeypatch, fail_on: str | None = None, sampler=None):
        self.made, self.calls, self.fail_on = [], [], fail_on
        self.sampler = FakeSampler() if sampler is None else sampler
        monkeypatch.setattr("dashrepro.evaluation.base_model.make_generation_sampler", self.make)
        monkeypatch.setattr(
            "dashrepro.evaluation.base_model.generate_policy_responses", self.generate
        )

    def make(self, base_dir, generation):
        self.made.append((base_dir, generation))
        return self.sampler

    def generate(self, **kwargs):
        self.calls.append(kwargs)
        role = kwargs["prompt_role"]
        if role == self.fail_on:
            raise RuntimeError(f"{role} failed")
        rows = []
        for bench, path in kwargs["benchmark_files"].items():
            for problem in pd.read_parquet(path).itertuples():
                for sample in range(kwargs["generation"]["samples_per_problem"]):
                    right = CORRECT[(role, bench)](problem.problem_id, sample)
                    text = f"\\boxed{{{problem.answer if right else 'wrong'}}}"
                    rows.append(
                        {"checkpoint": kwargs["checkpoint"], "benchmark": bench,
                         "problem_id": problem.problem_id, "sample_index": sample, "seed": 0,
                         "prompt_role": role, "response": text, "n_tokens": 3,
                         "finish_reason": "stop", "gold": problem.answer}
                    )  # fmt: skip
        return pd.DataFrame(rows, columns=RESPONSE_COLUMNS)


@pytest.fixture
def bench_files(tmp_path):
    """``syn``: two problems with reference solutions; ``real``: one with none (answers only)."""
    syn = pd.DataFrame({"problem_id": ["p0", "p1"], "problem": ["2+3?", "3+4?"],
                        "answer": ["5", "7"], "reference_solution": ["2+3=5", "3+4=7"]})  # fmt: skip
    real = pd.DataFrame({"problem_id": ["r0"], "problem": ["1+2?"], "answer": ["3"],
                         "reference_solution": [None]})  # fmt: skip
    files = {"syn": tmp_path / "syn.parquet", "real": tmp_path / "real.parquet"}
    syn.to_parquet(files["syn"])
    real.to_parquet(files["real"])
    return files


def test_every_role_samples_its_benchmarks_from_one_sampler_shut_down_once(
    monkeypatch, bench_files
):
    fake = FakeGeneration(monkeypatch)
    roles = {"student": ["syn", "real"], "teacher": ["syn"], "teacher:answer_only": []}
    responses = sample_roles("base", roles, bench_files, GENERATION, PROTOCOL)
    assert fake.made == [("base", GENERATION)]
    assert fake.sampler.shutdowns == 1
    assert set(responses) == {"student", "teacher"}  # a role without benchmarks is skipped
    assert [c["prompt_role"] for c in fake.calls] == ["student", "teacher"]
    assert all(c["sampler"] is fake.sampler for c in fake.calls)
    assert all(c["adapter_dir"] is None and c["checkpoint"] == "base" for c in fake.calls)
    assert all(c["protocol"] is PROTOCOL for c in fake.calls)
    assert fake.calls[1]["benchmark_files"] == {"syn": bench_files["syn"]}
    assert len(responses["student"]) == 6 and len(responses["teacher"]) == 4


def test_the_sampler_is_shut_down_when_a_role_fails(monkeypatch, bench_files):
    fake = FakeGeneration(monkeypatch, fail_on="teacher")
    with pytest.raises(RuntimeError, match="teacher failed"):
        sample_roles("base", {"student": ["syn"], "teacher": ["syn"]}, bench_files, GENERATION,
                     PROTOCOL)  # fmt: skip
    assert fake.sampler.shutdowns == 1


def test_a_sampler_without_shutdown_is_left_as_it_is(monkeypatch, bench_files):
    FakeGeneration(monkeypatch, sampler=object())
    responses = sample_roles("base", {"student": ["real"]}, bench_files, GENERATION, PROTOCOL)
    assert list(responses["student"]["benchmark"]) == ["real", "real"]


def test_the_record_has_each_roles_accuracy_and_the_gap_on_the_shared_benchmarks(
    monkeypatch, bench_files
):
    fake = FakeGeneration(monkeypatch)
    lines = []
    student, teacher, record = evaluate_base_model(
        "base", bench_files, ["full", "answer_only"], GENERATION, GRADING, PROTOCOL, lines.append
    )
    # "full" is the teacher role itself; only the other views get roles of their own.
    assert [c["prompt_role"] for c in fake.calls] == ["student", "teacher", "teacher:answer_only"]
    assert record["teacher_benchmarks"] == ["syn"]
    assert record["student"]["benchmarks"]["syn"]["avg_at_k"] == pytest.approx(50.0)
    assert record["student"]["benchmarks"]["real"]["avg_at_k"] == pytest.approx(100.0)
    assert record["student"]["mean_over_benchmarks"] == pytest.approx(75.0)
    assert list(record["teacher"]["benchmarks"]) == ["syn"]
    assert record["teacher"]["mean_over_benchmarks"] == pytest.approx(100.0)
    assert set(record["teacher_views"]) == {"answer_only"}
    assert record["teacher_views"]["answer_only"]["mean_over_benchmarks"] == pytest.approx(50.0)
    # Teacher 100 against the student's 50 on syn (not its 75 over both benchmarks).
    assert record["teacher_minus_student"] == pytest.approx(50.0)
    assert list(student.columns) == SAMPLE_COLUMNS and list(teacher.columns) == SAMPLE_COLUMNS
    assert len(student) == 6 and set(student["prompt_role"]) == {"student"}
    assert student["correct"].sum() == 4  # syn: 2 of 4, real: 2 of 2
    assert len(teacher) == 8
    assert set(teacher["prompt_role"]) == {"teacher", "teacher:answer_only"}
    assert lines[0] == "student: mean Avg@k 75.00 {'syn': 50.0, 'real': 100.0}"
    assert lines[1] == "teacher: mean Avg@k 100.00 {'syn': 100.0}"
    assert lines[2] == "teacher:answer_only: mean Avg@k 50.00 {'syn': 50.0}"


def test_without_reference_solutions_only_the_student_is_evaluated(monkeypatch, bench_files):
    fake = FakeGeneration(monkeypatch)
    lines = []
    student, teacher, record = evaluate_base_model(
        "base", {"real": bench_files["real"]}, ["answer_only"], GENERATION, GRADING, PROTOCOL,
        lines.append,
    )  # fmt: skip
    assert [c["prompt_role"] for c in fake.calls] == ["student"]
    assert record["teacher_benchmarks"] == []
    assert record["teacher"] is None and record["teacher_views"] == {"answer_only": None}
    assert "teacher_minus_student" not in record
    assert record["student"]["mean_over_benchmarks"] == pytest.approx(100.0)
    assert teacher.empty and list(teacher.columns) == SAMPLE_COLUMNS
    assert len(student) == 2
    assert lines[1:] == [
        "teacher: no benchmark has reference solutions; not evaluated",
        "teacher:answer_only: no benchmark has reference solutions; not evaluated",
    ]


def test_a_missing_benchmark_file_is_named_before_any_sampler_starts(
    monkeypatch, bench_files, tmp_path
):
    fake = FakeGeneration(monkeypatch)
    missing = tmp_path / "gone.parquet"
    with pytest.raises(UnreadableFileError, match="gone.parquet: no such file"):
        evaluate_base_model(
            "base", {**bench_files, "gone": missing}, [], GENERATION, GRADING, PROTOCOL, print
        )
    assert fake.made == []
