"""What each aggregation, divergence and training objective declares: names, parameters with
their ranges and defaults, teacher views. Torch-free, so that config validation at Snakemake's
parse reads the same declarations the loss math uses.

A parameter is declared once, here: ``objectives.aggregate`` fills in its default and checks its
range by this entry, and config validation (``dashrepro.experiment.semantics``) checks every
method's ``params`` and ``objective_params`` against it before any job starts.

    from dashrepro.objectives.registry import AGGREGATION_SPECS, check_params
    check_params(AGGREGATION_SPECS["dash"].params, {"kappa": -5.0}, where="methods.dash.params")
    # -> ["methods.dash.params.kappa: -5.0 is out of range (kappa >= 0, a finite number)"]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    """One parameter: its type (``number`` or ``integer``), bounds, and its default or that it
    must be given.

    ``minimum``/``maximum`` are inclusive; ``exclusive_minimum`` makes the lower bound strict.
    ``default`` is the one value used where a method leaves the parameter out (None: no
    default, so a method must give it, or the parameter is ``required``).
    """

    kind: str = "number"
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    required: bool = False
    default: float | None = None
    meaning: str = ""

    def describe(self, name: str) -> str:
        """The allowed range in words, e.g. ``0 <= lam <= 1`` or ``position_s > 0``."""
        low = (
            ""
            if self.minimum is None
            else f"{self.minimum:g} {'<' if self.exclusive_minimum else '<='} "
        )
        high = "" if self.maximum is None else f" <= {self.maximum:g}"
        kind = "an integer" if self.kind == "integer" else "a finite number"
        bounds = f"{low}{name}{high}" if (low or high) else name
        if low and not high:  # "kappa >= 0" reads better than "0 <= kappa"
            bounds = f"{name} {'>' if self.exclusive_minimum else '>='} {self.minimum:g}"
        return f"{bounds}, {kind}"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed (None when it is)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not a number"
        if self.kind == "integer" and not float(value).is_integer():
            return f"{value!r} is not an integer"
        if not math.isfinite(float(value)):
            return f"{value!r} is not finite"
        too_low = self.minimum is not None and (
            value <= self.minimum if self.exclusive_minimum else value < self.minimum
        )
        too_high = self.maximum is not None and value > self.maximum
        if too_low or too_high:
            return f"{value!r} is out of range"
        return None


#: The local divergences of the signal r_t (``methods.<m>.divergence``; objectives.divergences).
DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")

#: DASH's propagation sensitivity, shared by every gap-gated aggregation (paper: kappa = 5).
_KAPPA = Param(minimum=0.0, default=5.0, meaning="gate sharpness of the sigmoid(-kappa x gap) gate")


@dataclass(frozen=True)
class AggregationSpec:
    """What an aggregation of ``objectives.AGGREGATIONS`` declares, in its one entry here: its
    parameters (the function's keyword arguments, with their ranges and defaults) and whether it
    reads the teacher's per-token entropy (the trainer computes it and passes
    ``teacher_entropy``)."""

    params: dict[str, Param]
    needs_teacher_entropy: bool = False
    # Whether it weighs tokens through propagation gates lambda_t (the premise probe measures
    # their spread; a test holds this to what ``objectives.aggregate`` returns).
    gated: bool = False


#: Every aggregation (``methods.<m>.aggregation``); its function is ``objectives.AGGREGATIONS``'s.
AGGREGATION_SPECS: dict[str, AggregationSpec] = {
    "opsd": AggregationSpec(params={}),
    "dash": AggregationSpec(params={"kappa": _KAPPA}, gated=True),
    "fixed_lambda": AggregationSpec(
        params={"lam": Param(minimum=0.0, maximum=1.0, required=True, meaning="the constant gate")},
        gated=True,
    ),
    "inverse_gap": AggregationSpec(params={"kappa": _KAPPA}, gated=True),
    "normalized_dash": AggregationSpec(params={"kappa": _KAPPA}, gated=True),
    "scale_matched_opsd": AggregationSpec(params={"kappa": _KAPPA}),
    "entropy_gate": AggregationSpec(
        params={"kappa": _KAPPA}, needs_teacher_entropy=True, gated=True
    ),
    "soft_or": AggregationSpec(params={"kappa": _KAPPA}, needs_teacher_entropy=True, gated=True),
    "pw_opsd": AggregationSpec(
        params={
            # SaFo-Lab/PW-OPSD's defaults.
            "position_w_min": Param(
                minimum=0.0, maximum=1.0, default=0.25, meaning="weight of the first token"
            ),
            "position_tau": Param(
                minimum=0.0, maximum=1.0, default=0.30, meaning="midpoint, a fraction of T"
            ),
            "position_s": Param(
                minimum=0.0, exclusive_minimum=True, default=0.10, meaning="sigmoid width"
            ),
        }
    ),
}


@dataclass(frozen=True)
class Objective:
    """A training objective: its parameters, the teacher views it scores, what it is.

    ``teacher_views`` name the reference texts the privileged teacher is conditioned on, each a
    forward pass (``dashrepro.data.views``): ``full`` (the protocol's message around the
    reference solution), and AVSD's ``full_solution``, ``partial_solution`` and ``answer_only``
    in AVSD's own message. Only ``distill``
    uses an aggregation; the others have their own per-token loss and take ``aggregation: opsd``
    with no ``params``.
    """

    params: dict[str, Param]
    teacher_views: tuple[str, ...]
    uses_aggregation: bool
    meaning: str


#: Every training objective (``methods.<m>.objective``); the trainer's losses are keyed by it.
OBJECTIVES: dict[str, Objective] = {
    "distill": Objective(
        params={},
        teacher_views=("full",),
        uses_aggregation=True,
        meaning="local signal r_t aggregated over the rollout (OPSD, DASH and their ablations)",
    ),
    "eopd": Objective(
        params={
            "entropy_threshold": Param(minimum=0.0, meaning="teacher entropy above which top-k"),
            "top_k": Param(kind="integer", minimum=1, meaning="teacher tokens of the top-k term"),
        },
        teacher_views=("full",),
        uses_aggregation=False,
        meaning="EOPD: reverse KL on the sampled token plus forward KL on the teacher's top-k "
        "where the teacher is uncertain",
    ),
    "avsd": Objective(
        params={},
        teacher_views=("full_solution", "partial_solution", "answer_only"),
        uses_aggregation=False,
        meaning="AVSD: a sampled-token target mixed from three teacher views",
    ),
}


def teacher_views_of(methods: Mapping[str, Mapping]) -> tuple[str, ...]:
    """Every teacher view the config entries ``methods`` score against, in first-use order:
    the layouts an embedded base model's warm start must teach it to read."""
    views: dict[str, None] = {}
    for spec in methods.values():
        objective = OBJECTIVES.get(spec.get("objective", "distill"))
        views.update(dict.fromkeys(objective.teacher_views if objective else ()))
    return tuple(views)


def check_params(
    declared: Mapping[str, Param], given: Mapping[str, Any], where: str, owner: str = "this"
) -> list[str]:
    """Problems of ``given`` against ``declared``, each naming ``where.<key>`` and the range.

    ``owner`` names what declares the parameters (``aggregation 'dash'``) for a key that does
    not belong there.
    """
    problems = []
    for key, value in given.items():
        if key not in declared:
            allowed = sorted(declared) or "no params"
            problems.append(f"{where}.{key}: does not apply to {owner} (it takes {allowed})")
            continue
        why = declared[key].problem(value)
        if why:
            problems.append(f"{where}.{key}: {why} ({declared[key].describe(key)})")
    for key, param in declared.items():
        if param.required and key not in given:
            problems.append(f"{where}.{key}: required ({param.describe(key)})")
    return problems
