"""The cleaning report: which rows a load kept and which it dropped, and why.

``normalise`` (in ``dashrepro.data.datasets``) fills a ``DataReport``: the rows read and kept,
which source column fed each of ours, and every dropped row (0-based position in the source, id,
detail) under the first of ``REASONS`` that applies. ``summary()`` is the human-readable text the
loaders print and put in their errors; ``to_dict()`` is the JSON-ready form the data rules write.
This module has no command line; see ``python -m dashrepro.data.datasets --help``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

MISSING_ID = "missing_id"
MISSING_PROBLEM = "missing_problem"
MISSING_ANSWER = "missing_answer"
MISSING_REFERENCE = "missing_reference_solution"
DUPLICATE_ID = "duplicate_id"
REASONS = (MISSING_ID, MISSING_PROBLEM, MISSING_ANSWER, MISSING_REFERENCE, DUPLICATE_ID)
_REASON_TEXT = {
    MISSING_ID: "missing or empty id",
    MISSING_PROBLEM: "missing or empty problem",
    MISSING_ANSWER: "missing or empty answer",
    MISSING_REFERENCE: "missing or empty reference solution",
    DUPLICATE_ID: "duplicate id (first kept)",
}


class DroppedRow(NamedTuple):
    row: int  # 0-based position in the source file
    id: str | None
    detail: str = ""


@dataclass
class DataReport:
    """What ``normalise`` kept and dropped. Each dropped row is listed once, under its first reason
    in ``REASONS`` order (duplicates are looked for among rows that passed the other checks)."""

    source: str
    layout: str
    rows_read: int = 0
    rows_kept: int = 0
    column_map: dict[str, str | None] = field(default_factory=dict)
    dropped: dict[str, list[DroppedRow]] = field(default_factory=lambda: {r: [] for r in REASONS})
    # Training rows whose reference solution had no boxed final answer: "The final answer is
    # \\boxed{<answer>}." was appended, so the privileged teacher always sees the answer.
    answers_appended: list[str] = field(default_factory=list)

    @property
    def n_dropped(self) -> int:
        return sum(len(rows) for rows in self.dropped.values())

    def counts(self) -> dict[str, int]:
        """Reason -> number of rows dropped for it (every reason, zeros included)."""
        return {reason: len(self.dropped.get(reason, [])) for reason in REASONS}

    def ids(self, reason: str) -> list[str | None]:
        return [d.id for d in self.dropped.get(reason, [])]

    def rows(self, reason: str) -> list[int]:
        return [d.row for d in self.dropped.get(reason, [])]

    def summary(self, max_ids: int = 10) -> str:
        """A headline, then one line per reason that dropped rows, with up to ``max_ids`` rows."""
        lines = [
            f"{self.source} [layout {self.layout}]: {self.rows_read} rows read, "
            f"{self.rows_kept} kept, {self.n_dropped} dropped"
        ]
        for reason in REASONS:
            rows = self.dropped.get(reason, [])
            if not rows:
                continue
            shown = ", ".join(_describe_row(d) for d in rows[:max_ids])
            more = f", ... and {len(rows) - max_ids} more" if len(rows) > max_ids else ""
            lines.append(f"  {_REASON_TEXT[reason]}: {len(rows)} row(s): {shown}{more}")
        if self.answers_appended:
            ids = ", ".join(self.answers_appended[:max_ids])
            more = ", ..." if len(self.answers_appended) > max_ids else ""
            lines.append(
                f"  final answer appended to the reference solution: "
                f"{len(self.answers_appended)} row(s): {ids}{more}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "layout": self.layout,
            "rows_read": self.rows_read,
            "rows_kept": self.rows_kept,
            "column_map": dict(self.column_map),
            "answers_appended": list(self.answers_appended),
            "dropped": {
                reason: [d._asdict() for d in self.dropped.get(reason, [])] for reason in REASONS
            },
        }


def _describe_row(dropped: DroppedRow) -> str:
    label = f"id {dropped.id}" if dropped.id is not None else "no id"
    detail = f", {dropped.detail}" if dropped.detail else ""
    return f"row {dropped.row} ({label}{detail})"
