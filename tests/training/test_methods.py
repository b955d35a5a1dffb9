"""Tests of dashrepro.training.methods: method specs and the privileged teacher's messages."""

import pytest

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.training.methods import MethodSpec


def _reference_partial_solution(solution: str, keep_ratio: float = 0.5) -> str:
    """duykhuongnguyen/AVSD src/avsd/math/privileged_views.py ``build_partial_solution`` on a
    solution whose paragraphs are its segments (a literal port of that path)."""
    import math
    import re

    base = solution[: solution.rindex("\\boxed{")].strip()  # the last box cut
    segments = [s.strip() for s in re.split(r"\n\s*\n+", base) if s.strip()]
    keep = min(max(1, math.ceil(keep_ratio * len(segments))), len(segments) - 1)
    notice = "[The reference above is incomplete and may omit later steps or the final answer.]"
    return "\n\n".join(segments[:keep]).strip() + "\n\n" + notice


def test_avsd_teacher_views_are_avsds_own(default_config):
    from dashrepro.data.views import avsd_message, partial_solution
    from dashrepro.training.methods import teacher_messages

    protocol = TeacherProtocol.from_config(default_config["protocol"])
    solution = "First, 2 + 3 = 5.\n\nThen check: 5 - 3 = 2.\n\nSo the answer is \\boxed{5}."
    spec = MethodSpec("avsd", "opsd", "forward_kl", None, objective="avsd")
    full, partial, answer = teacher_messages(spec, "What is 2+3?", solution, "5", protocol)
    assert full == avsd_message("What is 2+3?", "full_solution", solution)
    assert partial_solution(solution) == _reference_partial_solution(solution)
    assert "Begin ===\nFirst, 2 + 3 = 5.\n\nThen check: 5 - 3 = 2.\n\n[The" in partial
    assert "\\boxed{5}" not in partial.split("Begin ===")[1].split("End ===")[0]
    assert "Verified final answer: 5\n=== Privileged Reference (answer_only) End ===" in answer
    assert all(
        m.endswith("put your final answer within \\boxed{}.") for m in (full, partial, answer)
    )
    plain = MethodSpec("dash", "dash", "forward_kl", None)
    assert teacher_messages(plain, "P", "sol", "1", protocol) == [protocol.user_message("P", "sol")]


def test_method_spec_is_checked_against_the_objective_registry(default_config):
    entry = {k: v for k, v in default_config["methods"]["eopd"].items() if k != "label"}
    with pytest.raises(ValueError, match=r"methods.x.objective: 'nope' is not one of"):
        MethodSpec.from_config("x", {**entry, "objective": "nope"})
    with pytest.raises(ValueError, match=r"methods.x.objective_params.top_k: 0 is out of range"):
        MethodSpec.from_config("x", {**entry, "objective_params": {"top_k": 0}})
    with pytest.raises(ValueError, match=r"objective_params.kappa: does not apply"):
        MethodSpec.from_config(
            "x", {**entry, "objective": "avsd", "objective_params": {"kappa": 1}}
        )
