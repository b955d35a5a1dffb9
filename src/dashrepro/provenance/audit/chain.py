"""A cell's chain: from a table cell, through each seed's selection and candidate checkpoints,
to the raw generations, the adapter and the training run (see ``dashrepro.provenance.audit``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dashrepro.analysis.registry import OURS, SCORE_KINDS
from dashrepro.analysis.tables import published_table_id
from dashrepro.io import read_csv, read_json
from dashrepro.provenance.records import record_path


@dataclass
class SeedChain:
    seed: int
    selection: str
    selected_step: int
    candidates: dict[int, float]
    samples: dict[int, str]
    summaries: dict[int, str]
    responses: str | None = None
    adapter: str | None = None
    adapter_config: str | None = None
    #: The model folders' files the selected checkpoint's generation read beside its inputs.
    read_files: list[str] = field(default_factory=list)
    run_record: dict[str, Any] | None = None


@dataclass
class CellChain:
    table: str
    row: str
    scale: str
    column: str
    value: float
    std: float
    source: str
    table_csv: str
    benchmarks: list[str] = field(default_factory=list)
    declared_seeds: list[int] = field(default_factory=list)
    seeds: list[SeedChain] = field(default_factory=list)
    copied_from: str | None = None


class AuditError(ValueError):
    """A cell that cannot be audited (unknown table, row, scale or column; not a scores table)."""


def output_record(root: Path, output: str | Path) -> dict | None:
    """The provenance record of ``output`` (a path relative to ``root``), or None."""
    output = Path(output)
    path = record_path(output if output.is_absolute() else root / output)
    if not path.is_file():
        folder = (root / output).parent / "provenance.json"  # a file inside a folder output
        return read_json(folder) if folder.is_file() else None
    return read_json(path)


def record_inputs(record: Mapping | None, name: str) -> list[dict]:
    return list((record or {}).get("inputs", {}).get(name, []))


def _table_context(root: Path, results: Path, table: str) -> tuple[str, dict, dict]:
    csv = results / "tables" / f"{table}.csv"
    if not csv.is_file():
        known = sorted(p.stem for p in (results / "tables").glob("*.csv"))
        raise AuditError(f"no table {table!r} in {results / 'tables'} (tables: {known})")
    record = output_record(root, csv) or {}
    params = record.get("params") or {}
    return str(csv.relative_to(root)) if csv.is_relative_to(root) else str(csv), record, params


def cell_chain(
    root: str | Path, results: str | Path, table: str, row: str, scale: str, column: str
) -> CellChain:
    """The chain of one cell (see the module docstring); paths relative to ``root``, the
    workflow's working directory, as the records hold them."""
    root, results = Path(root), Path(results)
    results = results if results.is_absolute() else root / results
    csv, record, params = _table_context(root, results, table)
    cells = read_csv(root / csv if not Path(csv).is_absolute() else csv)
    mine = cells[(cells["row"] == row) & (cells["scale"] == scale) & (cells["column"] == column)]
    if mine.empty:
        raise AuditError(
            f"{csv}: no cell ({row}, {scale}, {column}); rows {sorted(set(cells['row']))}, "
            f"scales {sorted(set(cells['scale']))}, columns {sorted(set(cells['column']))}"
        )
    cell = mine.iloc[0]
    std = float(cell["std"]) if cell.get("std") not in (None, "") else math.nan
    chain = CellChain(
        table=table, row=row, scale=scale, column=column, value=float(cell["value"]),
        std=std, source=str(cell["source"]), table_csv=csv,
    )  # fmt: skip
    if chain.source != OURS:
        published = published_table_id(table, params.get("spec") or {})
        chain.copied_from = (
            f"{chain.source}: copied from the published numbers (table {published!r}, "
            f"{record_inputs(record, 'published')[0]['path'] if record_inputs(record, 'published') else 'CSV'})"
        )
        return chain
    kind = (params.get("spec") or {}).get("kind")
    if kind not in SCORE_KINDS:
        raise AuditError(f"table {table!r} is of kind {kind!r}; the audit follows {SCORE_KINDS}")
    context = params.get("context") or {}
    chain.benchmarks = list(context.get("benchmarks") or [])
    chain.declared_seeds = [int(s) for s in (context.get("runs") or {}).get(f"{row}/{scale}", [])]
    # Each selection file's [method, scale, seed] is beside it in the table job's context.
    keys = (context.get("input_keys") or {}).get("selections")
    paths = [item["path"] for item in record_inputs(record, "selections")]
    if keys is None or len(keys) != len(paths):
        raise AuditError(
            f"{csv}: its record does not say which run each selection file is "
            "(context.input_keys); it was made by an older version: rerun the table"
        )
    selections = [
        path for path, (m, c, _) in zip(paths, keys, strict=True) if (m, c) == (row, scale)
    ]
    for path in sorted(selections):
        chain.seeds.append(_seed_chain(root, path))
    return chain


