"""Rule divergence_association_figure: D_t against the mean future divergence (paper Fig. 1a).

Drawn from the per-token traces the trainer records for the first rollouts of step 1 and of
every checkpoint, over the table's methods and seeds; the correlations go to a JSON beside it.
"""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    import pandas as pd

    from dashrepro.analysis.reporting import (
        divergence_association,
        future_divergence,
        plot_divergence_association,
    )
    from dashrepro.io import atomic_path, read_parquet, write_json

    frames = []
    for path in snakemake.input.traces:
        traces = read_parquet(path)
        if "r" in traces.columns:  # objectives without a local signal (EOPD, AVSD) have none
            frames.append(traces.assign(run=path))
    frame = future_divergence(pd.concat(frames, ignore_index=True))
    stats = divergence_association(frame)
    write_json(snakemake.output.stats, stats)
    fig = plot_divergence_association(frame, stats, f"experiment {snakemake.params.experiment}")
    for out, fmt in ((snakemake.output.png, "png"), (snakemake.output.pdf, "pdf")):
        with atomic_path(out) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150)
    log.info("association %s", stats)


if __name__ == "__main__":
    run(main, snakemake)
