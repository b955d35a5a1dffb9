"""Loaders for the real training set and benchmarks, normalised to one schema.

Every loader returns a ``pandas.DataFrame`` with exactly the columns of ``COLUMNS``::

    id, problem, reference_solution, answer, source

(the schema that ``synthetic_data`` writes for the embedded default, less its ``task`` column),
and a ``DataReport`` that counts and names every row it dropped, and why.

Sources are either a local file (``.parquet``, ``.jsonl``, or ``.json`` holding a JSON list of
objects) or a Hugging Face dataset id at a pinned revision, read through
``datasets.load_dataset(repo_id, revision=..., split=...)`` when the ``datasets`` package is
installed (it is imported only then; without it the loader stops with an error naming the id).
How a source's columns map onto ours is a named *layout* (``LAYOUTS``):

==========================  =============================================  =====================
layout                      used for                                       id
==========================  =============================================  =====================
``opsd_train``              ``siyanzhao/Openthoughts_math_30k_opsd``       ``openthoughts-00000``
``hf_aime_2024``            ``HuggingFaceH4/aime_2024``                    ``aime2024-<id>``
``matharena``               ``MathArena/aime_2025``, ``.../hmmt_feb_2025``  ``<name>-<problem_idx>``
``yentinglin_aime_2025``    ``yentinglin/aime_2025``                       ``aime2025-<id>``
``local_benchmark``         ``../shared/data/benchmarks/*.jsonl``          the file's ``id``
==========================  =============================================  =====================

Cleaning rules (``normalise``):

- a row whose problem is missing or blank is dropped; the problem text itself is kept verbatim
  (not stripped), as the OPSD reference code feeds it to the model;
- a row whose answer is missing or blank is dropped. Answers become strings: a string is kept as
  given apart from surrounding whitespace (so ``"025"`` stays ``"025"``: the source text is the
  authority, and math-verify reads both forms as 25); a non-string number is converted, ints as
  ``str(int)`` (``25 -> "25"``) and integral floats likewise (``25.0 -> "25"``, which is what a
  parquet integer column with a null in it turns into), other floats as ``str(float)``;
- for the training layout, a row without a reference solution is dropped;
- a row without an id is dropped; of rows sharing an id the first is kept and the rest dropped.

Rows are named in messages by their 0-based position in the source file (for JSON Lines: among the
non-blank lines) and by id; a JSON Lines line that is not valid JSON is named by its 1-based line
number, as an editor shows it.

``load_benchmark(spec)`` and ``load_training_set(spec)`` take a mapping with ``path`` *or*
``hf_id`` (+ ``revision``, ``split``), ``layout``, and for benchmarks ``expected_size`` (a
benchmark must come out at exactly that size), optionally ``sha256`` (of a local file, checked
before it is read), ``min_rows`` (training set), ``id_prefix``, ``name``.

    python -m dashrepro.data.datasets --path ../shared/data/benchmarks/aime2024.jsonl \\
        --layout local_benchmark --expected-size 30 --out /tmp/aime2024.parquet
    python -m dashrepro.data.datasets --hf-id siyanzhao/Openthoughts_math_30k_opsd \\
        --revision <commit> --layout opsd_train --training --out /tmp/train.parquet
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from dashrepro.io import sha256_file, write_parquet

COLUMNS = ("id", "problem", "reference_solution", "answer", "source")
SUPPORTED_SUFFIXES = (".parquet", ".jsonl", ".json")
# Suffixes that mark a string as a file path rather than a hub id, even when the file is absent.
_FILE_LIKE_SUFFIXES = SUPPORTED_SUFFIXES + (".csv", ".tsv", ".txt", ".arrow", ".gz", ".zst")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class DataError(ValueError):
    """A data file or dataset that cannot be used; the message names the file or id."""


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------


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
#   METHODS.md and in our brief was NOT found in any card or code, so the problem is taken from
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
# - local_benchmark: the shared files, read here (id, problem, answer, source_repo, source_path).
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


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------

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
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "layout": self.layout,
            "rows_read": self.rows_read,
            "rows_kept": self.rows_kept,
            "column_map": dict(self.column_map),
            "dropped": {
                reason: [d._asdict() for d in self.dropped.get(reason, [])] for reason in REASONS
            },
        }


def _describe_row(dropped: DroppedRow) -> str:
    label = f"id {dropped.id}" if dropped.id is not None else "no id"
    detail = f", {dropped.detail}" if dropped.detail else ""
    return f"row {dropped.row} ({label}{detail})"


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _decoded_lines(path: Path):
    """``(line_number, text)`` of a UTF-8 file; a byte that is not UTF-8 names file and line."""
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"{path}: line {line_number} is not UTF-8 text "
                    f"(byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
                ) from None


def _read_jsonl(path: Path) -> pd.DataFrame:
    records = []
    for line_number, line in _decoded_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{path}: line {line_number} is not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(record, dict):
            raise DataError(
                f"{path}: line {line_number} holds a JSON {type(record).__name__}, "
                "expected an object"
            )
        records.append(record)
    return _frame_from_records(records)


def _read_json(path: Path) -> pd.DataFrame:
    text = "".join(line for _, line in _decoded_lines(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
        ) from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of objects, found a {type(data).__name__}")
    for position, record in enumerate(data):
        if not isinstance(record, dict):
            raise DataError(
                f"{path}: row {position} holds a JSON {type(record).__name__}, expected an object"
            )
    return _frame_from_records(data)


def _frame_from_records(records: list[dict]) -> pd.DataFrame:
    # dtype=object keeps every value as parsed (an int stays an int even if another row lacks it).
    if not records:
        return pd.DataFrame()
    return pd.DataFrame(records, dtype=object)


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: cannot read as parquet ({type(exc).__name__}: {exc})") from exc


def _read_local(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DataError(
            f"{path}: unsupported file type {suffix or '(no extension)'!r}; "
            f"expected one of {', '.join(SUPPORTED_SUFFIXES)}"
        )
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if suffix == ".parquet":
        return _read_parquet(path)
    if suffix == ".jsonl":
        return _read_jsonl(path)
    return _read_json(path)


def _read_hub(repo_id: str, revision: str | None, split: str) -> pd.DataFrame:
    try:
        import datasets  # optional: imported only for hub loads
    except ImportError:
        datasets = None
    # Run as a script, this file itself could be found as "datasets": require the real API.
    if datasets is None or not hasattr(datasets, "load_dataset"):
        raise DataError(
            f"cannot load Hugging Face dataset {repo_id!r} (revision {revision}, split {split!r}): "
            "the `datasets` package is not installed; install it or pass a local file "
            "(.parquet, .jsonl, .json) instead"
        ) from None
    try:
        dataset = datasets.load_dataset(repo_id, revision=revision, split=split)
    except Exception as exc:  # network, auth, missing revision or split
        raise DataError(
            f"cannot load Hugging Face dataset {repo_id!r} (revision {revision}, split {split!r}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return dataset.to_pandas()


def _is_hub_id(path_or_id: str) -> bool:
    if Path(path_or_id).exists():
        return False
    if path_or_id.lower().endswith(_FILE_LIKE_SUFFIXES):
        return False
    return bool(_HUB_ID.match(path_or_id))


def load_table(
    path_or_id: str | Path,
    *,
    layout: str | Layout,
    revision: str | None = None,
    split: str = "train",
) -> pd.DataFrame:
    """The raw rows of a local file or a hub dataset, after checking the layout's columns exist.

    A string that names an existing file, or ends in a file suffix, is a local path (``revision``
    and ``split`` are then ignored); an ``owner/name`` string otherwise is a hub id.
    """
    layout = get_layout(layout)
    text = str(path_or_id)
    if isinstance(path_or_id, Path) or not _is_hub_id(text):
        path = Path(text)
        frame = _read_local(path)
        where = str(path)
    else:
        frame = _read_hub(text, revision, split)
        where = f"Hugging Face dataset {text!r} (revision {revision}, split {split!r})"
    check_columns(frame, layout, where)
    return frame.reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# Normalising
# --------------------------------------------------------------------------------------------


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, (list, tuple, dict, set, np.ndarray)):
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _number_text(value: Any) -> str | None:
    """A non-string number as text: integers (and integral floats) without a decimal point."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isnan(number):
            return None
        if number.is_integer():
            return str(int(number))
        return str(number)
    return None


