"""Tests for dashrepro.analysis.tables.batch_runtime: hours from the phase seconds."""

from __future__ import annotations

import pandas as pd

from ..conftest import context_of


def test_batch_runtime_sums_the_phase_seconds(paper_config, tmp_path):
    from dashrepro.analysis.tables import batch_runtime

    spec = paper_config["tables"]["supp_batch_runtime"]
    paths, keys = [], []
    # What each file is comes beside it (input_keys), not from its path, here a misleading one.
    for scale, seconds in (("qwen3_1p7b", 900.0), ("qwen3_4b", 1800.0), ("qwen3_8b", 3600.0)):
        path = tmp_path / f"qwen3_1p7b-{len(paths)}.parquet"
        keys.append(["dash", scale, 0])
        pd.DataFrame({"step": [1, 2], "seconds_rollout": [seconds / 4] * 2,
                      "seconds_student": [seconds / 4] * 2, "loss": [1.0, 0.5]}).to_parquet(path)  # fmt: skip
        paths.append(path)
    context = {**context_of(paper_config, "supp_batch_runtime"), "input_keys": {"metrics": keys}}
    cells = batch_runtime.build(spec, {"metrics": paths}, context)
    hours = cells[cells["column"] == "hours"].set_index("scale")["value"]
    assert list(hours) == [0.25, 0.5, 1.0]
    assert "| Qwen3-1.7B | 4/2/8 | 0.25 h |" in batch_runtime.render(cells, spec, context)["md"]
