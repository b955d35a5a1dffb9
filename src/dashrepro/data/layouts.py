"""Layouts: how each family of source datasets maps its columns onto the common schema.

``LAYOUTS`` names one per family (``opsd_train``, ``hf_aime_2024``, ``matharena``,
``yentinglin_aime_2025``, ``local_benchmark``; the table of sources and ids:
docs/datasets.md). ``get_layout(name)`` looks a layout up; ``check_columns(frame, layout,
where)`` resolves which source column feeds each of ours and raises ``DataError`` naming
``where``, the layout and the missing column(s). Used through ``load_table`` and the loaders
(``python -m dashrepro.data.datasets --help``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config's validation imports the layouts while Snakemake parses
    import pandas as pd

COLUMNS = ("id", "problem", "reference_solution", "answer", "source")


class DataError(ValueError):
    """A data file or dataset that cannot be used; the message names the file or id."""


@dataclass(frozen=True)
class Layout:
    """How one family of source files maps onto ``COLUMNS``.

    ``columns`` maps each of our content columns to candidate source columns; the first one the
    source has is used, an empty tuple means the source has no such column (the value is None).
    The id is ``id_format`` filled with the id column's ``value`` and a ``prefix``, or, when the
    source has none of ``id_columns``, ``index_id_format`` filled with the 0-based row ``index``
    (None: the id column is required).
    """

    name: str
    columns: Mapping[str, tuple[str, ...]]
    required: tuple[str, ...]
    id_columns: tuple[str, ...]
    id_format: str = "{value}"
    index_id_format: str | None = None
    id_prefix: str | None = None  # None: derived from the source's name
    requires_reference_solution: bool = False
    used_for: tuple[str, ...] = ()


# What was checked, and where (searches of hub dataset cards and public code):
# - opsd_train: `solution` and `Answer` CONFIRMED in public code that loads the hub set (e.g.
#   scripts reading row["solution"], row["Answer"], row["generated_token_count"]); the OPSD
#   authors' own opsd_train.py / data_collator.py (siyan-zhao/OPSD @ c181e5b) read the defaults
#   problem_field="problem", solution_field="solution". The `Question` column named in
#   in the project's planning notes was NOT found in any card or code, so the problem is taken from
#   `Question` when present and otherwise from `problem`; DataReport.column_map records which.
#   No id column is known: ids are openthoughts-<row:05d>.
# - hf_aime_2024: CONFIRMED from the dataset card (HuggingFaceH4/aime_2024 README @ 2fe88a2:
#   id int64, problem, solution, answer string, url, year; split "train", 30 rows) and from
#   OPSD eval/evaluate_math.py (example["problem"], example["answer"], example.get("id")).
# - matharena: `problem_idx`, `problem`, `answer` CONFIRMED for MathArena/hmmt_feb_2025 by
#   OPSD eval/evaluate_math.py (example["problem"], str(example["answer"]),
#   example.get("problem_idx")) and for the MathArena family by its cards (aime_2024_I,
#   brumo_2025, cmimc_2025, hmmt_feb_2026: problem_idx int64, problem, answer, problem_type;
#   answer is int64 in some, hence the number handling). MathArena/aime_2025's own card was not
#   found: ASSUMED to follow the family.
# - yentinglin_aime_2025: `problem`, `answer`, split "train" CONFIRMED by OPSD
#   eval/evaluate_math.py; `id` (and solution/url/year) ASSUMED from the brief and from a copy
#   of that set on the hub with id int64 0..29, problem, solution, answer, url. If `id` is
#   absent, the row index is used.
# - local_benchmark: the offline benchmark files, read here (id, problem, answer, source_repo,
#   source_path).
LAYOUTS: dict[str, Layout] = {
    "opsd_train": Layout(
        name="opsd_train",
        columns={
            "problem": ("Question", "problem"),
            "reference_solution": ("solution",),
            "answer": ("Answer", "answer"),
        },
        required=("problem", "reference_solution", "answer"),
        id_columns=("id",),
        index_id_format="openthoughts-{index:05d}",
        requires_reference_solution=True,
        used_for=("siyanzhao/Openthoughts_math_30k_opsd",),
    ),
    "hf_aime_2024": Layout(
        name="hf_aime_2024",
        columns={
            "problem": ("problem",),
            "reference_solution": ("solution",),
            "answer": ("answer",),
        },
        required=("problem", "answer"),
        id_columns=("id",),
        id_format="{prefix}-{value}",
        id_prefix="aime2024",
        used_for=("HuggingFaceH4/aime_2024",),
    ),
    "matharena": Layout(
        name="matharena",
        columns={"problem": ("problem",), "reference_solution": (), "answer": ("answer",)},
        required=("problem", "answer"),
        id_columns=("problem_idx",),
        id_format="{prefix}-{value}",
        used_for=("MathArena/aime_2025", "MathArena/hmmt_feb_2025"),
    ),
    "yentinglin_aime_2025": Layout(
        name="yentinglin_aime_2025",
        columns={
            "problem": ("problem",),
            "reference_solution": ("solution",),
            "answer": ("answer",),
        },
        required=("problem", "answer"),
        id_columns=("id",),
        id_format="{prefix}-{value}",
        index_id_format="{prefix}-{index}",
        id_prefix="aime2025",
        used_for=("yentinglin/aime_2025",),
    ),
    "local_benchmark": Layout(
        name="local_benchmark",
        columns={"problem": ("problem",), "reference_solution": (), "answer": ("answer",)},
        required=("problem", "answer"),
        id_columns=("id",),
        used_for=("aime2024.jsonl", "aime2025.jsonl", "hmmt_feb2025.jsonl"),
    ),
}


def get_layout(layout: str | Layout) -> Layout:
    if isinstance(layout, Layout):
        return layout
    try:
        return LAYOUTS[layout]
    except KeyError:
        raise DataError(f"unknown layout {layout!r}; expected one of {sorted(LAYOUTS)}") from None


def _resolve_columns(layout: Layout, available: Sequence[str]) -> dict[str, str | None]:
    """Our column -> the source column it is read from (None where the source has none)."""
    present = set(available)
    resolved: dict[str, str | None] = {}
    for ours, candidates in layout.columns.items():
        resolved[ours] = next((c for c in candidates if c in present), None)
    resolved["id"] = next((c for c in layout.id_columns if c in present), None)
    return resolved


def check_columns(frame: pd.DataFrame, layout: str | Layout, where: str) -> dict[str, str | None]:
    """Raise ``DataError`` naming ``where``, the layout and the missing column(s)."""
    layout = get_layout(layout)
    available = [str(c) for c in frame.columns]
    resolved = _resolve_columns(layout, available)
    missing = []
    for ours in layout.required:
        if resolved.get(ours) is None:
            missing.append(_describe_candidates(layout.columns[ours], ours))
    if resolved["id"] is None and layout.index_id_format is None:
        missing.append(_describe_candidates(layout.id_columns, "id"))
    if missing:
        raise DataError(
            f"{where}: layout {layout.name!r} needs column(s) {'; '.join(missing)}, "
            f"but the source has {sorted(available)}"
        )
    return resolved


def _describe_candidates(candidates: tuple[str, ...], ours: str) -> str:
    names = " or ".join(repr(c) for c in candidates)
    return f"{names} (for {ours})"
