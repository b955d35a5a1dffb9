r"""The privileged teacher's views: each one user message the teacher is conditioned on.

``TEACHER_VIEWS`` maps a view name (the ``teacher_views`` an objective of
``objectives.registry.OBJECTIVES`` declares) to ``f(problem, solution, answer, protocol) ->
user message``: ``full`` (the protocol's teacher message: OPSD, DASH, EOPD, ...) and AVSD's
``full_solution``, ``partial_solution``, ``answer_only``, ported from duykhuongnguyen/AVSD
(docs/prompts.md).

    from dashrepro.data.views import TEACHER_VIEWS
    TEACHER_VIEWS["partial_solution"](problem, solution, answer, protocol)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from dashrepro.data.prompts import TeacherProtocol, render_user_turn

#: ``--partial_solution_ratio`` of the reference's scripts (scripts/math/train_avsd_qwen3_8b.sh).
PARTIAL_SOLUTION_RATIO = 0.5
PARTIAL_NOTICE = "[The reference above is incomplete and may omit later steps or the final answer.]"

_BOXED = re.compile(r"\\boxed\{")


def _last_boxed_span(text: str) -> tuple[int, int] | None:
    """(start, end) of the last ``\\boxed{...}`` whose braces balance (searching backwards)."""
    for match in reversed(list(_BOXED.finditer(text))):
        depth, index = 1, match.end()
        while index < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            index += 1
        if depth == 0:
            return match.start(), index
    return None


def _without_last_boxed(text: str) -> str:
    span = _last_boxed_span(text)
    return text if span is None else (text[: span[0]] + text[span[1] :]).strip()


def _segments(text: str) -> tuple[list[str], str] | None:
    """The first of the reference's splits that gives more than one segment, with its joiner."""
    splits = (
        (lambda t: re.split(r"\n\s*\n+", t), "\n\n"),
        (lambda t: re.split(r"(?=^\s*(?:[-*•]|\d+[.)]))", t, flags=re.MULTILINE), "\n"),
        (lambda t: re.split(r"(?<=[.!?])\s+", t), " "),
    )
    for split, joiner in splits:
        segments = [s.strip() for s in split(text) if s.strip()]
        if len(segments) > 1:
            return segments, joiner
    return None


def partial_solution(solution: str, keep_ratio: float = PARTIAL_SOLUTION_RATIO) -> str:
    """AVSD's ``build_partial_solution``: the kept prefix of the solution, then the notice."""
    base = _without_last_boxed(solution).strip()
    if not base:
        return PARTIAL_NOTICE
    segmented = _segments(base)
    if segmented is not None:
        segments, joiner = segmented
        keep = min(max(1, math.ceil(keep_ratio * len(segments))), len(segments) - 1)
        text = joiner.join(segments[:keep]).strip()
    else:
        keep = max(1, math.ceil(len(base) * keep_ratio))
        text = base[: min(keep, len(base) - 1) if len(base) > 1 else keep].rstrip()
    return f"{text or base[:1]}\n\n{PARTIAL_NOTICE}"


def final_answer(solution: str, answer: str) -> str:
    """AVSD's ``extract_final_answer``: the last boxed content, else an "answer:" line, else the
    row's answer (the reference falls back to the solution's last line; our rows carry it)."""
    span = _last_boxed_span(solution)
    if span is not None:
        return solution[span[0] : span[1]].split("{", 1)[1][:-1].strip()
    lines = re.findall(r"^(?:final answer|answer)\s*:\s*(.+)$", solution, re.I | re.M)
    return lines[-1].strip() if lines else str(answer)


def avsd_message(problem: str, view: str, payload: str) -> str:
    """AVSD's multi-view teacher message (privileged_views.py ``format_privileged_message``)."""
    return (
        f"Problem: {problem}\n\n"
        "Here is training-time reference information for this problem. It may contain a final "
        "answer, a hint, a partial solution, or a full solution to the problem.\n"
        f"=== Privileged Reference ({view}) Begin ===\n"
        f"{payload}\n"
        f"=== Privileged Reference ({view}) End ===\n\n"
        "Use the reference only as hidden guidance. Use it only to understand, verify, or correct "
        "your solution.\n"
        "Do not mention, quote, copy, cite, or refer to the privileged reference or its existence.\n"
        "Now solve the original problem independently using your own reasoning.\n"
        "Please reason step by step, and put your final answer within \\boxed{}."
    )


ViewFn = Callable[[str, str, str, TeacherProtocol], str]

TEACHER_VIEWS: dict[str, ViewFn] = {
    "full": lambda problem, solution, answer, protocol: protocol.user_message(problem, solution),
    "full_solution": lambda problem, solution, answer, protocol: avsd_message(
        problem, "full_solution", solution.strip()
    ),
    "partial_solution": lambda problem, solution, answer, protocol: avsd_message(
        problem, "partial_solution", partial_solution(solution)
    ),
    "answer_only": lambda problem, solution, answer, protocol: avsd_message(
        problem, "answer_only", f"Verified final answer: {final_answer(solution, answer)}"
    ),
}


def render_teacher_view(
    tokenizer, view: str, problem: str, solution: str, answer: str, protocol: TeacherProtocol
) -> str:
    """The teacher's prompt text in ``view``: its user message in the chat template, ready for
    the reply (``full`` is ``data.prompts.render_teacher_prompt``)."""
    return render_user_turn(tokenizer, TEACHER_VIEWS[view](problem, solution, answer, protocol))
