"""training.teacher: the privileged teacher's context within the model's positions."""

from __future__ import annotations


def test_an_analysis_budget_keeps_the_teacher_within_the_models_positions():
    from dashrepro.training.teacher import analysis_budget

    requests, responses, transition = [[1] * 30, [1] * 10], [[2] * 5, [2] * 40], [3] * 4
    assert analysis_budget(4096, requests, transition, responses, None) == 4096
    assert analysis_budget(4096, requests, transition, responses, 40960) == 4096
    # longest request + rollout is 50, the transition 4: 100 - 54 tokens are left
    assert analysis_budget(4096, requests, transition, responses, 100) == 46
    assert analysis_budget(4096, requests, transition, responses, 50) == 0
