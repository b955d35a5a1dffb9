"""Tests for dashrepro.grading.symbolic: box extraction, grade_response's verdicts and paths,
the exact fallback, timeouts and the documented limits of the protocol."""

from __future__ import annotations

import threading
import time

import pytest
from grading_support import TOWER, TRICKY_PAIRS

from dashrepro.grading import (
    ERROR_TEXT_LIMIT,
    PATHS,
    exact_fallback_match,
    extract_last_boxed,
    grade_batch,
    grade_response,
)

# --------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"\boxed{5}", "5"),
        (r"a \boxed{1} b \boxed{2} c", "2"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\boxed{5}}", "5"),
        (r"\boxed {7}", "7"),
        (r"\fbox{8}", "8"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        (r"\boxed{\left\{ x \right.}", r"\left\{ x \right."),  # escaped brace ignored
        (r"\boxed{a\\{b}}", r"a\\{b}"),  # "\\" is a line break, the next brace is real
        (r"\boxed{1} \boxed{2", None),  # the last box is unclosed
        ("no box here", None),
        (r"\boxed 5", None),  # brace-less form is not a box
        (r"\boxed{}", ""),
    ],
)
def test_extract_last_boxed(text, expected):
    assert extract_last_boxed(text) == expected


def test_extract_last_boxed_linear_on_1mb():
    cases = [
        "word " * 200_000 + r"\boxed{204}",  # long reasoning, box at the end
        r"\boxed{" + "{}" * 500_000 + "}",  # one box with 1 MB of nested braces inside
        r"\boxed{" * 150_000,  # 1 MB of unclosed openers
        r"\boxed{" + "{" * 1_000_000,  # deep and unclosed
    ]
    expected = ["204", "{}" * 500_000, None, None]
    for text, exp in zip(cases, expected, strict=True):
        t0 = time.perf_counter()
        assert extract_last_boxed(text) == exp
        assert time.perf_counter() - t0 < 2.0


# --------------------------------------------------------------------------- grade_response


@pytest.mark.parametrize("response, gold, correct, path", TRICKY_PAIRS)
def test_tricky_pairs(response, gold, correct, path):
    res = grade_response(response, gold)
    assert res["path"] == path, res
    assert res["correct"] is correct, res
    assert set(res) >= {"correct", "extracted", "path", "seconds", "error", "normalisation"}
    assert res["path"] in PATHS


def test_grade_response_1mb_response_is_fast():
    response = ("Let me reason about this carefully. " * 30_000)[:1_000_000] + r"\boxed{204}"
    t0 = time.perf_counter()
    res = grade_response(response, "204")
    assert time.perf_counter() - t0 < 3.0
    assert res["correct"] is True and res["path"] == "math_verify"


def test_exact_fallback_rule():
    assert exact_fallback_match(r"$\text{Yes}$", r"\text{yes}")
    assert exact_fallback_match("A B", "ab")
    assert not exact_fallback_match(None, "5")
    assert not exact_fallback_match("5.0", "5")


def test_grade_response_refuses_non_main_thread():
    box = {}

    def target():
        try:
            grade_response(r"\boxed{1}", "1")
        except RuntimeError as e:
            box["err"] = e

    th = threading.Thread(target=target)
    th.start()
    th.join()
    assert "main thread" in str(box["err"])


def test_tower_signal_timeout_in_process():
    # In this environment math-verify's SIGALRM does stop the tower after ~5 s.
    t0 = time.perf_counter()
    res = grade_response(TOWER, "1")
    assert time.perf_counter() - t0 < 9.0
    assert res["path"] == "timeout" and res["correct"] is False


# ------------------------------------------------------------------ fragments and long errors


def test_a_box_math_verify_parses_only_in_part_is_not_a_match():
    """math-verify falls back to later matches inside the box; a fragment ("3") of a box that
    does not parse as a whole must not decide the verdict."""
    res = grade_response(r"so \boxed{\frac{1}{\sqrt[}{x}^^_\begin{matrix} 3}", "3")
    assert res["path"] == "partial_parse" and res["correct"] is False
    assert res["extracted"] == r"\frac{1}{\sqrt[}{x}^^_\begin{matrix} 3"
    # A whole box that parses is still graded by math-verify.
    assert grade_response(r"\boxed{\frac{6}{2}}", "3")["path"] == "math_verify"
    assert grade_response(r"\boxed{\frac{6}{2}}", "3")["correct"] is True
    # The exact rule still decides a partial parse that is literally the gold.
    res = grade_batch([r"\boxed{3^^}", r"\boxed{3^^}"], ["3^^", "3"], workers=1)
    assert [r["path"] for r in res] == ["partial_parse", "partial_parse"]
    assert [r["correct"] for r in res] == [True, False]


def test_error_text_of_a_timeout_is_truncated():
    """math-verify's timeout message quotes the whole input (megabytes for a huge box)."""
    huge = "\\boxed{" + "+".join(["x^{2}"] * 200_000) + "}"
    res = grade_response(huge, "3", timeout_s=1)
    assert res["path"] == "timeout" and res["correct"] is False
    assert len(res["error"]) <= ERROR_TEXT_LIMIT + 40
    assert res["error"].endswith("more characters]")


# ------------------------------------------------------------------ box normalisation


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("\\boxed{\n8\\sqrt{10}\n}", "8\\sqrt{10}"),  # newlines around the content
        ("\\boxed{  42 }", "42"),
        ("\\boxed{\\$204}", "204"),  # an escaped dollar is a currency sign, not math
        ("\\boxed{2^{10}.}", "1024"),  # trailing sentence punctuation
        ("\\boxed{\\frac{4}{9}.}", "\\frac{4}{9}"),
        ("\\boxed{3;}", "3"),
    ],
)
def test_box_content_is_normalised_before_parsing(response, gold):
    res = grade_response(response, gold)
    assert res["correct"] is True and res["path"] == "math_verify", res


@pytest.mark.parametrize(
    ("response", "gold", "correct", "normalisation"),
    [
        # math-verify alone reads these literally; step 9's normalisations accept them
        ("\\boxed{1\\,000}", "1000", True, "digit_grouping"),  # thin-space separator
        ("\\boxed{5 \\pmod{7}}", "5", True, "modulus"),  # a \\pmod suffix
        # still literal
        ("\\boxed{\\pm 2}", "2", False, None),  # +-2 against a single value
        ("\\boxed{\\pm 2}", "2, -2", True, None),  # ... but it equals the two values
    ],
)
def test_known_limits_of_the_protocol(response, gold, correct, normalisation):
    """Documented in grading.symbolic: what math-verify reads literally, and what step 9 fixes."""
    res = grade_response(response, gold)
    assert res["correct"] is correct and res["normalisation"] == normalisation, res
