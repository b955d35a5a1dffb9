"""Training methods: ``MethodSpec`` (one ``methods.<m>`` entry of ``workflow_config.yaml``) and
the privileged teacher's views.

A method names a training objective of ``dashrepro.objectives.registry.OBJECTIVES`` (``distill``,
``eopd``, ``avsd``); the objective declares its parameters and the *teacher views* it scores,
each view one reference text the privileged teacher is conditioned on (one forward pass each).
``teacher_messages`` builds the teacher's user message of each view (``data.views``: the
protocol's message around the reference solution for every objective but AVSD, AVSD's own three
views for AVSD, a baseline of the paper *DASH: divergence-adaptive supervision horizons*). A new
view needs a function in ``data.views.TEACHER_VIEWS`` and its name in an objective's
``teacher_views``.

    from dashrepro.training.methods import MethodSpec, teacher_messages
    spec = MethodSpec.from_config("avsd", config["methods"]["avsd"])
    teacher_messages(spec, "What is 2+3?", "2+3=5. \\boxed{5}", "5", protocol)  # three messages
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dashrepro.objectives.registry import AGGREGATION_SPECS, OBJECTIVES, check_params
from dashrepro.settings import GrpoSettings

#: The keys of a ``methods:`` entry that decide what is trained (all but its display ``label``),
#: in one fixed order: the train rule's params (Snakemake compares them by their repr, so a
#: default filled in or a grid-made entry must not reorder them), ``MethodSpec``
#: and the run's resume fingerprint (``training.run_spec.run_fingerprint_config``) read this list,
#: and a test holds the config schema's method properties to it.
METHOD_TRAINING_KEYS = (
    "objective",
    "objective_params",
    "aggregation",
    "divergence",
    "tau",
    "top_k",
    "params",
    "grpo",
)


def training_entry(entry: Mapping) -> dict:
    """A ``methods.<m>`` entry without its display label, in ``METHOD_TRAINING_KEYS``' order:
    the train rule's ``method`` param (so a relabel retrains nothing)."""
    return {key: entry[key] for key in METHOD_TRAINING_KEYS if key in entry}


@dataclass(frozen=True)
class MethodSpec:
    """One training method of ``workflow_config.yaml`` (its ``label`` aside)."""

    name: str
    aggregation: str
    divergence: str
    tau: float | None
    top_k: int | None = None
    params: Mapping = field(default_factory=dict)
    objective: str = "distill"  # a key of registry.OBJECTIVES
    objective_params: Mapping = field(default_factory=dict)
    grpo: GrpoSettings | None = None  # the GRPO hybrid's term; None: none

    @classmethod
    def from_config(cls, name: str, spec: Mapping) -> MethodSpec:
        """The method of config entry ``methods.<name>``; its objective and the objective's
        parameters are checked against ``registry.OBJECTIVES``."""
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
            grpo=(
                GrpoSettings.from_config(spec["grpo"], f"methods.{name}.grpo")
                if spec.get("grpo")
                else None
            ),
        )

    def training_config(self) -> dict:
        """Every training key of the method (``METHOD_TRAINING_KEYS``), as plain
        values: what a resumed state must have been trained under."""
        values = {key: getattr(self, key) for key in METHOD_TRAINING_KEYS}
        for key in ("params", "objective_params"):
            values[key] = dict(values[key])
        values["grpo"] = self.grpo.to_dict() if self.grpo else None
        return values

    @property
    def needs_teacher_entropy(self) -> bool:
        return AGGREGATION_SPECS[self.aggregation].needs_teacher_entropy

    def aggregate(self, r, mask, teacher_entropy):
        """The method's aggregation of the local signal ``r`` over each rollout, under its
        ``params`` (``objectives.aggregate`` fills in their defaults and checks their ranges);
        the teacher's entropy goes only to an aggregation that reads it."""
        from dashrepro import objectives  # torch, at call time: the config's parse loads this

        entropy = teacher_entropy if self.needs_teacher_entropy else None
        return objectives.aggregate(
            self.aggregation, r, mask, teacher_entropy=entropy, **self.params
        )

    @property
    def group_size(self) -> int:
        return self.grpo.group_size if self.grpo else 1

    @property
    def teacher_view_names(self) -> tuple[str, ...]:
        """The views the privileged teacher scores for this method's objective, in order."""
        return OBJECTIVES[self.objective].teacher_views


def teacher_messages(
    method: MethodSpec, problem: str, reference_solution: str, answer: str, protocol
) -> list[str]:
    """The privileged teacher's user messages for ``method``, one per declared view
    (``data.views.TEACHER_VIEWS``)."""
    from dashrepro.data.views import TEACHER_VIEWS

    return [
        TEACHER_VIEWS[view](problem, reference_solution, answer, protocol)
        for view in method.teacher_view_names
    ]
