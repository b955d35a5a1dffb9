"""Cells and LaTeX escaping shared by the table kinds."""

from __future__ import annotations

import math


def mean_std_cell(mean: float, std: float, latex: bool) -> str:
    """``12.34 ± 0.56`` (``$\\pm$`` in LaTeX); the mean alone when the std is undefined."""
    if math.isnan(std):
        return f"{mean:.2f}"
    return f"{mean:.2f} $\\pm$ {std:.2f}" if latex else f"{mean:.2f} ± {std:.2f}"


def escape_latex(text: str) -> str:
    return text.replace("&", r"\&").replace("%", r"\%").replace("_", r"\_")
