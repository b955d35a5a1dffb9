"""Tests for dashrepro.analysis.tables.method_scores: seed aggregation of the selected scores and
the external rows."""

from __future__ import annotations

import json
import math

import pytest

from dashrepro.analysis.tables import method_scores
from dashrepro.analysis.tables._render import cells_frame

from ..conftest import context_of

BENCHES = ["a", "b", "c"]


def test_table_mean_and_sample_std_over_seeds():
    records = [
        {
            "method": "dash",
            "seed": s,
            "selected_step": 20,
            "benchmark_scores": dict(zip(BENCHES, v, strict=True)),
        }
        for s, v in enumerate([(10, 20, 30), (20, 20, 50)])
    ]
    cells = method_scores.selection_cells(
        records, "t", ["dash"], {"dash": "DASH"}, BENCHES, ["s"]
    ).set_index("column")
    assert cells.loc["a", "value"] == 15 and cells.loc["a", "std"] == pytest.approx(math.sqrt(50))
    assert cells.loc["b", "std"] == 0  # ddof = 1 over two equal values
    assert cells.loc["average", "value"] == pytest.approx((15 + 20 + 40) / 3)
    assert math.isnan(cells.loc["average", "std"]) and cells.loc["a", "seeds"] == "0,1"
    context = {"benchmark_labels": {"a": "A", "b": "B", "c": "C"}, "experiment": "e",
               "scales": ["s"], "id": "t"}  # fmt: skip
    rendered = method_scores.render(cells.reset_index(), {"methods": ["dash"]}, context)
    assert "| DASH | **15.00 ± 7.07** |" in rendered["md"]  # the only row ranks first
    tex = rendered["tex"]
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex


def test_external_rows_come_first_with_a_dagger(published, paper_config, tmp_path):
    from dashrepro.analysis.tables import method_scores

    spec = paper_config["tables"]["main_results"]
    context = context_of(paper_config, "main_results")
    records = [
        {"method": m, "scale": s, "seed": seed, "selected_step": 20,
         "benchmark_scores": {b: 50.0 for b in context["benchmarks"]}}
        for s in context["scales"] for m in spec["methods"] for seed in context["runs"][f"{m}/{s}"]
    ]  # fmt: skip
    paths = []
    for i, record in enumerate(records):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(record))
    csv = tmp_path / "published.csv"
    published.to_csv(csv, index=False)
    cells = method_scores.build(spec, {"selections": paths, "published": [csv]}, context)
    assert list(dict.fromkeys(cells["row"]))[:3] == ["base", "sft", "grpo"]
    assert set(cells[cells["row"] == "eopd"]["n_seeds"]) == {1}
    md = method_scores.render(cells, spec, context)["md"].splitlines()
    assert md[2].startswith("| Base† | **51.50** |") and "DASH (Ours)" in md[-1]
    assert cells_frame([]).columns.tolist()[:3] == ["table", "row", "label"]
