"""LoRA on-policy self-distillation (OPSD family, DASH, EOPD, AVSD, GRPO hybrid): one trainer.

One optimisation step (paper Sec. "Preliminaries" and Alg. "DASH aggregation"):

1. the student (base + LoRA adapter) samples one rollout per problem from the problem alone
   (Qwen3 chat template, thinking on), with HF ``generate`` (CPU) or a colocated vLLM engine
   whose LoRA adapter is re-synced every step (GPU);
2. the privileged teacher -- the same network with the adapter *disabled* -- scores the
   student's tokens by teacher forcing after its own prompt (problem, reference solution and the
   protocol's instructions); its distributions are detached;
3. the method's objective turns the two distributions into a loss: a local signal r_t
   (``objectives.local_signal``, clipped forward KL by default) aggregated over the rollout
   (``objectives.aggregate``: uniform for OPSD, c_k for DASH, ...), or EOPD's / AVSD's per-token
   objective; the GRPO hybrid adds eta times a GRPO term over K rollouts per problem;
4. AdamW (0.9, 0.999, 1e-8, no weight decay), learning rate decaying linearly to zero without
   warmup (paper appendix "Adapters and optimization"), gradient norm clipped at 1.0.

Processes and batches. The global batch of a step is ``micro_batch_size x grad_accumulation x
num_processes`` rollouts. Every random draw of a micro-batch (its examples, its rollout seed, its
LoRA-dropout masks) is a function of (seed, step, global micro-batch index) alone, so 2 processes
with one micro-batch each compute exactly what 1 process computes with 2 accumulated micro-batches
(``tests/training/test_trainer_resume.py`` checks it with 2 gloo processes), and a resumed run needs nothing but
the step, the adapter and the optimizer to continue bit for bit. Processes are managed by
``accelerate`` (DDP; DeepSpeed ZeRO-2 with optimizer offload on GPU when the scale names a
DeepSpeed config): ``accelerate launch -m dashrepro.training.trainer --spec run.json``.

Checkpoints and resume. Every ``checkpoint_every`` steps the adapter is saved as a PEFT folder
(``checkpoint-N``: ``adapter_config.json`` + ``adapter_model.safetensors``, loadable by peft and
vLLM). Beside it, a full training state (``checkpointing``) goes to ``.resume/step-N``, which is
not a Snakemake output, so it survives a killed job: rerunning the same target continues from the
last complete state, refusing if the run's config changed. SIGTERM or SIGUSR1 (SLURM's
preemption notice) makes the trainer save a state at the end of the current step and exit with
``checkpointing.PREEMPTED_EXIT_CODE``, so that Snakemake's retry resumes it.

Records: ``train_metrics.parquet`` (one row per step: loss, r statistics, gates, coefficients,
horizon, response length, truncation, seconds per phase, tokens/s) and ``token_traces.parquet``
(for the first rollouts of chosen steps, per token: r_t, teacher entropy, gate, c_k), from which
the paper's motivation figure (D_t against the mean future divergence) is drawn.

    python -m dashrepro.training.trainer --spec run.json           # one process
    accelerate launch --num_processes 2 -m dashrepro.training.trainer --spec run.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from dashrepro import objectives
from dashrepro.config import checkpoint_steps
from dashrepro.data.prompts import TeacherProtocol, render_student_prompt, render_teacher_prompt
from dashrepro.grading import reward_exact_match
from dashrepro.io import atomic_dir, read_parquet, source_fingerprint, write_parquet
from dashrepro.sampling import SamplingSettings, derive_seed
from dashrepro.sampling.hf import sample_responses
from dashrepro.training import checkpointing

RESUME_DIR = ".resume"
OBJECTIVES = ("distill", "eopd", "avsd")
# Per-step metrics averaged over micro-batches and processes (NaN where a method has none).
METRIC_KEYS = (
    "loss",
    "distill_loss",
    "grpo_loss",
    "r_mean",
    "r_std",
    "coef_mean",
    "coef_max",
    "gate_mean",
    "horizon_mean",
    "response_length",
    "truncated_fraction",
    "rollout_accuracy",
    "reward_mean",
)
# Per-step counts summed over micro-batches and processes.
COUNT_KEYS = ("rollouts", "tokens", "empty_rollouts", "skipped_long_prompts")


# ----------------------------------------------------------------------------------------------
# Method
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MethodSpec:
    """One training method of ``workflow_config.yaml`` (its ``label`` aside)."""

    name: str
    aggregation: str
    divergence: str
    tau: float | None
    top_k: int | None = None
    params: Mapping = field(default_factory=dict)
    objective: str = "distill"  # distill (r_t + aggregation), eopd, avsd
    objective_params: Mapping = field(default_factory=dict)
    grpo: Mapping | None = None  # {eta, group_size, aggregate, gamma, lam}

    @classmethod
    def from_config(cls, name: str, spec: Mapping) -> MethodSpec:
        objective = spec.get("objective", "distill")
        if objective not in OBJECTIVES:
            raise ValueError(f"methods.{name}.objective: {objective!r} is not one of {OBJECTIVES}")
        return cls(
            name=name,
            aggregation=spec["aggregation"],
            divergence=spec["divergence"],
            tau=spec["tau"],
            top_k=spec.get("top_k"),
            params=dict(spec["params"]),
            objective=objective,
            objective_params=dict(spec.get("objective_params") or {}),
            grpo=dict(spec["grpo"]) if spec.get("grpo") else None,
        )

    @property
    def needs_teacher_entropy(self) -> bool:
        return self.aggregation in {"entropy_gate", "soft_or"}

    @property
    def group_size(self) -> int:
        return int(self.grpo["group_size"]) if self.grpo else 1


# ----------------------------------------------------------------------------------------------
# Small pure helpers
# ----------------------------------------------------------------------------------------------


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of an already rendered prompt (the chat template added every special token)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def epoch_order(n_rows: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n_rows))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def micro_batch_rows(
    n_rows: int, seed: int, step: int, micro: int, problems_per_micro: int, micros_per_step: int
) -> list[int]:
    """Row indices of global micro-batch ``micro`` of ``step`` (1-based): a pure function.

    The data is read in a fresh seeded permutation per epoch; step ``s`` consumes examples
    ``(s - 1) * problems_per_step ...`` of that endless stream, so the position is never state.
    """
    start = ((step - 1) * micros_per_step + micro) * problems_per_micro
    rows = []
    for position in range(start, start + problems_per_micro):
        epoch, offset = divmod(position, n_rows)
        rows.append(epoch_order(n_rows, seed, epoch)[offset])
    return rows


def rollout_rows(
    n_rows: int,
    seed: int,
    step: int,
    accumulation_index: int,
    rank: int,
    world: int,
    micro: int,
    accum: int,
    group: int,
) -> list[int]:
    """The data row of each rollout of one micro-batch (``micro`` rollouts) of ``step``.

    Without groups, global micro-batch ``accumulation_index * world + rank`` reads its own
    ``micro`` problems. With GRPO groups, a process reads ``micro * accum / group`` problems per
    step, repeats each ``group`` times, and its micro-batches take consecutive slices, so a
    group may span micro-batches of the same process (its rewards are normalised together).
    """
    if group == 1:
        return micro_batch_rows(
            n_rows, seed, step, accumulation_index * world + rank, micro, accum * world
        )
    if (micro * accum) % group:
        raise ValueError(
            f"GRPO group_size {group} must divide micro_batch_size x grad_accumulation "
            f"({micro} x {accum})"
        )
    problems = micro_batch_rows(n_rows, seed, step, rank, micro * accum // group, world)
    flat = [row for row in problems for _ in range(group)]
    return flat[accumulation_index * micro : (accumulation_index + 1) * micro]


def right_pad_concat(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[prompt | response | pad] rows; returns ids, attention mask and prompt lengths."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        seq = p + r
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids, mask, torch.tensor([len(p) for p in prompts])


def response_logits(
    logits: torch.Tensor, prompt_lengths: torch.Tensor, response_width: int
) -> torch.Tensor:
    """Logits that predict response token j of row b: position prompt_len_b + j - 1 -> [B, T, V]."""
    offsets = torch.arange(response_width, device=logits.device)
    prompt_lengths = prompt_lengths.to(logits.device)
    positions = (prompt_lengths[:, None] - 1 + offsets[None, :]).clamp(max=logits.shape[1] - 1)
    index = positions[:, :, None].expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, index)


def teacher_views(method: MethodSpec, reference_solution: str, answer: str) -> list[str]:
    """The reference texts the privileged teacher sees: one view, or AVSD's three.

    AVSD (METHODS.md "Baselines"): the full solution, its first half, and the final answer only.
    The half is cut at the last whitespace before the middle character (a word is never split);
    the answer-only view is ``The final answer is \\boxed{answer}.``
    """
    if method.objective != "avsd":
        return [reference_solution]
    middle = len(reference_solution) // 2
    cut = reference_solution.rfind(" ", 0, middle)
    half = reference_solution[: cut if cut > 0 else middle].rstrip()
    return [reference_solution, half, f"The final answer is \\boxed{{{answer}}}."]


def sequence_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) under ``logits`` [B, T, V] for ``tokens`` [B, T] (padding gathers index 0)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[..., None]).squeeze(-1)


def grpo_sequence_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Group-normalised GRPO advantages of rollouts listed ``group_size`` per problem, in order."""
    return objectives.group_advantages(rewards.view(-1, group_size)).view(-1)


