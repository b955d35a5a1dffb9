"""Rule select_best_checkpoint: the paper's best-within-budget checkpoint of one run."""

from _bootstrap import setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.io import write_json
    from dashrepro.provenance import write_provenance
    from dashrepro.scoring import load_checked_summary
    from dashrepro.selection import select_best_checkpoint

    # Each summary is recomputed from its samples: an edited or corrupt file stops here, named.
    summaries = {
        int(step): load_checked_summary(summary, samples, snakemake.params.benchmarks)
        for step, summary, samples in zip(
            snakemake.params.steps,
            snakemake.input.summaries,
            snakemake.input.samples,
            strict=True,
        )
    }
    record = select_best_checkpoint(summaries, snakemake.params.benchmarks)
    wc = snakemake.wildcards
    record.update(method=wc.method, scale=wc.scale, seed=int(wc.seed))
    record["selected_summary"] = snakemake.input.summaries[
        list(summaries).index(record["selected_step"])
    ]
    write_json(snakemake.output.selection, record)
    write_provenance(
        snakemake.output.selection,
        "select_best_checkpoint",
        inputs={
            "summaries": list(snakemake.input.summaries),
            "samples": list(snakemake.input.samples),
        },
        params={"benchmarks": snakemake.params.benchmarks, "steps": snakemake.params.steps},
    )
    log.info("selected step %d (score %.2f)", record["selected_step"], record["selection_score"])


if __name__ == "__main__":
    main(snakemake)
