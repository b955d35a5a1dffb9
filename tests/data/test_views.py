"""Tests of dashrepro.data.views: AVSD's partial solution and final answer, the multi-view
teacher message, every entry of TEACHER_VIEWS, and render_teacher_view's chat turn."""

import pytest

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.data.views import (
    PARTIAL_NOTICE,
    TEACHER_VIEWS,
    avsd_message,
    final_answer,
    partial_solution,
    render_teacher_view,
)

PROTOCOL = TeacherProtocol(
    template="P={problem} S={reference_solution} A={analysis_instruction} T={transition_instruction}",
    analysis_instruction="analyse",
    transition_instruction="go on",
)


def _payload(message: str, view: str) -> str:
    """The text between a message's privileged-reference delimiters of ``view``."""
    begin = f"=== Privileged Reference ({view}) Begin ===\n"
    end = f"\n=== Privileged Reference ({view}) End ==="
    return message.split(begin, 1)[1].split(end, 1)[0]


# -- partial_solution --------------------------------------------------------------------------


def test_partial_solution_keeps_half_the_paragraphs_rounded_up_without_the_boxed_answer():
    # 3 paragraphs once the box is cut: ceil(0.5 * 3) = 2 kept.
    solution = "A is 2.\n\nB is 3.\n\nSo A + B = 5.\n\n\\boxed{5}"
    assert partial_solution(solution) == f"A is 2.\n\nB is 3.\n\n{PARTIAL_NOTICE}"


def test_partial_solution_never_keeps_every_segment():
    # ceil(1.0 * 4) = 4, capped at 4 - 1 = 3; two paragraphs keep one.
    four = "a.\n\nb.\n\nc.\n\nd."
    assert partial_solution(four, keep_ratio=1.0) == f"a.\n\nb.\n\nc.\n\n{PARTIAL_NOTICE}"
    assert partial_solution("a.\n\nb.") == f"a.\n\n{PARTIAL_NOTICE}"
    # keep_ratio 0.25 of 4: ceil(1.0) = 1; a ratio of 0 still keeps one segment.
    assert partial_solution(four, keep_ratio=0.25) == f"a.\n\n{PARTIAL_NOTICE}"
    assert partial_solution(four, keep_ratio=0.0) == f"a.\n\n{PARTIAL_NOTICE}"


def test_partial_solution_falls_back_to_list_items_then_sentences():
    # No blank line: the numbered items are the segments (4 of them, 2 kept), joined by "\n".
    listed = "Steps:\n1. add 2 and 3\n2. check 5 - 3 = 2\n3. done"
    assert partial_solution(listed) == f"Steps:\n1. add 2 and 3\n\n{PARTIAL_NOTICE}"
    # One line: its sentences (3, 2 kept), joined by a space.
    assert partial_solution("First! Second? Third.") == f"First! Second?\n\n{PARTIAL_NOTICE}"


def test_partial_solution_of_one_unsplittable_segment_keeps_a_prefix_of_characters():
    assert partial_solution("abcdef") == f"abc\n\n{PARTIAL_NOTICE}"  # ceil(6 * 0.5) = 3
    assert partial_solution("abcde") == f"abc\n\n{PARTIAL_NOTICE}"  # ceil(2.5) = 3
    assert partial_solution("abcdef", keep_ratio=1.0) == f"abcde\n\n{PARTIAL_NOTICE}"  # len - 1
    assert partial_solution("x") == f"x\n\n{PARTIAL_NOTICE}"  # one character stays


def test_partial_solution_of_only_a_boxed_answer_is_the_notice_alone():
    assert partial_solution("\\boxed{7}") == PARTIAL_NOTICE
    assert partial_solution("   ") == PARTIAL_NOTICE


def test_partial_solution_cuts_only_the_last_balanced_box():
    # The earlier box stays in the text; the last one (nested braces) is removed.
    solution = "Try \\boxed{4}: wrong.\n\nFix it.\n\nSo \\boxed{\\frac{1}{2}}"
    assert partial_solution(solution) == f"Try \\boxed{{4}}: wrong.\n\nFix it.\n\n{PARTIAL_NOTICE}"


