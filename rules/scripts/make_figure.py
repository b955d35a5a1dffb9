"""Rule figure: one figure of the config's ``figures:`` (its kind's module draws it), as PNG and
PDF, with the numbers it shows as JSON beside them."""

from _bootstrap import named_files, run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.analysis.figures import make_figure
    from dashrepro.io import save_figure, write_json

    fig, data = make_figure(
        snakemake.params.spec, named_files(snakemake.input), snakemake.params.context
    )
    save_figure(fig, {"png": snakemake.output.png, "pdf": snakemake.output.pdf})
    write_json(snakemake.output.data, data)
    log.info("figure %s drawn", snakemake.wildcards.figure)


if __name__ == "__main__":
    run(main, snakemake)
