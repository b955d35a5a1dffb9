"""Tests for dashrepro.analysis.figures.divergence_association: future divergence and its
association statistics."""

from __future__ import annotations

import pandas as pd


def test_future_divergence_is_the_mean_over_later_tokens_of_the_same_rollout():
    from dashrepro.analysis.figures.divergence_association import (
        divergence_association,
        future_divergence,
    )

    traces = pd.DataFrame(
        {
            "step": [1] * 6,
            "rollout": [0, 0, 0, 0, 1, 1],
            "position": [0, 1, 2, 3, 0, 1],
            "r": [1.0, 2.0, 3.0, 4.0, 10.0, 20.0],
        }
    ).sample(frac=1.0, random_state=1)  # any row order
    frame = future_divergence(traces)
    got = {(int(r.rollout), int(r.position)): r.future_mean_r for r in frame.itertuples()}
    # The last token of each rollout has no future and is dropped.
    assert got == {(0, 0): 3.0, (0, 1): 3.5, (0, 2): 4.0, (1, 0): 20.0}
    stats = divergence_association(frame)
    assert stats["n_tokens"] == 4 and stats["n_rollouts"] == 2
    assert -1.0 <= stats["spearman"] <= 1.0
