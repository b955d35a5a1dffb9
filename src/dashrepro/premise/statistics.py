"""The premise statistics of a probe's scored tokens, one number each, with what it measures.

Three questions (paper, motivation figure and Eq. ``dash_weighted_objective``): is DASH more than
a fixed lambda here (the share of its gates strictly inside ``GATE_BAND``, and how far its
weights c_k stray from those of the fixed lambda with the same mean gate); does the local
divergence D_t say anything about the divergence that follows it (Spearman, pooled over every
token as the paper's panel a, and within each rollout with the position partialled out, so
neither the rollouts' levels nor the trend along a response makes the association); and does D
mark the tokens where rollouts part ways (at each branch point of a problem's prefix tree, how
much the reward and the future divergence vary between the branches, against D there).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from dashrepro.analysis.figures.divergence_association import (
    divergence_association,
    future_divergence,
)

#: A gate strictly inside this band is neither "cut here" nor "carry on" (the issue's 0.1, 0.9).
GATE_BAND = (0.1, 0.9)
#: Tokens with a future a rollout needs to enter the within-rollout correlation.
MIN_WITHIN_TOKENS = 5
#: Shuffles of D within each rollout that give the within statistic's null, and their seed.
NULL_PERMUTATIONS = 200
NULL_SEED = 0
#: The columns of ``branches.parquet``, one row per branch point.
BRANCH_COLUMNS = (
    "problem_id", "position", "n_rollouts", "n_branches", "D", "D_spread", "reward_range",
    "future_range",
)  # fmt: skip

#: Every statistic of ``premise_statistics``, in order, with what it measures.
STATISTICS = {
    "n_problems": "training problems probed",
    "n_rollouts": "rollouts scored (K per problem; empty ones left out)",
    "n_tokens": "response tokens scored",
    "mean_reward": "share of rollouts whose final answer is right",
    "gate_mid_share": "share of the gates strictly between 0.1 and 0.9",
    "gate_low_share": "share of the gates at or below 0.1 (the weight stops there)",
    "gate_high_share": "share of the gates at or above 0.9 (the weight carries on)",
    "gate_iqr": "interquartile range of the gates (how far apart DASH's gates are at all)",
    "gate_within_sd": "mean over rollouts of the gates' standard deviation within a rollout "
    "(0 for a fixed lambda)",
    "weight_cv": "mean over rollouts of the coefficient of variation of c_k",
    "weight_departure": "mean over rollouts of the RMS distance of c_k from the fixed-lambda "
    "weights with the rollout's mean gate, over their mean (0: DASH is that fixed lambda)",
    "spearman_pooled": "Spearman of D_t with the mean future divergence, every token pooled "
    "(the paper's panel a)",
    "spearman_within": "the same within rollouts, position partialled out (pooled residual ranks)",
    "spearman_within_null": f"its mean over {NULL_PERMUTATIONS} shuffles of D within each "
    "rollout: what no association gives (negative, see association_statistics)",
    "spearman_within_p": "two-sided permutation p-value of the within statistic against that null",
    "n_within_rollouts": f"rollouts with at least {MIN_WITHIN_TOKENS} tokens with a future",
    "n_branch_points": "positions where a problem's rollouts part ways (the prefix tree)",
    "reward_split_share": "share of branch points whose branches differ in mean reward",
    "spearman_D_reward_range": "Spearman of D at a branch point with the range of its "
    "branches' mean rewards",
    "spearman_D_future_range": "Spearman of D at a branch point with the range of its "
    "branches' mean future divergence",
    "reward_range_high_D": "mean reward range at branch points with D above the median",
    "reward_range_low_D": "mean reward range at branch points with D at or below the median",
}


def _rollouts(tokens: pd.DataFrame):
    """Each rollout's rows in position order."""
    return tokens.sort_values(["rollout", "position"]).groupby("rollout", sort=True)


