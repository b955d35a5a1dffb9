"""The pre-registered study's analysis, fixed before its numbers exist (docs/premise-study.md).

Scores are Avg@k points of one checkpoint fixed in advance, one per (seed, cell, method). A
method is compared with a control cell by cell, paired over seeds (a run of each method with
the same seed): the mean difference, its t interval, a two-sided t-test with Holm's adjustment
across cells, and two one-sided tests (TOST) against a margin before anything is called "no
difference". ``seeds_for_power`` sizes the study from a measured spread of paired differences;
``false_alarms`` applies the same tests to two halves of one method's seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

#: The columns of ``cell_tests``' frame, one row per cell.
TEST_COLUMNS = (
    "cell", "n_seeds", "difference", "sd", "low", "high", "p", "p_holm", "p_equivalence",
    "p_equivalence_holm", "verdict",
)  # fmt: skip


def seeds_for_power(sd: float, effect: float = 2.0, power: float = 0.8, alpha: float = 0.05,
                    cells: int = 1, most: int = 1000) -> int:  # fmt: skip
    """The fewest seeds whose paired two-sided t-test at ``alpha / cells`` (Holm's first step,
    the strictest) detects a true difference ``effect`` with ``power``, when the paired
    differences have standard deviation ``sd`` (noncentral t)."""
    if sd <= 0 or effect <= 0:
        raise ValueError(f"sd and effect must be positive, got sd={sd}, effect={effect}")
    for n in range(2, most + 1):
        if power_of(sd, effect, n, alpha, cells) >= power:
            return n
    raise ValueError(f"more than {most} seeds would be needed (sd={sd}, effect={effect})")


def power_of(sd: float, effect: float, n: int, alpha: float = 0.05, cells: int = 1) -> float:
    """The power of the paired two-sided t-test at ``alpha / cells`` with ``n`` seeds to detect
    a true difference ``effect`` when the differences have standard deviation ``sd``."""
    df, level = n - 1, alpha / cells
    critical = stats.t.ppf(1 - level / 2, df)
    shift = effect / sd * math.sqrt(n)
    # The lower tail (a significant difference of the wrong sign) is negligible at any useful
    # power, and scipy's noncentral t gives NaN for it at some large shifts: read that as 0.
    lower = float(stats.nct.cdf(-critical, df, shift))
    return float(stats.nct.sf(critical, df, shift)) + (lower if math.isfinite(lower) else 0.0)


def detectable_effect(sd: float, n: int, power: float = 0.8, alpha: float = 0.05,
                      cells: int = 1) -> float:  # fmt: skip
    """The smallest true difference that ``n`` seeds detect with ``power`` (``power_of``
    inverted by bisection, to 0.01 points): what a study held to fewer seeds can see."""
    if n < 2 or sd <= 0:
        raise ValueError(f"need n >= 2 seeds and sd > 0, got n={n}, sd={sd}")
    low, high = 0.0, sd
    while power_of(sd, high, n, alpha, cells) < power:
        high *= 2
    while high - low > 0.005:
        middle = (low + high) / 2
        low, high = (
            (middle, high) if power_of(sd, middle, n, alpha, cells) < power else (low, middle)
        )
    return math.ceil(high * 100) / 100  # rounded up: the power at it is at least `power`


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order (NaN stays NaN, uncounted)."""
    p = np.asarray(p_values, dtype=float)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    adjusted, running = np.full(len(p), np.nan), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def paired_test(differences: Sequence[float], margin: float, confidence: float = 0.95) -> dict:
    """One cell: mean paired difference, its t interval, the two-sided p-value against 0, and
    the TOST p-value against ``margin`` (the larger of the two one-sided p-values)."""
    d = np.asarray(differences, dtype=float)
    n, mean = len(d), float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else float("nan")
    se = sd / math.sqrt(n) if n > 1 else float("nan")
    if n < 2 or se == 0:
        p = 1.0 if mean == 0 else 0.0
        p_equivalence = 0.0 if abs(mean) < margin else 1.0
        half = 0.0 if se == 0 else float("nan")
    else:
        df = n - 1
        p = float(2 * stats.t.sf(abs(mean) / se, df))
        p_equivalence = float(
            max(stats.t.sf((mean + margin) / se, df), stats.t.cdf((mean - margin) / se, df))
        )
        half = float(stats.t.ppf(0.5 + confidence / 2, df) * se)
    return {"n_seeds": n, "difference": mean, "sd": sd, "low": mean - half, "high": mean + half,
            "p": p, "p_equivalence": p_equivalence}  # fmt: skip


def verdict(difference: float, p_holm: float, p_equivalence_holm: float, alpha: float) -> str:
    """What a cell's tests allow one to say, in the order the pre-registration checks them."""
    if p_holm < alpha:
        return "better" if difference > 0 else "worse"
    if p_equivalence_holm < alpha:
        return "equivalent"
    return "inconclusive"


