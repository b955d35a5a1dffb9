"""Tests for dashrepro.analysis.tables.grpo_grid: the aggregation gain of the GRPO grid."""

from __future__ import annotations

import json

from ..conftest import context_of


def test_grpo_grid_gain_is_aggregated_minus_not(paper_config, tmp_path):
    from dashrepro.analysis.tables import grpo_grid

    spec = paper_config["tables"]["supp_grpo_grid"]
    paths = []
    for i, method in enumerate(spec["methods"]):
        for seed in (0, 1):
            path = tmp_path / f"{method}-{seed}.json"
            value = 40.0 + i + seed
            path.write_text(json.dumps({
                "method": method, "scale": "qwen3_1p7b", "seed": seed, "selected_step": 20,
                "benchmark_scores": {b: value for b in paper_config["benchmarks"]},
            }))  # fmt: skip
            paths.append(path)
    cells = grpo_grid.build(spec, {"selections": paths}, context_of(paper_config, "supp_grpo_grid"))
    first = cells[cells["row"] == "grpo_eta0p3_k4"].set_index("column")["value"]
    assert first["no_agg"] == 40.5 and first["agg"] == 41.5 and first["gain"] == 1.0
