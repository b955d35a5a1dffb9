"""Rule generate_checkpoint_responses: k sampled responses per problem for one checkpoint."""

import shutil
from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.evaluation.responses import generate_policy_responses
    from dashrepro.io import write_parquet

    wc = snakemake.wildcards
    adapter_dir = Path(snakemake.input.adapter).parent
    base_dir = snakemake.params.base_model
    bench_files = dict(zip(snakemake.params.benchmarks, snakemake.input.benchmarks, strict=True))
    checkpoint = f"{wc.method}/{wc.scale}/seed{wc.seed}/step{wc.step}"
    # Finished shards survive a killed job (they are not declared outputs, so Snakemake keeps
    # them); the rerun reuses those made from the same adapter, model, problems and settings.
    shard_dir = Path(snakemake.output.responses).parent / ".responses-shards"
    # Measured seconds go into the output's provenance record, not the parquet: the same
    # generation done twice writes the same bytes.
    timing = {"generation_seconds": 0.0}
    responses = generate_policy_responses(
        base_model_dir=base_dir,
        adapter_dir=adapter_dir,
        benchmark_files=bench_files,
        generation=snakemake.params.generation,
        checkpoint=checkpoint,
        shard_dir=shard_dir,
        log=log.info,
        timing=timing,
    )
    write_parquet(snakemake.output.responses, responses)
    shutil.rmtree(shard_dir, ignore_errors=True)
    log.info("%s: %d responses", checkpoint, len(responses))
    return timing


if __name__ == "__main__":
    run(main, snakemake)
