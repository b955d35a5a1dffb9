"""Rule grade_checkpoint: grade stored responses and summarise Avg@k (no generation)."""

from _bootstrap import setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.evaluation import grade_and_summarize
    from dashrepro.io import read_parquet, write_json, write_parquet
    from dashrepro.provenance import write_provenance

    wc = snakemake.wildcards
    responses = read_parquet(snakemake.input.responses)
    samples, summary = grade_and_summarize(
        responses, snakemake.params.benchmarks, snakemake.params.grading
    )
    summary.update(method=wc.method, scale=wc.scale, seed=int(wc.seed), step=int(wc.step))
    params = {"grading": snakemake.params.grading}
    write_parquet(snakemake.output.samples, samples)
    write_provenance(
        snakemake.output.samples,
        "grade_checkpoint",
        inputs={"responses": snakemake.input.responses},
        params=params,
    )
    write_json(snakemake.output.summary, summary)
    write_provenance(
        snakemake.output.summary,
        "grade_checkpoint",
        inputs={"samples": snakemake.output.samples},
        params=params,
    )
    log.info("%s: mean Avg@k %.2f", summary["checkpoint"], summary["mean_over_benchmarks"])


if __name__ == "__main__":
    main(snakemake)
