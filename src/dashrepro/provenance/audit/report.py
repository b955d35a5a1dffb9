"""The audit of every cell of an experiment's scores tables, as records, Markdown and HTML."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from dashrepro.analysis.registry import SCORE_KINDS
from dashrepro.io import read_csv
from dashrepro.provenance.audit.chain import cell_chain, output_record
from dashrepro.provenance.audit.verify import Finding, check_hashes, consistency, rederive


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
        record = output_record(root, csv) or {}
        if ((record.get("params") or {}).get("spec") or {}).get("kind") not in SCORE_KINDS:
            continue
        frame = read_csv(csv)
        for item in frame.itertuples():
            cells.append((csv.stem, item.row, item.scale, item.column))
    return cells


def audit_report(
    root: str | Path,
    results: str | Path,
    regrade: Mapping | None = None,
    tables: Sequence[str] | None = None,
) -> tuple[list[dict], str, str]:
    """Audit every cell of the scores tables ``tables`` (None: every one under ``results``):
    (one record per cell, Markdown, HTML). ``regrade``: grade the selected checkpoints again
    with these grading settings (the config's)."""
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
