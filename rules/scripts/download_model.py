"""Rule download_model: a pretrained model at its pinned commit, fetched once into resources/."""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.hub import download_model

    folder = Path(snakemake.output.snapshot).parent
    record = download_model(
        snakemake.params.model, snakemake.params.revision, folder, where=snakemake.params.where
    )
    log.info(
        "%s@%s: %d files in %s", record["model"], record["revision"], len(record["files"]), folder
    )


if __name__ == "__main__":
    run(main, snakemake)
