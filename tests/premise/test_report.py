"""premise.report: the statistics table (every statistic, its meaning, n/a where undefined) and
the three-panel figure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dashrepro.premise.report import premise_figure, statistics_frame, statistics_markdown
from dashrepro.premise.statistics import STATISTICS, branch_points
from dashrepro.premise.statistics import premise_statistics as compute


def tokens_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for rollout in range(6):
        for position in range(10):
            rows.append({
                "problem_id": f"p{rollout % 2}", "sample": rollout // 2, "rollout": rollout,
                "position": position, "token_id": int(rng.integers(0, 2)),
                "D": float(rng.exponential()), "gate": float(rng.random()),
                "coefficient": 1.0 + position / 10, "reward": float(rollout % 2),
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.assign(r=frame["D"])


def test_the_table_has_each_statistic_with_its_meaning_and_names_what_is_undefined():
    values = dict.fromkeys(STATISTICS, 0.5) | {"n_tokens": 1234, "spearman_pooled": math.nan}
    frame = statistics_frame({"tiny": values, "other": values})
    assert list(frame.columns) == ["probe", *STATISTICS]
    text = statistics_markdown(frame, "Premise")
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(lines) == len(STATISTICS)
    assert "| `n_tokens` | 1,234 | 1,234 | response tokens scored |" in text
    assert "| `spearman_pooled` | n/a | n/a |" in text
    assert "| statistic | tiny | other | what it measures |" in text


def test_the_figure_has_three_panels_titled_with_their_statistics():
    tokens = tokens_frame()
    branches = branch_points(tokens)
    values, within = compute(tokens, branches)
    figure = premise_figure(tokens, within, branches, values, "t")
    titles = [ax.get_title() for ax in figure.axes]
    assert len(titles) == 3
    assert titles[0].startswith("(a)") and f"{values['gate_mid_share']:.3f}" in titles[0]
    assert f"{values['spearman_within']:.3f}" in titles[1]
    assert f"{values['n_branch_points']:,} branch points" in titles[2]
