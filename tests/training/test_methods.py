"""Tests of dashrepro.training.methods: method specs and the privileged teacher's messages."""

import pytest

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.training.methods import METHOD_TRAINING_KEYS, MethodSpec, training_entry


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


def test_the_training_entry_drops_only_the_label_and_keeps_the_key_order(default_config):
    # The train rule's param: a relabel must not retrain, and its repr must not change with it.
    entry = dict(default_config["methods"]["dash"], label="DASH (renamed)")
    trained = training_entry(entry)
    assert trained == training_entry(default_config["methods"]["dash"])
    assert set(trained) == set(entry) - {"label"}
    assert list(trained) == [key for key in METHOD_TRAINING_KEYS if key in entry]


def test_the_method_aggregates_with_its_params_and_their_defaults(default_config):
    torch = pytest.importorskip("torch")
    from dashrepro import objectives

    r = torch.tensor([[0.2, 0.9, 0.1], [0.5, 0.0, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    sharp = MethodSpec.from_config(
        "k", dict(default_config["methods"]["dash"], params={"kappa": 1.0})
    )
    default = MethodSpec.from_config("d", dict(default_config["methods"]["dash"], params={}))
    got = sharp.aggregate(r, mask, teacher_entropy=None).coefficients
    assert torch.equal(got, objectives.aggregate("dash", r, mask, kappa=1.0).coefficients)
    got = default.aggregate(r, mask, teacher_entropy=None).coefficients
    assert torch.equal(got, objectives.aggregate("dash", r, mask, kappa=5.0).coefficients)
    assert not torch.equal(got, sharp.aggregate(r, mask, None).coefficients)
