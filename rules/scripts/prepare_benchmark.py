"""Rule prepare_benchmark: one synthetic or real benchmark, normalised, of exactly its size."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.data.datasets import prepare_dataset
    from dashrepro.io import write_json, write_parquet

    source = snakemake.input.get("source")
    frame, report = prepare_dataset(
        snakemake.params.dataset,
        source_file=source,
        expected_size=snakemake.params.n_problems,
        name=snakemake.wildcards.bench,
    )
    write_parquet(snakemake.output.benchmark, frame)
    write_json(snakemake.output.report, report)
    log.info("%s", report["summary"])


if __name__ == "__main__":
    run(main, snakemake)
