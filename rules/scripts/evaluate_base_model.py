"""Rule evaluate_base_model: the base student's and the privileged teacher's sampled accuracy
(``dashrepro.evaluation.base_model``), in ``accuracy.json``, with every view's samples."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.evaluation.base_model import evaluate_base_model
    from dashrepro.io import write_json, write_parquet

    params = snakemake.params
    timing = {}  # measured seconds: into the provenance record, not the data files
    student, teacher, record = evaluate_base_model(
        params.base_model,
        dict(zip(params.benchmarks, snakemake.input.benchmarks, strict=True)),
        params.teacher_views,
        params.generation,
        params.grading,
        TeacherProtocol.from_config(params.protocol),
        log.info,
        timing=timing,
    )
    write_parquet(snakemake.output.student_samples, student)
    write_parquet(snakemake.output.teacher_samples, teacher)
    write_json(snakemake.output.accuracy, {"scale": snakemake.wildcards.scale, **record})
    return timing


if __name__ == "__main__":
    run(main, snakemake)