def grpo_token_advantages(
    advantages: torch.Tensor, mask: torch.Tensor, grpo: Mapping
) -> torch.Tensor:
    """Per-token GRPO advantages [B, T] from the rollouts' sequence advantages [B].

    Without aggregation each token carries its rollout's advantage (GRPO). With ``aggregate``
    the advantage is an outcome reward arriving at the last token and the gamma/lambda backward
    recursion (``objectives.discounted_token_advantages``) spreads it: a_t = A_hat at t = T and
    0 before, so A_t = (gamma lambda)^(T - t) A_hat -- GAE with gamma = lambda = 0.95 (paper
    appendix "Compatibility with Outcome-Level RL") and no critic. The paper gives no formula;
    this choice is ours and is documented in the README.
    """
    mask = mask.bool()
    if not grpo.get("aggregate", True):
        return advantages[:, None].float() * mask.float()
    lengths = mask.sum(1)
    last = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    last[rows, lengths[rows] - 1] = advantages[rows].float()
    return objectives.discounted_token_advantages(
        last, mask, gamma=float(grpo.get("gamma", 0.95)), lam=float(grpo.get("lam", 0.95))
    )


# ----------------------------------------------------------------------------------------------
# The loss of one micro-batch
# ----------------------------------------------------------------------------------------------


