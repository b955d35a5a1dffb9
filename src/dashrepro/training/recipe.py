"""The training recipe: ``DistillationRecipe.setup()``, ``.train()``, ``.save_checkpoint()``.

One (method, scale, seed) run of LoRA on-policy self-distillation in the torchtune-recipe
shape: ``setup`` builds the accelerator, tokenizer, student (base + LoRA), AdamW and its linear
schedule, and the run's ``TrainingState`` (``resume``), which the ``Checkpointer`` restores
from the kept states or leaves at step 0; ``train`` runs the step loop (one step:
``_train_step``), hands the traced rollouts to the ``RolloutTracer`` and the state to the
checkpointer when one is due.

    recipe = DistillationRecipe(RunSpec.from_json("run.json"))
    recipe.setup()
    metrics = recipe.train()   # a DataFrame, also written to <out_dir>/train_metrics.parquet
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from dashrepro.hub import source_fingerprint
from dashrepro.io import load_tokenizer, read_parquet
from dashrepro.sampling import derive_seed
from dashrepro.training.batching import (
    BatchLayout,
    check_training_data,
    response_batch,
    rollout_rows,
    student_response_logits,
    teacher_response_logits,
)
from dashrepro.training.distributed import (
    StateInAccelerateFolder,
    any_process,
    make_accelerator,
    unwrapped_model,
    zero_backward,
)
from dashrepro.training.losses import grpo_sequence_advantages, method_loss
from dashrepro.training.metrics import (
    MicroResult,
    StepTally,
    micro_counts,
    micro_result,
    parameter_change_norm,
    reduce_step_metrics,
    rollout_frame,
    rollout_table,
)
from dashrepro.training.model import build_optimizer, load_lora_student
from dashrepro.training.preemption import PREEMPTED_EXIT_CODE, PreemptionGuard
from dashrepro.training.resume import Checkpointer, TrainingState
from dashrepro.training.rollouts import RolloutPhase, Share
from dashrepro.training.run_spec import RunSpec, run_fingerprint_config
from dashrepro.training.step_tracking import StepTracking
from dashrepro.training.teacher import (
    generates_analysis,
    view_prompt_ids,
)
from dashrepro.training.token_traces import RolloutTracer


class DistillationRecipe:
    """One run of LoRA on-policy self-distillation; see the module docstring."""

    def __init__(self, spec: RunSpec, log: Callable[[str], None] = print):
        self.spec = spec
        self.method = spec.method
        self.seed = spec.seed
        self.log = log
        self.out_dir = Path(spec.out_dir)
        self.deepspeed = bool(spec.train.deepspeed_config)
        self.state: TrainingState | None = None  # what a resume restores (setup makes it)
        self.bar = None

    # --- Setup ---

    def setup(self) -> None:
        """Accelerator, tokenizer, student, data, optimizer; resume or discard kept states."""
        spec, train = self.spec, self.spec.train
        self.accelerator = make_accelerator(train)
        self.tokenizer = load_tokenizer(spec.base_model_dir)
        self.tokenizer.padding_side = "right"  # the protocol's padding for training batches
        self.model = load_lora_student(spec.base_model_dir, spec.lora, self.seed, train)
        self.data = read_parquet(spec.train_parquet)
        check_training_data(self.data, str(spec.train_parquet))
        self.layout = self._batch_layout()
        self.steps = train.steps
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer, self.scheduler = build_optimizer(self.trainable, train.lr, self.steps)
        self.model, self.optimizer = self.accelerator.prepare(self.model, optimizer)
        self.policy = unwrapped_model(self.accelerator, self.model, self.deepspeed)
        self.device = self.accelerator.device
        self.run_config = self._run_config()
        optimizer_state = StateInAccelerateFolder() if self.deepspeed else self.optimizer
        self.state = TrainingState(self.policy, optimizer_state, self.scheduler)
        self.checkpointer = Checkpointer(
            self.out_dir,
            self.accelerator,
            self.run_config,
            name=f"{self.method.name} seed {self.seed}",
            deepspeed=self.deepspeed,
            log=self.log,
        )
        self.checkpointer.restore(self.state)
        self.tracking = StepTracking(spec.tracked, self.checkpointer.root, self.rank == 0)
        self.tracking.start(self.run_config, self.state.step, self.log)
        self.rollouts = RolloutPhase(
            self.tokenizer,
            train,
            spec.lora,
            str(spec.base_model_dir),
            self.checkpointer.root / "rollout-adapter",
            self.rank,
        )
        self.pad_id = self.tokenizer.pad_token_id
        self.analyses = generates_analysis(self.method, spec.protocol)
        self.max_positions = getattr(self.policy.config, "max_position_embeddings", None)
        self.save_at = set(train.checkpoint_steps())
        self.tracer = RolloutTracer({1, *self.save_at}, spec.trace_rollouts, train.loss_temperature)
        if spec.progress and self.accelerator.is_main_process:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.steps,
                initial=self.state.step,
                desc=f"{self.method.name} seed {self.seed}",
            )

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    def _batch_layout(self) -> BatchLayout:
        micro, accum = self.spec.train.micro_batch_size, self.spec.train.grad_accumulation
        group = self.method.group_size
        if (micro * accum) % group:
            raise ValueError(
                f"methods.{self.method.name}.grpo.group_size {group} must divide "
                f"micro_batch_size x grad_accumulation ({micro} x {accum})"
            )
        world = self.accelerator.num_processes
        return BatchLayout(micro=micro, accum=accum, world=world, rank=self.rank, group=group)

    def _run_config(self) -> dict:
        spec = self.spec
        config = run_fingerprint_config(
            self.method, spec.train, spec.lora, spec.protocol, self.seed
        )
        config["num_processes"] = self.layout.world
        config["inputs"] = {
            "base_model": source_fingerprint(spec.base_model_dir),
            "train_data": source_fingerprint(spec.train_parquet),
        }
        return config

    # --- Training ---

    def train(self) -> pd.DataFrame:
        """Steps from the resumed one to ``train.steps``; the metrics, one row per step."""
        self.model.train()
        # A training state every `state_every_minutes` of training as well as at checkpoints,
        # so a job killed without notice (SIGKILL, a node failure) loses at most that much.
        every = self.spec.train.state_every_minutes
        last_state = time.monotonic()
        with PreemptionGuard(log=None) as guard:
            for step in range(self.state.step + 1, self.steps + 1):
                self._train_step(step)
                self.state.step = step
                preempted = any_process(self.accelerator, guard.requested is not None)
                due = every is not None and any_process(
                    self.accelerator, time.monotonic() - last_state >= 60.0 * float(every)
                )
                if step in self.save_at or preempted or due:
                    self.save_checkpoint()
                    last_state = time.monotonic()
                if preempted:
                    self.log(
                        f"[train] {guard.requested}: state saved after step {step}; "
                        "exiting to resume"
                    )
                    raise SystemExit(PREEMPTED_EXIT_CODE)
        return self._finish()

    def _train_step(self, step: int) -> None:
        """One step (paper *DASH: divergence-adaptive supervision horizons*, Alg. ``alg:dash``):

        1. rollout phase: every rollout of this process's share of the step (``rollouts``;
           GRPO normalises the rewards of a problem's rollouts, which may span micro-batches);
           in ``reason_first`` mode the teacher (adapter off) then writes an analysis per
           rollout;
        2. learning phase, one micro-batch at a time: the privileged teacher -- the same network
           with the adapter disabled -- scores the student's tokens by teacher forcing after its
           own context (``teacher``: problem, teacher view of the reference solution, protocol
           instructions, and the analysis in ``reason_first`` mode), detached; the student's
           logits are recomputed with LoRA dropout seeded per micro-batch; the objective's loss
           (``losses``) is back-propagated;
        3. AdamW step with the gradient norm clipped at 1.0, then the schedule's step;
        4. metrics (``metrics``); ``train`` then saves a training state on checkpoint steps,
           every ``state_every_minutes`` (if set) or on a preemption notice (SIGTERM/SIGUSR1:
           saved after the step, then exit with ``preemption.PREEMPTED_EXIT_CODE`` so that a
           retry resumes it).
        """
        tally = StepTally()
        shares = self._rollout_phase(step, tally)
        self._learn_phase(step, shares, tally)
        lr_used, grad_norm = self._optimizer_step(tally)
        self._record_step(step, tally, lr_used, grad_norm)

    def _rollout_phase(self, step: int, tally: StepTally) -> list[Share]:
        """Every rollout of this process's share of the step, one Share per micro-batch, in
        calls of ``train.rollout_call_rows`` rows (absent: one call per micro-batch); each call
        seeded as its first micro-batch, the analyses likewise."""
        accum = range(self.layout.accum)
        rows = [rollout_rows(len(self.data), self.seed, step, self.layout, a) for a in accum]
        micro = [self.layout.global_micro(a) for a in accum]
        analyses = None
        if self.analyses:
            seeds = [derive_seed(self.seed, step, m, "analysis") for m in micro]
            analyses = (self.spec.protocol, self.max_positions, seeds)
        return self.rollouts.step_shares(
            self.policy, self.data, rows, [derive_seed(self.seed, step, m, "rollout") for m in micro],
            tally.timings, call_rows=self.spec.train.rollout_call_rows, analyses=analyses,
        )  # fmt: skip

    def _learn_phase(self, step: int, shares: list[Share], tally: StepTally) -> None:
        """Teacher scoring, loss and backward, one micro-batch at a time."""
        advantages = None
        if self.method.grpo:
            rewards = torch.tensor([r for share in shares for r in share.rewards])
            advantages = grpo_sequence_advantages(rewards, self.method.group_size).split(
                self.layout.micro
            )
        for a, share in enumerate(shares):
            global_micro = self.layout.global_micro(a)
            with self.accelerator.accumulate(self.model):
                out = self._learn_micro(
                    share, None if advantages is None else advantages[a], step, global_micro, tally
                )
            tally.add(out)
            if self.tracer.traces(step, global_micro) and out.trace is not None:
                self.tracer.add_trace(self.state.records, out.trace, step)

    def _learn_micro(self, share: Share, advantages, step: int, global_micro: int, tally):
        """Teacher scoring, the method's loss and backward for one micro-batch of rollouts."""
        responses = [s.token_ids for s in share.samples]
        kept = [i for i, r in enumerate(responses) if any(t != self.pad_id for t in r)]
        if not kept:
            # Every process must still join the gradient all-reduce.
            zero_backward(self.trainable, self.accelerator)
            return MicroResult(micro_counts(share, kept, None), {}, None)
        kept_responses = [responses[i] for i in kept]
        tokens, mask = response_batch(kept_responses, self.pad_id, self.device)

        t0 = time.perf_counter()
        # One teacher context per rollout and view: [rollout][view] (AVSD has three views).
        contexts = [
            view_prompt_ids(
                self.tokenizer,
                self.method,
                self.spec.protocol,
                share.teacher_inputs[i],
                None if share.analyses is None else share.analyses[i].token_ids,
                self.rollouts.max_total,
            )
            for i in kept
        ]
        view_logits = self._teacher_logits(contexts, kept_responses)
        tally.timings["teacher"] += time.perf_counter() - t0
        traced = self.tracer.traces(step, global_micro)
        if traced:
            self.tracer.add_contexts(
                self.state.records, self.tokenizer, step, self.method, share, kept, contexts
            )

        t0 = time.perf_counter()
        # LoRA dropout draws from torch's global generator: seed it per micro-batch so that the
        # masks depend on (seed, step, micro-batch) only -- the same on 1 or N processes, and
        # after a resume.
        dropout_seed = derive_seed(self.seed, step, global_micro, "dropout")
        student_logits = self._student_logits(share, kept, kept_responses, dropout_seed)
        kept_advantages = None if advantages is None else advantages[kept].to(self.device)
        result = method_loss(
            self.method,
            student_logits,
            view_logits,
            tokens,
            mask,
            kept_advantages,
            temperature=self.spec.train.loss_temperature,
        )
        if traced:
            result.trace["divergence"] = self.tracer.divergence(student_logits, view_logits, mask)
        self.accelerator.backward(result.loss)
        tally.timings["student"] += time.perf_counter() - t0
        return micro_result(share, kept, result, tokens, mask, micro_batch=global_micro)

    def _teacher_logits(self, contexts: list[list[list[int]]], responses: list[list[int]]):
        """The teacher's response logits [B, T, V] per view (``teacher_response_logits``)."""
        return teacher_response_logits(self.policy, contexts, responses, self.pad_id, self.device)

    def _student_logits(self, share: Share, kept, responses, dropout_seed: int) -> torch.Tensor:
        """The student's response logits [B, T, V], with grad, LoRA dropout seeded."""
        prompts = [share.prompt_ids[i] for i in kept]
        torch.manual_seed(dropout_seed)
        return student_response_logits(self.model, prompts, responses, self.pad_id, self.device)

    def _optimizer_step(self, tally: StepTally) -> tuple[float, float | None]:
        """Clip, step AdamW and the schedule; the learning rate used and the gradient norm."""
        t0 = time.perf_counter()
        lr_used = self.optimizer.param_groups[0]["lr"]
        # Gradient-norm clipping at 1.0: TRL's default max_grad_norm, which the OPSD authors'
        # trainer (built on TRL) inherits; the paper does not list it.
        if not self.accelerator.sync_gradients:
            raise RuntimeError("gradient accumulation out of step with the trainer's steps")
        grad_norm = self.accelerator.clip_grad_norm_(self.trainable, 1.0)  # None under DeepSpeed
        # The update's norm from copies of the weights: nothing the step computes changes. Under
        # DeepSpeed the engine has already stepped inside the last backward: update_norm is NaN.
        before = None if self.deepspeed else [p.detach().clone() for p in self.trainable]
        self.optimizer.step()
        if before is not None:
            tally.update_norm = parameter_change_norm(self.trainable, before)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        tally.timings["optimizer"] = time.perf_counter() - t0
        return lr_used, grad_norm

    def _record_step(self, step: int, tally: StepTally, lr_used: float, grad_norm) -> None:
        rollouts = rollout_table(self.accelerator, tally, self.device)  # every process's
        row = reduce_step_metrics(self.accelerator, tally, self.device, rollouts)
        for key, what in (
            ("empty_rollouts", "rollouts held only padding"),
            ("skipped_long_prompts", "prompts were longer than max_total_length"),
        ):
            if row[key] and self.accelerator.is_main_process:
                self.log(f"[train] step {step}: {int(row[key])} {what}; skipped (metric {key})")
        row.update(
            step=step, lr=lr_used, grad_norm=math.nan if grad_norm is None else float(grad_norm)
        )
        row["update_norm"] = tally.update_norm
        seconds = sum(tally.timings.values())
        row["tokens_per_second"] = row["tokens"] / max(seconds, 1e-9)
        row["tracker_failures"] = self.tracking.send(row)  # sent live, on the main process
        self.state.records.rows.append(row)
        self.state.records.weights.append(rollout_frame(rollouts, step))
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{row['loss']:.4f}", tok_s=f"{row['tokens_per_second']:.0f}")
        if not self.accelerator.is_main_process:
            return  # the metrics are reduced over processes: one line per step, from rank 0
        self.log(
            f"[train] {self.method.name} seed {self.seed} step {step}/{self.steps} "
            f"loss {row['loss']:.4f} acc {row['rollout_accuracy']:.2f} "
            f"{row['tokens_per_second']:.0f} tok/s"
        )

    # --- Checkpoints and the end of the run ---

    def save_checkpoint(self) -> None:
        """The training state after the current step (every process takes part), and on a
        checkpoint step the declared PEFT folder ``checkpoint-<step>``."""
        # The steps kept for W&B go out before the state that a resume would start after.
        self.tracking.flush(self.state.records.rows)
        self.checkpointer.save(self.state, export=self.state.step in self.save_at)

    def _finish(self) -> pd.DataFrame:
        """Write the run's records (main process) and remove the kept training states."""
        if self.bar is not None:
            self.bar.close()
        records = self.state.records
        self.tracking.finish(records.rows)
        metrics = records.metrics()
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            self.checkpointer.export_missing(self.save_at)
            records.write(self.out_dir)
            self.checkpointer.remove_states()
        self.accelerator.wait_for_everyone()
        return metrics
