"""Figure kind ``motivation_futures``: two rollouts matched on D_t at a fork, different futures.

The paper's motivation figure, panel b. From the per-token traces (unclipped forward KL D_t,
``divergence``), the figure draws two rollouts' divergence profiles, marks the matched position,
and gives each rollout's outcome (its reward: 1 if its final answer was graded correct).

The pair (``matched_pair``): the candidates are the tokens with at least ``min_future`` later
tokens (default 5, so a future exists to compare) and D_t > 0. Of these, only those whose D_t is
at least the ``quantile`` (default 0.9) of all candidates' D_t are matched, so the fork is a
position of large local divergence, not one where D_t is about 0 (where many tokens agree
trivially). Among tokens of *different* traced rollouts whose D_t agree within ``tolerance``
(relative, default 5 %), the pair whose mean future divergences differ most is chosen (ties:
the closer D_t). If no two rollouts match above that quantile, the quantile is lowered (0.75,
0.5, then every candidate) and the quantile used is recorded. The JSON gives both D_t values,
the quantile and its D_t threshold.
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
    "quantile": "matched D_t at least this quantile of the candidates' D_t (default 0.9)",
}
CAPTION = (
    "Two rollouts with the same large local divergence D_t (by default at least its 90% "
    "quantile) at one position (the fork) and their divergence profiles afterwards, with each "
    "rollout's outcome."
)


#: The quantiles tried, in order, after the requested one finds no pair (0: every candidate).
FALLBACK_QUANTILES = (0.75, 0.5, 0.0)


def _best_pair(values, futures, rollout, tolerance: float) -> tuple[int, int] | None:
    """Indices (into D_t-sorted arrays) of the pair of different rollouts with D_t within
    ``tolerance`` whose futures differ most (ties: the closer D_t), or None."""
    best, pair = (-1.0, 0.0), None
    # Sorted by D_t, each token's matches are a window ahead of it.
    for i in range(len(values)):
        j = i + 1
        while j < len(values) and values[j] <= values[i] * (1 + tolerance):
            score = (abs(futures[j] - futures[i]), -(values[j] - values[i]))
            if rollout[i] != rollout[j] and score > best:
                best, pair = score, (i, j)
            j += 1
    return pair


def matched_pair(
    frame: pd.DataFrame, tolerance: float, min_future: int, quantile: float = 0.9
) -> tuple[dict, dict, dict]:
    """The two tokens (rows of ``future_divergence``) of different rollouts with D_t within
    ``tolerance`` of each other and at least the ``quantile`` of the candidates' D_t, whose mean
    future divergences differ most (the rule of the module docstring), and the selection:
    ``{"quantile", "requested_quantile", "threshold", "n_candidates", "n_above"}``."""
    if not 0 <= quantile <= 1:
        raise ValueError(f"motivation_futures: quantile must lie in [0, 1], not {quantile}")
    keys = ["run", "step", "rollout"]
    frame = frame.copy()
    frame["later"] = frame.groupby(keys)["position"].transform("max") - frame["position"]
    frame = frame[(frame["later"] >= min_future) & (frame["r"] > 0)].sort_values("r")
    if len(frame) < 2:
        raise ValueError("motivation_futures: fewer than two tokens with a future to compare")
    rollout_of = frame[keys].astype(str).agg("/".join, axis=1)
    levels = [quantile, *(q for q in FALLBACK_QUANTILES if q < quantile)]
    for level in levels:
        threshold = float(frame["r"].quantile(level))
        above = frame["r"] >= threshold
        pair = _best_pair(
            frame.loc[above, "r"].to_numpy(),
            frame.loc[above, "future_mean_r"].to_numpy(),
            rollout_of[above].to_numpy(),
            tolerance,
        )
        if pair is not None:
            rows = frame[above].iloc[list(pair)].to_dict("records")
            selection = {
                "quantile": level, "requested_quantile": quantile, "threshold": threshold,
                "n_candidates": int(len(frame)), "n_above": int(above.sum()),
            }  # fmt: skip
            return rows[0], rows[1], selection
    raise ValueError("motivation_futures: no two rollouts share a D_t within the tolerance")


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
    first, second, selection = matched_pair(
        frame,
        float(options.get("tolerance", 0.05)),
        int(options.get("min_future", 5)),
        float(options.get("quantile", 0.9)),
    )
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    data = {
        "pair": [],
        "matched_D_t": [float(first["r"]), float(second["r"])],
        "D_t_quantile": selection["quantile"],
        "D_t_requested_quantile": selection["requested_quantile"],
        "D_t_threshold": selection["threshold"],
        "n_candidates": selection["n_candidates"],
        "n_above_threshold": selection["n_above"],
    }
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
    ax.set_title(
        f"matched D_t = {first['r']:.3f} / {second['r']:.3f} "
        f"(>= q{100 * selection['quantile']:.0f} = {selection['threshold']:.3f})",
        fontsize=8,
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig, data
