"""Rule grade_checkpoint: grade stored responses and summarise Avg@k (no generation)."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.evaluation.grade import grade_and_summarize
    from dashrepro.io import read_parquet, write_json, write_parquet
    from dashrepro.provenance.records import code_version
    from dashrepro.tracking import TrackedRun, checkpoint_scores, send_checkpoint_values

    wc = snakemake.wildcards
    responses = read_parquet(snakemake.input.responses)
    timing = {}  # the grader's seconds: into the provenance record, not samples.parquet
    samples, summary = grade_and_summarize(
        responses,
        snakemake.params.benchmarks,
        snakemake.params.grading,
        validation=snakemake.params.validation,
        timing=timing,
    )
    summary.update(method=wc.method, scale=wc.scale, seed=int(wc.seed), step=int(wc.step))
    write_parquet(snakemake.output.samples, samples)
    write_json(snakemake.output.summary, summary)
    log.info("%s: mean Avg@k %.2f", summary["checkpoint"], summary["mean_over_benchmarks"])
    # The scores into the run's tracker run, at the checkpoint's step (the config's trackers,
    # not a param: changing them regrades nothing).
    tracked = TrackedRun.from_config(snakemake.config, wc.method, wc.scale, wc.seed, code_version())
    send_checkpoint_values(tracked, checkpoint_scores(summary), int(wc.step), "grade", log.info)
    return timing


if __name__ == "__main__":
    run(main, snakemake)
