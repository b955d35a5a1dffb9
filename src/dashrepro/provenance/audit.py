"""Audit a table cell: its chain back to the raw generations, every hash on it checked again, the
number derived again; and a report over every cell of an experiment.

A cell of a scores table (kinds ``method_scores`` and ``seed_statistics``: one row per method)
is the mean over seeds of each seed's selected checkpoint's Avg@k. Its chain, file by file:

    table CSV (its record names the selection files and their sha256)
      -> per seed: selection JSON (the selected step, every candidate's score)
        -> per candidate: graded samples.parquet and summary.json (grade_checkpoint's record)
          -> responses.parquet, the raw generations (generate_checkpoint_responses's record)
            -> the adapter, and the training run's record: its config (method, train, LoRA,
               protocol), the training data's and the base model's sha256 (a hub model's commit),
               the code version

A cell copied from another paper (source other than "this run") says where it was copied from.

``--verify`` checks every recorded input hash on the chain against the file as it is now,
derives the summaries, the selection and the cell again from the graded samples (``--regrade``:
from the raw responses, through the grader), and names every difference; the command then
exits 1. So a changed grade, a swapped adapter, an edited summary, selection or table is caught
and named. ``--report`` audits every cell of every scores table and writes Markdown and HTML
flagging changed or stale inputs, cells whose chain mixes code versions or configurations, and
cells with fewer seeds than the run matrix declares.

    dashrepro audit main_results dash tiny aime2025
    dashrepro audit main_results dash tiny aime2025 --verify --regrade
    dashrepro audit --report --results results/tiny
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dashrepro.analysis.registry import OURS, SCORE_KINDS
from dashrepro.io import read_csv, read_json, sha256_path
from dashrepro.provenance.records import record_path

#: Relative tolerance when a number is derived again (a CSV holds floats to full precision).
TOLERANCE = 1e-9


@dataclass
class Finding:
    """One problem on a chain: ``kind`` (changed_input, changed_output, stale_input,
    missing_file, mismatch, regrade_mismatch, mixed_code, mixed_config, fewer_seeds), the file
    it concerns, and what."""

    kind: str
    path: str
    detail: str

    def line(self) -> str:
        return f"[{self.kind}] {self.path}: {self.detail}"


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


def _record(root: Path, output: str | Path) -> dict | None:
    """The provenance record of ``output`` (a path relative to ``root``), or None."""
    output = Path(output)
    path = record_path(output if output.is_absolute() else root / output)
    if not path.is_file():
        folder = (root / output).parent / "provenance.json"  # a file inside a folder output
        return read_json(folder) if folder.is_file() else None
    return read_json(path)


def _input(record: Mapping | None, name: str) -> list[dict]:
    return list((record or {}).get("inputs", {}).get(name, []))


def _table_context(root: Path, results: Path, table: str) -> tuple[str, dict, dict]:
    csv = results / "tables" / f"{table}.csv"
    if not csv.is_file():
        known = sorted(p.stem for p in (results / "tables").glob("*.csv"))
        raise AuditError(f"no table {table!r} in {results / 'tables'} (tables: {known})")
    record = _record(root, csv) or {}
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
        published = (params.get("spec") or {}).get("options", {}).get("published_table", table)
        chain.copied_from = (
            f"{chain.source}: copied from the published numbers (table {published!r}, "
            f"{_input(record, 'published')[0]['path'] if _input(record, 'published') else 'CSV'})"
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
    paths = [item["path"] for item in _input(record, "selections")]
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
    record = _record(root, selection_path)
    # The selection job's inputs are its checkpoints' files in the order of its params' steps.
    steps = [int(t) for t in (record or {}).get("params", {}).get("steps", [])]
    summaries = {t: p["path"] for t, p in zip(steps, _input(record, "summaries"), strict=True)}
    samples = {t: p["path"] for t, p in zip(steps, _input(record, "samples"), strict=True)}
    seed = SeedChain(
        seed=int(selection["seed"]),
        selection=selection_path,
        selected_step=int(selection["selected_step"]),
        candidates={int(s): float(v) for s, v in selection["scores_by_step"].items()},
        samples=samples,
        summaries=summaries,
    )
    chosen = samples.get(seed.selected_step)
    grading = _record(root, chosen) if chosen else None
    responses = _input(grading, "responses")
    if responses:
        seed.responses = responses[0]["path"]
        generation = _record(root, seed.responses)
        adapter = _input(generation, "adapter")
        if adapter:
            seed.adapter = adapter[0]["path"]
            seed.run_record = _record(root, seed.adapter)
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
    for item in _input(record, "train"):
        lines.append(f"  training data: {item['path']} sha256 {item['sha256']}")
    for item in _input(record, "base_model"):
        lines.append(f"  base model: {item['path']} sha256 {item['sha256']}")
        snapshot = root / item["path"]
        if snapshot.name == "dashrepro_snapshot.json" and snapshot.is_file():
            info = read_json(snapshot)
            lines.append(f"    hub model {info['model']} at commit {info['revision']}")
    if not _input(record, "base_model"):
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
        ]
        lines += ["    " + line for line in _run_summary(root, seed.run_record)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- verification


def _records_on(root: Path, chain: CellChain) -> list[tuple[str, dict]]:
    """(output, record) of every job on the chain."""
    found = []
    table = _record(root, chain.table_csv)
    if table:
        found.append((chain.table_csv, table))
    for seed in chain.seeds:
        outputs = [seed.selection, *seed.samples.values(), seed.responses, seed.adapter]
        for output in filter(None, outputs):
            record = _record(root, output)
            if record:
                found.append((output, record))
    return found


def _parse_time(text: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def check_hashes(root: str | Path, chain: CellChain, cache: dict | None = None) -> list[Finding]:
    """Every recorded input hash on the chain against the file now; a file written after the job
    that read it finished is reported as stale even where its hash still agrees; every output of
    those jobs against the sha256 it was written with (``changed_output``)."""
    root, cache = Path(root), {} if cache is None else cache
    findings: list[Finding] = []
    seen: set[str] = set()
    for output, record in _records_on(root, chain):
        finished = _parse_time(record.get("finished_utc"))
        for name, items in (record.get("inputs") or {}).items():
            for item in items:
                if item.get("sha256") is None:
                    continue  # a name, not a file (a hub id), recorded as given
                path = root / item["path"]
                if not path.exists():
                    findings.append(
                        Finding("missing_file", item["path"], f"input {name!r} of {output}")
                    )
                    continue
                if item["path"] not in cache:
                    cache[item["path"]] = sha256_path(path)
                if cache[item["path"]] != item["sha256"]:
                    findings.append(Finding(
                        "changed_input", item["path"],
                        f"sha256 {cache[item['path']][:12]}… now, {item['sha256'][:12]}… when "
                        f"{record.get('rule')} made {output}",
                    ))  # fmt: skip
                elif finished is not None and path.stat().st_mtime > finished + 1.0:
                    findings.append(Finding(
                        "stale_input", item["path"],
                        f"written after {record.get('rule')} made {output} (same content)",
                    ))  # fmt: skip
        findings.extend(_changed_outputs(root, record, cache, seen))
    return findings


def _changed_outputs(root: Path, record: Mapping, cache: dict, seen: set) -> list[Finding]:
    """Every output of a job on the chain (a table's CSV, Markdown and LaTeX; a run's
    adapters) against the sha256 its own record says the job wrote."""
    findings = []
    for output in record.get("outputs") or []:
        if output in seen:
            continue
        seen.add(output)
        own = _record(root, output)
        written = (own or {}).get("output_sha256")
        path = root / output
        if not written or not path.exists():
            continue
        if output not in cache:
            cache[output] = sha256_path(path)
        if cache[output] != written:
            findings.append(Finding(
                "changed_output", output,
                f"sha256 {cache[output][:12]}… now, {written[:12]}… when {record.get('rule')} "
                "wrote it",
            ))  # fmt: skip
    return findings


def _close(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def rederive(root: str | Path, chain: CellChain, regrade: bool = False) -> list[Finding]:
    """Summaries, selection and the cell derived again from the graded samples (``regrade``:
    the selected checkpoints' samples graded again from their raw responses first)."""
    import pandas as pd

    from dashrepro.analysis.selection import select_best_checkpoint
    from dashrepro.evaluation.scoring import summarize_samples, summary_differences
    from dashrepro.io import read_parquet

    root = Path(root)
    findings, per_seed = [], []
    for seed in chain.seeds:
        summaries = {}
        for step, path in sorted(seed.samples.items()):
            samples = read_parquet(root / path)
            summaries[step] = summarize_samples(samples, chain.benchmarks)
            stored = root / seed.summaries.get(step, "")
            if seed.summaries.get(step) and stored.is_file():
                for line in summary_differences(
                    read_json(stored), summaries[step], chain.benchmarks
                ):
                    findings.append(Finding("mismatch", seed.summaries[step], line))
            if regrade and step == seed.selected_step and seed.responses:
                findings += _regrade(root, seed.responses, path, samples)
        again = select_best_checkpoint(summaries, chain.benchmarks)
        if again["selected_step"] != seed.selected_step:
            findings.append(Finding(
                "mismatch", seed.selection,
                f"selected step {seed.selected_step}, the samples select {again['selected_step']}",
            ))  # fmt: skip
        per_seed.append(again["benchmark_scores"])
    if not per_seed:
        return [*findings, Finding("missing_file", chain.table_csv, "no selection on the chain")]
    frame = pd.DataFrame(per_seed)
    if chain.column == "average":
        value = float(frame[chain.benchmarks].mean().mean())
        std = math.nan
    else:
        value = float(frame[chain.column].mean())
        std = float(frame[chain.column].std(ddof=1)) if len(frame) > 1 else math.nan
    if not _close(value, chain.value) or not _close(std, chain.std):
        findings.append(Finding(
            "mismatch", chain.table_csv,
            f"cell {chain.value!r} ± {chain.std!r}, the samples give {value!r} ± {std!r}",
        ))  # fmt: skip
    return findings


def _regrade(root: Path, responses_path: str, samples_path: str, samples) -> list[Finding]:
    from dashrepro.evaluation.grade import grade_samples
    from dashrepro.io import read_parquet

    record = _record(root, samples_path) or {}
    grading = (record.get("params") or {}).get("grading") or {}
    regraded = grade_samples(
        read_parquet(root / responses_path),
        grading_workers=int(grading.get("grading_workers", 2)),
        grading_timeout_s=float(grading.get("grading_timeout_s", 5.0)),
    )
    keys = ["benchmark", "problem_id", "prompt_role", "sample_index"]
    if len(regraded) != len(samples):
        return [Finding("regrade_mismatch", samples_path,
                        f"{len(samples)} graded rows, {len(regraded)} responses")]  # fmt: skip
    left = samples.sort_values(keys).reset_index(drop=True)
    right = regraded.sort_values(keys).reset_index(drop=True)
    differ = left["correct"].astype(bool) != right["correct"].astype(bool)
    if differ.any():
        where = left.loc[differ, keys].head(3).to_dict("records")
        return [Finding("regrade_mismatch", samples_path,
                        f"{int(differ.sum())} grades differ from the responses' regrade, e.g. {where}")]  # fmt: skip
    return []


def consistency(root: str | Path, chain: CellChain) -> list[Finding]:
    """Chains mixing code versions or training configurations, and missing seeds."""
    root = Path(root)
    findings = []
    versions = {}
    for output, record in _records_on(root, chain):
        code = record.get("code") or {}
        versions.setdefault((code.get("git_commit"), code.get("git_dirty")), output)
    if len(versions) > 1:
        listing = "; ".join(
            f"{c[0] and c[0][:10]}{' dirty' if c[1] else ''} ({o})" for c, o in versions.items()
        )
        findings.append(Finding("mixed_code", chain.table_csv, f"the chain's jobs ran {listing}"))
    configs = {}
    for seed in chain.seeds:
        params = dict((seed.run_record or {}).get("params") or {})
        key = repr(
            {k: params.get(k) for k in ("method", "train", "lora", "protocol", "base_model")}
        )
        configs.setdefault(key, []).append(seed.seed)
    if len(configs) > 1:
        findings.append(Finding(
            "mixed_config", chain.table_csv,
            f"seeds {list(configs.values())} were trained with different configurations",
        ))  # fmt: skip
    have = [s.seed for s in chain.seeds]
    if chain.declared_seeds and len(have) < len(chain.declared_seeds):
        findings.append(Finding(
            "fewer_seeds", chain.table_csv,
            f"{len(have)} seeds {have}, the run matrix declares {chain.declared_seeds}",
        ))  # fmt: skip
    return findings


def verify(root: str | Path, chain: CellChain, regrade: bool = False) -> list[Finding]:
    """Every check on one cell: hashes, derivation (and regrading), consistency."""
    if chain.copied_from:
        return []
    return [*check_hashes(root, chain), *rederive(root, chain, regrade), *consistency(root, chain)]


# ---------------------------------------------------------------------------------- the report


def score_cells(
    root: str | Path, results: str | Path, tables: Sequence[str] | None = None
) -> list[tuple[str, str, str, str]]:
    """(table, row, scale, column) of every cell of the scores tables ``tables`` under
    ``results`` (None: every table there, as the command line audits a folder)."""
    root, results = Path(root), Path(results)
    results = results if results.is_absolute() else root / results
    cells = []
    if tables is None:
        files = sorted((results / "tables").glob("*.csv"))
    else:
        files = [results / "tables" / f"{table}.csv" for table in tables]
    for csv in files:
        record = _record(root, csv) or {}
        if ((record.get("params") or {}).get("spec") or {}).get("kind") not in SCORE_KINDS:
            continue
        frame = read_csv(csv)
        for item in frame.itertuples():
            cells.append((csv.stem, item.row, item.scale, item.column))
    return cells


def audit_report(
    root: str | Path,
    results: str | Path,
    regrade: bool = False,
    tables: Sequence[str] | None = None,
) -> tuple[list[dict], str, str]:
    """Audit every cell of the scores tables ``tables`` (None: every one under ``results``):
    (one record per cell, Markdown, HTML)."""
    root = Path(root)
    cache: dict = {}
    rows = []
    for table, row, scale, column in score_cells(root, results, tables):
        chain = cell_chain(root, results, table, row, scale, column)
        if chain.copied_from:
            findings: list[Finding] = []
        else:
            findings = [*check_hashes(root, chain, cache), *rederive(root, chain, regrade),
                        *consistency(root, chain)]  # fmt: skip
        rows.append({
            "table": table, "row": row, "scale": scale, "column": column, "value": chain.value,
            "source": chain.source, "seeds": len(chain.seeds),
            "declared_seeds": len(chain.declared_seeds), "status": "ok" if not findings else
            ",".join(sorted({f.kind for f in findings})), "findings": [f.line() for f in findings],
        })  # fmt: skip
    return rows, _markdown(rows), _html(rows)


def _markdown(rows: Sequence[Mapping]) -> str:
    flagged = [r for r in rows if r["status"] != "ok"]
    lines = [
        "# Audit of every table cell",
        "",
        f"{len(rows)} cells, {len(flagged)} flagged. Each cell's chain: table -> selection per "
        "seed -> graded samples of every candidate checkpoint -> generations -> adapter -> "
        "training run; every recorded input hash checked, every number derived again "
        "(`dashrepro audit TABLE ROW SCALE COLUMN --verify` prints one chain).",
        "",
        "| table | row | scale | column | value | seeds | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['table']} | {r['row']} | {r['scale']} | {r['column']} | {r['value']:.2f} | "
            f"{r['seeds']}/{r['declared_seeds']} | {r['status']} |"
        )
    if flagged:
        lines += ["", "## Findings", ""]
        for r in flagged:
            lines.append(f"- {r['table']} / {r['row']} / {r['scale']} / {r['column']}:")
            lines += [f"  - {line}" for line in r["findings"]]
    return "\n".join(lines) + "\n"


def _html(rows: Sequence[Mapping]) -> str:
    body = [
        "<table><thead><tr><th>table</th><th>row</th><th>scale</th><th>column</th>"
        "<th>value</th><th>seeds</th><th>status</th><th>findings</th></tr></thead><tbody>"
    ]
    for r in rows:
        colour = "" if r["status"] == "ok" else ' style="background:#fdd"'
        findings = "<br>".join(html.escape(line) for line in r["findings"])
        body.append(
            f"<tr{colour}><td>{html.escape(r['table'])}</td><td>{html.escape(r['row'])}</td>"
            f"<td>{html.escape(r['scale'])}</td><td>{html.escape(r['column'])}</td>"
            f"<td>{r['value']:.2f}</td><td>{r['seeds']}/{r['declared_seeds']}</td>"
            f"<td>{html.escape(r['status'])}</td><td>{findings}</td></tr>"
        )
    body.append("</tbody></table>")
    flagged = sum(r["status"] != "ok" for r in rows)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Audit</title></head><body>"
        f"<h1>Audit of every table cell</h1><p>{len(rows)} cells, {flagged} flagged.</p>"
        + "".join(body)
        + "</body></html>\n"
    )


