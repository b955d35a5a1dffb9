"""layout: every results file name is spelled once, in the layout module, and the rules, the
rule scripts and the package ask it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dashrepro import layout

ROOT = Path(__file__).resolve().parents[1]
#: Stems the rules extend, with the extensions they write.
STEMS = {"REPRODUCTION_GAP": (".csv", ".png", ".pdf"), "AUDIT_REPORT": (".md", ".html")}


def file_names() -> dict[str, str]:
    """Each results file name the layout spells -> its constant."""
    names = {}
    for name, value in vars(layout).items():
        if name in STEMS:
            names.update({value + ext: name for ext in STEMS[name]})
        elif name.isupper() and isinstance(value, str) and re.fullmatch(r"\w+\.\w+", value):
            names[value] = name
    return names


def string_literals(path: Path) -> list[str]:
    """The string literals of a Python file (docstrings left out: they describe, not name) or
    of a Snakemake file (each quoted token)."""
    text = path.read_text()
    if path.suffix != ".py":
        return re.findall(r"[\"']([^\"'\s]+)[\"']", text)
    tree = ast.parse(text)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings and not re.search(r"\s", node.value)
    ]  # fmt: skip


def test_no_results_file_name_is_spelled_outside_the_layout_module():
    names = file_names()
    assert {"train.parquet", "cell_statistics.csv", "reproduction_gap.pdf", "report.html"} <= set(
        names
    )
    sources = [ROOT / "Snakefile", *(ROOT / "rules").rglob("*.smk"), *(ROOT / "rules").rglob("*.py"),
               *(ROOT / "src/dashrepro").rglob("*.py")]  # fmt: skip
    spelled = [
        f"{path.relative_to(ROOT)}: {literal!r} (layout.{names[name]})"
        for path in sources
        if path != ROOT / "src/dashrepro/layout.py"
        for literal in string_literals(path)
        for name in names
        if literal == name or literal.endswith("/" + name)
    ]
    assert not spelled, "\n".join(spelled)


def test_the_results_paths_put_each_file_in_its_folder():
    results = layout.Results("tiny")
    assert results.data(layout.TRAIN_DATA) == "results/tiny/data/train.parquet"
    assert (
        results.statistics(layout.CELL_STATISTICS) == "results/tiny/statistics/cell_statistics.csv"
    )
    assert results.audit(f"{layout.AUDIT_REPORT}.md") == "results/tiny/audit/report.md"
    assert results.run_file(layout.TRAIN_METRICS, "dash", "tiny", 0) == (
        "results/tiny/runs/dash/tiny/seed0/train_metrics.parquet"
    )