@dataclass
class MicroLoss:
    loss: torch.Tensor
    metrics: dict[str, float]
    trace: dict[str, torch.Tensor]  # per-token tensors [B, T] for token_traces.parquet


def method_loss(
    method: MethodSpec,
    student_logits: torch.Tensor,
    view_logits: Sequence[torch.Tensor],
    tokens: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor | None = None,
) -> MicroLoss:
    """The objective of ``method`` on one micro-batch of rollouts (all tensors [B, T(, V)])."""
    teacher_logits = view_logits[0]
    metrics: dict[str, float] = {}
    trace: dict[str, torch.Tensor] = {}
    if method.objective == "distill":
        r = objectives.local_signal(
            student_logits,
            teacher_logits,
            mask,
            divergence=method.divergence,
            tau=method.tau,
            top_k=method.top_k,
        )
        entropy = objectives.teacher_entropy(teacher_logits, mask)
        agg = objectives.aggregate(
            method.aggregation,
            r,
            mask,
            teacher_entropy=entropy if method.needs_teacher_entropy else None,
            **method.params,
        )
        loss = agg.loss
        metrics.update(agg.diagnostics)
        trace.update(r=r.detach(), teacher_entropy=entropy.detach(), coefficient=agg.coefficients)
        if agg.gates is not None:
            trace["gate"] = agg.gates
    elif method.objective == "eopd":
        loss, diagnostics = objectives.eopd_token_loss(
            student_logits, teacher_logits, tokens, mask, **method.objective_params
        )
        metrics.update({k: float(v) for k, v in diagnostics.items()})
    else:  # avsd
        student_lp = sequence_logprobs(student_logits, tokens)
        views = torch.stack([sequence_logprobs(v, tokens) for v in view_logits])
        target, aux = objectives.avsd_target_logprobs(views, student_lp.detach(), mask)
        loss = objectives.avsd_token_loss(student_lp, target, mask)
        metrics["gate_mean"] = float(objectives.masked_mean(aux["gate"], mask.bool()))
        trace["gate"] = aux["gate"]
    metrics["distill_loss"] = float(loss.detach())
    if method.grpo:
        token_advantages = grpo_token_advantages(advantages, mask, method.grpo)
        grpo_loss = objectives.grpo_token_loss(
            sequence_logprobs(student_logits, tokens), token_advantages, mask
        )
        loss = objectives.hybrid_loss(loss, grpo_loss, float(method.grpo["eta"]))
        metrics["grpo_loss"] = float(grpo_loss.detach())
    metrics["loss"] = float(loss.detach())
    return MicroLoss(loss, metrics, trace)


# ----------------------------------------------------------------------------------------------
# Setup
# ----------------------------------------------------------------------------------------------


def resolve_attn_implementation(requested: str) -> str:
    """``auto``: FlashAttention-2 when installed and a GPU is present, else PyTorch SDPA."""
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        import importlib.util

        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
    return "sdpa"


