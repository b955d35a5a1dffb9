"""Figure kind ``motivation_futures``: two rollouts matched on D_t at a fork, different futures.

The paper's motivation figure, panel b. From the per-token traces (unclipped forward KL D_t,
``divergence``), among tokens of *different* traced rollouts whose D_t agree within
``tolerance`` (relative, default 5 %), the pair whose mean future divergences differ most; the
figure draws both rollouts' divergence profiles, marks the matched position, and gives each
rollout's outcome (its reward: 1 if its final answer was graded correct). Only positions with
at least ``min_future`` later tokens (default 5) are matched, so a future exists to compare.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dashrepro.analysis.figures.divergence_association import future_divergence

NEEDS = ("traces",)
OPTIONS = {
    "tolerance": "relative D_t difference of a matched pair (default 0.05)",
    "min_future": "later tokens a matched position needs (default 5)",
}
CAPTION = (
    "Two rollouts with the same local divergence D_t at one position (the fork) and their "
    "divergence profiles afterwards, with each rollout's outcome."
)


def matched_pair(frame: pd.DataFrame, tolerance: float, min_future: int) -> tuple[dict, dict]:
    """The two tokens (rows of ``future_divergence``) of different rollouts with D_t within
    ``tolerance`` of each other whose mean future divergences differ most."""
    keys = ["run", "step", "rollout"]
    frame = frame.copy()
    frame["later"] = frame.groupby(keys)["position"].transform("max") - frame["position"]
    frame = frame[(frame["later"] >= min_future) & (frame["r"] > 0)].sort_values("r")
    if len(frame) < 2:
        raise ValueError("motivation_futures: fewer than two tokens with a future to compare")
    values = frame["r"].to_numpy()
    futures = frame["future_mean_r"].to_numpy()
    rollout = frame[keys].astype(str).agg("/".join, axis=1).to_numpy()
    best, pair = -1.0, None
    # Sorted by D_t, each token's matches are a window ahead of it.
    for i in range(len(values)):
        j = i + 1
        while j < len(values) and values[j] <= values[i] * (1 + tolerance):
            gap = abs(futures[j] - futures[i])
            if rollout[i] != rollout[j] and gap > best:
                best, pair = gap, (i, j)
            j += 1
    if pair is None:
        raise ValueError("motivation_futures: no two rollouts share a D_t within the tolerance")
    rows = frame.iloc[list(pair)].to_dict("records")
    return rows[0], rows[1]


def draw(spec: Mapping, inputs: Mapping, context: Mapping):
    import matplotlib.pyplot as plt

    from dashrepro.io import read_parquet

    options = spec.get("options") or {}
    traces = pd.concat(
        [read_parquet(p).assign(run=str(p)) for p in inputs["traces"]], ignore_index=True
    )
    if "divergence" not in traces.columns:
        raise ValueError("motivation_futures: the traces hold no unclipped divergence")
    frame = future_divergence(traces.dropna(subset=["divergence"]), "divergence")
    first, second = matched_pair(
        frame, float(options.get("tolerance", 0.05)), int(options.get("min_future", 5))
    )
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    data = {"pair": []}
    for token, color in ((first, "tab:blue"), (second, "tab:red")):
        keys = (token["run"], token["step"], token["rollout"])
        run = traces[
            (traces["run"] == keys[0])
            & (traces["step"] == keys[1])
            & (traces["rollout"] == keys[2])
        ].sort_values("position")
        offset = run["position"] - token["position"]
        reward = run["reward"].iloc[0] if "reward" in run else np.nan
        outcome = "correct" if reward == 1 else ("wrong" if reward == 0 else "unknown")
        ax.plot(offset, run["divergence"], color=color, linewidth=1,
                label=f"{token['problem_id']} ({outcome}); mean future {token['future_mean_r']:.3f}")  # fmt: skip
        data["pair"].append({
            "run": keys[0], "step": int(keys[1]), "rollout": int(keys[2]),
            "problem_id": token["problem_id"], "position": int(token["position"]),
            "D_t": float(token["r"]), "mean_future": float(token["future_mean_r"]),
            "outcome": outcome,
        })  # fmt: skip
    ax.axvline(0, color="black", linestyle=":", linewidth=0.8)
    ax.set_xlabel("tokens from the matched position")
    ax.set_ylabel("local divergence D_t")
    ax.set_title(f"matched D_t = {first['r']:.3f} / {second['r']:.3f}", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig, data
