"""Rule checkpoint_curves_figure: mean Avg@k over benchmarks per checkpoint, per method and seed."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    import pandas as pd

    from dashrepro.analysis.reporting import plot_checkpoint_curves
    from dashrepro.evaluation.scoring import load_checked_summary
    from dashrepro.io import atomic_path, read_json

    base = read_json(snakemake.input.base_accuracy[0])["student"]["mean_over_benchmarks"]
    rows = []
    for path, samples in zip(snakemake.input.summaries, snakemake.input.samples, strict=True):
        s = load_checked_summary(path, samples, snakemake.params.benchmarks)
        rows.append(
            {
                "method": s["method"],
                "seed": s["seed"],
                "step": s["step"],
                "mean_over_benchmarks": s["mean_over_benchmarks"],
            }
        )
    curves = pd.DataFrame(rows)
    starts = curves[["method", "seed"]].drop_duplicates().assign(step=0, mean_over_benchmarks=base)
    curves = pd.concat([starts, curves], ignore_index=True)
    curves["method"] = pd.Categorical(
        curves["method"], categories=snakemake.params.methods, ordered=True
    )
    selected = pd.DataFrame(
        [
            {"method": r["method"], "seed": r["seed"], "step": r["selected_step"]}
            for r in map(read_json, snakemake.input.selections)
        ]
    )
    fig = plot_checkpoint_curves(
        curves,
        selected,
        snakemake.params.method_labels,
        f"experiment {snakemake.params.experiment}, scale {snakemake.params.scale}",
    )
    for out, fmt in ((snakemake.output.png, "png"), (snakemake.output.pdf, "pdf")):
        with atomic_path(out) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150)
    log.info("figure with %d points", len(curves))


if __name__ == "__main__":
    run(main, snakemake)
