"""Rule statistics: clustered errors, selection optimism, paired differences, held-out selection,
reproduction gap."""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    import pandas as pd

    from dashrepro.analysis import statistics as st
    from dashrepro.analysis import statistics_report as sr
    from dashrepro.io import atomic_path, read_csv, read_parquet, write_text

    params = snakemake.params
    settings = params.settings
    # Every candidate checkpoint's graded samples, by run: .../eval/<method>/<scale>/seed<s>/
    # step<t>/samples.parquet (the inputs, so nothing is read that Snakemake does not track).
    paths: dict[tuple[str, str], dict[tuple[int, int], str]] = {}
    for path in snakemake.input.samples:
        method, scale, seed, step = Path(path).parts[-5:-1]
        paths.setdefault((method, scale), {})[(int(seed[4:]), int(step[4:]))] = path

    def per_problem_of(method, scale):
        return st.checkpoint_problem_accuracy({
            key: read_parquet(path, columns=["benchmark", "problem_id", "correct"])
            for key, path in paths[(method, scale)].items()
        })  # fmt: skip

    cells, paired = sr.experiment_statistics(
        params.tables, params.benchmarks, per_problem_of,
        reference=settings["reference"], n_resamples=settings["n_resamples"],
        seed=settings["seed"], confidence=settings["confidence"],
    )  # fmt: skip
    ours = {path.split("/")[-1][: -len(".csv")]: read_csv(path) for path in snakemake.input.tables}
    for cells_of in ours.values():
        cells_of["value"] = cells_of["value"].astype(float)
    gap = sr.gap_table(ours, params.tables, read_csv(snakemake.input.published), cells)
    heldout = None
    if params.validation:
        heldout = sr.experiment_heldout(
            params.tables, params.benchmarks, per_problem_of, params.validation
        )
    write_text(
        snakemake.output.heldout,
        (heldout if heldout is not None else pd.DataFrame(columns=sr.HELDOUT_COLUMNS)).to_csv(
            index=False
        ),
    )
    write_text(snakemake.output.cells, cells.to_csv(index=False))
    write_text(snakemake.output.paired, paired.to_csv(index=False))
    write_text(snakemake.output.gap, gap.to_csv(index=False))
    write_text(
        snakemake.output.report,
        sr.report_markdown(params.experiment, cells, paired, gap, settings, heldout),
    )
    figure = sr.gap_figure(gap, params.experiment)
    for fmt in ("png", "pdf"):
        with atomic_path(snakemake.output[f"gap_{fmt}"]) as tmp:
            figure.savefig(tmp, format=fmt, dpi=150)
    log.info("%d cells, %d paired differences, gap: %s", len(cells), len(paired),
             gap["status"].value_counts().to_dict())  # fmt: skip


if __name__ == "__main__":
    run(main, snakemake)
