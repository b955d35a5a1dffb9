"""embedded.task_families: each family's problem determines its reference solution and answer,
line by line; its dials do what they say; the splits of a family training set stay disjoint and
the schema's task lists are the generators'."""

from __future__ import annotations

import random
import re

import pytest
import yaml

from dashrepro.embedded.sft import sft_target
from dashrepro.embedded.synthetic_data import ALL_TASKS, make_dataset, make_validation_split
from dashrepro.embedded.task_families import FAMILIES, STYLE_WORDS, make_family_problem

LINE = re.compile(
    r"^(?:(?P<word>[A-Za-z ]+) )?\((?P<step>\d)\) (?P<left>\d)\+(?P<term>\d)=(?P<sum>\d+), (?P<value>\d)\.$"
)


def solve(problem: str) -> tuple[list[tuple[int, int, int]], int, str | None, int]:
    """The steps (left, term, value) the problem asks for, the answer, the looked-up key and
    the start value."""
    start = re.search(r"Start at (\w)\.", problem)[1]
    key = None
    if start.isalpha():
        table = dict(re.findall(r"([A-Z])=(\d)", problem.split("Start at")[0]))
        key, value = start, int(table[start])
    else:
        value = int(start)
    first, steps = value, []
    for move in re.search(r"Steps: (.*?)\. A step", problem)[1].split(", "):
        left, term = move.split(" ", 1)[1].split("+")
        left = value if left == "" else int(left)
        value = (left + int(term)) % 10
        steps.append((left, int(term), value))
    return steps, value, key, first


@pytest.mark.parametrize("task", sorted(FAMILIES))
def test_the_problem_determines_every_line_and_the_answer(task):
    rng = random.Random(f"test:{task}")
    family = FAMILIES[task]
    for _ in range(50):
        row = make_family_problem(task, rng)
        steps, answer, key, start = solve(row["problem"])
        lines = row["reference_solution"].splitlines()
        if family.lookup:
            assert lines.pop(0) == f"{key}={start}."
        assert len(steps) == family.steps == len(lines) - 1
        for number, ((left, term, value), line) in enumerate(zip(steps, lines, strict=False), 1):
            match = LINE.match(line)
            assert match and int(match["step"]) == number, line
            assert (int(match["left"]), int(match["term"]), int(match["value"])) == (
                left,
                term,
                value,
            )
            assert int(match["sum"]) == left + term
            assert match["word"] is None or match["word"] in STYLE_WORDS
            assert (match["word"] is not None) == (family.style == 1.0) or 0 < family.style < 1
        assert row["answer"] == str(answer) and row["task"] == task
        assert lines[-1].endswith(f"The answer is $\\boxed{{{answer}}}$.")
        assert sft_target(row["reference_solution"], row["answer"]).count("The answer is") == 1


def test_the_chain_dial_sets_how_many_steps_build_on_the_last_result():
    def chained_share(task):
        rng = random.Random(0)
        moves = [m for _ in range(200) for m in re.search(
            r"Steps: (.*?)\. A step", make_family_problem(task, rng)["problem"])[1].split(", ")]  # fmt: skip
        return sum(m.split(" ", 1)[1].startswith("+") for m in moves) / len(moves)

    assert chained_share("chain_p0") == 0.0 and chained_share("chain_p1") == 1.0
    assert 0.45 < chained_share("chain_p05") < 0.55


def test_a_family_training_set_its_benchmarks_and_validation_share_no_problem():
    tasks = ("chain_p0", "chain_p1", "lookup")
    specs = {task: {"task": task, "n": 20} for task in tasks}
    train, benchmarks = make_dataset(300, specs, seed=5, tasks=tasks)
    validation = make_validation_split(train, benchmarks, 30, seed=5, tasks=tasks)
    problems = [set(train["problem"]), set(validation["problem"])]
    problems += [set(frame["problem"]) for frame in benchmarks.values()]
    assert sum(map(len, problems)) == len(set().union(*problems))
    assert set(train["task"]) == set(tasks) and set(validation["task"]) == set(tasks)


def test_the_config_schema_lists_every_task(repo_root):
    schema = yaml.safe_load((repo_root / "src/dashrepro/experiment/config_schema.yaml").read_text())
    data = schema["properties"]["data"]["properties"]
    assert data["tasks"]["items"]["enum"] == list(ALL_TASKS)
    benchmark = schema["properties"]["benchmarks"]["additionalProperties"]["properties"]
    assert benchmark["task"]["enum"] == list(ALL_TASKS)
