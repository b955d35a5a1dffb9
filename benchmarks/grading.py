"""Throughput of dashrepro.grading.grade_batch (gradings per second, 2 worker processes).

Run from the repository root:

    python benchmarks/grading.py            # N = 20,000 per mix
    python benchmarks/grading.py --quick    # N = 2,000 per mix
    python benchmarks/grading.py -n 50000 --workers 2
    python benchmarks/grading.py --hostile  # the hostile-answer corpus: seconds per class

Three synthetic workloads, each laid out like Avg@12 evaluation (N/12 problems x 12
sampled responses, about half of them correct, a few hundred characters of reasoning
text before the final ``$\\boxed{...}$``):

* ``integer``: AIME-style integer answers 0-999, wrong answers are other integers.
* ``integer-cold``: as ``integer`` but every gold and every wrong answer is a distinct
  large integer, so the per-worker parse cache almost never hits (worst case).
* ``hard``: fractions, radicals, intervals and pairs; correct responses use a mix of
  equivalent forms (``\\dfrac``, decimals, reordered pairs), wrong ones are perturbed.

Each line reports gradings/s over the whole ``grade_batch`` call (worker start-up
included), the path counts and the accuracy, so a regression in verdicts shows too.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter

from dashrepro.grading import grade_batch

_FILLER = [
    "Let me set up the problem carefully. ",
    "We have $a + b = 12$ and $ab = 35$, so $a$ and $b$ are roots of $x^2 - 12x + 35 = 0$. ",
    "Checking the boundary case separately, nothing changes. ",
    "By symmetry it suffices to count the configurations with $x \\le y$. ",
    "Therefore, summing over all cases, ",
]


def _reasoning(rng: random.Random) -> str:
    return "".join(rng.choice(_FILLER) for _ in range(rng.randint(4, 12)))


def _integer_mix(n: int, rng: random.Random, cold: bool) -> tuple[list[str], list[str], list[bool]]:
    responses, golds, labels = [], [], []
    fresh = iter(range(10**6, 10**9, 7919))  # distinct integers for the cold workload
    for _ in range((n + 11) // 12):
        gold = next(fresh) if cold else rng.randint(0, 999)
        for _ in range(12):
            if rng.random() < 0.5:
                pred = gold
            else:
                pred = next(fresh) if cold else rng.randint(0, 999)
            responses.append(f"{_reasoning(rng)}the answer is $\\boxed{{{pred}}}$.")
            golds.append(str(gold))
            labels.append(pred == gold)
    return responses[:n], golds[:n], labels[:n]


def _hard_item(rng: random.Random) -> tuple[str, list[str], list[str]]:
    """(gold, equivalent predictions, wrong predictions) for one problem."""
    a, b = rng.randint(1, 9), rng.randint(2, 11)
    k = rng.choice([2, 3, 5, 6, 7, 10, 11, 13])
    kind = rng.randrange(5)
    if kind == 0:
        num, den = a, b + a  # a proper fraction
        return (
            f"\\frac{{{num}}}{{{den}}}",
            [f"\\dfrac{{{num}}}{{{den}}}", f"{num}/{den}", f"\\frac{{{2 * num}}}{{{2 * den}}}"],
            [f"\\frac{{{num + 1}}}{{{den}}}", f"{num / den + 0.01:.4f}"],
        )
    if kind == 1:
        return (
            f"{a}\\sqrt{{{k}}}",
            [f"\\sqrt{{{a * a * k}}}", f"{a} \\sqrt {{{k}}}"],
            [f"{a + 1}\\sqrt{{{k}}}", f"\\sqrt{{{a * a * k + 1}}}"],
        )
    if kind == 2:
        return (
            f"\\frac{{{a}+\\sqrt{{{k}}}}}{{{b}}}",
            [
                f"\\dfrac{{\\sqrt{{{k}}}+{a}}}{{{b}}}",
                f"\\frac{{{a}}}{{{b}}}+\\frac{{\\sqrt{{{k}}}}}{{{b}}}",
            ],
            [f"\\frac{{{a}-\\sqrt{{{k}}}}}{{{b}}}"],
        )
    if kind == 3:
        return (
            f"[{-a}, {b})",
            [f"[{-a},{b})", f"\\left[{-a}, {b}\\right)"],
            [f"({-a}, {b})", f"[{-a}, {b}]"],
        )
    return (
        f"\\frac{{-1+\\sqrt{{{k}}}}}{{2}}, \\frac{{-1-\\sqrt{{{k}}}}}{{2}}",
        [f"\\frac{{-1-\\sqrt{{{k}}}}}{{2}}, \\frac{{-1+\\sqrt{{{k}}}}}{{2}}"],
        [
            f"\\frac{{-1+\\sqrt{{{k}}}}}{{2}}",
            f"\\frac{{1+\\sqrt{{{k}}}}}{{2}}, \\frac{{1-\\sqrt{{{k}}}}}{{2}}",
        ],
    )


def _hard_mix(n: int, rng: random.Random) -> tuple[list[str], list[str], list[bool]]:
    responses, golds, labels = [], [], []
    for _ in range((n + 11) // 12):
        gold, good, bad = _hard_item(rng)
        for _ in range(12):
            ok = rng.random() < 0.5
            pred = rng.choice([gold, *good]) if ok else rng.choice(bad)
            responses.append(f"{_reasoning(rng)}so the answer is $\\boxed{{{pred}}}$.")
            golds.append(gold)
            labels.append(ok)
    return responses[:n], golds[:n], labels[:n]


def _run(name: str, responses: list[str], golds: list[str], labels: list[bool], workers: int):
    t0 = time.perf_counter()
    results = grade_batch(responses, golds, workers=workers)
    dt = time.perf_counter() - t0
    paths = Counter(r["path"] for r in results)
    acc = sum(r["correct"] for r in results) / len(results)
    agree = sum(r["correct"] == lab for r, lab in zip(results, labels, strict=True))
    print(
        f"{name:13s} N={len(results):6d}  {dt:7.2f} s  {len(results) / dt:8.0f} gradings/s  "
        f"accuracy={acc:.3f}  agrees-with-construction={agree / len(results):.4f}  "
        f"paths={dict(paths)}",
        flush=True,
    )
    return results


def hostile(workers: int) -> None:
    """Each class of ``dashrepro.grading.hostile`` graded under the default config's limits: its
    path and seconds, the worst item against the hard limit, and the call's total."""
    from pathlib import Path

    import yaml

    from dashrepro.grading.hostile import HOSTILE_ANSWERS

    config = Path(__file__).resolve().parents[1] / "workflow_config.yaml"
    evaluation = yaml.safe_load(config.read_text())["evaluation"]
    timeout_s, item_s = evaluation["grading_timeout_s"], evaluation["grading_item_timeout_s"]
    names = list(HOSTILE_ANSWERS)
    t0 = time.perf_counter()
    results = grade_batch([HOSTILE_ANSWERS[k][0] for k in names],
                          [HOSTILE_ANSWERS[k][1] for k in names], workers=workers,
                          timeout_s=timeout_s, item_timeout_s=item_s)  # fmt: skip
    total = time.perf_counter() - t0
    print(f"hostile answers, workers={workers}, math-verify timeout {timeout_s} s, hard limit "
          f"{item_s} s per answer")  # fmt: skip
    print(f"{'class':28s} {'chars':>9s} {'path':15s} {'seconds':>8s}")
    for name, result in zip(names, results, strict=True):
        chars = len(HOSTILE_ANSWERS[name][0])
        print(f"{name:28s} {chars:9,d} {result['path']:15s} {result['seconds']:8.2f}")
    worst = max(r["seconds"] for r in results)
    print(f"worst item {worst:.2f} s (hard limit {item_s} s); the call {total:.1f} s for "
          f"{len(names)} answers")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=20_000, help="responses per workload")
    ap.add_argument("--quick", action="store_true", help="N = 2,000 per workload")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hostile", action="store_true", help="the hostile-answer corpus only")
    args = ap.parse_args()
    if args.hostile:
        hostile(args.workers)
        return
    n = 2_000 if args.quick else args.n
    rng = random.Random(args.seed)
    print(f"grade_batch throughput, workers={args.workers} (times include worker start-up)")
    t0 = time.perf_counter()
    grade_batch([r"\boxed{1}"], ["1"], workers=args.workers)
    print(f"start-up: first 1-item call {time.perf_counter() - t0:.2f} s", end="  ")
    t0 = time.perf_counter()
    grade_batch([r"\boxed{1}"], ["1"], workers=args.workers)
    print(f"later 1-item call {time.perf_counter() - t0:.2f} s", flush=True)
    _run("integer", *_integer_mix(n, rng, cold=False), args.workers)
    _run("integer-cold", *_integer_mix(n, rng, cold=True), args.workers)
    _run("hard", *_hard_mix(n, rng), args.workers)


if __name__ == "__main__":
    main()
