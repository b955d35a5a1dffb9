"""The premise probe's statistics as a table (one row per probe) and as a three-panel figure.

The table's Markdown is the statistics of ``statistics.STATISTICS`` with what each measures;
the figure shows the gates against ``GATE_BAND`` (panel a), D_t against the future divergence
within rollouts, position partialled out (panel b), and D at each branch point against the range
of its branches' rewards (panel c).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import pandas as pd

from dashrepro.premise.statistics import GATE_BAND, STATISTICS

#: Points a scatter draws at most (every point enters the statistics).
MAX_POINTS = 2500


def statistics_frame(rows: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """One row per probe (``rows``: probe label -> its statistics), the columns in order."""
    return pd.DataFrame(
        [
            {"probe": label, **{key: values[key] for key in STATISTICS}}
            for label, values in rows.items()
        ]
    )


def _cell(value) -> str:
    """A count with thousands separated, any other number to 3 decimals, n/a if undefined."""
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    value = float(value)
    return f"{value:.3f}" if math.isfinite(value) else "n/a"


def statistics_markdown(frame: pd.DataFrame, title: str) -> str:
    """The statistics of each probe (a column each) beside what they measure."""
    probes = list(frame["probe"])
    lines = [
        f"# {title}",
        "",
        "| statistic | " + " | ".join(probes) + " | what it measures |",
        "|---|" + "---:|" * len(probes) + "---|",
    ]
    for key, meaning in STATISTICS.items():
        cells = " | ".join(_cell(value) for value in frame[key])
        lines.append(f"| `{key}` | {cells} | {meaning} |")
    return "\n".join(lines) + "\n"


def premise_figure(tokens: pd.DataFrame, within: pd.DataFrame, branches: pd.DataFrame,
                   values: Mapping[str, float], title: str):  # fmt: skip
    """The probe's three panels (see the module docstring)."""
    import matplotlib.pyplot as plt

    fig, (gates_ax, within_ax, branch_ax) = plt.subplots(1, 3, figsize=(12.0, 3.6))
    last = tokens.groupby("rollout")["position"].transform("max") == tokens["position"]
    gates_ax.hist(tokens.loc[~last, "gate"], bins=40, range=(0, 1), color="tab:blue")
    for edge in GATE_BAND:
        gates_ax.axvline(edge, color="black", linestyle=":", linewidth=0.8)
    gates_ax.set_xlabel(r"gate $\lambda_t$")
    gates_ax.set_ylabel("tokens")
    gates_ax.set_title(
        f"(a) {_cell(values['gate_mid_share'])} of gates in {GATE_BAND}; "
        f"c_k off fixed-lambda {_cell(values['weight_departure'])}",
        fontsize=8,
    )
    shown = within.sample(n=min(MAX_POINTS, len(within)), random_state=0) if len(within) else within
    within_ax.scatter(shown.get("within_D", []), shown.get("within_future", []), s=4, alpha=0.4)
    within_ax.set_xlabel(r"rank of $D_t$ in its rollout (position partialled)")
    within_ax.set_ylabel("rank of the mean future divergence (same)")
    within_ax.grid(alpha=0.3)
    within_ax.set_title(
        f"(b) Spearman within {_cell(values['spearman_within'])} (null "
        f"{_cell(values['spearman_within_null'])}, p {_cell(values['spearman_within_p'])}); "
        f"pooled {_cell(values['spearman_pooled'])}",
        fontsize=8,
    )
    branch_ax.scatter(branches["D"], branches["reward_range"], s=8, alpha=0.5, color="tab:red")
    branch_ax.set_xlabel("D at the branch point")
    branch_ax.set_ylabel("range of the branches' mean rewards")
    branch_ax.set_title(
        f"(c) {values['n_branch_points']:,} branch points; Spearman "
        f"{_cell(values['spearman_D_reward_range'])}",
        fontsize=8,
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
