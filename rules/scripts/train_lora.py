"""Rule train_lora: one (method, scale, seed) run of LoRA on-policy self-distillation.

One process trains in this script's process. Several (``train.num_processes`` GPUs) are started
with ``accelerate launch -m dashrepro.training.trainer``, which reads the same arguments from a JSON file.
A preempted or killed run resumes from its last training state when the job is rerun.
"""

import subprocess
import sys
from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.provenance.records import code_version
    from dashrepro.tracking import TrackedRun
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.run_spec import RunSpec
    from dashrepro.training.trainer import run_spec

    out_dir = Path(snakemake.output.metrics).parent
    seed = int(snakemake.wildcards.seed)
    wc = snakemake.wildcards
    # A train rule per scale, named train_lora_<scale> (rules/train.smk), without a scale
    # wildcard; a param would retrain every existing run, so the name says it.
    scale = snakemake.rule.removeprefix("train_lora_")
    spec = RunSpec(
        base_model_dir=snakemake.params.base_model,
        train_parquet=snakemake.input.train,
        out_dir=out_dir,
        method=MethodSpec.from_config(wc.method, snakemake.params.method),
        train=snakemake.params.train,
        lora=snakemake.params.lora,
        protocol=TeacherProtocol.from_config(snakemake.params.protocol),
        seed=seed,
        # From the config, not the rule's params: changing the trackers reruns no training.
        tracked=TrackedRun.from_config(snakemake.config, wc.method, scale, seed, code_version()),
    )
    if spec.train.num_processes == 1:
        run_spec(spec, log=log.info)
        return
    from dashrepro.training.distributed import launch_command

    command = launch_command(spec.to_json(out_dir.parent / f".seed{seed}.trainer.json"),
                             spec.train.num_processes)  # fmt: skip
    log.info("launching %s", " ".join(command))
    # The trainer's exit code (PREEMPTED_EXIT_CODE after a preemption notice) is the job's.
    returncode = subprocess.run(command).returncode
    if returncode:
        sys.exit(returncode)


if __name__ == "__main__":
    run(main, snakemake)
