"""The studies' figures: contrasts with their intervals (a forest plot), and a per-arm panel.

One row per (contrast, cell) with its mean and 95 % interval, the endpoint's rows apart from the
cells', zero and the equivalence band drawn; written with ``io.save_figure``, so the same record
draws the same bytes and a page's ``--check`` can compare them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    return plt


def forest_plot(rows: Sequence[Mapping], path: Path, title: str, margin: float | None = None,
                xlabel: str = "difference (points)") -> None:  # fmt: skip
    """``rows`` (label, difference, low, high; ``emphasis`` for the endpoint's rows) as a forest
    plot at ``path`` (PNG), top to bottom in their order."""
    from dashrepro.io import save_figure

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 0.9 + 0.32 * len(rows)))
    ys = list(range(len(rows)))[::-1]
    for y, row in zip(ys, rows, strict=True):
        bold = row.get("emphasis", False)
        low, high = row["low"], row["high"]
        if math.isfinite(low) and math.isfinite(high):
            ax.plot([low, high], [y, y], color="black" if bold else "0.35", lw=2.2 if bold else 1.2)
        ax.plot(row["difference"], y, "D" if bold else "o", color="black" if bold else "0.35",
                ms=6 if bold else 4)  # fmt: skip
    ax.axvline(0.0, color="0.5", lw=0.8)
    if margin:
        ax.axvspan(-margin, margin, color="0.85", zorder=0, label=f"±{margin:g} (equivalence)")
        ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.set_yticks(ys, [row["label"] for row in rows], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, {"png": path})
    plt.close(fig)


def arm_panels(values: Mapping[str, Mapping[str, tuple[float, float, float]]], path: Path,
               title: str) -> None:  # fmt: skip
    """One panel per diagnostic (``values``: diagnostic -> arm -> mean, low, high over seeds),
    the arms on each panel's vertical axis."""
    from dashrepro.io import save_figure

    names = list(values)
    arms = list(next(iter(values.values()))) if names else []
    plt = _pyplot()
    fig, axes = plt.subplots(1, max(1, len(names)), sharey=True,
                             figsize=(2.4 * max(1, len(names)), 0.8 + 0.3 * len(arms)))  # fmt: skip
    axes = [axes] if len(names) <= 1 else list(axes)
    ys = list(range(len(arms)))[::-1]
    for ax, name in zip(axes, names, strict=False):
        for y, arm in zip(ys, arms, strict=True):
            mean, low, high = values[name][arm]
            if math.isfinite(low) and math.isfinite(high):
                ax.plot([low, high], [y, y], color="0.35", lw=1.2)
            ax.plot(mean, y, "o", color="black", ms=4)
        ax.set_title(name, fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(ys, arms, fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, {"png": path})
    plt.close(fig)
