r"""Synthetic task families whose premise statistics can be dialled at one per-token difficulty.

Every family is a chain of four one-digit additions kept to their last digit, one numbered line
per step that writes the sum, then the digit kept (``(2) 7+5=12, 2.``), so each step is as hard
as any other. What differs is what an error does next:
``chain`` is the probability that a step adds to the previous result (1: an error derails every
later line and the answer; 0: each step adds two digits the problem gives, so an early error
stays local and only the last line decides the answer); ``lookup`` opens with the start value
looked up in a table of that many letters (one early token decides everything after it);
``style`` is the probability that a line opens with a connective drawn at random ("Then",
"Next", ...), which the teacher copies from its reference and the student cannot know (a large
local divergence with no consequence). docs/datasets.md describes each family.

    make_family_problem("chain_p1", random.Random(0))   # problem, reference_solution, answer
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

#: The connectives a ``style`` line may open with.
STYLE_WORDS = ("Then", "Next", "Now", "So", "After that")


@dataclass(frozen=True)
class Family:
    """One family's dials (see the module docstring)."""

    steps: int = 4
    chain: float = 1.0
    lookup: int = 0
    style: float = 0.0


#: The families by task name (``benchmarks.<b>.task``, ``data.tasks``).
FAMILIES = {
    "chain_p0": Family(chain=0.0),
    "chain_p05": Family(chain=0.5),
    "chain_p1": Family(chain=1.0),
    "lookup": Family(chain=1.0, lookup=6),
    "style": Family(chain=0.5, style=1.0),
}


def make_family_problem(task: str, rng: random.Random) -> dict:
    """One problem of family ``task``: the problem, its worked reference solution ending in
    ``\boxed{}``, the answer (the last line's digit) and the task."""
    family = FAMILIES[task]
    start = rng.randrange(10)
    lines, opening = [], f"Start at {start}."
    if family.lookup:
        letters = string.ascii_uppercase[: family.lookup]
        table = {letter: rng.randrange(10) for letter in letters}
        key = rng.choice(letters)
        start = table[key]
        entries = ", ".join(f"{letter}={value}" for letter, value in table.items())
        opening = f"Table: {entries}. Start at {key}."
        lines.append(f"{key}={start}.")
    moves, value = [], start
    for step in range(1, family.steps + 1):
        term = rng.randrange(10)
        if rng.random() < family.chain:
            left, move = value, f"({step}) +{term}"
        else:
            left = rng.randrange(10)
            move = f"({step}) {left}+{term}"
        value = (left + term) % 10
        # A numbered step is an anchor both the student (reading its operands) and the teacher
        # (copying its line) can find: with bare lines a 3-layer model learned neither. The full
        # sum comes before the digit kept: asked for the digit at once, the student's sums stayed
        # at chance (10.8 %); with the sum first, all right (docs/premise-study.md). Lines are
        # compact so that a response fits the default's 96 new tokens.
        word = f"{rng.choice(STYLE_WORDS)} " if rng.random() < family.style else ""
        lines.append(f"{word}({step}) {left}+{term}={left + term}, {value}.")
        moves.append(move)
    problem = (
        f"{opening} Steps: {', '.join(moves)}. A step +n adds n to the last result, a step m+n "
        "adds m and n; keep only the last digit each time. What is the last result?"
    )
    solution = (
        "\n".join(lines) + f"\nSo the last result is {value}. The answer is $\\boxed{{{value}}}$."
    )
    return {"problem": problem, "reference_solution": solution, "answer": str(value), "task": task}
