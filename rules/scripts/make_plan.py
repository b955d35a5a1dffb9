"""Rule plan: the jobs and GPU-hours of all_tables, all_figures and all (``dashrepro.experiment.plan``)."""

from _bootstrap import run, setup, to_console


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.io import write_text

    write_text(snakemake.output[0], snakemake.params.plan)
    log.info("%s", snakemake.params.plan)
    to_console(snakemake.params.plan)


if __name__ == "__main__":
    run(main, snakemake)
