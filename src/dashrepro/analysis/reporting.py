"""Tables and figures from selected checkpoints.

``main_results_table`` aggregates selection records over seeds: per method and benchmark the mean
and the sample standard deviation (ddof = 1, paper Eq. supp_seed_statistics) of the selected
checkpoint's Avg@k, and the Average column = the mean of the three benchmark means (the paper does
not derive a std for it: the benchmark scores are paired within a seed). Written as CSV, Markdown
and LaTeX (booktabs).

``plot_checkpoint_curves`` draws the three-benchmark mean per checkpoint for each method and
seed (the base model at step 0), marking each seed's selected checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd


def main_results_table(
    records: Sequence[Mapping],
    methods: Sequence[str],
    method_labels: Mapping[str, str],
    benchmarks: Sequence[str],
) -> pd.DataFrame:
    """One row per method; ``records`` carry method, seed and benchmark_scores."""
    rows = []
    for method in methods:
        mine = [r for r in records if r["method"] == method]
        if not mine:
            raise ValueError(f"no selection records for method {method!r}")
        row = {"method": method, "label": method_labels[method], "n_seeds": len(mine)}
        means = []
        for bench in benchmarks:
            values = pd.Series([r["benchmark_scores"][bench] for r in mine], dtype=float)
            mean = float(values.mean())
            std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
            row[f"{bench}_mean"], row[f"{bench}_std"] = mean, std
            means.append(mean)
        row["average"] = sum(means) / len(means)
        row["seeds"] = ",".join(str(r["seed"]) for r in sorted(mine, key=lambda r: r["seed"]))
        row["selected_steps"] = ",".join(
            str(r["selected_step"]) for r in sorted(mine, key=lambda r: r["seed"])
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _cell(mean: float, std: float, latex: bool) -> str:
    if math.isnan(std):
        return f"{mean:.2f}"
    return f"{mean:.2f} $\\pm$ {std:.2f}" if latex else f"{mean:.2f} ± {std:.2f}"


def to_markdown(table: pd.DataFrame, benchmark_labels: Mapping[str, str]) -> str:
    header = ["Method", *benchmark_labels.values(), "Average", "Seeds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.to_dict("records"):
        cells = [row["label"]]
        cells += [_cell(row[f"{b}_mean"], row[f"{b}_std"], False) for b in benchmark_labels]
        cells += [f"{row['average']:.2f}", str(row["n_seeds"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_latex(table: pd.DataFrame, benchmark_labels: Mapping[str, str], caption: str) -> str:
    def escape(text: str) -> str:
        return text.replace("&", r"\&").replace("%", r"\%").replace("_", r"\_")

    n = len(benchmark_labels)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{@{}l" + "c" * (n + 1) + "@{}}",
        r"\toprule",
        r"\textbf{Method} & "
        + " & ".join(rf"\textbf{{{escape(v)}}}" for v in benchmark_labels.values())
        + r" & \textbf{Average} \\",
        r"\midrule",
    ]
    for row in table.to_dict("records"):
        cells = [escape(row["label"])]
        cells += [_cell(row[f"{b}_mean"], row[f"{b}_std"], True) for b in benchmark_labels]
        cells.append(f"{row['average']:.2f}")
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def plot_checkpoint_curves(
    curves: pd.DataFrame, selected: pd.DataFrame, method_labels: Mapping[str, str], title: str
):
    """``curves``: method, seed, step, mean_over_benchmarks; ``selected``: method, seed, step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    for m_index, (method, per_method) in enumerate(curves.groupby("method", sort=False)):
        for s_index, (seed, run) in enumerate(per_method.groupby("seed")):
            run = run.sort_values("step")
            ax.plot(
                run["step"],
                run["mean_over_benchmarks"],
                color=colors[m_index % len(colors)],
                linestyle=styles[s_index % len(styles)],
                marker="o",
                markersize=3,
                label=f"{method_labels[method]} (seed {seed})",
            )
            pick = selected[(selected["method"] == method) & (selected["seed"] == seed)]
            for step in pick["step"]:
                value = run.loc[run["step"] == step, "mean_over_benchmarks"]
                ax.scatter(
                    [step], value, s=90, facecolors="none", edgecolors=colors[m_index % len(colors)]
                )
    ax.set_xlabel("training step (0 = base model)")
    ax.set_ylabel("mean Avg@k over benchmarks (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def future_divergence(traces: pd.DataFrame) -> pd.DataFrame:
    """Per token: the local signal D_t = r_t and the mean future divergence of its rollout,
    ``D_bar_{>t}`` = mean of r over the later tokens (paper Fig. "Motivation", panel a).

    ``traces`` are ``token_traces.parquet`` rows (step, rollout, position, r, ...) of one or more
    runs; a rollout is identified by (run, step, rollout). The last token of each rollout has no
    future and is dropped.
    """
    keys = [c for c in ("run", "step", "rollout") if c in traces.columns]
    frame = traces.sort_values([*keys, "position"]).copy()
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
        # Spearman = Pearson of the ranks (average ranks for ties), without scipy.
        "spearman": float(frame["r"].rank().corr(frame["future_mean_r"].rank())),
    }


def plot_divergence_association(frame: pd.DataFrame, stats: Mapping[str, float], title: str):
    """Scatter of D_t against the mean future divergence (at most 2,500 points, as the paper)."""
    import matplotlib

    matplotlib.use("Agg")
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
