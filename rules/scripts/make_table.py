"""Rule table: one table of the config's ``tables:`` (its kind's module builds it)."""

from _bootstrap import named_files, run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.analysis.tables import make_table
    from dashrepro.io import write_text

    rendered = make_table(
        snakemake.params.spec, named_files(snakemake.input), snakemake.params.context
    )
    for fmt, text in rendered.items():
        write_text(snakemake.output[fmt], text)
    log.info("table %s:\n%s", snakemake.wildcards.table, rendered["md"])


if __name__ == "__main__":
    run(main, snakemake)
