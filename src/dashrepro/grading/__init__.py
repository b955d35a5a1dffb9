"""Answer grading: the benchmark grader (``symbolic``, with the answer forms of ``answer_forms``,
run in worker processes by ``batch``) and the GRPO reward grader (``reward``).

from dashrepro.grading import grade_response, grade_batch
"""

from dashrepro.grading.answer_forms import normalise_box
from dashrepro.grading.batch import grade_batch
from dashrepro.grading.reward import reward_exact_match, strip_string
from dashrepro.grading.symbolic import (
    ERROR_TEXT_LIMIT,
    PATHS,
    exact_fallback_match,
    extract_last_boxed,
    grade_response,
)

__all__ = [
    "ERROR_TEXT_LIMIT",
    "PATHS",
    "exact_fallback_match",
    "extract_last_boxed",
    "grade_batch",
    "grade_response",
    "normalise_box",
    "reward_exact_match",
    "strip_string",
]