def _scalar_text(value: Any, *, column: str, row: int, where: str, strip: bool) -> str | None:
    """Text for a cell, or None when missing/blank; non-scalar cells are a ``DataError``."""
    if _is_missing(value):
        return None
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped:
            return None
        return stripped if strip else value
    text = _number_text(value)
    if text is not None:
        return text
    raise DataError(
        f"{where}: row {row}: column {column!r} holds a {type(value).__name__} "
        f"({str(value)[:60]!r}), expected text or a number"
    )


def normalise_answer(value: Any) -> str | None:
    """An answer as a string (see the module docstring), or None when missing or blank."""
    return _scalar_text(value, column="answer", row=-1, where="answer", strip=True)


def _prefix_from_source(source: str) -> str:
    tail = re.sub(r"^[a-z][a-z0-9+.-]*:", "", source)  # a "file:" or "hf:" scheme
    tail = tail.split("@", 1)[0].rstrip("/\\")
    tail = re.split(r"[/\\]", tail)[-1]
    for suffix in SUPPORTED_SUFFIXES:
        if tail.lower().endswith(suffix):
            tail = tail[: -len(suffix)]
            break
    return tail or "row"


def normalise(
    frame: pd.DataFrame,
    layout: str | Layout,
    source: str,
    *,
    id_prefix: str | None = None,
) -> tuple[pd.DataFrame, DataReport]:
    """Map ``frame`` (raw rows of one source, in file order) onto ``COLUMNS`` and clean it.

    ``source`` fills the ``source`` column and names the data in messages; ``id_prefix`` overrides
    the layout's id prefix (default: the layout's, else the source's file or dataset name).
    """
    layout = get_layout(layout)
    resolved = check_columns(frame, layout, source)
    prefix = id_prefix or layout.id_prefix or _prefix_from_source(source)
    report = DataReport(source=source, layout=layout.name, rows_read=len(frame))
    report.column_map = dict(resolved)

    def column(ours: str) -> list[Any]:
        name = resolved.get(ours)
        return list(frame[name]) if name is not None else [None] * len(frame)

    raw_ids, problems, solutions, answers = (
        column(c) for c in ("id", "problem", "reference_solution", "answer")
    )
    first_seen: dict[str, int] = {}
    kept = []
    for row in range(len(frame)):
        if resolved["id"] is not None:
            value = _scalar_text(
                raw_ids[row], column=resolved["id"], row=row, where=source, strip=True
            )
            row_id = None if value is None else layout.id_format.format(value=value, prefix=prefix)
        else:
            row_id = layout.index_id_format.format(index=row, prefix=prefix)  # type: ignore[union-attr]
        problem = _scalar_text(
            problems[row],
            column=resolved["problem"] or "problem",
            row=row,
            where=source,
            strip=False,
        )
        solution = _scalar_text(
            solutions[row],
            column=resolved["reference_solution"] or "reference_solution",
            row=row,
            where=source,
            strip=False,
        )
        answer = _scalar_text(
            answers[row], column=resolved["answer"] or "answer", row=row, where=source, strip=True
        )
        if row_id is None:
            reason = MISSING_ID
        elif problem is None:
            reason = MISSING_PROBLEM
        elif answer is None:
            reason = MISSING_ANSWER
        elif layout.requires_reference_solution and solution is None:
            reason = MISSING_REFERENCE
        elif row_id in first_seen:
            reason = DUPLICATE_ID
        else:
            reason = None
        if reason is not None:
            detail = f"first seen at row {first_seen[row_id]}" if reason == DUPLICATE_ID else ""
            report.dropped[reason].append(DroppedRow(row, row_id, detail))
            continue
        first_seen[row_id] = row  # type: ignore[index]
        kept.append(
            {
                "id": row_id,
                "problem": problem,
                "reference_solution": solution,
                "answer": answer,
                "source": source,
            }
        )
    # dtype=object keeps None as None (a pandas string column would turn it into NaN).
    out = pd.DataFrame(kept, columns=list(COLUMNS), dtype=object)
    report.rows_kept = len(out)
    return out, report


