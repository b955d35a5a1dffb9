"""Rule prepare_benchmark: one synthetic or real benchmark, normalised, of exactly its size."""

from _bootstrap import setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.datasets import prepare_dataset
    from dashrepro.io import write_json, write_parquet
    from dashrepro.provenance import write_provenance

    source = snakemake.input.get("source")
    frame, report = prepare_dataset(
        snakemake.params.dataset,
        source_file=source,
        expected_size=snakemake.params.n_problems,
        name=snakemake.wildcards.bench,
    )
    write_parquet(snakemake.output.benchmark, frame)
    write_json(snakemake.output.report, report)
    for output in (snakemake.output.benchmark, snakemake.output.report):
        write_provenance(
            output,
            "prepare_benchmark",
            inputs={"source": source} if source else {},
            params={"dataset": snakemake.params.dataset, "n_problems": snakemake.params.n_problems},
        )
    log.info("%s", report["summary"])


if __name__ == "__main__":
    main(snakemake)
