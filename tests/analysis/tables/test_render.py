"""Tests for dashrepro.analysis.tables._render: rank shading with ties."""

from __future__ import annotations

import math

from dashrepro.analysis.tables._render import ranks


def test_ranks_are_the_top_three_distinct_displayed_values_ties_sharing():
    assert ranks([58.3, 57.8, 58.3, 55.6, 51.0, math.nan]) == [1, 2, 1, 3, None, None]
    # 76.204 and 76.2 show as 76.20: one value, one rank
    assert ranks([77.2, 76.4, 76.204, 76.2, 73.9]) == [1, 2, 3, 3, None]
    assert ranks([1.0, 2.0], top=1) == [None, 1]