# --------------------------------------------------------------------------------------------
# Specs
# --------------------------------------------------------------------------------------------

_SPEC_KEYS = {
    "path",
    "hf_id",
    "revision",
    "split",
    "layout",
    "expected_size",
    "min_rows",
    "sha256",
    "id_prefix",
    "name",
    "label",
    "description",
}


def _check_spec(spec: Mapping, what: str) -> None:
    if not isinstance(spec, Mapping):
        raise DataError(f"{what} spec must be a mapping, got {type(spec).__name__}")
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise DataError(f"{what} spec has unknown key(s) {unknown}; allowed: {sorted(_SPEC_KEYS)}")
    if ("path" in spec) == ("hf_id" in spec):
        raise DataError(f"{what} spec needs exactly one of 'path' or 'hf_id', got {dict(spec)}")
    if "layout" not in spec:
        raise DataError(f"{what} spec needs a 'layout' (one of {sorted(LAYOUTS)})")
    if "hf_id" in spec and not spec.get("revision"):
        raise DataError(
            f"{what} spec for Hugging Face dataset {spec['hf_id']!r} needs a pinned 'revision' "
            "(a commit hash), so that the data cannot change under the run"
        )
    if "hf_id" in spec and spec.get("sha256"):
        raise DataError(
            f"{what} spec for {spec['hf_id']!r}: 'sha256' checks local files only; "
            "a hub dataset is pinned by its 'revision'"
        )
    for key in ("expected_size", "min_rows"):
        value = spec.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise DataError(f"{what} spec: {key!r} must be a non-negative integer, got {value!r}")


