"""Processes: the ``accelerate`` accelerator, the DeepSpeed config, cross-process agreement.

The trainer runs as one process or as several started by ``accelerate launch`` (or
``torch.distributed.run``): DDP with gloo on CPU or NCCL on GPU, or DeepSpeed ZeRO-2 with the
optimizer states offloaded to CPU when the scale names a DeepSpeed config
(``train.deepspeed_config``) -- on GPUs, or on DeepSpeed's CPU accelerator with gloo, as
``tests/training/test_deepspeed.py`` runs it. accelerate's gradient accumulation divides each
loss by ``grad_accumulation`` and all-reduces (DDP) or steps (DeepSpeed) on the last micro-batch
of a step only. Every process must join every all-reduce, so a micro-batch without a usable rollout
still runs a zero backward (``zero_backward``), and a preemption notice seen by one process
stops all of them after the same step (``any_process``).

    accelerate launch --num_processes 2 -m dashrepro.training.trainer --spec run.json
"""

from __future__ import annotations

import json
import os
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from dashrepro.settings import Precision, TrainSettings

#: ``train.precision``: fp32, or bf16 (DDP: autocast, the base weights in bf16 and LoRA's in
#: fp32; DeepSpeed: the config's "bf16" section, the module in bf16 and fp32 master weights).
#: The settings' type is their one home; a TrainSettings made without ``from_config`` is
#: checked against it here too.
PRECISIONS = typing.get_args(Precision)


def launch_command(spec: str | Path, n_processes: int) -> list[str]:
    """``accelerate launch`` of the trainer on ``spec`` with ``n_processes`` processes on this
    node (``--multi_gpu`` starts them on a CPU-only machine all the same: gloo).

    They meet on a port the OS chooses when torch's store binds it (``--main_process_port 0``):
    accelerate's default, 29500, is one per node, so two jobs sharing a node (two 4-GPU runs)
    would race for it (accelerate moves the later one elsewhere only if the port is already
    taken when it checks)."""
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--num_processes", str(n_processes), "--multi_gpu", "--main_process_port", "0",
        "-m", "dashrepro.training.trainer", "--spec", str(spec),
    ]  # fmt: skip


def make_accelerator(train: TrainSettings):
    """An ``accelerate.Accelerator``: DDP (gloo on CPU, NCCL on GPU) or DeepSpeed ZeRO-2 (on a GPU,
    or on DeepSpeed's CPU accelerator with gloo), in fp32 or bf16 autocast."""
    from accelerate import Accelerator

    precision = train.precision
    if precision not in PRECISIONS:
        raise ValueError(
            f"train.precision must be one of {', '.join(PRECISIONS)}; got {precision!r}"
        )
    cuda = torch.cuda.is_available()
    # accelerate's accumulation: backward() divides the loss by grad_accumulation, DDP skips the
    # all-reduce and DeepSpeed the step on all but the last micro-batch of a step.
    kwargs: dict[str, Any] = {"gradient_accumulation_steps": train.grad_accumulation}
    if precision == "bf16":
        # On CPU too, deliberately: torch autocasts to bfloat16 on CPU, so the GPU runs'
        # precision is trained and tested here as well (slower than fp32 on most CPUs). Under
        # DeepSpeed accelerate hands it to the config's "bf16" section instead.
        kwargs["mixed_precision"] = "bf16"
    if not train.deepspeed_config:
        kwargs["cpu"] = not cuda
        return Accelerator(**kwargs)

    from accelerate.utils import DeepSpeedPlugin, InitProcessGroupKwargs

    plugin = DeepSpeedPlugin(hf_ds_config=deepspeed_config(train))  # bad configs fail here first
    # Not cpu=True: accelerate drops a DeepSpeed plugin when cpu=True and silently trains without
    # DeepSpeed. Without CUDA, DeepSpeed detects its CPU accelerator (as DS_ACCELERATOR=cpu would
    # select it), whose collectives fall back to gloo when oneCCL is absent (DeepSpeed >= 0.14.1).
    if not cuda:
        _skip_cpu_inference_kernel()
        # accelerate infers no backend for a launch that is neither cpu=True nor on a GPU (and
        # would then count one process): name the one DeepSpeed's CPU accelerator talks.
        kwargs["kwargs_handlers"] = [InitProcessGroupKwargs(backend="gloo")]
    if "LOCAL_RANK" not in os.environ:
        _single_process_group("nccl" if cuda else "gloo")
    return Accelerator(deepspeed_plugin=plugin, **kwargs)


