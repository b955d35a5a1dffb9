"""Tests for dashrepro.grading.reward: strip_string and the GRPO reward grader."""

from __future__ import annotations

import pytest

from dashrepro.grading import reward_exact_match, strip_string

# --------------------------------------------------------------------------- strip_string


@pytest.mark.parametrize(
    "raw, expected",
    [
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\tfrac12", r"\frac{1}{2}"),
        (r"\frac1{72}", r"\frac{1}{72}"),
        ("0.5", r"\frac{1}{2}"),
        (".5", r"\frac{1}{2}"),  # leading "." gets a 0, then "0.5" becomes 1/2
        ("3/4", r"\frac{3}{4}"),
        ("3 / 4", r"\frac{3}{4}"),  # spaces go before the a/b rule
        ("x/4", "x/4"),
        (r"\sqrt3", r"\sqrt{3}"),
        (r"2\sqrt{2}", r"2\sqrt{2}"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"30^\circ", "30"),
        (r"30^{\circ}", "30"),
        (r"\$18.90", "18.90"),
        (r"50\%", "50"),
        (r"5 \text{ cm}", "5"),
        ("x = 5", "5"),
        ("k=3", "3"),
        ("abc=3", "abc=3"),  # left-hand side too long to drop
        ("a=1, b=2=3", "a=1,b=2=3"),
        ("1\n000", "1000"),
        (r"a\!b", "ab"),
        (r"\\frac{1}{2}", r"\frac{1}{2}"),
        ("", ""),
    ],
)
def test_strip_string(raw, expected):
    assert strip_string(raw) == expected


def test_strip_string_rejects_two_unit_blocks():
    with pytest.raises(ValueError):
        strip_string(r"5 \text{ m} and 6 \text{ s}")


@pytest.mark.parametrize(
    "response, gold, reward",
    [
        (r"so \boxed{\dfrac{1}{2}}", r"\frac12", 1.0),
        (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
        (r"\boxed{30^\circ}", "30", 1.0),
        (r"\boxed{x = 5}", "5", 1.0),
        (r"\boxed{025}", "25", 0.0),  # strip_string keeps leading zeros
        (r"\boxed{0.50}", r"\frac{1}{2}", 0.0),  # only the literal "0.5" is rewritten
        (r"\boxed{3} \boxed{4}", "4", 1.0),
        ("no box", "4", 0.0),
        (r"\boxed{4", "4", 0.0),
        (r"\boxed{5}", r"\boxed{5}", 1.0),  # a boxed gold is unboxed first
        (r"\boxed{5 \text{ m} 6 \text{ s}}", r"5 \text{ m} 6 \text{ s}", 1.0),  # raw fallback
    ],
)
def test_reward_exact_match(response, gold, reward):
    assert reward_exact_match(response, gold) == reward
