"""Training throughput of our OPSD / DASH trainer against TRL's ``DistillationTrainer``.

Measures steps/s and generated-tokens/s of one optimisation step (student rollout, teacher
scoring, student forward + loss + backward, optimiser) on the embedded tiny Qwen3-architecture
model, for

- ``ours-OPSD`` / ``ours-DASH``  -- ``dashrepro.training.trainer.train_run`` with the config's ``opsd`` and
  ``dash`` methods (privileged teacher = the same network with the LoRA adapter disabled, scoring
  the student's tokens after the problem + reference solution + the protocol's instructions);
- ``ours-*/stu-ctx``  -- (``--teacher-context student`` or ``both``) the same, but the teacher is
  given the student's own prompt, i.e. exactly the input TRL's teacher sees, so the comparison
  with TRL is not blurred by the privileged prompt being several times longer;
- ``TRL``  -- ``trl.DistillationTrainer`` (TRL 1.16.0, ``trl/trainer/distillation_trainer.py``),
  configured as on-policy self-distillation: ``beta=0.0`` (forward KL), the student is base +
  the same LoRA adapter as ours (built by our ``load_lora_student``, same seed), the teacher a
  frozen copy of the same base weights; fully on-policy (this trainer always samples from the
  student: TRL 1.16 removed ``lmbda``, which the older ``trl.experimental`` version had); same
  batch size, prompts (same rows in the same order), ``max_new_tokens``, sampling (temperature,
  top-p, top-k), learning rate, AdamW betas/eps, no weight decay, linear decay without warmup,
  gradient clipping at 1.0, fp32, no gradient checkpointing.

A step's time is the wall-clock time between the ends of two consecutive steps, for both
trainers alike (ours: the trainer's per-step ``log`` call; TRL: ``TrainerCallback.on_step_end``),
so anything a trainer does per step counts; the first ``--warmup-steps`` steps are left out.
Tokens are the generated response tokens (EOS included, padding excluded) per step.

DASH's cost over OPSD is reported twice: as the end-to-end step-time difference between the two
runs (noisy: rollouts differ once the adapters diverge), and measured directly, as the time spent
inside the DASH coefficient function (``objectives.AGGREGATIONS["dash"]``, wrapped with a timer in
this process) and inside the whole ``objectives.aggregate`` call, against the step time.

The base model is built in a temporary folder: the tokenizer and the architecture of the
config's scale (``tiny`` by default), randomly initialised -- untrained -- unless
``--sft-steps N`` warm-starts it by N steps of the pipeline's SFT. An untrained model almost
never samples EOS, so every rollout runs to ``max_new_tokens`` in every trainer: equal work per
step. ``--base-model-dir`` uses an existing base model folder instead (e.g. the pipeline's
``results/tiny/base_model/tiny``); rollouts then stop at EOS and lengths differ between runs,
which tokens/s accounts for.

What still differs between the trainers (TRL 1.16 offers no way to align these):

- teacher input: TRL's teacher scores the student's own ``prompt + completion`` ids (no
  privileged context); ours-OPSD/DASH put the privileged prompt (~10x the student prompt here)
  in front -- the ``/stu-ctx`` rows remove exactly this difference;
- logits: ours runs both forwards through ``lm_head`` over every position and gathers the
  response rows; TRL runs the backbones only and projects the completion positions chunk by
  chunk inside its loss (with the sampling temperature applied to both distributions there).
  So TRL's "teacher" share is the teacher backbone alone; ours includes the teacher's logits;
- rollouts: both sample with Hugging Face ``generate``; ours switches the model to eval mode for
  it (LoRA dropout off), TRL samples in train mode (LoRA dropout on);
- padding: ours right-pads ``[prompt | response]`` rows; TRL left-pads prompts and right-pads
  completions. The untrained model's prompts differ by a few tokens at most, so this is small;
- teacher weights: ours disables the adapter on the student module; TRL holds a second copy;
- in the ``/stu-ctx`` and TRL runs teacher and student start identical (LoRA B = 0, same input),
  so their loss is 0 -- the same arithmetic runs regardless, so throughput is unaffected.

Timings are noisy on a shared machine; the script runs every trainer ``--repeats`` times in
alternating order, pools the steps, and prints the load average. ``--threads`` defaults to 1
(see the flag's comment).

Setup (a scratch virtual environment ``.benchvenv``, git-ignored; nothing here touches ``.venv``)::

    python3.11 -m venv .benchvenv
    .benchvenv/bin/pip install torch==2.13.0
    .benchvenv/bin/pip install -c envs/cpu-constraints.txt -e .
    .benchvenv/bin/pip install -c envs/cpu-constraints.txt \\
        trl==1.16.0 accelerate==1.15.0 datasets==5.2.0

Run (about 2-3 minutes on 2 CPU cores with the defaults)::

    .benchvenv/bin/python benchmarks/train_throughput.py
    .benchvenv/bin/python benchmarks/train_throughput.py --steps 4 --warmup-steps 1 \\
        --repeats 1 --micro-batch-size 8 --max-new-tokens 32          # quick smoke run
    .benchvenv/bin/python benchmarks/train_throughput.py --only ours --teacher-context student
    .benchvenv/bin/python benchmarks/train_throughput.py \\
        --base-model-dir results/tiny/base_model/tiny                 # the pipeline's SFT'd model
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import random
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = re.compile(r"\bstep (\d+)/\d+\b")


@dataclass
class Run:
    """Per-measured-step records of one trainer run (warm-up steps already dropped)."""

    name: str
    seconds: list[float]
    tokens: list[float]
    rollout: list[float]
    teacher: list[float]
    coefficients: list[float] = field(default_factory=list)  # DASH/OPSD coefficient function
    aggregate: list[float] = field(default_factory=list)  # whole objectives.aggregate call
    prompt_tokens: float = float("nan")  # mean student prompt length
    teacher_input_tokens: float = float("nan")  # mean teacher prompt length

    @property
    def steps_per_second(self) -> float:
        return len(self.seconds) / sum(self.seconds)

    @property
    def tokens_per_second(self) -> float:
        return sum(self.tokens) / sum(self.seconds)

    @property
    def mean_step(self) -> float:
        return statistics.fmean(self.seconds)


# ----------------------------------------------------------------------------------------------
# Shared inputs: data, tokenizer, base model
# ----------------------------------------------------------------------------------------------


def build_inputs(args, config: dict, work: Path) -> tuple[Path, Path]:
    """Training parquet and base-model folder (model + tokenizer) for both trainers."""
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.embedded.synthetic_data import make_dataset

    data_cfg = config["data"]
    benchmarks = {
        name: {"task": spec["task"], "n": spec["n_problems"]}
        for name, spec in config["benchmarks"].items()
    }
    train, _ = make_dataset(data_cfg["n_train"], benchmarks, data_cfg["seed"])
    train_parquet = work / "train.parquet"
    train.to_parquet(train_parquet)
    if args.base_model_dir is not None:
        return train_parquet, Path(args.base_model_dir)

    from dashrepro.embedded.tiny_model import build_tiny_qwen3, count_parameters
    from dashrepro.embedded.tiny_tokenizer import train_tokenizer

    scale = config["scales"][args.scale]
    # The tokenizer is trained as the pipeline's train_tokenizer rule does (training text plus the
    # protocol strings), so prompt lengths in tokens match the pipeline's.
    texts = [*train["problem"], *train["reference_solution"], *config["protocol"].values()]
    tokenizer = train_tokenizer(texts, data_cfg["tokenizer_vocab_size"])
    sft = scale["sft"]
    model = build_tiny_qwen3(
        scale["architecture"],
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        sft["seed"],
    )
    state = "untrained"
    if args.sft_steps > 0:
        from dashrepro.embedded.sft import build_sft_examples, run_sft

        protocol = TeacherProtocol.from_config(config["protocol"])
        examples = build_sft_examples(
            train, tokenizer, protocol, sft["teacher_fraction"], sft["seed"]
        )
        run_sft(model, examples, {**sft, "steps": args.sft_steps}, sft["seed"], log=lambda _: None)
        state = f"SFT {args.sft_steps} steps"
    base_dir = work / "base_model"
    model.save_pretrained(str(base_dir))
    tokenizer.save_pretrained(str(base_dir))
    print(
        f"base model: tiny Qwen3, {count_parameters(model):,} parameters, vocab {len(tokenizer)}, "
        f"{state}"
    )
    return train_parquet, base_dir


def train_settings(args, config: dict) -> dict:
    train = dict(config["scales"][args.scale]["train"])
    train.update(
        steps=args.warmup_steps + args.steps,
        grad_accumulation=1,
        # Past the last step: no checkpoint is written inside the timed loop.
        checkpoint_every=args.warmup_steps + args.steps + 1,
    )
    # The comparison is the CPU one, like for like with TRL's settings below: fp32 weights and
    # Hugging Face generate for rollouts (GPU entries of the config would not run here anyway).
    train.update(precision="fp32", rollout_backend="hf", gradient_checkpointing=False)
    if args.micro_batch_size is not None:
        train["micro_batch_size"] = args.micro_batch_size
    if args.max_new_tokens is not None:
        train["max_new_tokens"] = args.max_new_tokens
    return train


def student_context_protocol():
    """A teacher protocol whose user message is the problem alone: the student's prompt."""
    from dashrepro.data.prompts import TeacherProtocol

    return TeacherProtocol(template="{problem}", analysis_instruction="", transition_instruction="")


