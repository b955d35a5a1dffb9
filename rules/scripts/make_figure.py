"""Rule figure: one figure of the config's ``figures:`` (its kind's module draws it), as PNG and
PDF, with the numbers it shows as JSON beside them."""

from _bootstrap import named_files, run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.analysis.figures import make_figure
    from dashrepro.io import atomic_path, write_json

    fig, data = make_figure(
        snakemake.params.spec, named_files(snakemake.input), snakemake.params.context
    )
    # No creation date in the PDF: the same numbers draw the same bytes, on any day.
    for fmt, metadata in (("png", None), ("pdf", {"CreationDate": None})):
        with atomic_path(snakemake.output[fmt]) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, metadata=metadata)
    write_json(snakemake.output.data, data)
    log.info("figure %s drawn", snakemake.wildcards.figure)


if __name__ == "__main__":
    run(main, snakemake)
