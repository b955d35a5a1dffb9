"""The privileged teacher's contexts: the token ids it is conditioned on before the rollout.

Per rollout and teacher view (``data.views``), the teacher's context is its user turn in the
chat template, encoded and cut to ``max_total_length`` tokens from the right, as the reference
collators do. In ``reason_first`` mode the context is the request for an analysis, the
analysis the teacher (adapter off) generated, and the transition text, concatenated as
siyan-zhao/OPSD does (docs/prompts.md). The traced rollouts' contexts are a run's records
(``teacher_contexts.parquet``).

    ids = view_prompt_ids(tokenizer, method, protocol, (problem, solution, answer), None, 512)
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from dashrepro.data.prompts import TeacherProtocol, render_user_turn
from dashrepro.training.batching import encode
from dashrepro.training.methods import MethodSpec, teacher_messages

#: The columns of ``teacher_contexts.parquet``.
CONTEXT_COLUMNS = (
    "step",
    "rollout",
    "problem_id",
    "view",
    "context",
    "context_tokens",
    "analysis",
    "analysis_tokens",
    "analysis_finish_reason",
)


def generates_analysis(method: MethodSpec, protocol: TeacherProtocol) -> bool:
    """Whether the teacher of ``method`` writes an analysis before it scores (reason_first on
    a method whose teacher has the protocol's ``full`` view)."""
    return protocol.generates_analysis and "full" in method.teacher_view_names


def analysis_request_ids(
    tokenizer, protocol: TeacherProtocol, teacher_input: tuple[str, str, str], max_total: int
) -> list[int]:
    """The templated request for an analysis (``reason_first``), cut to ``max_total`` tokens."""
    problem, reference, _answer = teacher_input
    prompt = render_user_turn(tokenizer, protocol.user_message(problem, reference))
    return encode(tokenizer, prompt)[:max_total]


def analysis_budget(
    max_tokens: int,
    requests: Sequence[Sequence[int]],
    transition: Sequence[int],
    responses: Sequence[Sequence[int]],
    max_positions: int | None,
) -> int:
    """New tokens the analyses of one micro-batch may have: ``protocol.analysis_max_tokens``,
    less where the longest teacher sequence (request, analysis, transition, rollout) would not
    fit the model's positions (never at the paper's lengths: 20,000 + 4,096 < 40,960)."""
    if max_positions is None:
        return max_tokens
    longest = max(len(q) + len(r) for q, r in zip(requests, responses, strict=True))
    return max(0, min(max_tokens, max_positions - longest - len(transition)))


def view_prompt_ids(
    tokenizer,
    method: MethodSpec,
    protocol: TeacherProtocol,
    teacher_input: tuple[str, str, str],
    analysis_ids: Sequence[int] | None,
    max_total: int,
) -> list[list[int]]:
    """The teacher's context of each view of ``method`` for one rollout, as token ids.

    ``analysis_ids`` is the generated analysis (``reason_first``; ``None`` otherwise); it and the
    transition text follow the ``full`` view's request."""
    problem, reference, answer = teacher_input
    contexts = []
    messages = teacher_messages(method, problem, reference, answer, protocol)
    for view, message in zip(method.teacher_view_names, messages, strict=True):
        ids = encode(tokenizer, render_user_turn(tokenizer, message))[:max_total]
        if view == "full" and analysis_ids is not None:
            ids = ids + list(analysis_ids) + encode(tokenizer, protocol.transition_text())
        contexts.append(ids)
    return contexts


def context_frame(
    tokenizer,
    step: int,
    method: MethodSpec,
    problem_ids: Sequence[str],
    contexts: Sequence[Sequence[Sequence[int]]],
    analyses: Sequence | None,
) -> pd.DataFrame:
    """``teacher_contexts.parquet`` rows of rollouts ``0..len(contexts)-1`` (the traced ones):
    ``contexts[b][v]`` is rollout b's context of view v, ``analyses[b]`` its analysis Sample."""
    rows = []
    for b, views in enumerate(contexts):
        analysis = None if analyses is None else analyses[b]
        for view, ids in zip(method.teacher_view_names, views, strict=True):
            with_analysis = analysis is not None and view == "full"
            rows.append(
                {
                    "step": step,
                    "rollout": b,
                    "problem_id": str(problem_ids[b]),
                    "view": view,
                    "context": tokenizer.decode(ids, skip_special_tokens=False),
                    "context_tokens": len(ids),
                    "analysis": analysis.text if with_analysis else None,
                    "analysis_tokens": len(analysis.token_ids) if with_analysis else 0,
                    "analysis_finish_reason": analysis.finish_reason if with_analysis else None,
                }
            )
    return pd.DataFrame(rows, columns=list(CONTEXT_COLUMNS))
