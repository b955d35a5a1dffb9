"""The embedded default's synthetic data: deterministic, correct, and held out."""

import re

import pytest

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


# The expression re-read independently of the generator's own key (``expression_key``): the
# phrasings spelled out here, the terms sorted, so that 12 + 34 and 34 + 12 are one problem.
_READ_BACK = re.compile(r"(?:What is |Compute |Find the value of |Evaluate )(\d+(?: \+ \d+)+)[?.]")


def read_back(problem: str) -> tuple[int, ...]:
    match = _READ_BACK.fullmatch(problem)
    assert match, f"unexpected phrasing: {problem!r}"
    return tuple(sorted(int(term) for term in match[1].split(" + ")))


def shared_problems(splits: dict) -> dict[tuple[str, str], int]:
    """For each pair of splits, how many problems (read back) they share."""
    keys = {name: {read_back(p) for p in frame["problem"]} for name, frame in splits.items()}
    names = list(keys)
    return {(a, b): len(keys[a] & keys[b]) for i, a in enumerate(names) for b in names[i + 1 :]}


def default_splits():
    """The embedded default's splits (workflow_config.yaml: 3,000 training problems, seed 1234)."""
    from dashrepro.embedded.synthetic_data import make_validation_split

    train, benches = make_dataset(3000, SPECS, seed=1234)
    validation = make_validation_split(train, benches, 30, seed=1234)
    return {"train": train, **benches, "validation": validation}


def test_splits_share_no_problem_up_to_phrasing_and_term_order():
    splits = default_splits()
    assert set(shared_problems(splits).values()) == {0}
    for name, frame in splits.items():  # no problem twice within a split either
        assert len({read_back(p) for p in frame["problem"]}) == len(frame), name


def test_keying_on_the_phrased_text_would_leak(monkeypatch):
    """The check above has teeth: with the generator keyed on the text after the first word
    (the landed key before this test), the same read-back finds benchmark problems in training."""
    from dashrepro.embedded import synthetic_data

    monkeypatch.setattr(synthetic_data, "expression_key", lambda p: p.split(" ", 1)[-1])
    shared = shared_problems(default_splits())
    assert shared[("train", "aime2024")] > 0 and shared[("train", "hmmt_feb2025")] > 0


def test_expression_key_reads_the_problem_up_to_term_order():
    from dashrepro.embedded.synthetic_data import expression_key

    assert expression_key("What is 12 + 34?") == expression_key("Compute 34 + 12.") == (12, 34)
    assert expression_key("Evaluate 5 + 50 + 7.") == (5, 7, 50)
    assert expression_key("Find the value of 12 + 34.") != expression_key("What is 12 + 35?")
    for bad in ("Add 12 and 34.", "What is 12 - 34?", "Compute 12 + 34"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            expression_key(bad)


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
    mine = {read_back(p) for p in validation["problem"]}
    assert len(mine) == 30
    for frame in [train, *benches.values()]:
        assert not mine & {read_back(p) for p in frame["problem"]}
    assert validation.equals(make_validation_split(train, benches, 30, seed=0))
    # Drawn after the others: the training set and benchmarks are those made without it.
    again_train, again_benches = make_dataset(2000, SPECS, seed=0)
    assert again_train.equals(train) and all(again_benches[k].equals(benches[k]) for k in SPECS)
