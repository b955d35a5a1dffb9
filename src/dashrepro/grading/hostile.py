"""Answers written to make a grader stall, blow up or lose items: the hostile-answer corpus.

A model in degenerate repetition, or one that writes towers of exponents, produces boxes no
benchmark has: thousands of dots, megabyte boxes, deep nesting, numbers whose exact value does not
fit in memory. ``HOSTILE_ANSWERS`` names one response per input class (with its gold); the
grading tests grade them all and want a named verdict for each, and ``benchmarks/grading.py
--hostile`` prints each class's seconds against the configured limits.
"""

from __future__ import annotations


def _nested(depth: int) -> str:
    return "{" * depth + "1" + "}" * depth


#: class -> (response, gold). Every response is a full model output (extraction included).
HOSTILE_ANSWERS: dict[str, tuple[str, str]] = {
    "dots after the box": ("The answer is \\boxed{1}" + "." * 100_000, "1"),
    "dots inside the box": ("\\boxed{1" + "." * 100_000 + "}", "1"),
    "punctuation run inside": ("\\boxed{1" + " ,;:." * 20_000 + "}", "1"),
    "a 1 MB box": ("\\boxed{" + "12345678+" * 116_508 + "1}", "1"),
    "10,000 nested braces": ("\\boxed{" + _nested(10_000) + "}", "1"),
    "a huge exponent": ("\\boxed{10^{10^{10}}}", "1"),
    "a tower of exponents": ("\\boxed{9^{9^{9^{9^{9}}}}}", "1"),
    "a huge factorial": ("\\boxed{1000000!}", "1"),
    "a unicode flood": ("\\boxed{" + "\u2211\u222b\U0001d4d0\u200b" * 50_000 + "}", "1"),
    "an unclosed box": ("\\boxed{1 + " + "(x" * 50_000, "1"),
    "boxes in a row": ("\\boxed{1}" * 50_000, "1"),
}
