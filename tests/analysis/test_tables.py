"""Tests for dashrepro.analysis.tables (the package): the published numbers through the same
renderer (the paper's main table must come out shaded exactly as printed)."""

from __future__ import annotations

import re

import pandas as pd

from dashrepro.analysis.tables import (
    make_published_table,
    publishable,
    published_layout,
    published_table_specs,
)
from dashrepro.analysis.tables._render import published_cells, shade
from dashrepro.experiment.config import load_config
from dashrepro.experiment.run_matrix import spec_scales

from .conftest import context_of


def test_the_published_main_table_is_shaded_exactly_as_the_paper(published, paper_config):
    main = published[published["table"] == "main_results"]
    cells = published_cells(published, "main_results", {})
    computed = shade(cells, "rank")
    printed = [None if pd.isna(r) else int(r) for r in main["rank"]]
    assert list(computed) == printed
    assert sum(r is not None for r in printed) == 43  # 12 first, 18 second, 13 third
    rendered = make_published_table(
        published, paper_config["tables"]["main_results"], context_of(paper_config, "main_results")
    )
    assert r"\firstscore{58.30}" in rendered["tex"] and r"Base$^{\dagger}$" in rendered["tex"]
    assert "| GRPO† | 51.10 |" in rendered["md"]


def test_every_published_table_renders(published, paper_config):
    rendered = {
        name: make_published_table(published, spec, context_of(paper_config, name))
        for name, spec in paper_config["tables"].items()
        if publishable(spec)
    }
    assert set(rendered) == {
        "main_results", "supp_propagation_controls", "supp_allocation_signal",
        "supp_local_designs", "vocabulary_support", "supp_four_seed_results",
        "supp_grpo_grid", "grpo_hybrid", "supp_batch_runtime",
    }  # fmt: skip
    assert "| 0.5 | 8 | 42.50 | 44.50 | **+2.00** |" in rendered["supp_grpo_grid"]["md"]
    assert "| AIME 2024 | 58.30 ± 0.90 |" in rendered["supp_four_seed_results"]["md"]
    assert "| Qwen3-8B | 1/16/4 | 15.00 h |" in rendered["supp_batch_runtime"]["md"]
    assert "*Propagation-gate signal*" in rendered["supp_allocation_signal"]["md"]
    for tables in rendered.values():
        tex = tables["tex"]
        assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 1
        assert tex.count("{") == tex.count("}")  # balanced braces


MARK = re.compile(r"\\(first|second|third)score\{([^}]*)\}|\\textbf\{([-+0-9.]+)\}")
RANK_OF = {"first": 1, "second": 2, "third": 3}


def test_published_tables_mark_exactly_the_cells_the_paper_marks(
    repo_root, published, paper_config
):
    """Each published table's marks are the printed ranks of dash_paper.csv, not a top three of
    its own: in three supplementary tables the paper's bold is not a per-column ranking (7 cells,
    e.g. OPSD third in vocabulary_support is unmarked, DASH's AIME 2024 in supp_local_designs is
    bold while dash_k1 ties it), and the text's GRPO hybrid numbers carry no mark."""
    specs = published_table_specs(
        paper_config["tables"], published_layout(repo_root / paper_config["published_numbers"])
    )
    checked = 0
    for name, spec in specs.items():
        table = (spec.get("options") or {}).get("published_table", name)
        rows = published[(published["table"] == table) & published["rank"].notna()]
        if spec["kind"] == "grpo_grid":
            printed = sorted((1, f"{float(v):+.2f}" if c == "gain" else f"{float(v):.2f}")
                             for v, c in zip(rows["value"], rows["column"], strict=True))  # fmt: skip
        else:
            printed = sorted(
                (int(float(r)), f"{float(v):.2f}")
                for r, v in zip(rows["rank"], rows["value"], strict=True)
            )
        tex = make_published_table(
            published, spec, context_of({**paper_config, "tables": specs}, name)
        )["tex"]
        marked = sorted(
            (RANK_OF[m[0]], m[1].split(" ")[0]) if m[0] else (1, m[2]) for m in MARK.findall(tex)
        )
        assert marked == printed, name
        checked += len(printed)
    assert checked == 65  # every printed mark of every table (43 of them in the main table)
    vocabulary = make_published_table(
        published,
        specs["vocabulary_support"],
        context_of({**paper_config, "tables": specs}, "vocabulary_support"),
    )["md"]
    assert "| OPSD | 55.60 | 40.80 | 29.20 | 41.87 |" in vocabulary


def test_published_tables_take_their_scales_and_copied_rows_from_the_numbers(repo_root):
    """Whatever experiment is selected, the published tables are the ones the numbers hold, at
    the scales they hold them, with the rows the paper copies: the embedded default's tables
    are at its tiny scales and copy no rows, and come out as the paper prints them."""
    default = load_config(repo_root / "workflow_config.yaml")
    layout = published_layout(repo_root / default["published_numbers"])
    specs = published_table_specs(default["tables"], layout)
    ids = {(spec.get("options") or {}).get("published_table", name) for name, spec in specs.items()}
    assert ids == set(layout)  # every table the numbers hold, none they do not
    assert "supp_result_provenance" not in specs  # its kind draws no published numbers
    assert spec_scales(specs["main_results"]) == ["qwen3_1p7b", "qwen3_4b", "qwen3_8b"]
    assert specs["main_results"]["options"]["external_rows"] == ["base", "sft", "grpo"]
    assert spec_scales(specs["grpo_hybrid"]) == ["qwen3_1p7b", "qwen3_8b"]
    # A table whose published numbers are not held is left out, not drawn empty.
    assert published_table_specs({"mine": {**default["tables"]["main_results"]}}, layout) == {}