def mean_prompt_lengths(base_dir: Path, train_parquet: Path, protocol, rows: int = 256):
    from transformers import AutoTokenizer

    from dashrepro.data.prompts import render_student_prompt, render_teacher_prompt

    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    frame = pd.read_parquet(train_parquet).head(rows)
    student, teacher = [], []
    for problem, solution in zip(frame["problem"], frame["reference_solution"], strict=True):
        student.append(
            len(
                tokenizer(render_student_prompt(tokenizer, problem), add_special_tokens=False)[
                    "input_ids"
                ]
            )
        )
        prompt = render_teacher_prompt(tokenizer, problem, solution, protocol)
        teacher.append(len(tokenizer(prompt, add_special_tokens=False)["input_ids"]))
    return statistics.fmean(student), statistics.fmean(teacher)


# ----------------------------------------------------------------------------------------------
# Our trainer
# ----------------------------------------------------------------------------------------------


def run_ours(args, config, method_name, base_dir, train_parquet, work, teacher_context) -> Run:
    from dashrepro import objectives
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.trainer import train_run

    method = MethodSpec.from_config(method_name, config["methods"][method_name])
    if teacher_context == "privileged":
        protocol = TeacherProtocol.from_config(config["protocol"])
        name = f"ours-{method_name.upper()}"
    else:
        protocol = student_context_protocol()
        name = f"ours-{method_name.upper()}/stu-ctx"

    # Timers around the coefficient function and the whole aggregation: the trainer reaches both
    # through module attributes, so wrapping them here times exactly what train_run runs.
    # functools.wraps keeps the signature, which aggregate() inspects for accepted parameters.
    bucket = {"coefficients": 0.0, "aggregate": 0.0}
    calls = {"coefficients": 0}
    coef_fn = objectives.AGGREGATIONS[method.aggregation]
    aggregate_fn = objectives.aggregate

    @functools.wraps(coef_fn)
    def timed_coefficients(*a, **k):
        calls["coefficients"] += 1
        t0 = time.perf_counter()
        try:
            return coef_fn(*a, **k)
        finally:
            bucket["coefficients"] += time.perf_counter() - t0

    @functools.wraps(aggregate_fn)
    def timed_aggregate(*a, **k):
        t0 = time.perf_counter()
        try:
            return aggregate_fn(*a, **k)
        finally:
            bucket["aggregate"] += time.perf_counter() - t0

    step_end: dict[int, float] = {}
    per_step: dict[int, dict] = {}

    def log(message: str) -> None:
        # train_run calls log once at the end of every step, after the optimiser: the step clock.
        match = STEP_LINE.search(message)
        if match:
            step = int(match.group(1))
            step_end[step] = time.perf_counter()
            per_step[step] = dict(bucket)
            bucket.update(coefficients=0.0, aggregate=0.0)

    objectives.AGGREGATIONS[method.aggregation] = timed_coefficients
    objectives.aggregate = timed_aggregate
    try:
        metrics = train_run(
            base_model_dir=base_dir,
            train_parquet=train_parquet,
            # A fresh folder per run: train_run resumes from a state it finds in out_dir.
            out_dir=tempfile.mkdtemp(prefix="ours-", dir=work),
            method=method,
            train=train_settings(args, config),
            lora=config["scales"][args.scale]["lora"],
            protocol=protocol,
            seed=args.seed,
            log=log,
        )
    finally:
        objectives.AGGREGATIONS[method.aggregation] = coef_fn
        objectives.aggregate = aggregate_fn

    if not calls["coefficients"]:
        raise RuntimeError(
            f"train_run never called objectives.AGGREGATIONS[{method.aggregation!r}]: the direct "
            "coefficient timing no longer matches the trainer"
        )
    metrics = metrics.set_index("step")
    measured = [s for s in metrics.index if s > args.warmup_steps]
    if any(s not in step_end or s - 1 not in step_end for s in measured):
        raise RuntimeError("train_run's per-step log lines were not recognised; cannot time steps")
    student_len, teacher_len = mean_prompt_lengths(base_dir, train_parquet, protocol)
    return Run(
        name=name,
        seconds=[step_end[s] - step_end[s - 1] for s in measured],
        tokens=[float(metrics.at[s, "tokens"]) for s in measured],
        rollout=[float(metrics.at[s, "seconds_rollout"]) for s in measured],
        teacher=[float(metrics.at[s, "seconds_teacher"]) for s in measured],
        coefficients=[per_step[s]["coefficients"] for s in measured],
        aggregate=[per_step[s]["aggregate"] for s in measured],
        prompt_tokens=student_len,
        teacher_input_tokens=teacher_len,
    )


