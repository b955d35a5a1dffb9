"""premise.forest: the studies' figures draw the same bytes from the same rows (so a page's
--check can compare them), and rows without an interval still draw."""

from __future__ import annotations

import math

from dashrepro.premise.forest import arm_panels, forest_plot

ROWS = [{"label": "dash - opsd (endpoint)", "difference": 2.0, "low": 0.5, "high": 3.5,
         "emphasis": True},
        {"label": "dash - opsd: a", "difference": -1.0, "low": -4.0, "high": 2.0},
        {"label": "dash - opsd: b", "difference": 0.3, "low": math.nan, "high": math.nan}]  # fmt: skip


def test_the_same_rows_draw_the_same_png_and_other_rows_another(tmp_path):
    first, second, other = tmp_path / "1.png", tmp_path / "2.png", tmp_path / "3.png"
    forest_plot(ROWS, first, "contrasts", margin=2.0)
    forest_plot(ROWS, second, "contrasts", margin=2.0)
    forest_plot(ROWS[:2], other, "contrasts", margin=2.0)
    assert first.read_bytes()[:4] == b"\x89PNG"
    assert first.read_bytes() == second.read_bytes() != other.read_bytes()


def test_the_arm_panels_draw_each_diagnostic_per_arm(tmp_path):
    values = {"update_norm": {"opsd": (0.1, 0.05, 0.15), "dash": (0.2, math.nan, math.nan)},
              "weight_top3_share": {"opsd": (0.2, 0.1, 0.3), "dash": (0.6, 0.5, 0.7)}}  # fmt: skip
    path = tmp_path / "arms.png"
    arm_panels(values, path, "diagnostics")
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 5000
