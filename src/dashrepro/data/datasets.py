"""Loaders for the real training set and benchmarks, normalised to one schema (``COLUMNS``:
id, problem, reference_solution, answer, source), each with a ``DataReport`` naming every row
dropped and why.

Sources are a local file (.parquet, .jsonl, .json) or a Hugging Face dataset at a pinned
revision (``data.reading``); a named layout maps their columns onto ours (``data.layouts``).
The cleaning rules and the dataset spec are in docs/datasets.md. ``prepare_dataset`` is what
the workflow's data rules call; from the command line (without ``--sha256`` the error gives
the file's):

    python -m dashrepro.data.datasets --path benchmarks/aime2024.jsonl --sha256 <sha256> \\
        --layout local_benchmark --expected-size 30 --out aime2024.parquet
    python -m dashrepro.data.datasets --hf-id siyanzhao/Openthoughts_math_30k_opsd \\
        --revision <commit> --layout opsd_train --training --out train.parquet
"""

from __future__ import annotations

import argparse
import math
import numbers
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dashrepro.data.layouts import (
    COLUMNS,
    LAYOUTS,
    DataError,
    Layout,
    check_columns,
    get_layout,
)
from dashrepro.data.reading import SUPPORTED_SUFFIXES, _read_parquet, load_table
from dashrepro.data.report import (
    DUPLICATE_ID,
    MISSING_ANSWER,
    MISSING_ID,
    MISSING_PROBLEM,
    MISSING_REFERENCE,
    REASONS,
    DataReport,
    DroppedRow,
)
from dashrepro.data.spec import dataset_spec_problems
from dashrepro.hub import unpinned_dataset_message, unpinned_hub_dataset
from dashrepro.io import sha256_file, write_parquet

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


def _prefix_from_source(source: str) -> str:
    tail = re.sub(r"^[a-z][a-z0-9+.-]*:", "", source)  # a "file:" or "hf:" scheme
    tail = tail.split("@", 1)[0].rstrip("/\\")
    tail = re.split(r"[/\\]", tail)[-1]
    for suffix in SUPPORTED_SUFFIXES:
        if tail.lower().endswith(suffix):
            tail = tail[: -len(suffix)]
            break
    return tail or "row"


def _row_id(
    raw: Any, row: int, layout: Layout, id_column: str | None, prefix: str, source: str
) -> str | None:
    """The row's id from its id cell (None when blank), or from its index without an id column."""
    if id_column is not None:
        value = _scalar_text(raw, column=id_column, row=row, where=source, strip=True)
        return None if value is None else layout.id_format.format(value=value, prefix=prefix)
    return layout.index_id_format.format(index=row, prefix=prefix)  # type: ignore[union-attr]


def _drop_reason(
    layout: Layout,
    first_seen: Mapping[str, int],
    row_id: str | None,
    problem: str | None,
    solution: str | None,
    answer: str | None,
) -> str | None:
    """The first of ``REASONS`` that drops the row, or None to keep it."""
    if row_id is None:
        return MISSING_ID
    if problem is None:
        return MISSING_PROBLEM
    if answer is None:
        return MISSING_ANSWER
    if layout.requires_reference_solution and solution is None:
        return MISSING_REFERENCE
    if row_id in first_seen:
        return DUPLICATE_ID
    return None


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

    def text(values: list[Any], ours: str, row: int, strip: bool) -> str | None:
        name = resolved[ours] or ours
        return _scalar_text(values[row], column=name, row=row, where=source, strip=strip)

    raw_ids, problems, solutions, answers = (
        column(c) for c in ("id", "problem", "reference_solution", "answer")
    )
    first_seen: dict[str, int] = {}
    kept = []
    for row in range(len(frame)):
        row_id = _row_id(raw_ids[row], row, layout, resolved["id"], prefix, source)
        problem = text(problems, "problem", row, strip=False)
        solution = text(solutions, "reference_solution", row, strip=False)
        answer = text(answers, "answer", row, strip=True)
        reason = _drop_reason(layout, first_seen, row_id, problem, solution, answer)
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


def check_dataset_spec(spec: Mapping, what: str) -> None:
    """Stop with a ``DataError`` naming every way ``spec`` breaks the dataset spec's schema
    (``dashrepro.data.spec``, the rule the workflow config is checked by too)."""
    problems = dataset_spec_problems(spec, f"{what} spec")
    if problems:
        raise DataError("\n".join(problems))


def _load_spec(
    spec: Mapping, what: str, base_dir: str | Path | None, name: str | None, *, revision_key: str
) -> tuple[pd.DataFrame, DataReport, str]:
    check_dataset_spec(spec, what)
    _require_commit(spec, what, revision_key)
    layout = get_layout(spec["layout"])
    if "path" in spec:
        path = Path(spec["path"])
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        if not path.is_file():
            raise DataError(f"{path}: no such file")
        expected_hash = str(spec["sha256"]).lower()
        actual = sha256_file(path)
        if actual != expected_hash:
            raise DataError(f"{path}: sha256 mismatch: expected {expected_hash}, file has {actual}")
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
    return frame, report, name or source


