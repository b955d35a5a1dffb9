"""Processes: the ``accelerate`` accelerator, the DeepSpeed config, cross-process agreement.

The trainer runs as one process or as several started by ``accelerate launch`` (or
``torch.distributed.run``): DDP with gloo on CPU or NCCL on GPU, or DeepSpeed ZeRO-2 with the
optimizer states offloaded to CPU when the scale names a DeepSpeed config
(``train.deepspeed_config``). accelerate's gradient accumulation divides each loss by
``grad_accumulation`` and all-reduces (DDP) or steps (DeepSpeed) on the last micro-batch of a
step only. Every process must join every all-reduce, so a micro-batch without a usable rollout
still runs a zero backward (``zero_backward``), and a preemption notice seen by one process
stops all of them after the same step (``any_process``).

    accelerate launch --num_processes 2 -m dashrepro.training.trainer --spec run.json
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import torch


def make_accelerator(train: Mapping):
    """An ``accelerate.Accelerator``: DDP (gloo on CPU, NCCL on GPU) or DeepSpeed ZeRO-2."""
    from accelerate import Accelerator

    # accelerate's accumulation: backward() divides the loss by grad_accumulation, DDP skips the
    # all-reduce and DeepSpeed the step on all but the last micro-batch of a step.
    kwargs: dict[str, Any] = {
        "cpu": not torch.cuda.is_available(),
        "gradient_accumulation_steps": int(train["grad_accumulation"]),
    }
    if train.get("precision") == "bf16" and torch.cuda.is_available():
        kwargs["mixed_precision"] = "bf16"
    if train.get("deepspeed_config"):
        from accelerate.utils import DeepSpeedPlugin

        kwargs["deepspeed_plugin"] = DeepSpeedPlugin(hf_ds_config=deepspeed_config(train))
    return Accelerator(**kwargs)


def deepspeed_config(train: Mapping, world_size: int | None = None) -> dict:
    """The run's DeepSpeed config: the file's, with its "auto" batch entries filled in.

    Without a prepared dataloader accelerate cannot infer the micro-batch size, so the trainer
    writes it: micro_batch_size per GPU, grad_accumulation, and clipping at 1.0 (as on CPU). The
    torch AdamW stays the optimizer (``zero_force_ds_cpu_optimizer: false`` lets ZeRO-2 offload
    its states to CPU), so the linear schedule drives it as on every other backend.
    """
    from dashrepro.config import resolve_repo_path

    config = json.loads(resolve_repo_path(train["deepspeed_config"]).read_text())
    world = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    micro, accum = int(train["micro_batch_size"]), int(train["grad_accumulation"])
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
                f"{train['deepspeed_config']}: {key} = {config[key]!r} contradicts the run "
                f'config ({value!r}); set it to "auto"'
            )
    return config


class StateInAccelerateFolder:
    """Stands in for the optimizer in ``checkpointing`` when DeepSpeed saves the moments."""

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