def _load_spec(
    spec: Mapping, what: str, base_dir: str | Path | None
) -> tuple[pd.DataFrame, DataReport, str]:
    _check_spec(spec, what)
    layout = get_layout(spec["layout"])
    if "path" in spec:
        path = Path(spec["path"])
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        expected_hash = spec.get("sha256")
        if expected_hash:
            if not path.is_file():
                raise DataError(f"{path}: no such file")
            actual = sha256_file(path)
            if actual.lower() != str(expected_hash).strip().lower():
                raise DataError(
                    f"{path}: sha256 mismatch: expected {str(expected_hash).strip().lower()}, "
                    f"file has {actual}"
                )
        raw = load_table(path, layout=layout)
        source = f"file:{path.name}"
        default_prefix = path.name
    else:
        hf_id = str(spec["hf_id"])
        revision = str(spec["revision"])
        split = str(spec.get("split", "train"))
        raw = load_table(hf_id, layout=layout, revision=revision, split=split)
        source = f"hf:{hf_id}@{revision}"
        default_prefix = hf_id
    prefix = spec.get("id_prefix") or layout.id_prefix or _prefix_from_source(default_prefix)
    frame, report = normalise(raw, layout, source, id_prefix=prefix)
    name = str(spec.get("name") or source)
    return frame, report, name


def load_benchmark(
    spec: Mapping, *, base_dir: str | Path | None = None
) -> tuple[pd.DataFrame, DataReport]:
    """Load, verify and clean one benchmark; it must come out at exactly ``expected_size`` rows.

    ``base_dir`` resolves a relative ``path`` (default: the working directory).
    """
    if isinstance(spec, Mapping) and spec.get("expected_size") is None:
        raise DataError(f"benchmark spec {dict(spec)} needs 'expected_size' (e.g. 30)")
    frame, report, name = _load_spec(spec, "benchmark", base_dir)
    expected = int(spec["expected_size"])
    if len(frame) != expected:
        raise DataError(
            f"benchmark {name}: expected {expected} problems after cleaning, got {len(frame)}\n"
            f"{report.summary()}"
        )
    return frame, report