def _seed_chain(root: Path, selection_path: str) -> SeedChain:
    selection = read_json(root / selection_path)
    record = output_record(root, selection_path)
    # The selection job's inputs are its checkpoints' files in the order of its params' steps.
    steps = [int(t) for t in (record or {}).get("params", {}).get("steps", [])]
    summaries = {
        t: p["path"] for t, p in zip(steps, record_inputs(record, "summaries"), strict=True)
    }
    samples = {t: p["path"] for t, p in zip(steps, record_inputs(record, "samples"), strict=True)}
    seed = SeedChain(
        seed=int(selection["seed"]),
        selection=selection_path,
        selected_step=int(selection["selected_step"]),
        candidates={int(s): float(v) for s, v in selection["scores_by_step"].items()},
        samples=samples,
        summaries=summaries,
    )
    chosen = samples.get(seed.selected_step)
    grading = output_record(root, chosen) if chosen else None
    responses = record_inputs(grading, "responses")
    if responses:
        seed.responses = responses[0]["path"]
        generation = output_record(root, seed.responses)
        adapter = record_inputs(generation, "adapter")
        config = record_inputs(generation, "adapter_config")
        seed.adapter_config = config[0]["path"] if config else None
        seed.read_files = [item["path"] for items in ((generation or {}).get("read_files") or {})
                           .values() for item in items]  # fmt: skip
        if adapter:
            seed.adapter = adapter[0]["path"]
            seed.run_record = output_record(root, seed.adapter)
    return seed


def _run_summary(root: Path, record: Mapping | None) -> list[str]:
    """The training run's config, data and base model hashes, and code version, as lines."""
    if not record:
        return ["training run: no provenance record"]
    params = record.get("params") or {}
    lines = [
        f"training run: rule {record.get('rule')} {record.get('wildcards')}, finished "
        f"{record.get('finished_utc')}",
        f"  method: {params.get('method')}",
        f"  train: {params.get('train')}",
        f"  lora: {params.get('lora')}",
    ]
    for item in record_inputs(record, "train"):
        lines.append(f"  training data: {item['path']} sha256 {item['sha256']}")
    for item in record_inputs(record, "base_model"):
        lines.append(f"  base model: {item['path']} sha256 {item['sha256']}")
        snapshot = root / item["path"]
        if snapshot.name == "dashrepro_snapshot.json" and snapshot.is_file():
            info = read_json(snapshot)
            lines.append(f"    hub model {info['model']} at commit {info['revision']}")
    if not record_inputs(record, "base_model"):
        lines.append(f"  base model: {params.get('base_model')} (no local file recorded)")
    code = record.get("code") or {}
    lines.append(
        f"  code: dashrepro {code.get('dashrepro')} git {code.get('git_commit')}"
        f"{' (dirty)' if code.get('git_dirty') else ''}, torch {code.get('torch')}, "
        f"transformers {code.get('transformers')}"
    )
    return lines


def render_chain(root: str | Path, chain: CellChain) -> str:
    """The chain as indented text, from the cell down to the training run."""
    root = Path(root)
    head = (
        f"cell {chain.table} / {chain.row} / {chain.scale} / {chain.column} = {chain.value:.4f}"
        + ("" if math.isnan(chain.std) else f" ± {chain.std:.4f}")
        + f"  [{chain.table_csv}]"
    )
    if chain.copied_from:
        return f"{head}\n  {chain.copied_from}"
    lines = [head, f"  seeds: {[s.seed for s in chain.seeds]} (declared {chain.declared_seeds})"]
    for seed in chain.seeds:
        candidates = ", ".join(
            f"{step}: {score:.2f}{' *' if step == seed.selected_step else ''}"
            for step, score in sorted(seed.candidates.items())
        )
        lines += [
            f"  seed {seed.seed}: {seed.selection}",
            f"    selected step {seed.selected_step}; every candidate's mean Avg@k: {candidates}",
            f"    graded samples: {seed.samples.get(seed.selected_step)}",
            f"    summary: {seed.summaries.get(seed.selected_step)}",
            f"    generations: {seed.responses}",
            f"    adapter: {seed.adapter}",
            f"    adapter config: {seed.adapter_config or 'not recorded'}",
            f"    model files read beside them: {len(seed.read_files)}, each hashed"
            + (f" ({', '.join(Path(p).name for p in seed.read_files)})" if seed.read_files else ""),
        ]
        lines += ["    " + line for line in _run_summary(root, seed.run_record)]
    return "\n".join(lines)
