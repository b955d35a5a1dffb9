"""Rule main_results_table: mean and sample std over seeds of the selected checkpoints."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.analysis.reporting import main_results_table, to_latex, to_markdown
    from dashrepro.io import read_json, write_text

    records = [read_json(path) for path in snakemake.input.selections]
    bench_labels = snakemake.params.benchmark_labels
    table = main_results_table(
        records, snakemake.params.methods, snakemake.params.method_labels, list(bench_labels)
    )
    n_seeds = len(snakemake.params.seeds)
    caption = (
        f"Experiment {snakemake.params.experiment}, scale {snakemake.params.scale}: Avg@k of the "
        f"checkpoint with the best mean over the benchmarks, mean $\\pm$ sample std over {n_seeds} seeds."
    )
    write_text(snakemake.output.csv, table.to_csv(index=False))
    write_text(snakemake.output.markdown, to_markdown(table, bench_labels))
    write_text(snakemake.output.latex, to_latex(table, bench_labels, caption))
    log.info("\n%s", to_markdown(table, bench_labels))


if __name__ == "__main__":
    run(main, snakemake)
