"""Rule statistics: clustered errors, selection optimism, paired differences (against the
reference method and the base student), held-out selection, reproduction gap."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    import pandas as pd

    from dashrepro.analysis import statistics_report as sr
    from dashrepro.analysis.run_samples import RunSamples
    from dashrepro.io import read_csv, save_figure, write_text

    params, settings, keys = (
        snakemake.params,
        snakemake.params.settings,
        snakemake.params.input_keys,
    )
    runs = RunSamples(snakemake.input.samples, keys["samples"], snakemake.input.base_samples,
                      keys["base_samples"], params.base_scales, params.benchmarks)  # fmt: skip
    bootstrap = dict(
        n_resamples=settings["n_resamples"],
        seed=settings["seed"],
        confidence=settings["confidence"],
    )
    cells, paired = sr.experiment_statistics(
        params.tables, params.benchmarks, runs.per_problem, reference=settings["reference"],
        **bootstrap,
    )  # fmt: skip
    lift = sr.experiment_base_lift(
        params.tables, params.benchmarks, runs.per_problem, runs.base_student, **bootstrap
    )
    changes = runs.sample_changes()
    ours = dict(zip(keys["tables"], map(read_csv, snakemake.input.tables), strict=True))
    for cells_of in ours.values():
        cells_of["value"] = cells_of["value"].astype(float)
    gap = sr.gap_table(ours, params.tables, read_csv(snakemake.input.published), cells)
    heldout = None
    if params.validation:
        heldout = sr.experiment_heldout(
            params.tables, params.benchmarks, runs.per_problem, params.validation
        )
    empty = pd.DataFrame(columns=sr.HELDOUT_COLUMNS)
    frames = {"lift": lift, "changes": changes, "heldout": heldout if heldout is not None else empty,
              "cells": cells, "paired": paired, "gap": gap}  # fmt: skip
    for name, frame in frames.items():
        write_text(snakemake.output[name], frame.to_csv(index=False))
    write_text(
        snakemake.output.report,
        sr.report_markdown(params.experiment, cells, paired, gap, settings, heldout, lift, changes),
    )
    figure = sr.gap_figure(gap, params.experiment)
    save_figure(figure, {"png": snakemake.output.gap_png, "pdf": snakemake.output.gap_pdf})
    log.info("%d cells, %d paired differences, gap: %s", len(cells), len(paired),
             gap["status"].value_counts().to_dict())  # fmt: skip


if __name__ == "__main__":
    run(main, snakemake)
