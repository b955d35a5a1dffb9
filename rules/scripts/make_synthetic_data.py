"""Rule make_synthetic_data: the embedded default's training set and synthetic benchmarks.

The training set excludes every problem of the synthetic benchmarks, so none is trained on.
"""

from pathlib import Path

from _bootstrap import setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.io import write_parquet
    from dashrepro.provenance import write_provenance
    from dashrepro.synthetic_data import make_dataset

    data, benchmarks = snakemake.params.data, snakemake.params.benchmarks
    specs = {name: {"task": b["task"], "n": b["n_problems"]} for name, b in benchmarks.items()}
    train, bench_frames = make_dataset(data["n_train"], specs, data["seed"])
    write_parquet(snakemake.output.train, train)
    write_provenance(snakemake.output.train, "make_synthetic_data", params={"data": data})
    for name, path in zip(benchmarks, snakemake.output.benchmarks, strict=True):
        assert Path(path).stem == name
        write_parquet(path, bench_frames[name])
        write_provenance(
            path, "make_synthetic_data", params={"data": data, "benchmark": benchmarks[name]}
        )
    log.info(
        "train rows %d; benchmarks %s", len(train), {k: len(v) for k, v in bench_frames.items()}
    )


if __name__ == "__main__":
    main(snakemake)
