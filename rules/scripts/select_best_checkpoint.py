"""Rule select_best_checkpoint: the paper's best-within-budget checkpoint of one run."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.analysis.selection import select_best_checkpoint
    from dashrepro.evaluation.scoring import load_checked_summary
    from dashrepro.io import write_json
    from dashrepro.provenance.records import code_version
    from dashrepro.tracking import TrackedRun, selection_values, send_checkpoint_values

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
    log.info("selected step %d (score %.2f)", record["selected_step"], record["selection_score"])
    tracked = TrackedRun.from_config(snakemake.config, wc.method, wc.scale, wc.seed, code_version())
    values = selection_values(record)
    send_checkpoint_values(tracked, values, record["selected_step"], "select", log.info)


if __name__ == "__main__":
    run(main, snakemake)