def cell_tests(scores: pd.DataFrame, method: str, control: str, margin: float = 2.0,
               alpha: float = 0.05) -> pd.DataFrame:  # fmt: skip
    """``method`` against ``control`` in each cell of ``scores`` (columns seed, cell, method,
    score), paired by seed; Holm across cells for both tests. A seed one of them lacks in a
    cell is a ``ValueError`` naming it (a pairing never drops a run silently)."""
    wide = scores.pivot_table(index=["cell", "seed"], columns="method", values="score")
    for name in (method, control):
        if name not in wide.columns:
            raise ValueError(f"no scores of method {name!r}")
    missing = wide[wide[[method, control]].isna().any(axis=1)]
    if len(missing):
        raise ValueError(f"unpaired seeds (cell, seed): {list(missing.index)}")
    rows = []
    for cell, block in wide.groupby(level="cell", sort=False):
        rows.append({"cell": cell, **paired_test(block[method] - block[control], margin)})
    frame = pd.DataFrame(rows)
    frame["p_holm"] = holm(frame["p"])
    frame["p_equivalence_holm"] = holm(frame["p_equivalence"])
    frame["verdict"] = [
        verdict(d, p, q, alpha)
        for d, p, q in zip(
            frame["difference"], frame["p_holm"], frame["p_equivalence_holm"], strict=True
        )  # fmt: skip
    ]
    return frame[list(TEST_COLUMNS)]


def false_alarms(scores: pd.DataFrame, method: str, margin: float = 2.0,
                 alpha: float = 0.05) -> pd.DataFrame:  # fmt: skip
    """``method`` against itself: its seeds sorted and split into two halves paired in order
    (different seeds, the same method), tested as ``cell_tests`` tests two methods. A verdict
    other than equivalent or inconclusive is a false alarm."""
    own = scores[scores["method"] == method]
    seeds = sorted(own["seed"].unique())
    half = len(seeds) // 2
    if half < 2:
        raise ValueError(f"{method!r} needs at least 4 seeds to be split, has {len(seeds)}")
    first = own[own["seed"].isin(seeds[:half])].assign(method="first")
    second = own[own["seed"].isin(seeds[half : 2 * half])].assign(method="second")
    renumber = {seed: i for i, seed in enumerate(seeds[:half])}
    renumber.update({seed: i for i, seed in enumerate(seeds[half : 2 * half])})
    pairs = pd.concat([first, second], ignore_index=True)
    pairs["seed"] = pairs["seed"].map(renumber)
    return cell_tests(pairs, "second", "first", margin, alpha)


def premise_association(differences: Mapping[str, float], statistic: Mapping[str, float]) -> dict:
    """Secondary: Spearman across cells of a method's mean difference with a premise statistic
    (descriptive: a handful of cells)."""
    cells = [cell for cell in differences if cell in statistic]
    if len(cells) < 3:
        return {"n_cells": len(cells), "spearman": float("nan")}
    rho = stats.spearmanr([differences[c] for c in cells], [statistic[c] for c in cells])
    return {"n_cells": len(cells), "spearman": float(rho.statistic)}


#: The κ grid ``kappa_for_gate_spread`` searches (log-spaced, the paper's 5 among them).
KAPPA_GRID = tuple(float(k) for k in np.round(np.geomspace(1.0, 1000.0, 31), 3)) + (5.0,)


def token_gates(tokens: pd.DataFrame, kappa: float) -> np.ndarray:
    """DASH's gate at ``kappa`` of every token of a probe's tokens, in their order (``r`` per
    rollout, as the objective computes them: ``objectives.gates_from_gap``)."""
    import torch  # the objective's own gates; only the study's rules ask for them

    from dashrepro.objectives import gates_from_gap

    rollout = torch.tensor(pd.factorize(tokens["rollout"])[0])
    position = torch.tensor(tokens["position"].to_numpy(copy=True))
    r = torch.zeros(int(rollout.max()) + 1, int(position.max()) + 1, dtype=torch.float64)
    r[rollout, position] = torch.tensor(tokens["r"].to_numpy(float, copy=True))
    mask = torch.zeros_like(r, dtype=torch.bool)
    mask[rollout, position] = True
    return gates_from_gap(r, mask, kappa)[rollout, position].numpy()


def last_token(tokens: pd.DataFrame) -> np.ndarray:
    """Whether each of a probe's tokens is its rollout's last (whose gate is never used)."""
    return (tokens.groupby("rollout")["position"].transform("max") == tokens["position"]).to_numpy()


def _used_gates(tokens: pd.DataFrame, kappa: float) -> np.ndarray:
    """DASH's gates at ``kappa`` on a probe's tokens, the last one of each rollout left out."""
    return token_gates(tokens, kappa)[~last_token(tokens)]


def gate_iqr(tokens: pd.DataFrame, kappa: float) -> float:
    """The interquartile range of DASH's used gates at ``kappa`` on a probe's tokens."""
    q75, q25 = np.percentile(_used_gates(tokens, kappa), [75, 25])
    return float(q75 - q25)


def fixed_lambda_from_probe(tokens: pd.DataFrame, kappa: float) -> float:
    """The fixed-λ control: the median of DASH's used gates on the probe, to one decimal."""
    return round(float(np.median(_used_gates(tokens, kappa))), 1)


def kappa_for_gate_spread(tokens: pd.DataFrame, target_iqr: float = 0.25) -> float:
    """The smallest κ of ``KAPPA_GRID`` whose gates on the probe's tokens have an interquartile
    range of at least ``target_iqr`` (the largest κ if none does): a κ set from the signal's
    scale alone, never from a method's scores."""
    for kappa in sorted(set(KAPPA_GRID)):
        if gate_iqr(tokens, kappa) >= target_iqr:
            return kappa
    return max(KAPPA_GRID)
