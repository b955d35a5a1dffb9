"""The embedded default's synthetic data: deterministic, correct, and held out."""

import re

from dashrepro.embedded.synthetic_data import column_addition_steps, make_dataset

SPECS = {
    "aime2024": {"task": "add2", "n": 30},
    "aime2025": {"task": "add3", "n": 30},
    "hmmt_feb2025": {"task": "sum3", "n": 30},
}


def test_deterministic_from_seed():
    a_train, a_bench = make_dataset(200, SPECS, seed=7)
    b_train, b_bench = make_dataset(200, SPECS, seed=7)
    assert a_train.equals(b_train)
    assert all(a_bench[k].equals(b_bench[k]) for k in SPECS)
    c_train, _ = make_dataset(200, SPECS, seed=8)
    assert not a_train.equals(c_train)


def test_fields_answers_and_solutions_are_right():
    train, benches = make_dataset(300, SPECS, seed=0)
    for frame in [train, *benches.values()]:
        assert {"id", "problem", "reference_solution", "answer", "source"} <= set(frame.columns)
        assert frame["id"].is_unique
        for row in frame.itertuples():
            operands = [int(x) for x in re.findall(r"\d+", row.problem)]
            assert int(row.answer) == sum(operands)
            assert row.reference_solution.endswith(f"$\\boxed{{{row.answer}}}$.")
    assert {k: len(v) for k, v in benches.items()} == {k: 30 for k in SPECS}


def test_benchmarks_are_held_out_of_training():
    train, benches = make_dataset(2000, SPECS, seed=0)
    expr = lambda p: p.split(" ", 1)[-1]  # noqa: E731
    train_exprs = {expr(p) for p in train["problem"]}
    for frame in benches.values():
        assert not train_exprs & {expr(p) for p in frame["problem"]}


def test_column_addition_carries():
    assert column_addition_steps([95, 17]) == [
        "5 + 7 = 12, digit 2, carry 1.",
        "9 + 1 + 1 = 11, digit 1, carry 1.",
    ]


def test_the_validation_split_is_new_problems_of_the_training_tasks():
    from dashrepro.embedded.synthetic_data import TASKS, make_validation_split

    train, benches = make_dataset(2000, SPECS, seed=0)
    validation = make_validation_split(train, benches, 30, seed=0)
    assert len(validation) == 30 and validation["id"].is_unique
    assert set(validation["task"]) == set(TASKS)  # the training distribution, not one benchmark's
    expr = lambda p: p.split(" ", 1)[-1]  # noqa: E731
    mine = {expr(p) for p in validation["problem"]}
    assert len(mine) == 30
    for frame in [train, *benches.values()]:
        assert not mine & {expr(p) for p in frame["problem"]}
    assert validation.equals(make_validation_split(train, benches, 30, seed=0))
    # Drawn after the others: the training set and benchmarks are those made without it.
    again_train, again_benches = make_dataset(2000, SPECS, seed=0)
    assert again_train.equals(train) and all(again_benches[k].equals(benches[k]) for k in SPECS)
