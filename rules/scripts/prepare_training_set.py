"""Rule prepare_training_set: the synthetic or real training set, normalised and checked."""

from _bootstrap import setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.datasets import prepare_dataset
    from dashrepro.io import write_json, write_parquet
    from dashrepro.provenance import write_provenance

    source = snakemake.input.get("source")
    frame, report = prepare_dataset(snakemake.params.dataset, source_file=source, training=True)
    write_parquet(snakemake.output.train, frame)
    write_json(snakemake.output.report, report)
    for output in (snakemake.output.train, snakemake.output.report):
        write_provenance(
            output,
            "prepare_training_set",
            inputs={"source": source} if source else {},
            params={"dataset": snakemake.params.dataset},
        )
    log.info("%s", report["summary"])


if __name__ == "__main__":
    main(snakemake)