def run_cli(args: Iterable[str] | None = None) -> int:
    """``dashrepro audit``: see the module docstring. Returns the exit status."""
    import argparse

    parser = argparse.ArgumentParser(prog="dashrepro audit", description=__doc__.splitlines()[0])
    parser.add_argument("cell", nargs="*", metavar="TABLE ROW SCALE COLUMN")
    parser.add_argument("--results", default=None, help="results/<experiment> (default: the "
                        "experiment of workflow_config.yaml)")  # fmt: skip
    parser.add_argument("--root", default=".", help="the workflow's working directory")
    parser.add_argument("--verify", action="store_true", help="check hashes, derive again")
    parser.add_argument("--regrade", action="store_true", help="with --verify: regrade too")
    parser.add_argument("--report", action="store_true", help="audit every cell")
    parser.add_argument("--out", default=None, help="--report: folder for report.{md,html}")
    options = parser.parse_args(list(args) if args is not None else None)
    root = Path(options.root)
    results = options.results or _default_results(root)
    if options.report:
        from dashrepro.io import write_text

        rows, markdown, page = audit_report(root, results, options.regrade)
        out = Path(options.out) if options.out else root / results / "audit"
        write_text(out / "report.md", markdown)
        write_text(out / "report.html", page)
        print(markdown)
        return 1 if any(r["status"] != "ok" for r in rows) else 0
    if len(options.cell) != 4:
        parser.error("give a cell as TABLE ROW SCALE COLUMN, or --report")
    try:
        chain = cell_chain(root, results, *options.cell)
    except AuditError as exc:
        print(f"dashrepro audit: {exc}")
        return 2
    print(render_chain(root, chain))
    if not (options.verify or options.regrade):
        return 0
    findings = verify(root, chain, options.regrade)
    print()
    if chain.copied_from:
        print("verify: a copied number; nothing of ours to check")
        return 0
    print(
        "verify: "
        + ("every hash and number agrees" if not findings else f"{len(findings)} problems")
    )
    for finding in findings:
        print("  " + finding.line())
    return 1 if findings else 0


def _default_results(root: Path) -> str:
    import yaml

    config = root / "workflow_config.yaml"
    experiment = yaml.safe_load(config.read_text())["experiment"] if config.is_file() else "tiny"
    return f"results/{experiment}"