def load_lora_student(base_model: str | Path, lora: Mapping, seed: int, train: Mapping = None):
    """The base network with a fresh LoRA adapter (B = 0, A seeded), ready to train."""
    train = train or {}
    precision = train.get("precision", "fp32")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    base = AutoModelForCausalLM.from_pretrained(
        str(base_model),
        dtype=dtype,
        attn_implementation=resolve_attn_implementation(train.get("attn_implementation", "sdpa")),
    )
    if train.get("gradient_checkpointing"):
        # Non-reentrant checkpointing works with frozen embeddings (LoRA) without the
        # enable_input_require_grads hook that the reentrant variant needs.
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(seed)  # LoRA A is Kaiming-initialised (B = 0): the seed fixes it
    config = LoraConfig(
        r=lora["r"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=list(lora["target_modules"]),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(base, config)


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
    import os

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


def run_fingerprint_config(
    method: MethodSpec, train: Mapping, lora: Mapping, protocol: TeacherProtocol, seed: int
) -> dict:
    """Everything in the config that determines the trained adapter (the trainer adds the
    content hashes of its inputs): a state written under other values is not resumed."""
    return {
        "method": {
            "aggregation": method.aggregation,
            "divergence": method.divergence,
            "tau": method.tau,
            "top_k": method.top_k,
            "params": dict(method.params),
            "objective": method.objective,
            "objective_params": dict(method.objective_params),
            "grpo": dict(method.grpo) if method.grpo else None,
        },
        "train": dict(train),
        "lora": dict(lora),
        "protocol": dataclasses.asdict(protocol),
        "seed": seed,
    }


class _Rollouts:
    """Student rollouts by HF ``generate`` or a colocated vLLM engine with a synced adapter."""

    def __init__(self, backend: str, base_model: str, train: Mapping, lora: Mapping, out_dir):
        self.backend = backend
        self.sampler = None
        if backend == "vllm":
            from dashrepro.sampling.vllm import VLLMSampler

            options = dict(train.get("vllm") or {})
            self.sampler = VLLMSampler(
                str(base_model),
                max_lora_rank=lora["r"],
                enable_sleep_mode=True,
                max_model_len=train.get("max_total_length"),
                **options,
            )
            self.adapter_dir = Path(out_dir) / RESUME_DIR / "rollout-adapter"

    def sample(self, model, tokenizer, prompts, settings, seed, rank: int):
        if self.backend == "hf":
            return sample_responses(model, tokenizer, prompts, settings, seed=seed)
        # vLLM serves the adapter from disk: write the current one, sync, sample, then sleep so
        # that training gets the GPU memory back (level 1 keeps the weights in CPU memory).
        folder = self.adapter_dir / f"rank{rank}"
        model.save_pretrained(str(folder))
        self.sampler.wake_up()
        self.sampler.sync_adapter(folder)
        samples = self.sampler.sample(prompts, settings, seed, adapter_dir=folder)
        self.sampler.sleep(level=1)
        return samples


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------


def _check_training_data(data: pd.DataFrame, where: str) -> None:
    missing = data["reference_solution"].isna() | (
        data["reference_solution"].astype(str).str.strip() == ""
    )
    if missing.any():
        raise ValueError(
            f"{where}: {int(missing.sum())} rows without a reference solution, e.g. "
            f"ids {list(data.loc[missing, 'id'][:5])}"
        )


def _export_adapter(state: Path, checkpoint: Path) -> None:
    """The declared PEFT checkpoint folder, copied from a training state's adapter files."""
    with atomic_dir(checkpoint) as tmp:
        for name in (checkpointing.ADAPTER_CONFIG, checkpointing.ADAPTER_WEIGHTS):
            shutil.copy2(state / name, tmp / name)


def train_run(
    *,
    base_model_dir: str | Path,
    train_parquet: str | Path,
    out_dir: str | Path,
    method: MethodSpec,
    train: Mapping,
    lora: Mapping,
    protocol: TeacherProtocol,
    seed: int,
    log: Callable[[str], None] = print,
    trace_rollouts: int = 4,
    progress: bool = False,
) -> pd.DataFrame:
    """Train one (method, scale, seed) run into ``out_dir``, resuming if a state is there."""
    out_dir = Path(out_dir)
    resume_root = out_dir / RESUME_DIR
    accelerator = make_accelerator(train)
    rank, world = accelerator.process_index, accelerator.num_processes
    tokenizer = AutoTokenizer.from_pretrained(str(base_model_dir))
    tokenizer.padding_side = "right"  # the protocol's padding for training batches
    model = load_lora_student(base_model_dir, lora, seed, train)
    data = read_parquet(train_parquet)
    _check_training_data(data, str(train_parquet))

    accum = int(train["grad_accumulation"])
    micro = int(train["micro_batch_size"])
    if (micro * accum) % method.group_size:
        raise ValueError(
            f"methods.{method.name}.grpo.group_size {method.group_size} must divide "
            f"micro_batch_size x grad_accumulation ({micro} x {accum})"
        )
    micros_per_step = accum * world
    steps = int(train["steps"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        trainable, lr=train["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0
    )
    # Stepped once per optimisation step by hand (an accelerate-prepared scheduler would step
    # once per process).
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))
    model, optimizer = accelerator.prepare(model, optimizer)
    policy = accelerator.unwrap_model(model)
    device = accelerator.device

    deepspeed = bool(train.get("deepspeed_config"))
    optimizer_state = _StateInAccelerateFolder() if deepspeed else optimizer
    run_config = run_fingerprint_config(method, train, lora, protocol, seed)
    run_config["num_processes"] = world
    start_step, rows, traces = 0, [], []  # rows: one metrics record per step
    run_config["inputs"] = {
        "base_model": source_fingerprint(base_model_dir),
        "train_data": source_fingerprint(train_parquet),
    }
    latest = checkpointing.latest_complete_checkpoint(resume_root)
    if latest is not None:
        # A kept state is resumed only when it was made from this config and these inputs (a
        # retrained base model or a new training set reruns this job with the old state there).
        stale = checkpointing.state_config_differences(latest, run_config)
        if stale:
            log(
                f"[train] discarding the training states in {resume_root}: {latest.name} was "
                f"written under other values: {'; '.join(stale)}"
            )
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                shutil.rmtree(resume_root, ignore_errors=True)
            accelerator.wait_for_everyone()
            latest = None
    if latest is not None:
        resumed = checkpointing.load_training_state(
            latest,
            model=policy,
            optimizer=optimizer_state,
            scheduler=scheduler,
            python_rng=random.Random(seed),
            run_config=run_config,
        )
        start_step = int(resumed["step"])
        if deepspeed:
            accelerator.load_state(str(resume_root / f"deepspeed-step-{start_step:06d}"))
        if (resume_root / "train_metrics.parquet").exists():
            done = read_parquet(resume_root / "train_metrics.parquet")
            rows = done[done["step"] <= start_step].to_dict("records")
        if (resume_root / "token_traces.parquet").exists():
            done = read_parquet(resume_root / "token_traces.parquet")
            traces = [done[done["step"] <= start_step]]
        log(f"[train] resuming {method.name} seed {seed} after step {start_step} from {latest}")

    sampling = SamplingSettings(
        temperature=train["temperature"],
        top_p=train["top_p"],
        top_k=train["top_k"],
        max_new_tokens=train["max_new_tokens"],
    )
    max_total = int(train.get("max_total_length") or 10**9)
    rollouts = _Rollouts(
        train.get("rollout_backend", "hf"), str(base_model_dir), train, lora, out_dir
    )
    pad_id = tokenizer.pad_token_id
    save_at = set(checkpoint_steps(train))
    trace_at = {1, *save_at}
    bar = None
    if progress and accelerator.is_main_process:
        from tqdm import tqdm

        bar = tqdm(total=steps, initial=start_step, desc=f"{method.name} seed {seed}")

    def save_state(step: int) -> None:
        accelerator.wait_for_everyone()
        if deepspeed:
            # ZeRO-2 partitions the optimizer moments over the processes: each saves its part.
            accelerator.save_state(str(resume_root / f"deepspeed-step-{step:06d}"))
        if accelerator.is_main_process:
            state = checkpointing.state_dir(resume_root, step)
            checkpointing.save_training_state(
                state,
                model=policy,
                optimizer=optimizer_state,
                scheduler=scheduler,
                step=step,
                data_state={"rollouts_consumed": step * micros_per_step * micro},
                python_rng=random.Random(seed),
                run_config=run_config,
            )
            write_parquet(resume_root / "train_metrics.parquet", pd.DataFrame(rows))
            if traces:
                write_parquet(resume_root / "token_traces.parquet", pd.concat(traces))
            checkpointing.prune_states(resume_root, keep_steps=set())
        accelerator.wait_for_everyone()

    model.train()
    with checkpointing.PreemptionGuard(log=None) as guard:
        for step in range(start_step + 1, steps + 1):
            timings = dict.fromkeys(("rollout", "teacher", "student", "optimizer"), 0.0)
            sums = dict.fromkeys(COUNT_KEYS, 0.0)
            micro_metrics: list[dict[str, float]] = []
            # Phase 1: every rollout of this process's share of the step (GRPO normalises the
            # rewards of a problem's group_size rollouts, which may span micro-batches).
            shares = []
            for a in range(accum):
                global_micro = a * world + rank
                share_rows = rollout_rows(
                    len(data), seed, step, a, rank, world, micro, accum, method.group_size
                )
                shares.append(
                    _rollout_micro(
                        data=data,
                        rows=share_rows,
                        tokenizer=tokenizer,
                        policy=policy,
                        sampling=sampling,
                        rollouts=rollouts,
                        seed=seed,
                        step=step,
                        global_micro=global_micro,
                        max_total=max_total,
                        pad_id=pad_id,
                        rank=rank,
                        timings=timings,
                    )
                )
            advantages = None
            if method.grpo:
                rewards = torch.tensor([r for share in shares for r in share.rewards])
                advantages = grpo_sequence_advantages(rewards, method.group_size).split(micro)
            # Phase 2: teacher scoring, loss and backward, one micro-batch at a time.
            for a, share in enumerate(shares):
                global_micro = a * world + rank
                with accelerator.accumulate(model):
                    out = _learn_micro(
                        share=share,
                        advantages=None if advantages is None else advantages[a],
                        method=method,
                        model=model,
                        policy=policy,
                        tokenizer=tokenizer,
                        protocol=protocol,
                        seed=seed,
                        step=step,
                        global_micro=global_micro,
                        pad_id=pad_id,
                        device=device,
                        timings=timings,
                        trainable=trainable,
                        accelerator=accelerator,
                    )
                for key in COUNT_KEYS:
                    sums[key] += out["counts"].get(key, 0.0)
                if out["metrics"]:
                    micro_metrics.append(out["metrics"])
                if step in trace_at and global_micro == 0 and out["trace"] is not None:
                    traces.append(_trace_frame(out["trace"], step, trace_rollouts))

            t0 = time.perf_counter()
            lr_used = optimizer.param_groups[0]["lr"]
            # Gradient-norm clipping at 1.0: TRL's default max_grad_norm, which the OPSD
            # authors' trainer (built on TRL) inherits; the paper does not list it.
            if not accelerator.sync_gradients:
                raise RuntimeError("gradient accumulation out of step with the trainer's steps")
            grad_norm = accelerator.clip_grad_norm_(trainable, 1.0)  # None under DeepSpeed
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            timings["optimizer"] = time.perf_counter() - t0

            row = _reduce_step_metrics(accelerator, micro_metrics, sums, timings, device)
            for key, what in (
                ("empty_rollouts", "rollouts held only padding"),
                ("skipped_long_prompts", "prompts were longer than max_total_length"),
            ):
                if row[key]:
                    log(f"[train] step {step}: {int(row[key])} {what}; skipped (metric {key})")
            row.update(
                step=step, lr=lr_used, grad_norm=math.nan if grad_norm is None else float(grad_norm)
            )
            seconds = sum(timings.values())
            row["tokens_per_second"] = row["tokens"] / max(seconds, 1e-9)
            rows.append(row)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{row['loss']:.4f}", tok_s=f"{row['tokens_per_second']:.0f}")
            log(
                f"[train] {method.name} seed {seed} step {step}/{steps} "
                f"loss {row['loss']:.4f} acc {row['rollout_accuracy']:.2f} "
                f"{row['tokens_per_second']:.0f} tok/s"
            )
            preempted = _any_process(accelerator, guard.requested is not None)
            if step in save_at or preempted:
                save_state(step)
                if step in save_at and accelerator.is_main_process:
                    _export_adapter(
                        checkpointing.state_dir(resume_root, step), out_dir / f"checkpoint-{step}"
                    )
            if preempted:
                log(f"[train] {guard.requested}: state saved after step {step}; exiting to resume")
                raise SystemExit(checkpointing.PREEMPTED_EXIT_CODE)
    if bar is not None:
        bar.close()
    metrics = pd.DataFrame(rows)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        # The declared checkpoints of earlier steps, in case Snakemake removed them when the
        # killed job was rerun (the states under .resume keep every adapter).
        for step in sorted(save_at):
            if not (out_dir / f"checkpoint-{step}" / checkpointing.ADAPTER_WEIGHTS).exists():
                _export_adapter(
                    checkpointing.state_dir(resume_root, step), out_dir / f"checkpoint-{step}"
                )
        if traces:
            write_parquet(out_dir / "token_traces.parquet", pd.concat(traces, ignore_index=True))
        write_parquet(out_dir / "train_metrics.parquet", metrics)
        shutil.rmtree(resume_root, ignore_errors=True)
    accelerator.wait_for_everyone()
    return metrics


class _StateInAccelerateFolder:
    """Stands in for the optimizer in ``checkpointing`` when DeepSpeed saves the moments."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: Mapping) -> None:
        pass


def _any_process(accelerator, flag: bool) -> bool:
    if accelerator.num_processes == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=accelerator.device)
    return bool(accelerator.reduce(value, reduction="sum").item() > 0)


def _reduce_step_metrics(accelerator, micro_metrics, sums, timings, device) -> dict[str, float]:
    """Means of METRIC_KEYS over micro-batches and processes; sums of COUNT_KEYS; timings."""
    means = [
        float(pd.Series([m.get(k, math.nan) for m in micro_metrics], dtype=float).mean())
        if micro_metrics
        else math.nan
        for k in METRIC_KEYS
    ]
    values = torch.tensor([*means, *(sums[k] for k in COUNT_KEYS)], dtype=torch.float64)
    if accelerator.num_processes > 1:
        gathered = accelerator.gather(values.to(device)[None]).cpu()  # [world, K]
        n = len(METRIC_KEYS)
        means_t = torch.nanmean(gathered[:, :n], dim=0)
        counts_t = gathered[:, n:].sum(0)
        values = torch.cat([means_t, counts_t])
    row = dict(zip([*METRIC_KEYS, *COUNT_KEYS], values.tolist(), strict=True))
    row.update({f"seconds_{k}": v for k, v in timings.items()})
    return row


def _trace_frame(trace: Mapping[str, Any], step: int, n_rollouts: int) -> pd.DataFrame:
    mask = trace["mask"][:n_rollouts].bool()
    rows = []
    for b in range(mask.shape[0]):
        for t in range(int(mask[b].sum())):
            row = {
                "step": step,
                "rollout": b,
                "problem_id": trace["problem_ids"][b],
                "position": t,
                "token_id": int(trace["tokens"][b, t]),
            }
            for key in ("r", "teacher_entropy", "gate", "coefficient"):
                if key in trace:
                    row[key] = float(trace[key][b, t])
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class _Share:
    """One micro-batch's rollouts: which rows, their prompts, samples and rewards."""

    rows: list[int]  # data row of each rollout (a problem repeats group_size times)
    ids: list[str]
    teacher_inputs: list[tuple[str, str, str]]  # (problem, reference solution, answer)
    prompt_ids: list[list[int]]
    samples: list  # generation.Sample per rollout, or [] when the prompts were too long
    rewards: list[float]
    skipped_long_prompts: int = 0


def _rollout_micro(
    *,
    data,
    rows,
    tokenizer,
    policy,
    sampling,
    rollouts,
    seed,
    step,
    global_micro,
    max_total,
    pad_id,
    rank,
    timings,
) -> _Share:
    problems = [data["problem"].iloc[i] for i in rows]
    ids = [str(data["id"].iloc[i]) for i in rows]
    teacher_inputs = [
        (data["problem"].iloc[i], data["reference_solution"].iloc[i], str(data["answer"].iloc[i]))
        for i in rows
    ]
    prompts = [render_student_prompt(tokenizer, p) for p in problems]
    prompt_ids = [encode(tokenizer, p) for p in prompts]
    longest = max(len(p) for p in prompt_ids)
    if longest + 1 > max_total:
        # A rollout must fit max_total_length together with its prompt; never truncate one.
        return _Share(rows, ids, teacher_inputs, prompt_ids, [], [0.0] * len(rows), len(rows))
    settings = dataclasses.replace(
        sampling, max_new_tokens=min(sampling.max_new_tokens, max_total - longest)
    )
    t0 = time.perf_counter()
    samples = rollouts.sample(
        policy, tokenizer, prompts, settings, derive_seed(seed, step, global_micro, "rollout"), rank
    )
    timings["rollout"] += time.perf_counter() - t0
    rewards = [
        reward_exact_match(s.text, str(data["answer"].iloc[i]))
        for s, i in zip(samples, rows, strict=True)
    ]
    return _Share(rows, ids, teacher_inputs, prompt_ids, samples, rewards)


def _learn_micro(
    *,
    share: _Share,
    advantages,
    method,
    model,
    policy,
    tokenizer,
    protocol,
    seed,
    step,
    global_micro,
    pad_id,
    device,
    timings,
    trainable,
    accelerator,
) -> dict:
    """Teacher scoring, the method's loss and backward for one micro-batch of rollouts."""
    counts = {
        "skipped_long_prompts": float(share.skipped_long_prompts),
        "empty_rollouts": 0.0,
        "rollouts": 0.0,
        "tokens": 0.0,
    }
    responses = [s.token_ids for s in share.samples]
    kept = [i for i, r in enumerate(responses) if any(t != pad_id for t in r)]
    counts["empty_rollouts"] = float(len(responses) - len(kept))
    if not kept:
        # Every process must still join the gradient all-reduce.
        _zero_backward(trainable, model, accelerator)
        return {"counts": counts, "metrics": {}, "trace": None}

    kept_responses = [responses[i] for i in kept]
    width = max(len(r) for r in kept_responses)
    mask = torch.zeros((len(kept), width), device=device)
    tokens = torch.full((len(kept), width), pad_id, dtype=torch.long, device=device)
    for row, r in enumerate(kept_responses):
        mask[row, : len(r)] = 1.0
        tokens[row, : len(r)] = torch.tensor(r, device=device)

    t0 = time.perf_counter()
    # One teacher prompt per view and rollout: [rollout][view] (AVSD has three views).
    prompts_by_rollout = [
        [
            encode(tokenizer, render_teacher_prompt(tokenizer, problem, view, protocol))
            for view in teacher_views(method, reference, answer)
        ]
        for problem, reference, answer in (share.teacher_inputs[i] for i in kept)
    ]
    view_logits = []
    for t_prompt_ids in zip(*prompts_by_rollout, strict=True):
        t_ids, t_mask, t_len = right_pad_concat(list(t_prompt_ids), kept_responses, pad_id)
        with torch.no_grad(), policy.disable_adapter():
            logits = policy(input_ids=t_ids.to(device), attention_mask=t_mask.to(device)).logits
            view_logits.append(response_logits(logits, t_len, width).float())
    timings["teacher"] += time.perf_counter() - t0

    t0 = time.perf_counter()
    s_ids, s_mask, s_len = right_pad_concat(
        [share.prompt_ids[i] for i in kept], kept_responses, pad_id
    )
    # LoRA dropout draws from torch's global generator: seed it per micro-batch so that the
    # masks depend on (seed, step, micro-batch) only -- the same on 1 or N processes, and after
    # a resume.
    torch.manual_seed(derive_seed(seed, step, global_micro, "dropout"))
    student_logits = response_logits(
        model(input_ids=s_ids.to(device), attention_mask=s_mask.to(device)).logits, s_len, width
    )
    kept_advantages = None if advantages is None else advantages[kept].to(device)
    result = method_loss(method, student_logits, view_logits, tokens, mask, kept_advantages)
    accelerator.backward(result.loss)
    timings["student"] += time.perf_counter() - t0

    correct = [share.rewards[i] for i in kept]
    counts["rollouts"] = float(len(kept))
    counts["tokens"] = float(mask.sum())
    metrics = dict(result.metrics)
    metrics.update(
        response_length=float(mask.sum(1).mean()),
        truncated_fraction=sum(share.samples[i].finish_reason == "length" for i in kept)
        / len(kept),
        rollout_accuracy=sum(correct) / len(correct),
        reward_mean=sum(correct) / len(correct),
    )
    trace = {
        **{k: v.detach().cpu() for k, v in result.trace.items()},
        "mask": mask.cpu(),
        "tokens": tokens.cpu(),
        "problem_ids": [share.ids[i] for i in kept],
    }
    return {"counts": counts, "metrics": metrics, "trace": trace}


def _zero_backward(trainable, model, accelerator) -> None:
    """A backward pass that contributes nothing, so that every process joins the all-reduce."""
    loss = sum(p.sum() for p in trainable) * 0.0
    accelerator.backward(loss)


# ----------------------------------------------------------------------------------------------
# Command line (accelerate launch, tests)
# ----------------------------------------------------------------------------------------------


def run_from_json(path: str | Path) -> pd.DataFrame:
    """Train from a JSON file holding train_run's keyword arguments (protocol as its mapping)."""
    spec = json.loads(Path(path).read_text())
    return train_run(
        base_model_dir=spec["base_model_dir"],
        train_parquet=spec["train_parquet"],
        out_dir=spec["out_dir"],
        method=MethodSpec.from_config(spec["method_name"], spec["method"]),
        train=spec["train"],
        lora=spec["lora"],
        protocol=TeacherProtocol.from_config(spec["protocol"]),
        seed=int(spec["seed"]),
        trace_rollouts=int(spec.get("trace_rollouts", 4)),
        progress=bool(spec.get("progress", False)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="JSON file with train_run's arguments")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    run_from_json(args.spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
