"""Rule prepare_training_set: the synthetic or real training set, normalised and checked."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.data.datasets import prepare_dataset
    from dashrepro.io import write_json, write_parquet

    source = snakemake.input.get("source")
    frame, report = prepare_dataset(snakemake.params.dataset, source_file=source, training=True)
    write_parquet(snakemake.output.train, frame)
    write_json(snakemake.output.report, report)
    log.info("%s", report["summary"])


if __name__ == "__main__":
    run(main, snakemake)
