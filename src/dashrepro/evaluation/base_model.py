"""The base student's and the privileged teacher's sampled accuracy, before any training.

Distillation only has something to teach if the teacher (same weights, reference solution in
context, no adapter) beats the student. The student is sampled on every benchmark; the teacher,
which needs a reference solution in its prompt, on the benchmarks that have them (real
benchmarks ship answers only), in every view a configured method reads (``teacher`` is the
protocol's message; ``teacher:<view>`` another layout, e.g. AVSD's answer-only view).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.evaluation.grade import grade_and_summarize
from dashrepro.evaluation.responses import (
    SAMPLE_COLUMNS,
    generate_policy_responses,
    has_reference_solutions,
    make_generation_sampler,
)
from dashrepro.io import read_parquet
from dashrepro.settings import GenerationSettings, GradingSettings


def sample_roles(
    base_dir: str | Path,
    benchmarks: Mapping[str, Sequence[str]],
    bench_files: Mapping[str, str | Path],
    generation: GenerationSettings | Mapping,
    protocol: TeacherProtocol,
    timing: dict | None = None,
) -> dict[str, pd.DataFrame]:
    """The responses of each role (``benchmarks``: role -> the benchmarks it is sampled on),
    from one sampler (one vLLM engine): every role samples the base model. Every role is
    sampled before any is graded: an idle vLLM CPU engine keeps its cores busy, which would
    starve the grading workers. ``timing``: receives the seconds spent sampling."""
    responses = {}
    sampler = make_generation_sampler(base_dir, generation)
    try:
        for role, names in benchmarks.items():
            if names:
                responses[role] = generate_policy_responses(
                    base_model_dir=base_dir, adapter_dir=None,
                    benchmark_files={name: bench_files[name] for name in names},
                    generation=generation, checkpoint="base", prompt_role=role,
                    protocol=protocol, sampler=sampler, timing=timing,
                )  # fmt: skip
    finally:
        if hasattr(sampler, "shutdown"):  # a vLLM engine's processes
            sampler.shutdown()
    return responses


def evaluate_base_model(
    base_dir: str | Path,
    bench_files: Mapping[str, str | Path],
    teacher_views: Sequence[str],
    generation: GenerationSettings | Mapping,
    grading: GradingSettings | Mapping,
    protocol: TeacherProtocol,
    log: Callable[[str], None],
    timing: dict | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(student samples, teacher samples of every view, the accuracy record). ``timing``:
    receives the seconds spent sampling and grading (kept out of the files: they are data)."""
    with_solutions = [
        name for name, path in bench_files.items() if has_reference_solutions(read_parquet(path))
    ]
    views = [view for view in teacher_views if view != "full"]
    roles = {"student": list(bench_files), "teacher": with_solutions}
    roles.update({f"teacher:{view}": with_solutions for view in views})
    responses = sample_roles(base_dir, roles, bench_files, generation, protocol, timing)
    record = {"teacher_benchmarks": with_solutions, "teacher_views": {}}
    frames = {"student": [], "teacher": []}
    for role, names in roles.items():
        summary = None
        if names:
            samples, summary = grade_and_summarize(responses[role], names, grading, timing=timing)
            frames["student" if role == "student" else "teacher"].append(samples)
            log(f"{role}: mean Avg@k {summary['mean_over_benchmarks']:.2f} "
                f"{ {b: round(v['avg_at_k'], 2) for b, v in summary['benchmarks'].items()} }")  # fmt: skip
        else:
            log(f"{role}: no benchmark has reference solutions; not evaluated")
        if role.startswith("teacher:"):
            record["teacher_views"][role.split(":", 1)[1]] = summary
        else:
            record[role] = summary
    if record["teacher"] is not None:
        # Over the benchmarks both were measured on.
        student = [record["student"]["benchmarks"][name]["avg_at_k"] for name in with_solutions]
        record["teacher_minus_student"] = record["teacher"]["mean_over_benchmarks"] - sum(
            student
        ) / len(student)
    student_samples, teacher_samples = (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SAMPLE_COLUMNS)
        for parts in (frames["student"], frames["teacher"])
    )
    return student_samples, teacher_samples, record
