"""The cluster code paths on one GPU at the paper's Qwen3-1.7B shapes, run and measured.

Each stage (``stages/``, whose docstring lists them) runs in its own subprocess with its own time
limit (a failure is recorded and the next stage runs), writes ``<out>/<stage>.json``, and the
last lines printed are one table (``runner.py``, ``summary.py``). Every measurement is also
appended to ``<out>/measurements.jsonl`` as it is made (``runner.record``): a stage killed at
its limit or crashed returns what it measured before (its ``measurements``). The stages run with
``TORCH_LOGS`` set to log recompiles, graph breaks and CUDA-graph skips.

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

    python benchmarks/gpu_proof --out benchmarks/out/gpu_proof    # a GPU, every stage in turn
    python benchmarks/gpu_proof --shape tiny --out benchmarks/out/gpu_proof_tiny  # the CPU twin
    python benchmarks/gpu_proof --out DIR --costs    # GPU-hours from DIR/summary.json

A 15-minute lease (what benchmarks/measured/gpu_proof_h200_2026-11-27 ran, in ~8 minutes;
``--write-config`` and ``--download-wheels`` made the inputs beforehand):

    python benchmarks/gpu_proof --out gp_out --backend hf --config-json paper_config.json \
        --wheels wheels --benchmark aime2024.jsonl --stages env,build,profile \
        --lanes 'train_opsd|evaluate|train_dash|deepspeed' --deadline-s 530

What a bare GPU machine cannot run: vLLM's CUDA wheel (0.32.0: 326 MB, and it pins
torch 2.13.0 exactly) and FlashAttention-2 (an sdist that compiles its CUDA kernels when installed) need the
GPU environment of envs/gpu.yaml; without them the stages run HF ``generate`` and PyTorch SDPA,
and stage ``env`` says so.

``--benchmark FILE`` evaluates a real benchmark (a JSONL of the ``local_benchmark`` layout);
without it the evaluation reads synthetic stand-in problems. On a machine with PyTorch but
without the rest of the GPU stack and without a network, ``--wheels DIR`` installs the wheels
in DIR (``--download-wheels DIR`` fetches the ones ``scripts/gpu_wheels.py`` names, elsewhere) into a folder
that the stages put first on their path, and ``--config-json FILE`` reads the merged paper config
that ``--write-config FILE`` saved where Snakemake is installed (merging needs it). A lease that
cannot hold every stage takes ``--stages`` and ``--deadline-s``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if not __package__:  # ``python benchmarks/gpu_proof``: benchmarks/ on the path, not this folder
    here = Path(__file__).resolve().parent
    if sys.path and sys.path[0] and Path(sys.path[0]).resolve() == here:
        sys.path[0] = str(here.parent)
    else:
        sys.path.insert(0, str(here.parent))
    # The repository's dashrepro, as the stages get it (the runner puts src/ first on their
    # PYTHONPATH): --costs and --write-config read it too, where it is not installed.
    sys.path.insert(1, str(here.parents[1] / "src"))

from gpu_proof import runner, summary  # noqa: E402
from gpu_proof.common import paper_config  # noqa: E402
from gpu_proof.shapes import ROOT, SHAPES, STAGES  # noqa: E402
from gpu_proof.stages import RUNNERS  # noqa: E402


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
    parser.add_argument("--download-wheels", default=None, help="fetch gpu_wheels.WHEELS here")
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.download_wheels:
        runner.gpu_wheels.download(Path(args.download_wheels))
        return 0
    if args.costs:
        summary.write_costs_report(args, out)
        return 0
    if args.write_config:
        Path(args.write_config).write_text(json.dumps(paper_config(args), indent=1))
        return 0
    if args.stage:  # a worker
        result = RUNNERS[args.stage](args)
        summary.write_json(out / f"{args.stage}.json", result)
        return 0
    return runner.run_stages(args, out)


if __name__ == "__main__":
    sys.exit(main())
