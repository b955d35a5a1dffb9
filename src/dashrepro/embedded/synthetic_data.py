r"""Synthetic arithmetic "math" data for the embedded default experiment.

Made offline and deterministically from a seed, with the real training set's fields
(``problem``, ``reference_solution``, ``answer``) plus ``id``, ``source`` and ``task``. Three
benchmarks of 30 problems stand in for AIME 2024 / AIME 2025 / HMMT Feb 2025, in rising
difficulty (``add2``, ``add3``, ``sum3``); each reference solution spells out column addition
and ends in ``\boxed{...}``; a validation split (``make_validation_split``) lets a checkpoint be
selected on problems never trained on. Besides these ``TASKS``, the task families of
``task_families`` (``data.tasks``). The tasks: docs/datasets.md.

    python -m dashrepro.embedded.synthetic_data --out synthetic_out   # writes train/benchmark parquet files
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import pandas as pd

from dashrepro.embedded.task_families import FAMILIES, make_family_problem
from dashrepro.io import write_parquet
from dashrepro.layout import TRAIN_DATA

#: The column-addition tasks (the default's training set and stand-ins), then every task.
TASKS = ("add2", "add3", "sum3")
ALL_TASKS = TASKS + tuple(FAMILIES)

_PHRASINGS = (
    "What is {expr}?",
    "Compute {expr}.",
    "Find the value of {expr}.",
    "Evaluate {expr}.",
)


# Each phrasing as a pattern that captures its expression, to read a problem back (see
# ``expression_key``): the generator's templates are the one source of both.
_PHRASING_PATTERNS = tuple(
    re.compile("^" + re.escape(template).replace(re.escape("{expr}"), "(?P<expr>.+)") + "$")
    for template in _PHRASINGS
)
_EXPRESSION = re.compile(r"^\d+(?: \+ \d+)+$")


def expression_key(problem: str) -> tuple[int, ...]:
    """The arithmetic problem a phrased ``problem`` asks, up to the order of its terms.

    "What is 12 + 34?" and "Compute 34 + 12." are one problem, ``(12, 34)``: splits are kept
    disjoint by this key, so no benchmark or validation problem is a training problem in other
    words. A problem in no known phrasing, or whose expression is not a sum of integers, raises
    naming it (a new phrasing must be added here, not silently keyed on its text).
    """
    for pattern in _PHRASING_PATTERNS:
        match = pattern.match(problem)
        if match and _EXPRESSION.match(match["expr"]):
            return tuple(sorted(int(term) for term in match["expr"].split(" + ")))
    raise ValueError(
        f"synthetic problem {problem!r} is not in a known phrasing {_PHRASINGS} around a sum of "
        "integers; cannot key it to keep the splits disjoint"
    )


def _operands(task: str, rng: random.Random) -> list[int]:
    if task == "add2":
        return [rng.randint(10, 99), rng.randint(10, 99)]
    if task == "add3":
        return [rng.randint(100, 999), rng.randint(100, 999)]
    if task == "sum3":
        return [rng.randint(10, 99) for _ in range(3)]
    raise ValueError(f"unknown synthetic task {task!r}; expected one of {ALL_TASKS}")


def column_addition_steps(operands: list[int]) -> list[str]:
    """The digit-by-digit column addition of ``operands``, one line per column."""
    width = max(len(str(x)) for x in operands)
    carry = 0
    lines = []
    for column in range(width):
        digits = [(x // 10**column) % 10 for x in operands]
        total = sum(digits) + carry
        terms = " + ".join(str(d) for d in digits) + (f" + {carry}" if carry else "")
        carry, digit = divmod(total, 10)
        lines.append(f"{terms} = {total}, digit {digit}, carry {carry}.")
    return lines


def problem_key(task: str, problem: str) -> tuple:
    """What keeps the splits disjoint: a column-addition problem's ``expression_key`` (its
    terms, whatever the phrasing), a task family's problem text."""
    return expression_key(problem) if task in TASKS else (task, problem)


def make_problem(task: str, rng: random.Random) -> dict:
    if task in FAMILIES:
        return make_family_problem(task, rng)
    operands = _operands(task, rng)
    expr = " + ".join(str(x) for x in operands)
    answer = str(sum(operands))
    problem = rng.choice(_PHRASINGS).format(expr=expr)
    steps = column_addition_steps(operands)
    solution = "\n".join(steps) + f"\nSo {expr} = {answer}. The answer is $\\boxed{{{answer}}}$."
    return {"problem": problem, "reference_solution": solution, "answer": answer, "task": task}


def make_split(
    name: str, tasks: list[str], n: int, seed: int, exclude: set[tuple[int, ...]] | None = None
) -> pd.DataFrame:
    """``n`` distinct problems drawn round-robin from ``tasks``, none of whose ``problem_key``
    is in ``exclude``."""
    rng = random.Random(f"{name}:{seed}")
    seen = set(exclude or ())
    rows = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise RuntimeError(f"could not draw {n} distinct problems for split {name!r}")
        row = make_problem(tasks[len(rows) % len(tasks)], rng)
        key = problem_key(row["task"], row["problem"])
        if key in seen:
            continue
        seen.add(key)
        rows.append({"id": f"{name}-{len(rows):05d}", **row, "source": f"synthetic:{name}"})
    return pd.DataFrame(rows)


def _keys(frame: pd.DataFrame) -> set[tuple]:
    return {problem_key(t, p) for t, p in zip(frame["task"], frame["problem"], strict=True)}


def make_dataset(
    n_train: int, benchmarks: dict[str, dict], seed: int, tasks: tuple[str, ...] = TASKS
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Benchmarks first, then a training set of ``tasks`` that shares no problem with them."""
    bench_frames = {}
    held_out: set[tuple] = set()
    for name, spec in benchmarks.items():
        frame = make_split(name, [spec["task"]], spec["n"], seed, exclude=held_out)
        held_out |= _keys(frame)
        bench_frames[name] = frame
    train = make_split("train", list(tasks), n_train, seed, exclude=held_out)
    return train, bench_frames


def make_validation_split(
    train: pd.DataFrame, benchmarks: dict[str, pd.DataFrame], n: int, seed: int,
    tasks: tuple[str, ...] = TASKS,
) -> pd.DataFrame:  # fmt: skip
    """``n`` problems from the training distribution (every task of ``tasks``) that are in
    neither the training set nor a benchmark: the held-out split a checkpoint can be selected
    on. Drawn after the others, so the training set and the benchmarks stay as they were
    without it."""
    seen = _keys(train)
    for frame in benchmarks.values():
        seen |= _keys(frame)
    return make_split("validation", list(tasks), n, seed, exclude=seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    specs = {t: {"task": t, "n": 30} for t in TASKS}
    train, benches = make_dataset(args.n_train, specs, args.seed)
    write_parquet(args.out / TRAIN_DATA, train)
    for name, frame in benches.items():
        write_parquet(args.out / f"{name}.parquet", frame)


if __name__ == "__main__":
    main()
