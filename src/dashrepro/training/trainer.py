"""LoRA on-policy self-distillation (OPSD family, DASH, EOPD, AVSD, GRPO hybrid): the entry point.

``train_run(...)`` trains one (method, scale, seed) run into ``out_dir``, resuming from a kept
training state if one is there; ``python -m dashrepro.training.trainer --spec run.json`` does
the same from a JSON file of its arguments, which is how ``accelerate launch`` starts several
processes. The work is done by ``recipe.DistillationRecipe`` (setup, step loop, checkpoints).

Paper: *DASH: divergence-adaptive supervision horizons* (equation labels are the paper's). One
optimisation step (Alg. ``alg:dash``):

1. the student (base + LoRA adapter) samples one rollout per problem from the problem alone
   (``rollouts``: HF ``generate`` on CPU, or a colocated vLLM engine whose LoRA adapter is
   re-synced every step on GPU);
2. the privileged teacher -- the same network with the adapter *disabled* -- scores the
   student's tokens by teacher forcing after its own prompt (problem, reference solution and the
   protocol's instructions); its distributions are detached;
3. the method's objective (``losses``, keyed by ``parameters.OBJECTIVES``) turns the two
   distributions into a loss: the local signal r_t (clipped forward KL, Eq.
   ``supp_clipped_signal``) aggregated over the rollout (uniform for OPSD, Eq. ``opsd_loss``;
   the coefficients c_k for DASH, Eq. ``dash_weighted_objective``; ...), or EOPD's / AVSD's
   per-token objective; the GRPO hybrid adds eta times a GRPO term over K rollouts per problem
   (appendix ``sec:outcome_optimization``);
4. AdamW (0.9, 0.999, 1e-8, no weight decay), learning rate decaying linearly to zero without
   warmup (paper appendix "Adapters and optimization"), gradient norm clipped at 1.0.

Processes and batches. The global batch of a step is ``micro_batch_size x grad_accumulation x
num_processes`` rollouts. Every random draw of a micro-batch (its examples, its rollout seed, its
LoRA-dropout masks) is a function of (seed, step, global micro-batch index) alone, so 2 processes
with one micro-batch each compute what 1 process computes with 2 accumulated micro-batches, and a
resumed run needs nothing but the step, the adapter and the optimizer to continue bit for bit
(``tests/training/test_trainer_resume.py`` checks both). Processes are managed by ``accelerate``
(``distributed``: DDP; DeepSpeed ZeRO-2 with optimizer offload when the scale names a DeepSpeed
config).

Checkpoints and resume. Every ``checkpoint_every`` steps the adapter is saved as a PEFT folder
(``checkpoint-N``: ``adapter_config.json`` + ``adapter_model.safetensors``, loadable by peft and
vLLM). Beside it, a full training state (``checkpointing``) goes to ``.resume/step-N``, which is
not a Snakemake output, so it survives a killed job: rerunning the same target continues from the
last complete state, or discards the kept states (with a log line naming what changed) when they
were written under another config or other inputs. SIGTERM or SIGUSR1 (SLURM's preemption
notice) makes the trainer save a state at the end of the current step and exit with
``preemption.PREEMPTED_EXIT_CODE``, so that Snakemake's retry resumes it.

Records (``metrics``): ``train_metrics.parquet`` (one row per step: loss, r statistics, gates,
coefficients, horizon, response length, truncation, seconds per phase, tokens/s) and
``token_traces.parquet`` (for the first rollouts of chosen steps, per token: r_t, teacher
entropy, gate, c_k), from which the paper's motivation figure is drawn, and
``teacher_contexts.parquet`` (the same rollouts' teacher contexts per view, with the generated
analysis in ``reason_first`` mode; ``teacher``).

    python -m dashrepro.training.trainer --spec run.json           # one process
    accelerate launch --num_processes 2 -m dashrepro.training.trainer --spec run.json

Tests: ``pytest tests/training`` (CPU, a few minutes; real-process kill/resume and 2-process gloo).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd
import torch

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.training.methods import MethodSpec
from dashrepro.training.recipe import DistillationRecipe
from dashrepro.training.run_spec import RunSpec
from dashrepro.training.settings import LoraSettings, TrainSettings


def train_run(
    *,
    base_model_dir: str | Path,
    train_parquet: str | Path,
    out_dir: str | Path,
    method: MethodSpec,
    train: TrainSettings | Mapping,
    lora: LoraSettings | Mapping,
    protocol: TeacherProtocol,
    seed: int,
    log: Callable[[str], None] = print,
    trace_rollouts: int = 4,
    progress: bool = False,
) -> pd.DataFrame:
    """Train one (method, scale, seed) run into ``out_dir``, resuming if a state is there."""
    spec = RunSpec(
        base_model_dir=base_model_dir,
        train_parquet=train_parquet,
        out_dir=out_dir,
        method=method,
        train=train,
        lora=lora,
        protocol=protocol,
        seed=seed,
        trace_rollouts=trace_rollouts,
        progress=progress,
    )
    return run_spec(spec, log)


def run_spec(spec: RunSpec, log: Callable[[str], None] = print) -> pd.DataFrame:
    """Train the run ``spec`` describes (setup, then the step loop); the metrics."""
    recipe = DistillationRecipe(spec, log=log)
    recipe.setup()
    return recipe.train()


def run_from_json(path: str | Path) -> pd.DataFrame:
    """Train from a JSON file holding train_run's keyword arguments (protocol as its mapping)."""
    return run_spec(RunSpec.from_json(path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="JSON file with train_run's arguments")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and os.environ.get("RANK") == "0":
        # Where the processes met (distributed.launch_command lets the OS choose the port).
        print(f"[train] {os.environ['WORLD_SIZE']} processes met at "
              f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}", flush=True)  # fmt: skip
    run_from_json(args.spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
