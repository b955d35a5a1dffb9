"""Figure kind ``divergence_association``: the local divergence D_t against the mean future
divergence of its rollout (the paper's motivation figure, panel a).

Drawn from the per-token traces the trainer records for the first rollouts of step 1 and of
every checkpoint, over the spec's methods and seeds. D_t is the *unclipped* forward KL the
trainer traces beside each method's own signal (column ``divergence``), as the paper plots it;
option ``signal: r`` plots the method's own (possibly clipped) signal instead. Correlations use
every token; the scatter shows a sample of at most 2,500 (the paper shows 2,500 of 30k). The
figure's data names the runs and steps the tokens come from.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

NEEDS = ("traces",)
OPTIONS: dict[str, str] = {
    "signal": "divergence (default: the unclipped forward KL) or r (the method's own signal)"
}
CAPTION = (
    "Local divergence D_t against the mean divergence of the rest of its rollout, from the "
    "training traces; Spearman and Pearson correlations in the title."
)


def future_divergence(traces: pd.DataFrame, signal: str = "r") -> pd.DataFrame:
    """Per token: the local signal D_t = r_t and the mean future divergence of its rollout,
    ``D_bar_{>t}`` = mean of r over the later tokens.

    ``traces`` are ``token_traces.parquet`` rows (step, rollout, position, r, ...) of one or more
    runs; a rollout is identified by (run, step, rollout). The last token of each rollout has no
    future and is dropped.
    """
    keys = [c for c in ("run", "step", "rollout") if c in traces.columns]
    frame = traces.sort_values([*keys, "position"]).copy()
    frame["r"] = frame[signal]
    grouped = frame.groupby(keys, sort=False)["r"]
    later_sum = grouped.transform(lambda r: r[::-1].cumsum()[::-1] - r)
    later_count = grouped.transform(lambda r: pd.Series(range(len(r) - 1, -1, -1), index=r.index))
    frame["future_mean_r"] = later_sum / later_count.where(later_count > 0)
    return frame.dropna(subset=["future_mean_r"]).reset_index(drop=True)


def divergence_association(frame: pd.DataFrame) -> dict[str, float]:
    """Pearson and Spearman correlation of D_t with the mean future divergence, and n tokens."""
    return {
        "n_tokens": int(len(frame)),
        "n_rollouts": int(
            frame.groupby([c for c in ("run", "step", "rollout") if c in frame]).ngroups
        ),
        "pearson": float(frame["r"].corr(frame["future_mean_r"], method="pearson")),
        # Spearman = Pearson of the ranks (average ranks for ties).
        "spearman": float(frame["r"].rank().corr(frame["future_mean_r"].rank())),
    }


def plot_divergence_association(frame: pd.DataFrame, stats: Mapping[str, float], title: str):
    """Scatter of D_t against the mean future divergence (at most 2,500 points, as the paper)."""
    import matplotlib.pyplot as plt

    shown = frame.sample(n=min(2500, len(frame)), random_state=0) if len(frame) else frame
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.scatter(shown["r"], shown["future_mean_r"], s=4, alpha=0.4)
    ax.set_xlabel("local divergence $D_t$")
    ax.set_ylabel(r"mean future divergence $\bar{D}_{>t}$")
    ax.set_title(
        f"{title}\nSpearman {stats['spearman']:.2f}, Pearson {stats['pearson']:.2f}, "
        f"{stats['n_tokens']} tokens",
        fontsize=8,
    )
    fig.tight_layout()
    return fig


def draw(spec: Mapping, inputs: Mapping, context: Mapping):
    from dashrepro.io import read_parquet

    signal = (spec.get("options") or {}).get("signal", "divergence")
    if signal not in ("divergence", "r"):
        raise ValueError(
            f"divergence_association: option signal must be 'divergence' or 'r', got {signal!r}"
        )
    frames = []
    for path in inputs["traces"]:
        traces = read_parquet(path)
        if signal in traces.columns:  # EOPD and AVSD runs trace no local signal `r`
            frames.append(traces.assign(run=path))
    if not frames:
        raise ValueError(f"no trace among {inputs['traces']} has a {signal!r} column")
    frame = future_divergence(pd.concat(frames, ignore_index=True), signal)
    stats = divergence_association(frame)
    fig = plot_divergence_association(frame, stats, f"experiment {context['experiment']}")
    stats["signal"] = signal
    stats["sources"] = {
        run: sorted(int(s) for s in steps)
        for run, steps in frame.groupby("run")["step"].unique().items()
    }
    return fig, stats
