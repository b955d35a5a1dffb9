"""premise.study: the pre-registered tests against values worked out independently (scipy's
paired t-test, statsmodels-free Holm by hand, a simulated power), and the verdict rules."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dashrepro.premise.study import (
    TEST_COLUMNS,
    cell_tests,
    detectable_effect,
    false_alarms,
    fixed_lambda_from_probe,
    holm,
    kappa_for_gate_spread,
    paired_test,
    power_of,
    premise_association,
    seeds_for_power,
    verdict,
)


def test_seeds_for_power_reaches_the_power_by_simulation_and_one_fewer_does_not():
    n = seeds_for_power(sd=2.5, effect=2.0, power=0.8, alpha=0.05, cells=3)
    rng = np.random.default_rng(0)

    def simulated(k):
        draws = rng.normal(2.0, 2.5, size=(20000, k))
        p = stats.ttest_1samp(draws, 0.0, axis=1).pvalue
        return (p < 0.05 / 3).mean()

    assert simulated(n) >= 0.78 and simulated(n - 1) < 0.8
    assert seeds_for_power(sd=2.5, cells=1) < n  # Holm's strictest step costs seeds
    with pytest.raises(ValueError, match="positive"):
        seeds_for_power(sd=0.0)


def test_the_detectable_effect_inverts_the_power_of_a_fixed_number_of_seeds():
    n = seeds_for_power(sd=2.5, effect=2.0, cells=5)
    # The seeds the power analysis asks for detect 2 points (to the bisection's 0.01) ...
    assert detectable_effect(2.5, n, cells=5) <= 2.0 < detectable_effect(2.5, n - 1, cells=5)
    # ... and fewer seeds only larger effects, at exactly the power asked for.
    effect = detectable_effect(2.5, 4, cells=5)
    assert power_of(2.5, effect, 4, cells=5) >= 0.8 > power_of(2.5, effect - 0.01, 4, cells=5)
    with pytest.raises(ValueError, match="n >= 2"):
        detectable_effect(2.5, 1)


def test_holm_by_hand():
    assert holm([0.01, 0.04, 0.03, float("nan")])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(holm([0.5, float("nan")])[1])
    assert holm([0.9, 0.8]) == [1.0, 1.0]


def test_the_paired_test_is_scipys_and_tost_against_the_margin():
    d = [1.5, 0.5, -0.2, 1.1, 0.9, 0.3]
    result = paired_test(d, margin=2.0)
    assert result["p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    upper = stats.ttest_1samp(d, 2.0, alternative="less").pvalue
    lower = stats.ttest_1samp(d, -2.0, alternative="greater").pvalue
    assert result["p_equivalence"] == pytest.approx(max(upper, lower))
    interval = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (result["low"], result["high"]) == pytest.approx((interval.low, interval.high))


def test_verdicts_in_their_order():
    assert verdict(3.0, 0.01, 0.9, 0.05) == "better"
    assert verdict(-3.0, 0.01, 0.9, 0.05) == "worse"
    assert verdict(0.1, 0.5, 0.01, 0.05) == "equivalent"
    assert verdict(0.1, 0.5, 0.5, 0.05) == "inconclusive"


def scores_of(effects: dict[str, float], seeds: int, noise: float = 1.0) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for seed in range(seeds):
        for cell, effect in effects.items():
            base = 40 + rng.normal(0, 3)  # shared by the seed's runs: the pairing removes it
            rows.append({"seed": seed, "cell": cell, "method": "opsd", "score": base})
            rows.append({"seed": seed, "cell": cell, "method": "dash",
                         "score": base + effect + rng.normal(0, noise)})  # fmt: skip
    return pd.DataFrame(rows)


def test_cell_tests_find_a_large_gain_call_a_null_cell_equivalent_and_name_unpaired_seeds():
    scores = scores_of({"a": 6.0, "b": 0.0, "c": -6.0}, seeds=12, noise=0.5)
    frame = cell_tests(scores, "dash", "opsd")
    assert list(frame.columns) == list(TEST_COLUMNS)
    assert frame.set_index("cell")["verdict"].to_dict() == {
        "a": "better", "b": "equivalent", "c": "worse",
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"unpaired seeds .*\('a', 3\)"):
        cell_tests(scores.drop(index=scores.index[(scores.seed == 3) & (scores.cell == "a")
                                                  & (scores.method == "dash")]), "dash", "opsd")  # fmt: skip
    with pytest.raises(ValueError, match="no scores of method 'fixed'"):
        cell_tests(scores, "fixed", "opsd")


def test_false_alarms_split_one_methods_seeds_in_two_halves():
    scores = scores_of({"a": 0.0, "b": 0.0}, seeds=8)
    frame = false_alarms(scores, "opsd")
    assert frame["n_seeds"].tolist() == [4, 4]
    assert set(frame["verdict"]) <= {"equivalent", "inconclusive", "better", "worse"}
    with pytest.raises(ValueError, match="at least 4 seeds"):
        false_alarms(scores_of({"a": 0.0}, seeds=3), "opsd")


def test_the_secondary_association_is_descriptive_across_cells():
    assert premise_association({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.2})["n_cells"] == 2
    result = premise_association({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 0.3, "b": 0.2, "c": 0.1})
    assert result == {"n_cells": 3, "spearman": pytest.approx(-1.0)}


def probe_tokens(scale: float) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = [{"rollout": b, "position": t, "r": scale * rng.exponential()}
            for b in range(20) for t in range(30)]  # fmt: skip
    return pd.DataFrame(rows)


def test_kappa_is_set_from_the_signals_scale_and_the_control_from_the_median_gate():
    small, large = probe_tokens(0.001), probe_tokens(1.0)
    assert kappa_for_gate_spread(small) > kappa_for_gate_spread(large)
    # A signal 1000x smaller needs a kappa about 1000x larger for the same spread.
    assert kappa_for_gate_spread(small) / kappa_for_gate_spread(large) > 100
    assert fixed_lambda_from_probe(small, 5.0) == 0.5  # tiny gaps: every gate near 1/2
    assert 0.5 <= fixed_lambda_from_probe(large, 5.0) <= 1.0  # r below its mean: gates above 1/2