def unwrapped_model(accelerator, model, deepspeed: bool):
    """The model under what ``accelerator.prepare`` wrapped it in. One process without DeepSpeed
    wraps nothing, and accelerate's ``unwrap_model`` imports DeepSpeed (with MLflow: about 1 s
    of every single-process job) only to look for its engine, so it is asked only otherwise."""
    if deepspeed or accelerator.num_processes > 1:
        return accelerator.unwrap_model(model)
    return model


def _single_process_group(backend: str) -> None:
    """What a launcher of one process provides, for DeepSpeed in a process started without one
    (the workflow's one-process runs): DeepSpeed would otherwise look for MPI (mpi4py) to learn
    its rank, and refuses to start without ``LOCAL_RANK``. The group of one lives on an
    in-memory store, so no port is taken."""
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(
            backend, store=torch.distributed.HashStore(), rank=0, world_size=1
        )
    os.environ["LOCAL_RANK"] = "0"


def _skip_cpu_inference_kernel() -> None:
    """Tell DeepSpeed's CPU backend not to build its shared-memory all-reduce kernel.

    DeepSpeed compiles it (C++, JIT: ~80 s on 2 cores, and a compiler needed) when its first
    process group starts, yet only its inference tensor parallelism (``inference_all_reduce``)
    calls it; ZeRO's gradient reduction goes through torch.distributed (gloo). The op table is
    the one ``build_shm_op`` consults (deepspeed 0.19: ``deepspeed.ops.__compatible_ops__``,
    computed once and kept, so that edits to it persist).
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def deepspeed_config(train: TrainSettings, world_size: int | None = None) -> dict:
    """The run's DeepSpeed config: the file's, with its "auto" entries filled in.

    Without a prepared dataloader accelerate cannot infer the micro-batch size, so the trainer
    writes it: micro_batch_size per GPU, grad_accumulation, and clipping at 1.0 (as on CPU); the
    "bf16" section follows ``train.precision``. The torch AdamW stays the optimizer
    (``zero_force_ds_cpu_optimizer: false`` lets ZeRO-2 offload its states to CPU), so the linear
    schedule drives it as on every other backend.
    """
    from dashrepro.layout import resolve_repo_path

    path = resolve_repo_path(train.deepspeed_config)
    if not path.is_file():
        raise FileNotFoundError(f"train.deepspeed_config: no such file {str(path)!r}")
    config = json.loads(path.read_text())
    world = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    micro, accum = train.micro_batch_size, train.grad_accumulation
    filled = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "train_batch_size": micro * accum * world,
        "gradient_clipping": 1.0,
    }
    for key, value in filled.items():
        if config.get(key, "auto") == "auto":
            config[key] = value
        elif config[key] != value:
            raise ValueError(
                f"{train.deepspeed_config}: {key} = {config[key]!r} contradicts the run "
                f'config ({value!r}); set it to "auto"'
            )
    # The weights' precision is train.precision's: a config enabling bf16 in an fp32 run would
    # train in bf16 unnoticed (accelerate does not check it), and fp16 is no precision here.
    bf16 = train.precision == "bf16"
    for section, wanted in (("bf16", bf16), ("fp16", False)):
        enabled = config.setdefault(section, {}).get("enabled", "auto")
        if enabled == "auto":
            config[section]["enabled"] = wanted
        elif enabled is not wanted:
            raise ValueError(
                f"{train.deepspeed_config}: {section}.enabled = {enabled!r} contradicts "
                f"train.precision {train.precision!r}"
            )
    return config


class StateInAccelerateFolder:
    """Stands in for the optimizer in ``training.resume`` when DeepSpeed saves the moments."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: Mapping) -> None:
        pass


def any_process(accelerator, flag: bool) -> bool:
    """True on every process when ``flag`` is true on at least one."""
    if accelerator.num_processes == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=accelerator.device)
    return bool(accelerator.reduce(value, reduction="sum").item() > 0)


def zero_backward(trainable: list[torch.nn.Parameter], accelerator) -> None:
    """A backward pass that contributes nothing, so that every process joins the all-reduce."""
    loss = sum(p.sum() for p in trainable) * 0.0
    accelerator.backward(loss)