# ----------------------------------------------------------------------------------------------
# TRL
# ----------------------------------------------------------------------------------------------


def trl_dataset(args, tokenizer, train_parquet):
    """The training prompts as TRL reads them, checked to render as our student prompts."""
    import datasets

    from dashrepro.data.prompts import render_student_prompt

    # Same rows in the same order as train_run draws them (random.Random(seed).shuffle of the
    # row indices), with TRL's own shuffling off, so both trainers see the same prompts per step.
    frame = pd.read_parquet(train_parquet)
    order = list(range(len(frame)))
    random.Random(args.seed).shuffle(order)
    problems = [frame["problem"].iloc[i] for i in order]
    dataset = datasets.Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": p}] for p in problems]}
    )
    # The chat template rendered by TRL must give exactly our student prompt's tokens.
    ours = tokenizer(render_student_prompt(tokenizer, problems[0]), add_special_tokens=False)
    theirs = tokenizer.apply_chat_template(
        dataset[0]["prompt"],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        enable_thinking=True,
    )
    if list(ours["input_ids"]) != list(theirs["input_ids"]):
        raise RuntimeError(
            "TRL's rendered prompt differs from ours; the comparison would be unfair"
        )
    return dataset


def trl_config(args, train, work):
    """TRL's distillation settings doing the work our trainer does (see the comments)."""
    from trl import DistillationConfig

    return DistillationConfig(
        output_dir=str(work / "trl"),
        max_steps=train["steps"],
        per_device_train_batch_size=train["micro_batch_size"],
        gradient_accumulation_steps=1,
        learning_rate=train["lr"],
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        optim="adamw_torch",
        beta=0.0,  # forward KL, as our forward_kl local signal
        temperature=train["temperature"],
        top_p=train["top_p"],
        top_k=train["top_k"] or 0,
        max_completion_length=train["max_new_tokens"],
        chat_template_kwargs={"enable_thinking": True},
        shuffle_dataset=False,
        # TRL defaults that would make it do different work than ours: bf16 autocast and gradient
        # checkpointing (both on by default in TRL's configs); ours is fp32 without checkpointing.
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        disable_dropout=False,  # ours keeps LoRA dropout on while training
        use_cpu=True,
        seed=args.seed,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def run_trl(args, config, base_dir, train_parquet, work) -> Run:
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import DistillationTrainer

    from dashrepro.training.model import load_lora_student

    train = train_settings(args, config)
    records: list[dict] = []

    class TimedDistillationTrainer(DistillationTrainer):
        """Records, per generation batch (= per step here), tokens and phase times."""

        def _generate(self, prompts):
            t0 = time.perf_counter()
            out = super()._generate(prompts)
            records.append({"rollout": time.perf_counter() - t0, "teacher": 0.0})
            return out

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            records[-1]["tokens"] = float(out["completion_mask"].sum())
            records[-1]["prompt_tokens"] = float(out["prompt_mask"].sum(1).float().mean())
            return out

        def _get_last_hidden_state(self, *a, **k):
            # The teacher's backbone pass is the one under no_grad (the student's builds a graph).
            t0 = time.perf_counter()
            out = super()._get_last_hidden_state(*a, **k)
            if not torch.is_grad_enabled():
                records[-1]["teacher"] += time.perf_counter() - t0
            return out

    class StepClock(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_end(self, args_, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    lora = config["scales"][args.scale]["lora"]
    # Student: our own base + LoRA construction (same adapter init for the same seed); teacher: a
    # frozen copy of the same base weights -- what our trainer gets by disabling the adapter.
    # load_lora_student takes the train settings (precision, attention, checkpointing) in newer
    # versions of the trainer; pass them where accepted so the student is built as train_run's.
    accepts_train = "train" in inspect.signature(load_lora_student).parameters
    student = load_lora_student(
        base_dir, lora, args.seed, **({"train": train} if accepts_train else {})
    )
    teacher = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    teacher.requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), padding_side="left")

    dataset = trl_dataset(args, tokenizer, train_parquet)
    trl_args = trl_config(args, train, work)
    clock = StepClock()
    trainer = TimedDistillationTrainer(
        model=student,
        teacher_model=teacher,
        args=trl_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    # PrinterCallback would print the Trainer's end-of-training log dict into the table's output.
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    if len(clock.ends) != train["steps"] or len(records) != train["steps"]:
        raise RuntimeError(
            f"TRL ran {len(clock.ends)} steps / {len(records)} generations, "
            f"expected {train['steps']}"
        )
    measured = range(args.warmup_steps, train["steps"])  # 0-based step indices
    return Run(
        name=f"TRL {type(trainer).__mro__[1].__name__}",
        seconds=[clock.ends[i] - clock.ends[i - 1] for i in measured],
        tokens=[records[i]["tokens"] for i in measured],
        rollout=[records[i]["rollout"] for i in measured],
        teacher=[records[i]["teacher"] for i in measured],
        prompt_tokens=statistics.fmean(r["prompt_tokens"] for r in records),
        teacher_input_tokens=statistics.fmean(r["prompt_tokens"] for r in records),
    )


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------


def report(runs: list[Run], args, train: dict) -> None:
    print()
    print(
        f"measured steps: {args.steps} per run (after {args.warmup_steps} warm-up) x "
        f"{args.repeats} interleaved runs per trainer, micro-batch "
        f"{train['micro_batch_size']}, max_new_tokens {train['max_new_tokens']}, "
        f"torch threads {torch.get_num_threads()}"
    )
    trl = next((r for r in runs if r.name.startswith("TRL")), None)
    header = (
        f"{'trainer':<34}{'steps/s':>9}{'tokens/s':>10}{'s/step':>8}{'median':>8}"
        f"{'tok/step':>9}{'prompt':>7}{'t-prompt':>9}{'rollout':>8}{'teacher':>8}"
    )
    if trl is not None:
        header += f"{'steps/s ÷TRL':>14}{'tok/s ÷TRL':>12}"
    print(header)
    print("-" * len(header))
    for r in runs:
        total = sum(r.seconds)
        line = (
            f"{r.name:<34}{r.steps_per_second:>9.3f}{r.tokens_per_second:>10.0f}"
            f"{r.mean_step:>8.2f}{statistics.median(r.seconds):>8.2f}"
            f"{statistics.fmean(r.tokens):>9.0f}{r.prompt_tokens:>7.0f}"
            f"{r.teacher_input_tokens:>9.0f}"
            f"{sum(r.rollout) / total:>8.0%}{sum(r.teacher) / total:>8.0%}"
        )
        if trl is not None:
            line += (
                f"{r.steps_per_second / trl.steps_per_second:>14.2f}"
                f"{r.tokens_per_second / trl.tokens_per_second:>12.2f}"
            )
        print(line)
    print(
        "(s/step: mean wall-clock step; tok/step: generated tokens; prompt / t-prompt: mean "
        "student / teacher prompt tokens; rollout, teacher: share of step time)"
    )

    by_name = {r.name: r for r in runs}
    for suffix in ("", "/stu-ctx"):
        opsd, dash = by_name.get(f"ours-OPSD{suffix}"), by_name.get(f"ours-DASH{suffix}")
        if dash is None:
            continue
        tag = " (teacher sees the student prompt)" if suffix else " (privileged teacher)"
        ms = lambda xs: statistics.fmean(xs) * 1e3  # noqa: E731
        print(f"\nDASH overhead{tag}:")
        print(
            f"  measured directly: DASH coefficients {ms(dash.coefficients):.2f} ms/step = "
            f"{sum(dash.coefficients) / sum(dash.seconds):.3%} of DASH's step time; the whole "
            f"aggregate() call {ms(dash.aggregate):.2f} ms/step = "
            f"{sum(dash.aggregate) / sum(dash.seconds):.3%}"
        )
        if opsd is None:
            continue
        extra = (statistics.fmean(dash.aggregate) - statistics.fmean(opsd.aggregate)) / (
            opsd.mean_step
        )
        print(
            f"  OPSD for reference: coefficients {ms(opsd.coefficients):.2f} ms/step, aggregate() "
            f"{ms(opsd.aggregate):.2f} ms/step; DASH's extra aggregate() time = {extra:+.3%} of "
            "OPSD's step time"
        )
        # Per generated token, so runs whose rollouts differ in length stay comparable.
        per_tok = lambda r: sum(r.seconds) / sum(r.tokens)  # noqa: E731
        median_ratio = statistics.median(dash.seconds) / statistics.median(opsd.seconds) - 1
        print(
            f"  end to end, DASH vs OPSD step time: {dash.mean_step / opsd.mean_step - 1:+.2%} "
            f"(mean), {median_ratio:+.2%} (median), {per_tok(dash) / per_tok(opsd) - 1:+.2%} "
            "(per token); run-to-run noise included"
        )


def merge(runs: list[Run]) -> list[Run]:
    """Pool the measured steps of repeated runs of the same trainer, first-seen order kept."""
    merged: dict[str, Run] = {}
    for r in runs:
        if r.name not in merged:
            merged[r.name] = r
            continue
        m = merged[r.name]
        for key in ("seconds", "tokens", "rollout", "teacher", "coefficients", "aggregate"):
            getattr(m, key).extend(getattr(r, key))
    return list(merged.values())


def quiet_libraries() -> None:
    """Keep the table readable: no weight-loading bars, deprecation notes or Trainer log dicts."""
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="measured steps per trainer run")
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed first steps (>= 1)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per trainer, interleaved")
    parser.add_argument("--micro-batch-size", type=int, default=None, help="default: config's")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: config's")
    parser.add_argument("--only", choices=("ours", "trl"), default=None)
    parser.add_argument(
        "--teacher-context",
        choices=("privileged", "student", "both"),
        default="both",
        help="our teacher's prompt: the protocol's privileged one, the student's, or both",
    )
    parser.add_argument("--sft-steps", type=int, default=0, help="warm-start SFT steps (0: none)")
    parser.add_argument("--base-model-dir", type=Path, default=None, help="use this base model")
    parser.add_argument("--config", type=Path, default=REPO_ROOT / "workflow_config.yaml")
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    # One intra-op thread by default: on a 2-core machine with anything else running, two OpenMP
    # threads made single generate() calls 5-50x slower at random (measured while writing this),
    # which swamps every difference being measured; the 0.4M-parameter model gains little from
    # a second thread anyway. --threads 2 matches the pipeline's rules on an idle machine.
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    if args.warmup_steps < 1 or args.steps < 1 or args.repeats < 1:
        parser.error("--warmup-steps, --steps and --repeats must be >= 1")
    torch.set_num_threads(args.threads)
    quiet_libraries()

    from dashrepro.experiment.config import load_config

    config = load_config(args.config)
    train = train_settings(args, config)
    contexts = (
        ("privileged", "student") if args.teacher_context == "both" else (args.teacher_context,)
    )
    jobs = []
    if args.only in (None, "ours"):
        jobs += [("ours", method, context) for context in contexts for method in ("opsd", "dash")]
    if args.only in (None, "trl"):
        jobs.append(("trl", None, None))
    load_before = os.getloadavg()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="train_throughput-") as tmp:
        work = Path(tmp)
        train_parquet, base_dir = build_inputs(args, config, work)
        for repeat in range(args.repeats):
            # Alternate the order between repeats so that slow drifts of the machine's load
            # spread over all trainers instead of favouring the ones that ran first.
            for kind, method, context in jobs if repeat % 2 == 0 else jobs[::-1]:
                started = time.perf_counter()
                if kind == "ours":
                    run = run_ours(args, config, method, base_dir, train_parquet, work, context)
                else:
                    run = run_trl(args, config, base_dir, train_parquet, work)
                runs.append(run)
                elapsed = time.perf_counter() - started
                print(
                    f"[{repeat + 1}/{args.repeats}] {run.name}: {elapsed:.0f}s"
                    f" (median step {statistics.median(run.seconds):.3f}s)",
                    flush=True,
                )
    load_after = os.getloadavg()
    report(merge(runs), args, train)
    print(
        f"\nload average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f} "
        f"on {os.cpu_count()} CPUs -- other processes' load shows up as noise in every number"
    )


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
