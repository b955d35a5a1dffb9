"""The factorial study's analysis, fixed before its numbers exist (docs/factorial-study.md).

The paper's 2x2 factorial on the task families: allocation (uniform, DASH's) crossed with scale
(OPSD's, DASH's), i.e. OPSD, scale-matched OPSD, normalized DASH and DASH, at a κ chosen from
the probe alone, plus DASH as the first study ran it (κ = 5, unclipped) and, at the paper's
τ = 0.05, OPSD and DASH. The rules that fix the study's free values (which cells count, the
learning rate and read step, κ, the seeds) read only the base evaluation, the probe and OPSD's
pilot runs; the tests read one endpoint per (arm, seed): the mean Avg@k over the accepted cells.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from dashrepro.premise.study import holm, last_token, token_gates

#: The paper's κ grid (Figure prop_kappa); the study's κ is one of these.
PAPER_KAPPA_GRID = (1.0, 2.0, 5.0, 10.0, 20.0)
#: A rollout is *saturated* at a κ when its median used gate is at least this.
SATURATED_GATE = 0.9
#: The most a family's probe rollouts may be saturated at the study's κ.
MOST_SATURATED = 0.10
#: Chance on the families: the answer is one digit.
CHANCE = 10.0
#: Acceptance of a cell on the base evaluation (points): the student at least ``FLOOR_ABOVE``
#: above chance and at most ``CEILING``; the teacher at least ``TEACHER_ABOVE`` above it.
FLOOR_ABOVE, CEILING, TEACHER_ABOVE = 20.0, 85.0, 10.0
#: A cell is learned when OPSD's pilot mean at the read step is this far above the base student.
LEARNED_ABOVE = 5.0
#: A schedule has not decayed by its read step when OPSD's mean there is within this of its
#: best checkpoint (points, the endpoint).
DECAY_TOLERANCE = 2.0
#: The effect the co-primary tests are sized for, their power and family-wise level.
EFFECT, POWER, ALPHA = 3.0, 0.8, 0.05
#: The scale effect is called equivalent to zero within this margin (points).
SCALE_MARGIN = 2.0
#: The factorial's arms by role (method names of the study overlay, ``kappa`` filled in).
FACTORIAL = {
    "opsd": "opsd",
    "scale_matched": "scale_matched_opsd_k{kappa}",
    "normalized": "normalized_dash_k{kappa}",
    "dash": "dash_k{kappa}",
}
#: The first study's DASH (κ = 5, unclipped), and the arms at the paper's clip.
REPEAT, CLIPPED_OPSD, CLIPPED_DASH = "dash", "opsd_tau0p05", "dash_tau0p05"


def accepted_cells(base: Mapping) -> dict[str, str | None]:
    """Each cell of a base evaluation (``accuracy.json``: student and teacher Avg@k, points)
    with ``None`` when it is accepted, else the reason it is not."""
    verdicts = {}
    student, teacher = base["student"]["benchmarks"], base["teacher"]["benchmarks"]
    for cell, values in student.items():
        s = float(values["avg_at_k"])
        t = float(teacher[cell]["avg_at_k"]) if cell in teacher else float("nan")
        if s < CHANCE + FLOOR_ABOVE:
            verdicts[cell] = f"student {s:.1f} below chance + {FLOOR_ABOVE:g} ({CHANCE + FLOOR_ABOVE:g})"
        elif s > CEILING:
            verdicts[cell] = f"student {s:.1f} above the ceiling {CEILING:g}"
        elif not t >= s + TEACHER_ABOVE:
            verdicts[cell] = f"teacher {t:.1f} not {TEACHER_ABOVE:g} above the student {s:.1f}"
        else:
            verdicts[cell] = None
    return verdicts


def saturated_share(tokens: pd.DataFrame, kappa: float) -> pd.Series:
    """Per family (``task``), the share of the probe's rollouts whose median used gate at
    ``kappa`` is at least ``SATURATED_GATE``."""
    frame = tokens[["task", "rollout"]].assign(gate=token_gates(tokens, kappa))
    medians = frame[~last_token(tokens)].groupby(["task", "rollout"])["gate"].median()
    return (medians >= SATURATED_GATE).groupby(level="task").mean()


def kappa_from_probe(tokens: pd.DataFrame, cells: Sequence[str]) -> dict:
    """The study's κ: the largest of ``PAPER_KAPPA_GRID`` at which at most ``MOST_SATURATED``
    of every accepted family's probe rollouts are saturated (the gate regime the paper's clip
    allows); the smallest κ of the grid, flagged, when none qualifies."""
    shares = {}
    for kappa in PAPER_KAPPA_GRID:
        share = saturated_share(tokens[tokens["task"].isin(cells)], kappa)
        missing = sorted(set(cells) - set(share.index))
        if missing:
            raise ValueError(f"the probe's tokens have no rollout of cells {missing}")
        shares[kappa] = {cell: float(share[cell]) for cell in cells}
    fits = [k for k, by in shares.items() if max(by.values()) <= MOST_SATURATED]
    return {"kappa": max(fits) if fits else min(PAPER_KAPPA_GRID), "qualified": bool(fits),
            "saturated_share": {f"{k:g}": by for k, by in shares.items()}}  # fmt: skip


def endpoints(scores: pd.DataFrame, cells: Sequence[str]) -> pd.DataFrame:
    """The endpoint of each run and step: the mean Avg@k over ``cells`` (columns method, seed,
    step, endpoint). A run lacking a cell is a ``ValueError`` naming it."""
    kept = scores[scores["cell"].isin(cells)]
    counts = kept.groupby(["method", "seed", "step"])["cell"].nunique()
    short = counts[counts < len(cells)]
    if len(short):
        raise ValueError(f"runs without every accepted cell {list(cells)}: {list(short.index)}")
    means = kept.groupby(["method", "seed", "step"])["score"].mean()
    return means.rename("endpoint").reset_index()


def pilot_schedule(scores: pd.DataFrame, cells: Sequence[str]) -> dict:
    """The learning rate and read step from OPSD's pilot (columns lr, seed, step, cell, score):
    per learning rate, the endpoint's mean over seeds at each checkpoint; a learning rate is
    *stable* when its mean at its last checkpoint is within ``DECAY_TOLERANCE`` of its best.
    The stable rate with the highest last-checkpoint mean is chosen, read at its last step;
    with none stable, the smallest rate at its best step (flagged)."""
    frame = endpoints(scores.assign(method=scores["lr"].astype(str)), cells)
    frame["lr"] = frame["method"].astype(float)
    means = frame.groupby(["lr", "step"])["endpoint"].mean()
    curves = {float(lr): {int(s): float(v) for s, v in block.droplevel("lr").items()}
              for lr, block in means.groupby(level="lr")}  # fmt: skip
    stable = {lr: curve[max(curve)] for lr, curve in curves.items()
              if curve[max(curve)] >= max(curve.values()) - DECAY_TOLERANCE}  # fmt: skip
    if stable:
        lr = max(stable, key=lambda k: (stable[k], -k))
        step = max(curves[lr])
    else:
        lr = min(curves)
        step = max(curves[lr], key=lambda s: (curves[lr][s], -s))
    at = frame[(frame["lr"] == lr) & (frame["step"] == step)]
    return {"lr": lr, "step": step, "stable": bool(stable), "curves": curves,
            "endpoint_sd": float(at["endpoint"].std(ddof=1)), "n_seeds": int(len(at))}  # fmt: skip


def learned_cells(scores: pd.DataFrame, base: Mapping, lr: float, step: int,
                  cells: Sequence[str]) -> dict[str, bool]:  # fmt: skip
    """Whether OPSD's pilot at the chosen schedule beats the base student by ``LEARNED_ABOVE``
    in each cell (a cell OPSD cannot move cannot show a method's difference)."""
    at = scores[(scores["lr"] == lr) & (scores["step"] == step)]
    means = at.groupby("cell")["score"].mean()
    student = base["student"]["benchmarks"]
    return {c: bool(means[c] >= float(student[c]["avg_at_k"]) + LEARNED_ABOVE) for c in cells}


def one_sided_power(sd: float, effect: float, n: int, level: float) -> float:
    """The power of a one-sided one-sample t-test at ``level`` with ``n`` seeds against a true
    mean ``effect`` when the per-seed contrast has standard deviation ``sd`` (noncentral t)."""
    df = n - 1
    return float(stats.nct.sf(stats.t.ppf(1 - level, df), df, effect / sd * math.sqrt(n)))


def seeds_for_endpoint(endpoint_sd: float, effect: float = EFFECT, power: float = POWER,
                       alpha: float = ALPHA, most: int = 200) -> dict:  # fmt: skip
    """The seeds the co-primary tests need: DASH − OPSD's per-seed SD taken as √2 times the
    endpoint's SD between OPSD seeds (no credit for pairing by seed: conservative), tested
    one-sided at ``alpha / 2`` (Holm's first step over the two co-primary hypotheses). The
    allocation contrast, half a sum of two differences, has the endpoint's SD, so it needs
    fewer."""
    if not endpoint_sd > 0:
        raise ValueError(f"the endpoint's SD must be positive, got {endpoint_sd}")
    sd = math.sqrt(2) * endpoint_sd
    for n in range(3, most + 1):
        if one_sided_power(sd, effect, n, alpha / 2) >= power:
            return {"seeds_needed": n, "contrast_sd": sd}
    raise ValueError(f"more than {most} seeds would be needed (SD {sd:.2f}, effect {effect})")


def detectable(contrast_sd: float, n: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest true contrast ``n`` seeds detect with ``power`` (to 0.01 points, up)."""
    low, high = 0.0, 100.0
    while high - low > 0.005:
        middle = (low + high) / 2
        if one_sided_power(contrast_sd, middle, n, alpha / 2) < power:
            low = middle
        else:
            high = middle
    return math.ceil(high * 100) / 100


def evaluation_sd(samples: pd.DataFrame) -> float:
    """The endpoint's binomial evaluation noise (points) from one run's samples (columns cell,
    problem_id, correct): each cell's Avg@k has variance Σ p_i (1 − p_i) / (k N²) over its N
    problems, and the endpoint averages the cells."""
    variances = []
    for _, cell in samples.groupby("cell"):
        p = cell.groupby("problem_id")["correct"].mean()
        k = cell.groupby("problem_id").size()
        variances.append(float((p * (1 - p) / k).sum() / len(p) ** 2))
    return 100 * math.sqrt(sum(variances)) / len(variances)


def contrasts(wide: pd.DataFrame, arms: Mapping[str, str]) -> dict[str, pd.Series]:
    """The study's contrasts per seed (``wide``: one column per method, one row per seed)."""
    a = {role: wide[name] for role, name in arms.items()}
    return {
        "dash - opsd": a["dash"] - a["opsd"],
        "allocation": ((a["dash"] - a["scale_matched"]) + (a["normalized"] - a["opsd"])) / 2,
        "scale": ((a["scale_matched"] - a["opsd"]) + (a["dash"] - a["normalized"])) / 2,
    }


def _interval(values: pd.Series, confidence: float) -> tuple[float, float, float, float]:
    d = values.to_numpy(float)
    n, mean = len(d), float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se if n > 1 else float("nan")
    return mean, se, mean - half, mean + half


def coprimary_tests(wide: pd.DataFrame, arms: Mapping[str, str], alpha: float = ALPHA) -> list:
    """DASH − OPSD > 0 and the allocation effect > 0 on the endpoint: one-sided t-tests over
    seeds, Holm-adjusted over the two; each with its 95 % interval."""
    per_seed = contrasts(wide, arms)
    rows = []
    for name in ("dash - opsd", "allocation"):
        mean, se, low, high = _interval(per_seed[name], 0.95)
        p = float(stats.t.sf(mean / se, len(per_seed[name]) - 1)) if se > 0 else float(mean <= 0)
        rows.append({"contrast": name, "n_seeds": len(per_seed[name]), "difference": mean,
                     "low": low, "high": high, "p": p})  # fmt: skip
    for row, adjusted in zip(rows, holm([r["p"] for r in rows]), strict=True):
        row["p_holm"] = adjusted
        row["verdict"] = "supported" if adjusted < alpha else "not supported"
    return rows


def scale_equivalence(wide: pd.DataFrame, arms: Mapping[str, str],
                      margin: float = SCALE_MARGIN, alpha: float = ALPHA) -> dict:  # fmt: skip
    """The scale effect (secondary): equivalent to zero within ±``margin`` when its
    1 − 2α interval lies inside the margin (two one-sided tests), else *not shown*."""
    values = contrasts(wide, arms)["scale"]
    mean, se, low, high = _interval(values, 1 - 2 * alpha)
    verdict = "equivalent" if -margin < low and high < margin else "not shown equivalent"
    return {"contrast": "scale", "n_seeds": len(values), "difference": mean, "low": low,
            "high": high, "margin": margin, "verdict": verdict}  # fmt: skip


def cell_contrasts(scores: pd.DataFrame, arms: Mapping[str, str], cells: Sequence[str]) -> list:
    """Each contrast in each cell with its 95 % interval (descriptive; the forest plot)."""
    rows = []
    for cell in cells:
        wide = scores[scores["cell"] == cell].pivot_table(
            index="seed", columns="method", values="score"
        )
        for name, values in contrasts(wide, arms).items():
            mean, _, low, high = _interval(values.dropna(), 0.95)
            rows.append({"cell": cell, "contrast": name, "difference": mean, "low": low,
                         "high": high})  # fmt: skip
    return rows


def arms_for(kappa: float) -> dict[str, str]:
    """The factorial's method names at ``kappa`` (``dash_k5`` is the repeat's ``dash`` when the
    probe keeps the paper's κ)."""
    from dashrepro.layout import value_name

    name = value_name(kappa)
    arms = {role: template.format(kappa=name) for role, template in FACTORIAL.items()}
    return arms


def endpoint_table(frame: pd.DataFrame, methods: Sequence[str], step: int) -> pd.DataFrame:
    """``endpoints``' rows at ``step`` as one column per method, one row per seed; a seed that
    one of ``methods`` lacks is a ``ValueError`` naming it."""
    wide = frame[frame["step"] == step].pivot_table(index="seed", columns="method",
                                                    values="endpoint")  # fmt: skip
    absent = [m for m in methods if m not in wide.columns]
    if absent:
        raise ValueError(f"no endpoint at step {step} for methods {absent}")
    holes = wide[list(methods)].isna().any(axis=1)
    if holes.any():
        raise ValueError(f"seeds without every arm at step {step}: {list(wide.index[holes])}")
    return wide[list(methods)]


def best_checkpoint_endpoints(frame: pd.DataFrame) -> pd.DataFrame:
    """The paper's selection (secondary): each run at its best evaluated checkpoint."""
    best = frame.loc[frame.groupby(["method", "seed"])["endpoint"].idxmax()]
    return best.assign(step=0)


def summary_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and 95 % t interval of a few numbers (for the diagnostics per arm)."""
    mean, _, low, high = _interval(pd.Series(np.asarray(values, float)), 0.95)
    return mean, low, high
