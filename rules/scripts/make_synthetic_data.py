"""Rule make_synthetic_data: the embedded default's training set and synthetic benchmarks.

The training set excludes every problem of the synthetic benchmarks, so none is trained on.
"""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.embedded.synthetic_data import make_dataset
    from dashrepro.io import write_parquet

    data, benchmarks = snakemake.params.data, snakemake.params.benchmarks
    specs = {name: {"task": b["task"], "n": b["n_problems"]} for name, b in benchmarks.items()}
    train, bench_frames = make_dataset(data["n_train"], specs, data["seed"])
    write_parquet(snakemake.output.train, train)
    for name, path in zip(benchmarks, snakemake.output.benchmarks, strict=True):
        assert Path(path).stem == name
        write_parquet(path, bench_frames[name])
    log.info(
        "train rows %d; benchmarks %s", len(train), {k: len(v) for k, v in bench_frames.items()}
    )


if __name__ == "__main__":
    run(main, snakemake)