# -- final_answer ------------------------------------------------------------------------------


def test_final_answer_is_the_last_balanced_boxed_content():
    assert final_answer("first \\boxed{1}, then \\boxed{ \\frac{1}{2} }", "9") == "\\frac{1}{2}"
    # An unclosed last box is skipped for the balanced one before it.
    assert final_answer("\\boxed{3} and then \\boxed{4", "9") == "3"


def test_final_answer_falls_back_to_the_last_answer_line_then_the_rows_answer():
    text = "Answer: 10\nwork\nFINAL ANSWER :  12 \nmore work"
    assert final_answer(text, "9") == "12"
    assert final_answer("answer: x = 4", "9") == "x = 4"
    # "answer" must start its line; otherwise the row's answer.
    assert final_answer("The answer: 4", "9") == "9"
    assert final_answer("no marker here", "42") == "42"


# -- avsd_message and TEACHER_VIEWS ------------------------------------------------------------


def test_avsd_message_puts_the_payload_between_delimiters_naming_the_view():
    message = avsd_message("What is 2+3?", "hint", "line one\nline two")
    assert message.startswith("Problem: What is 2+3?\n\n")
    assert _payload(message, "hint") == "line one\nline two"
    assert message.index("(hint) Begin") < message.index("(hint) End")
    assert message.endswith("put your final answer within \\boxed{}.")


def test_the_full_view_is_the_protocols_own_message():
    assert TEACHER_VIEWS["full"]("q", "sol", "1", PROTOCOL) == "P=q S=sol A=analyse T=go on"
    with pytest.raises(ValueError, match="non-empty reference solution"):
        TEACHER_VIEWS["full"]("q", "  ", "1", PROTOCOL)


def test_the_avsd_views_carry_the_solution_its_prefix_or_its_answer():
    solution = "  Step one.\n\nStep two.\n\nSo \\boxed{5}.  "
    full = TEACHER_VIEWS["full_solution"]("q", solution, "5", PROTOCOL)
    partial = TEACHER_VIEWS["partial_solution"]("q", solution, "5", PROTOCOL)
    answer = TEACHER_VIEWS["answer_only"]("q", solution, "7", PROTOCOL)
    assert _payload(full, "full_solution") == solution.strip()
    # "So ." is the third paragraph once the box is cut: 2 of 3 kept.
    assert _payload(partial, "partial_solution") == f"Step one.\n\nStep two.\n\n{PARTIAL_NOTICE}"
    assert _payload(answer, "answer_only") == "Verified final answer: 5"  # the box, not "7"
    unboxed = TEACHER_VIEWS["answer_only"]("q", "no box", "7", PROTOCOL)
    assert _payload(unboxed, "answer_only") == "Verified final answer: 7"
    assert all(m.startswith("Problem: q\n\n") for m in (full, partial, answer))


class RecordingTokenizer:
    """Renders a chat as role:content lines and records the template's keyword arguments."""

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, **kwargs):
        self.calls.append(kwargs)
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<bot>"


def test_render_teacher_view_is_the_views_message_in_one_user_turn_with_thinking_on():
    tokenizer = RecordingTokenizer()
    text = render_teacher_view(tokenizer, "answer_only", "q", "\\boxed{5}", "5", PROTOCOL)
    expected = TEACHER_VIEWS["answer_only"]("q", "\\boxed{5}", "5", PROTOCOL)
    assert text == f"<user>{expected}</user><bot>"
    assert tokenizer.calls == [
        {"tokenize": False, "add_generation_prompt": True, "enable_thinking": True}
    ]
    full = render_teacher_view(tokenizer, "full", "q", "sol", "5", PROTOCOL)
    assert full == "<user>P=q S=sol A=analyse T=go on</user><bot>"
    with pytest.raises(KeyError, match="hint"):
        render_teacher_view(tokenizer, "hint", "q", "sol", "5", PROTOCOL)
