"""Rule make_synthetic_data: the embedded default's training set and synthetic benchmarks.

The training set excludes every problem of the synthetic benchmarks, so none is trained on; the
validation split (``data.validation``), if any, is in neither.
"""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.embedded.synthetic_data import TASKS, make_dataset, make_validation_split
    from dashrepro.io import write_parquet

    data, benchmarks = snakemake.params.data, snakemake.params.benchmarks
    specs = {name: {"task": b["task"], "n": b["n_problems"]} for name, b in benchmarks.items()}
    # `tasks` is a param only where the config sets it, so the default's job stays as it was.
    tasks = tuple(data.get("tasks", TASKS))
    train, bench_frames = make_dataset(data["n_train"], specs, data["seed"], tasks)
    write_parquet(snakemake.output.train, train)
    for name, path in zip(benchmarks, snakemake.output.benchmarks, strict=True):
        assert Path(path).stem == name
        write_parquet(path, bench_frames[name])
    validation = data.get("validation")
    if validation:
        split = make_validation_split(
            train, bench_frames, validation["n_problems"], validation["seed"], tasks
        )
        write_parquet(snakemake.output.validation, split)
    log.info(
        "train rows %d; benchmarks %s; validation rows %d",
        len(train),
        {k: len(v) for k, v in bench_frames.items()},
        validation["n_problems"] if validation else 0,
    )


if __name__ == "__main__":
    run(main, snakemake)
