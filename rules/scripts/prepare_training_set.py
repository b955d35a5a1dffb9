"""Rule prepare_training_set: the synthetic or real training set, normalised and checked, and
its validation split (``data.validation``) when the config asks for one."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.data.datasets import hold_out_validation, prepare_dataset
    from dashrepro.io import write_json, write_parquet

    dataset, validation = snakemake.params.dataset, snakemake.params.validation
    source = snakemake.input.get("source")
    frame, report = prepare_dataset(dataset, source_file=source, training=True)
    if validation and dataset is None:
        # Synthetic: its own split of the training tasks, in neither the training set nor a
        # benchmark (make_synthetic_data).
        held_out, _ = prepare_dataset(None, source_file=snakemake.input.validation_source)
        how = "a synthetic split of the training tasks"
    elif validation:
        frame, held_out = hold_out_validation(frame, validation["n_problems"], validation["seed"])
        how = f"held out of the training set (seed {validation['seed']})"
    if validation:
        overlap = set(frame["id"]) & set(held_out["id"])
        if overlap:
            raise ValueError(f"validation rows {sorted(overlap)[:5]} are training rows too")
        report["validation"] = {"rows": len(held_out), "how": how}
        report["summary"] += f"; validation: {len(held_out)} rows, {how}"
        write_parquet(snakemake.output.validation, held_out)
    write_parquet(snakemake.output.train, frame)
    write_json(snakemake.output.report, report)
    log.info("%s", report["summary"])


if __name__ == "__main__":
    run(main, snakemake)
