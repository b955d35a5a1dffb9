"""Rule train_lora: one (method, scale, seed) run of LoRA on-policy self-distillation.

One process trains in this script's process. Several (``train.num_processes`` GPUs) are started
with ``accelerate launch -m dashrepro.training.trainer``, which reads the same arguments from a JSON file.
A preempted or killed run resumes from its last training state when the job is rerun.
"""

import json
import subprocess
import sys
from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.trainer import train_run

    base_model = snakemake.params.base_model
    out_dir = Path(snakemake.output.metrics).parent
    train = snakemake.params.train
    seed = int(snakemake.wildcards.seed)
    n_processes = int(train.get("num_processes", 1))
    if n_processes == 1:
        train_run(
            base_model_dir=base_model,
            train_parquet=snakemake.input.train,
            out_dir=out_dir,
            method=MethodSpec.from_config(snakemake.wildcards.method, snakemake.params.method),
            train=train,
            lora=snakemake.params.lora,
            protocol=TeacherProtocol.from_config(snakemake.params.protocol),
            seed=seed,
            log=log.info,
        )
    else:
        spec = out_dir.parent / f".seed{seed}.trainer.json"
        spec.write_text(
            json.dumps(
                {
                    "base_model_dir": str(base_model),
                    "train_parquet": str(snakemake.input.train),
                    "out_dir": str(out_dir),
                    "method_name": snakemake.wildcards.method,
                    "method": dict(snakemake.params.method),
                    "train": dict(train),
                    "lora": dict(snakemake.params.lora),
                    "protocol": dict(snakemake.params.protocol),
                    "seed": seed,
                }
            )
        )
        from dashrepro.training.distributed import launch_command

        command = launch_command(spec, n_processes)
        log.info("launching %s", " ".join(command))
        # The trainer's exit code (PREEMPTED_EXIT_CODE after a preemption notice) is the job's.
        returncode = subprocess.run(command).returncode
        if returncode:
            sys.exit(returncode)


if __name__ == "__main__":
    run(main, snakemake)