def load_training_set(
    spec: Mapping, *, base_dir: str | Path | None = None
) -> tuple[pd.DataFrame, DataReport]:
    """Load, verify and clean the training set; ``expected_size`` (exact) and ``min_rows`` are
    optional checks on the cleaned size."""
    frame, report, name = _load_spec(spec, "training set", base_dir)
    expected = spec.get("expected_size")
    if expected is not None and len(frame) != int(expected):
        raise DataError(
            f"training set {name}: expected {expected} rows after cleaning, got {len(frame)}\n"
            f"{report.summary()}"
        )
    min_rows = spec.get("min_rows")
    if min_rows is not None and len(frame) < int(min_rows):
        raise DataError(
            f"training set {name}: needs at least {min_rows} rows after cleaning, got {len(frame)}\n"
            f"{report.summary()}"
        )
    return frame, report


def prepare_dataset(
    spec: Mapping | None,
    *,
    source_file: str | Path | None = None,
    training: bool = False,
    expected_size: int | None = None,
    name: str | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One workflow dataset, checked, with a JSON-ready report (what the data rules call).

    ``spec`` None means the synthetic data in ``source_file`` (made by ``synthetic_data``; it
    keeps its ``task`` column). Otherwise ``spec`` is a config ``dataset`` entry, loaded by
    ``load_training_set`` or ``load_benchmark``; ``expected_size`` is a benchmark's exact size.
    """
    what = f"benchmark {name}" if name else ("training set" if training else "benchmark")
    if spec is None:
        if source_file is None:
            raise DataError(f"{what}: synthetic data needs its source file")
        frame = _read_parquet(Path(source_file))
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise DataError(f"{source_file}: missing column(s) {missing}")
        if expected_size is not None and len(frame) != expected_size:
            raise DataError(
                f"{what} ({source_file}): expected {expected_size} problems, got {len(frame)}"
            )
        if frame["id"].duplicated().any():
            raise DataError(
                f"{source_file}: duplicate ids {list(frame['id'][frame['id'].duplicated()][:5])}"
            )
        report: dict[str, Any] = {
            "source": f"synthetic:{Path(source_file).name}",
            "rows_read": len(frame),
            "rows_kept": len(frame),
            "dropped": {reason: [] for reason in REASONS},
        }
        report["summary"] = f"{report['source']}: {len(frame)} rows"
        return frame, report
    full = dict(spec)
    if name is not None:
        full.setdefault("name", name)
    if training:
        frame, data_report = load_training_set(full)
    else:
        full["expected_size"] = expected_size
        frame, data_report = load_benchmark(full)
    report = data_report.to_dict()
    report["summary"] = data_report.summary()
    if "path" in spec:
        report["sha256"] = str(spec["sha256"]).lower()
    else:
        report["revision"] = spec["revision"]
    return frame, report


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--path", help="local .parquet, .jsonl or .json file")
    where.add_argument("--hf-id", help="Hugging Face dataset id (needs --revision)")
    parser.add_argument("--revision", help="hub commit to pin")
    parser.add_argument("--split", default="train")
    parser.add_argument("--layout", required=True, choices=sorted(LAYOUTS))
    parser.add_argument("--training", action="store_true", help="load as the training set")
    parser.add_argument("--expected-size", type=int)
    parser.add_argument("--min-rows", type=int)
    parser.add_argument("--sha256")
    parser.add_argument("--id-prefix")
    parser.add_argument("--out", type=Path, help="write the normalised rows to this parquet file")
    args = parser.parse_args(argv)

    spec: dict[str, Any] = {"layout": args.layout}
    if args.path:
        spec["path"] = args.path
    else:
        spec.update(hf_id=args.hf_id, revision=args.revision, split=args.split)
    for key in ("expected_size", "min_rows", "sha256", "id_prefix"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    try:
        if args.training:
            frame, report = load_training_set(spec)
        else:
            frame, report = load_benchmark(spec)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    if args.out is not None:
        write_parquet(args.out, frame)
        print(f"wrote {len(frame)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
