"""Rule published_table: one table of the config's ``tables:`` from the paper's numbers."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.analysis.tables import make_published_table
    from dashrepro.io import read_csv, write_text

    published = read_csv(snakemake.input.published, required=("table", "row", "scale", "column"))
    rendered = make_published_table(published, snakemake.params.spec, snakemake.params.context)
    for fmt, text in rendered.items():
        write_text(snakemake.output[fmt], text)
    log.info("published table %s:\n%s", snakemake.wildcards.table, rendered["md"])


if __name__ == "__main__":
    run(main, snakemake)
