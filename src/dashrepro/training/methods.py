"""Training methods: ``MethodSpec`` (one ``methods.<m>`` entry of ``workflow_config.yaml``) and
the privileged teacher's views.

A method names a training objective of ``dashrepro.parameters.OBJECTIVES`` (``distill``,
``eopd``, ``avsd``); the objective declares its parameters and the *teacher views* it scores,
each view one reference text the privileged teacher is conditioned on (one forward pass each).
``VIEW_TEXTS`` maps a view's name to the function that builds its text from the row's reference
solution and answer:

- ``full``: the reference solution itself (every objective's first view);
- ``first_half``: the solution cut at the last space before its middle character (a word is
  never split), trailing whitespace dropped;
- ``answer_only``: ``The final answer is \\boxed{<answer>}.``

The last two serve AVSD, a baseline of the paper (*DASH: divergence-adaptive supervision
horizons*), ported from duykhuongnguyen/AVSD. A new view needs a function here and its name in
an objective's ``teacher_views``.

    from dashrepro.training.methods import MethodSpec, teacher_views
    spec = MethodSpec.from_config("avsd", config["methods"]["avsd"])
    teacher_views(spec, "one two three four", "42")
    # -> ["one two three four", "one two", "The final answer is \\boxed{42}."]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dashrepro.parameters import OBJECTIVES, check_params


@dataclass(frozen=True)
class MethodSpec:
    """One training method of ``workflow_config.yaml`` (its ``label`` aside)."""

    name: str
    aggregation: str
    divergence: str
    tau: float | None
    top_k: int | None = None
    params: Mapping = field(default_factory=dict)
    objective: str = "distill"  # a key of parameters.OBJECTIVES
    objective_params: Mapping = field(default_factory=dict)
    grpo: Mapping | None = None  # {eta, group_size, aggregate, gamma, lam}

    @classmethod
    def from_config(cls, name: str, spec: Mapping) -> MethodSpec:
        """The method of config entry ``methods.<name>``; its objective and the objective's
        parameters are checked against ``parameters.OBJECTIVES``."""
        objective = spec.get("objective", "distill")
        if objective not in OBJECTIVES:
            raise ValueError(
                f"methods.{name}.objective: {objective!r} is not one of {tuple(OBJECTIVES)}"
            )
        objective_params = dict(spec.get("objective_params") or {})
        problems = check_params(
            OBJECTIVES[objective].params,
            objective_params,
            f"methods.{name}.objective_params",
            owner=f"objective {objective!r}",
        )
        if problems:
            raise ValueError("; ".join(problems))
        return cls(
            name=name,
            aggregation=spec["aggregation"],
            divergence=spec["divergence"],
            tau=spec["tau"],
            top_k=spec.get("top_k"),
            params=dict(spec["params"]),
            objective=objective,
            objective_params=objective_params,
            grpo=dict(spec["grpo"]) if spec.get("grpo") else None,
        )

    @property
    def needs_teacher_entropy(self) -> bool:
        return self.aggregation in {"entropy_gate", "soft_or"}

    @property
    def group_size(self) -> int:
        return int(self.grpo["group_size"]) if self.grpo else 1

    @property
    def teacher_view_names(self) -> tuple[str, ...]:
        """The views the privileged teacher scores for this method's objective, in order."""
        return OBJECTIVES[self.objective].teacher_views


# ----------------------------------------------------------------------------------------------
# Teacher views: name -> f(reference_solution, answer) -> the text the teacher sees
# ----------------------------------------------------------------------------------------------


def full_view(reference_solution: str, answer: str) -> str:
    """The reference solution as it is."""
    return reference_solution


def first_half_view(reference_solution: str, answer: str) -> str:
    """The solution's first half, cut at the last space before the middle character."""
    middle = len(reference_solution) // 2
    cut = reference_solution.rfind(" ", 0, middle)
    return reference_solution[: cut if cut > 0 else middle].rstrip()


def answer_only_view(reference_solution: str, answer: str) -> str:
    """The final answer alone, boxed."""
    return f"The final answer is \\boxed{{{answer}}}."


VIEW_TEXTS: dict[str, Callable[[str, str], str]] = {
    "full": full_view,
    "first_half": first_half_view,
    "answer_only": answer_only_view,
}


def teacher_views(method: MethodSpec, reference_solution: str, answer: str) -> list[str]:
    """The reference texts the privileged teacher sees for ``method``, one per declared view."""
    return [VIEW_TEXTS[view](reference_solution, answer) for view in method.teacher_view_names]