def gate_statistics(tokens: pd.DataFrame) -> dict[str, float]:
    """The gates' place in ``GATE_BAND`` and the weights' departure from a fixed lambda.

    A rollout's last gate is never used (c_k reads lambda_{k-1}), so it is left out. The fixed
    lambda's weights are ``c_k = (1 - lambda^k) / (1 - lambda)`` (``c_k = k`` at 1)."""
    low, high = GATE_BAND
    used, spreads, cvs, departures = [], [], [], []
    for _, rollout in _rollouts(tokens):
        gates, weights = rollout["gate"].to_numpy(float), rollout["coefficient"].to_numpy(float)
        if len(gates) < 2:
            continue
        used.append(gates[:-1])
        spreads.append(gates[:-1].std())
        cvs.append(weights.std() / weights.mean())
        lam, k = gates[:-1].mean(), np.arange(1, len(weights) + 1, dtype=float)
        fixed = k if lam == 1.0 else (1.0 - lam**k) / (1.0 - lam)
        departures.append(np.sqrt(np.mean((weights - fixed) ** 2)) / fixed.mean())
    gates = np.concatenate(used) if used else np.array([])
    share = (lambda hit: float(hit.mean())) if len(gates) else (lambda hit: float("nan"))
    return {
        "gate_mid_share": share((gates > low) & (gates < high)),
        "gate_low_share": share(gates <= low),
        "gate_high_share": share(gates >= high),
        "gate_iqr": float(np.subtract(*np.percentile(gates, [75, 25])))
        if len(gates)
        else float("nan"),
        "gate_within_sd": _mean(spreads),
        "weight_cv": _mean(cvs),
        "weight_departure": _mean(departures),
    }


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def _residual(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``y`` less its least-squares line in ``x`` (with intercept)."""
    xc, yc = x - x.mean(), y - y.mean()
    denominator = float(xc @ xc)
    return yc if denominator == 0 else yc - (xc @ yc) / denominator * xc


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    denominator = np.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b / denominator) if denominator > 0 else float("nan")


def _padded(rollouts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rollouts' D as rows of one array (NaN past a rollout's end) and their lengths."""
    lengths = np.array([len(d) for d in rollouts])
    padded = np.full((len(rollouts), lengths.max()), np.nan)
    for row, d in enumerate(rollouts):
        padded[row, : len(d)] = d
    return padded, lengths


def within_residuals(d: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per rollout (a row of ``d``, ``lengths`` long): the ranks of D_t and of the mean of the D
    after it, each less its line in the position, over the tokens that have a future (all but
    the last); 0 elsewhere."""
    width = d.shape[1]
    position = np.broadcast_to(np.arange(width, dtype=float), d.shape)
    has_future = position < (lengths[:, None] - 1)
    filled = np.nan_to_num(d)
    later = np.cumsum(filled[:, ::-1], axis=1)[:, ::-1] - filled
    future = later / np.maximum(lengths[:, None] - 1 - position, 1)
    residuals = []
    for values in (d, future):
        ranks = rankdata(np.where(has_future, values, np.nan), axis=1, nan_policy="omit")
        residuals.append(_row_residual(np.nan_to_num(ranks), position, has_future))
    return residuals[0], residuals[1]


def _row_residual(y: np.ndarray, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Each row of ``y`` less its least-squares line in ``x``, over ``keep``; 0 elsewhere."""
    count = keep.sum(axis=1, keepdims=True)
    xc = np.where(keep, x - (x * keep).sum(axis=1, keepdims=True) / count, 0.0)
    yc = np.where(keep, y - (y * keep).sum(axis=1, keepdims=True) / count, 0.0)
    denominator = (xc * xc).sum(axis=1, keepdims=True)
    slope = np.divide((xc * yc).sum(axis=1, keepdims=True), denominator,
                      out=np.zeros_like(denominator), where=denominator > 0)  # fmt: skip
    return yc - slope * xc


def _within(d: np.ndarray, lengths: np.ndarray) -> float:
    a, b = within_residuals(d, lengths)
    return _correlation(a.ravel(), b.ravel())


def _shuffled(d: np.ndarray, lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each row of ``d`` with its first ``length`` values in a random order."""
    keys = rng.random(d.shape)
    keys[np.arange(d.shape[1])[None, :] >= lengths[:, None]] = np.inf  # the padding stays last
    return np.take_along_axis(d, np.argsort(keys, axis=1), axis=1)


def association_statistics(tokens: pd.DataFrame) -> tuple[dict[str, float], pd.DataFrame]:
    """Spearman of D_t with the mean D of the rest of its rollout: pooled over every token (the
    paper's panel a) and within rollouts (``within_residuals``, pooled), with the within
    statistic's permutation null; also the within residuals per token, for the figure.

    The null matters: a rollout's future means share its tokens, so a large D_t raises the
    future means of the positions before it and lowers its own rank among them; under no
    association at all the within statistic is negative. ``NULL_PERMUTATIONS`` shuffles of D
    within each rollout give that null (its mean, ``spearman_within_null``); the excess over it
    and a two-sided permutation p-value are what the data say."""
    frame = future_divergence(tokens[["rollout", "position", "D"]], "D")
    pooled = divergence_association(frame)["spearman"] if len(frame) else float("nan")
    series = [
        rollout["D"].to_numpy(float)
        for _, rollout in _rollouts(tokens)
        if len(rollout) > MIN_WITHIN_TOKENS
    ]
    values = {"spearman_pooled": float(pooled), "n_within_rollouts": len(series)}
    if not series:
        nan = float("nan")
        values.update(spearman_within=nan, spearman_within_null=nan, spearman_within_p=nan)
        return values, pd.DataFrame(columns=["within_D", "within_future"])
    d, lengths = _padded(series)
    observed = _within(d, lengths)
    rng = np.random.default_rng(NULL_SEED)
    null = np.array(
        [_within(_shuffled(d, lengths, rng), lengths) for _ in range(NULL_PERMUTATIONS)]
    )
    centre = float(null.mean())
    extreme = np.abs(null - centre) >= abs(observed - centre)
    values.update(
        spearman_within=observed,
        spearman_within_null=centre,
        spearman_within_p=float((1 + extreme.sum()) / (1 + len(null))),
    )
    residual_d, residual_future = within_residuals(d, lengths)
    kept = np.arange(d.shape[1])[None, :] < (lengths[:, None] - 1)
    within = pd.DataFrame({"within_D": residual_d[kept], "within_future": residual_future[kept]})
    return values, within


def branch_points(tokens: pd.DataFrame) -> pd.DataFrame:
    """Every position where rollouts of one problem with the same tokens before it take
    different tokens there: D (the mean over those rollouts of D_t, the same distribution pair
    up to floating point, ``D_spread`` its range), how many branches, and between the branches
    the range of their mean rewards and of their mean future divergence (the mean D over a
    rollout's positions after this one; NaN when fewer than two branches have a future)."""
    rows = []
    for problem, group in tokens.groupby("problem_id", sort=True):
        rollouts = {
            key: (r["token_id"].to_numpy(), r["D"].to_numpy(float), float(r["reward"].iloc[0]))
            for key, r in _rollouts(group)
        }
        pending = [(tuple(rollouts), 0)]
        while pending:
            members, t = pending.pop()
            alive = [m for m in members if len(rollouts[m][0]) > t]
            if len(alive) < 2:
                continue
            branches = defaultdict(list)
            for m in alive:
                branches[int(rollouts[m][0][t])].append(m)
            if len(branches) > 1:
                rows.append(_branch_row(problem, t, alive, list(branches.values()), rollouts))
            pending.extend((tuple(branch), t + 1) for branch in branches.values())
    frame = pd.DataFrame(rows, columns=list(BRANCH_COLUMNS))
    return frame.sort_values(["problem_id", "position"], ignore_index=True)


def _branch_row(problem, t: int, alive: list, branches: list[list], rollouts: dict) -> dict:
    d = np.array([rollouts[m][1][t] for m in alive])
    rewards = [np.mean([rollouts[m][2] for m in branch]) for branch in branches]
    futures = []
    for branch in branches:
        later = [rollouts[m][1][t + 1 :].mean() for m in branch if len(rollouts[m][1]) > t + 1]
        if later:
            futures.append(np.mean(later))
    return {
        "problem_id": problem,
        "position": t,
        "n_rollouts": len(alive),
        "n_branches": len(branches),
        "D": float(d.mean()),
        "D_spread": float(d.max() - d.min()),
        "reward_range": float(max(rewards) - min(rewards)),
        "future_range": float(max(futures) - min(futures)) if len(futures) > 1 else float("nan"),
    }


def _spearman(a: pd.Series, b: pd.Series) -> float:
    keep = a.notna() & b.notna()
    if keep.sum() < 3:
        return float("nan")
    return float(a[keep].rank().corr(b[keep].rank()))


def branch_statistics(branches: pd.DataFrame) -> dict[str, float]:
    """How the branches' outcomes vary with D at their branch point."""
    high = branches["D"] > branches["D"].median()
    return {
        "n_branch_points": len(branches),
        "reward_split_share": _mean((branches["reward_range"] > 0).to_numpy()),
        "spearman_D_reward_range": _spearman(branches["D"], branches["reward_range"]),
        "spearman_D_future_range": _spearman(branches["D"], branches["future_range"]),
        "reward_range_high_D": _mean(branches.loc[high, "reward_range"].to_numpy()),
        "reward_range_low_D": _mean(branches.loc[~high, "reward_range"].to_numpy()),
    }


def premise_statistics(
    tokens: pd.DataFrame, branches: pd.DataFrame
) -> tuple[dict[str, float], pd.DataFrame]:
    """Every statistic of ``STATISTICS``, in its order, from a probe's tokens and branches; and
    the within-rollout residuals (``association_statistics``) for the figure."""
    association, within = association_statistics(tokens)
    per_rollout = tokens.groupby("rollout")["reward"].first()
    values = {
        "n_problems": int(tokens["problem_id"].nunique()),
        "n_rollouts": len(per_rollout),
        "n_tokens": len(tokens),
        "mean_reward": _mean(per_rollout.to_numpy(float)),
        **gate_statistics(tokens),
        **association,
        **branch_statistics(branches),
    }
    return {key: values[key] for key in STATISTICS}, within


def statistics_by_task(
    tokens: pd.DataFrame,
) -> tuple[dict[str, dict[str, float]], pd.DataFrame, pd.DataFrame]:
    """The statistics of every probed token (``all``) and, where the probe covers several
    tasks, of each task's tokens; the branch points (with their task) and the within-rollout
    residuals of ``all``."""
    tasks = list(dict.fromkeys(tokens["task"]))
    parts = {task: tokens[tokens["task"] == task] for task in tasks}
    branches = {task: branch_points(part).assign(task=task) for task, part in parts.items()}
    every = pd.concat(branches.values(), ignore_index=True)
    values, within = premise_statistics(tokens, every)
    rows = {"all": values}
    if len(tasks) > 1:
        rows.update({task: premise_statistics(parts[task], branches[task])[0] for task in tasks})
    return rows, every, within
