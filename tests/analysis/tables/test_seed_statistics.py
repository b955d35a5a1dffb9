"""Tests for dashrepro.analysis.tables.seed_statistics: one method's mean ± sample std over
seeds per benchmark and scale, from selection records or the published numbers, and its render."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dashrepro.analysis.tables import seed_statistics

from ..conftest import context_of

SPEC = {"kind": "seed_statistics", "methods": ["dash"]}
CONTEXT = {
    "id": "t", "experiment": "e", "scales": ["s1", "s2", "s3"], "benchmarks": ["a", "b"],
    "benchmark_labels": {"a": "A", "b": "B"}, "method_labels": {"dash": "DASH_v2"},
    "scale_labels": {"s1": "Small"},
}  # fmt: skip

# s1: two seeds -> a: mean 15, std sqrt(50) = 7.07; b: mean 40, std sqrt(200) = 14.14;
#     macro average (15 + 40) / 2 = 27.5.  s2: one seed -> no std; average 70.  s3: no runs.
RECORDS = [
    {"method": "dash", "scale": "s1", "seed": 0, "selected_step": 20,
     "benchmark_scores": {"a": 10.0, "b": 30.0}},
    {"method": "dash", "scale": "s1", "seed": 1, "selected_step": 40,
     "benchmark_scores": {"a": 20.0, "b": 50.0}},
    {"method": "dash", "scale": "s2", "seed": 0, "selected_step": 20,
     "benchmark_scores": {"a": 60.0, "b": 80.0}},
]  # fmt: skip


def _write(records, folder):
    paths = []
    for i, record in enumerate(records):
        paths.append(folder / f"selection-{i}.json")
        paths[-1].write_text(json.dumps(record))
    return paths


@pytest.fixture
def cells(tmp_path) -> pd.DataFrame:
    context = {**CONTEXT, "scales": ["s1", "s2"]}
    return seed_statistics.build(SPEC, {"selections": _write(RECORDS, tmp_path)}, context)


def test_build_gives_mean_and_sample_std_over_seeds_per_scale(cells):
    by = cells.set_index(["scale", "column"])
    assert by.loc[("s1", "a"), "value"] == 15.0
    assert by.loc[("s1", "a"), "std"] == pytest.approx(math.sqrt(50))
    assert by.loc[("s1", "b"), "std"] == pytest.approx(math.sqrt(200))
    assert by.loc[("s1", "average"), "value"] == 27.5 and math.isnan(
        by.loc[("s1", "average"), "std"]
    )
    assert by.loc[("s2", "a"), "value"] == 60.0 and math.isnan(by.loc[("s2", "a"), "std"])
    assert (
        by.loc[("s1", "a"), "seeds"] == "0,1" and by.loc[("s1", "a"), "selected_steps"] == "20,40"
    )
    assert set(cells["row"]) == {"dash"} and set(cells["label"]) == {"DASH_v2"}
    assert set(cells["table"]) == {"t"}


def test_build_refuses_more_than_one_method_naming_the_table(tmp_path):
    spec = {**SPEC, "methods": ["dash", "opsd"]}
    with pytest.raises(ValueError, match="tables.t: seed_statistics reports one method"):
        seed_statistics.build(spec, {"selections": _write(RECORDS, tmp_path)}, CONTEXT)


def test_build_names_a_scale_without_records(tmp_path):
    with pytest.raises(ValueError, match="no selection records for method 'dash' at scale 's3'"):
        seed_statistics.build(SPEC, {"selections": _write(RECORDS, tmp_path)}, CONTEXT)


def test_render_markdown_rows_are_benchmarks_then_the_macro_average(cells):
    md = seed_statistics.render(cells, SPEC, CONTEXT)["md"].splitlines()
    assert md == [
        "| Benchmark | Small | s2 |",  # s3 has no cells; s2 has no label: its id
        "|---|---|---|",
        "| A | 15.00 ± 7.07 | 60.00 |",
        "| B | 40.00 ± 14.14 | 80.00 |",
        "| Macro avg. | 27.50 | 70.00 |",
    ]


def test_render_shows_a_missing_cell_as_a_dash(cells):
    some = cells[~((cells["scale"] == "s2") & (cells["column"] == "b"))]
    md = seed_statistics.render(some, SPEC, CONTEXT)["md"]
    assert "| B | 40.00 ± 14.14 | -- |" in md


def test_render_latex_escapes_labels_and_separates_the_average(cells):
    tex = seed_statistics.render(cells, SPEC, CONTEXT)["tex"].splitlines()
    assert r"\begin{tabular}{@{}lcc@{}}" in tex
    assert r"\textbf{Benchmark} & \textbf{Small} & \textbf{s2} \\" in tex
    assert r"A & 15.00 $\pm$ 7.07 & 60.00 \\" in tex
    average = tex.index(r"Macro avg. & 27.50 & 70.00 \\")
    assert tex[average - 1] == r"\midrule"
    (caption,) = [line for line in tex if line.startswith(r"\caption{")]
    assert caption.startswith(r"\caption{DASH\_v2: Avg@k per benchmark")


def test_from_published_takes_this_tables_rows_with_their_printed_ranks():
    published = pd.DataFrame(
        [
            {"table": "t", "row": "dash", "scale": "s1", "column": "a", "value": 58.3,
             "std": 0.9, "rank": 1, "source": "this paper"},
            {"table": "t", "row": "dash", "scale": "s1", "column": "average", "value": 45.07,
             "std": None, "rank": None, "source": "this paper"},
            {"table": "u", "row": "dash", "scale": "s1", "column": "a", "value": 1.0,
             "std": None, "rank": None, "source": "this paper"},
        ]
    )  # fmt: skip
    cells = seed_statistics.from_published(published, SPEC, CONTEXT)
    assert cells["column"].tolist() == ["a", "average"]
    assert cells["label"].tolist() == ["DASH_v2", "DASH_v2"]
    assert [None if pd.isna(r) else int(r) for r in cells["rank"]] == [1, None]
    assert math.isnan(cells["std"].iloc[1])
    with pytest.raises(ValueError, match="hold no table 't'"):
        seed_statistics.from_published(published[published["table"] == "u"], SPEC, CONTEXT)


def test_the_papers_published_table_renders_its_numbers(published, paper_config):
    context = context_of(paper_config, "supp_four_seed_results")
    spec = paper_config["tables"]["supp_four_seed_results"]
    cells = seed_statistics.from_published(published, spec, context)
    expected = published[published["table"] == "supp_four_seed_results"]
    assert len(cells) == len(expected) == 12  # 3 scales x (3 benchmarks + average)
    md = seed_statistics.render(cells, spec, context)["md"].splitlines()
    assert md[0] == "| Benchmark | Qwen3-1.7B | Qwen3-4B | Qwen3-8B |"
    assert md[2] == "| AIME 2024 | 58.30 ± 0.90 | 77.20 ± 0.70 | 78.90 ± 0.90 |"
    assert md[-1] == "| Macro avg. | 45.07 | 65.00 | 66.40 |"
