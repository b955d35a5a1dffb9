"""Rule statistics: clustered errors, selection optimism, paired differences (against the
reference method and the base student), held-out selection, reproduction gap."""

import functools

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    import pandas as pd

    from dashrepro.analysis import per_problem as pp
    from dashrepro.analysis import sample_changes as sc
    from dashrepro.analysis import statistics_report as sr
    from dashrepro.io import atomic_path, read_csv, read_parquet, write_text

    params = snakemake.params
    settings = params.settings
    # Every candidate checkpoint's graded samples, by run (the inputs, so nothing is read that
    # Snakemake does not track), each named by its key beside it (params.input_keys).
    paths: dict[tuple[str, str], dict[tuple[int, int], str]] = {}
    keys = params.input_keys
    for path, (method, scale, seed, step) in zip(
        snakemake.input.samples, keys["samples"], strict=True
    ):
        paths.setdefault((method, scale), {})[(int(seed), int(step))] = path

    @functools.cache  # each run's files read once, for its cells, lift and sample changes
    def per_problem_of(method, scale):
        return pp.checkpoint_problem_accuracy({
            key: read_parquet(path, columns=["benchmark", "problem_id", "correct"])
            for key, path in paths[(method, scale)].items()
        })  # fmt: skip

    cells, paired = sr.experiment_statistics(
        params.tables, params.benchmarks, per_problem_of,
        reference=settings["reference"], n_resamples=settings["n_resamples"],
        seed=settings["seed"], confidence=settings["confidence"],
    )  # fmt: skip
    # The base student's samples, by base scale.
    base_files = dict(zip(keys["base_samples"], snakemake.input.base_samples, strict=True))

    def base_student_of(scale):
        samples = read_parquet(
            base_files[params.base_scales[scale]], columns=["benchmark", "problem_id", "correct"]
        )
        return pp.per_problem_accuracy(samples[samples["benchmark"].isin(params.benchmarks)])

    lift = sr.experiment_base_lift(
        params.tables, params.benchmarks, per_problem_of, base_student_of,
        n_resamples=settings["n_resamples"], seed=settings["seed"],
        confidence=settings["confidence"],
    )  # fmt: skip
    write_text(snakemake.output.lift, lift.to_csv(index=False))
    # Each run's samples at its selected checkpoint against the base student's (same seeds).
    texts = ["benchmark", "problem_id", "sample_index", "seed", "response"]
    selected_texts = {}
    for method, scale in paths:
        chosen = pp.select_checkpoints(per_problem_of(method, scale), params.benchmarks)
        for seed, step in zip(chosen["seed"], chosen["selected_step"], strict=True):
            path = paths[(method, scale)][(int(seed), int(step))]
            selected_texts[(method, scale, int(seed))] = read_parquet(path, columns=texts)
    changes = sc.sample_changes(
        selected_texts,
        {scale: read_parquet(base_files[base], columns=texts)
         for scale, base in params.base_scales.items()},
    )  # fmt: skip
    identical = sc.identical_runs(selected_texts)
    changes["identical_to"] = [
        ";".join(sorted({b if a == row.method else a for c, s, a, b in identical
                         if c == row.scale and s == row.seed and row.method in (a, b)}))
        for row in changes.itertuples()
    ]  # fmt: skip
    write_text(snakemake.output.changes, changes.to_csv(index=False))
    ours = {
        name: read_csv(path)
        for name, path in zip(keys["tables"], snakemake.input.tables, strict=True)
    }
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
        sr.report_markdown(params.experiment, cells, paired, gap, settings, heldout, lift, changes),
    )
    figure = sr.gap_figure(gap, params.experiment)
    for fmt, metadata in (("png", None), ("pdf", {"CreationDate": None})):  # no date: same bytes
        with atomic_path(snakemake.output[f"gap_{fmt}"]) as tmp:
            figure.savefig(tmp, format=fmt, dpi=150, metadata=metadata)
    log.info("%d cells, %d paired differences, gap: %s", len(cells), len(paired),
             gap["status"].value_counts().to_dict())  # fmt: skip


if __name__ == "__main__":
    run(main, snakemake)
