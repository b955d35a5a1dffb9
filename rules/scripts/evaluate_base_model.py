"""Rule evaluate_base_model: the base student's and the privileged teacher's sampled accuracy.

Distillation only has something to teach if the teacher (same weights, reference solution in
context, no adapter) beats the student; both Avg@k values are recorded in ``accuracy.json``,
with the teacher's in every other view a configured method reads (``teacher_views``; the
samples of every view in ``teacher_samples.parquet``, told apart by ``prompt_role``).
"""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    import pandas as pd

    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.evaluation.grade import grade_and_summarize
    from dashrepro.evaluation.responses import (
        SAMPLE_COLUMNS,
        generate_policy_responses,
        has_reference_solutions,
        make_generation_sampler,
    )
    from dashrepro.io import read_parquet, write_json, write_parquet

    base_dir = snakemake.params.base_model
    bench_files = dict(zip(snakemake.params.benchmarks, snakemake.input.benchmarks, strict=True))
    protocol = TeacherProtocol.from_config(snakemake.params.protocol)
    record = {"scale": snakemake.wildcards.scale}
    # The teacher needs a reference solution in its prompt. Real benchmarks ship answers only, so
    # the teacher is measured on the benchmarks that have solutions (the synthetic ones).
    with_solutions = [
        name for name, path in bench_files.items() if has_reference_solutions(read_parquet(path))
    ]
    record["teacher_benchmarks"] = with_solutions
    # The student, then the teacher in each view a configured method reads (``teacher`` is the
    # protocol's message; ``teacher:<view>`` another layout, e.g. AVSD's answer-only view), so a
    # teacher that cannot read its context is visible before any training.
    views = [view for view in snakemake.params.teacher_views if view != "full"]
    roles = ["student", "teacher", *(f"teacher:{view}" for view in views)]
    frames = {"student": [], "teacher": []}
    record["teacher_views"] = {}
    # One sampler (one vLLM engine) for every role: all of them sample the base model. Every
    # role is sampled before any is graded: an idle vLLM CPU engine keeps its cores busy, which
    # would starve the grading workers.
    responses = {}
    sampler = make_generation_sampler(base_dir, snakemake.params.generation)
    try:
        for role in roles:
            names = snakemake.params.benchmarks if role == "student" else with_solutions
            if names:
                responses[role] = generate_policy_responses(
                    base_model_dir=base_dir,
                    adapter_dir=None,
                    benchmark_files={name: bench_files[name] for name in names},
                    generation=snakemake.params.generation,
                    checkpoint="base",
                    prompt_role=role,
                    protocol=protocol,
                    sampler=sampler,
                )
    finally:
        if hasattr(sampler, "shutdown"):  # a vLLM engine's processes
            sampler.shutdown()
    for role in roles:
        names = snakemake.params.benchmarks if role == "student" else with_solutions
        summary = None
        if names:
            samples, summary = grade_and_summarize(responses[role], names, snakemake.params.grading)
            frames["student" if role == "student" else "teacher"].append(samples)
            log.info(
                "%s: mean Avg@k %.2f %s",
                role,
                summary["mean_over_benchmarks"],
                {b: round(v["avg_at_k"], 2) for b, v in summary["benchmarks"].items()},
            )
        else:
            log.info("%s: no benchmark has reference solutions; not evaluated", role)
        if role.startswith("teacher:"):
            record["teacher_views"][role.split(":", 1)[1]] = summary
        else:
            record[role] = summary
    for role, out in (
        ("student", snakemake.output.student_samples),
        ("teacher", snakemake.output.teacher_samples),
    ):
        parts = frames[role]
        write_parquet(
            out,
            pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SAMPLE_COLUMNS),
        )
    if record["teacher"] is not None:
        # Over the benchmarks both were measured on.
        student_means = [
            record["student"]["benchmarks"][name]["avg_at_k"] for name in with_solutions
        ]
        record["teacher_minus_student"] = record["teacher"]["mean_over_benchmarks"] - sum(
            student_means
        ) / len(student_means)
    write_json(snakemake.output.accuracy, record)


if __name__ == "__main__":
    run(main, snakemake)