def load_benchmark(
    spec: Mapping, *, base_dir: str | Path | None = None, name: str | None = None
) -> tuple[pd.DataFrame, DataReport]:
    """Load, verify and clean one benchmark; it must come out at exactly ``expected_size`` rows.

    ``base_dir`` resolves a relative ``path`` (default: the working directory); ``name`` names
    it in messages (default: its source).
    """
    if isinstance(spec, Mapping) and spec.get("expected_size") is None:
        raise DataError(f"benchmark spec {dict(spec)} needs 'expected_size' (e.g. 30)")
    key = f"benchmarks.{name}.dataset.revision" if name else "the benchmark's dataset.revision"
    frame, report, name = _load_spec(spec, "benchmark", base_dir, name, revision_key=key)
    expected = int(spec["expected_size"])
    if len(frame) != expected:
        raise DataError(
            f"benchmark {name}: expected {expected} problems after cleaning, got {len(frame)}\n"
            f"{report.summary()}"
        )
    return frame, report


def _require_commit(spec: Mapping, what: str, key: str) -> None:
    """A hub dataset must be pinned to a 40-hex commit: a branch name (``main``) can move under
    a run (a finished run's benchmark could change), so it stops here, before any download.
    The workflow checks the same before its first job (``experiment.pins.unpinned_revisions``)."""
    if unpinned_hub_dataset(spec):
        raise DataError(unpinned_dataset_message(what, spec["hf_id"], spec.get("revision"), key))


def _with_final_answers(frame: pd.DataFrame, report: DataReport) -> pd.DataFrame:
    """The privileged teacher's reference must include the final answer: a solution with no
    ``\\boxed{...}`` gets "The final answer is \\boxed{<answer>}." appended (ids recorded)."""
    lacking = ~frame["reference_solution"].astype(str).str.contains("\\boxed{", regex=False)
    if not lacking.any():
        return frame
    frame = frame.copy()
    frame.loc[lacking, "reference_solution"] = [
        f"{solution.rstrip()}\n\nThe final answer is \\boxed{{{answer}}}."
        for solution, answer in zip(
            frame.loc[lacking, "reference_solution"], frame.loc[lacking, "answer"], strict=True
        )
    ]
    report.answers_appended = [str(i) for i in frame.loc[lacking, "id"]]
    return frame


def load_training_set(
    spec: Mapping, *, base_dir: str | Path | None = None, name: str | None = None
) -> tuple[pd.DataFrame, DataReport]:
    """Load, verify and clean the training set; ``expected_size`` (exact) and ``min_rows`` are
    optional checks on the cleaned size. A hub training set must be pinned to a 40-hex commit:
    a branch name (``main``) can move under a run, so it stops here, before any download."""
    frame, report, name = _load_spec(
        spec, "training set", base_dir, name, revision_key="data.training_set.revision"
    )
    frame = _with_final_answers(frame, report)
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
    if training:
        frame, data_report = load_training_set(full, name=name)
    else:
        full["expected_size"] = expected_size
        frame, data_report = load_benchmark(full, name=name)
    report = data_report.to_dict()
    report["summary"] = data_report.summary()
    if "path" in spec:
        report["sha256"] = str(spec["sha256"]).lower()
    else:
        report["revision"] = spec["revision"]
    return frame, report


def hold_out_validation(
    frame: pd.DataFrame, n_problems: int, seed: int, *, what: str = "training set"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training rows, validation rows): ``n_problems`` rows drawn at random (numpy's generator
    seeded with ``seed``) are taken out of the training set, so the checkpoint selected on them
    was never trained on them. Both keep the source order. A set too small to spare them (it
    must keep at least as many rows as it gives) stops with a ``DataError``."""
    if n_problems < 1:
        raise DataError(f"{what}: a validation split needs at least one problem, not {n_problems}")
    if 2 * n_problems > len(frame):
        raise DataError(
            f"{what}: {len(frame)} rows cannot spare {n_problems} for validation "
            "(data.validation.n_problems: at most half the rows)"
        )
    rng = np.random.default_rng(seed)
    chosen = np.zeros(len(frame), dtype=bool)
    chosen[rng.choice(len(frame), size=n_problems, replace=False)] = True
    return frame[~chosen].reset_index(drop=True), frame[chosen].reset_index(drop=True)


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
    if args.path and args.sha256 is None and Path(args.path).is_file():
        print(
            f"error: --path needs --sha256 ({args.path}: {sha256_file(args.path)}), "
            "the content the dataset is pinned to",
            file=sys.stderr,
        )
        return 1
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
