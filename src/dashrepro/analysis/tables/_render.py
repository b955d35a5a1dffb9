r"""What the table kinds share: the cell records, rank shading, and the score-table renderer.

Every table kind builds *cells*, one record per number shown (``CELL_COLUMNS``), from our
results or from the paper's published numbers, and one renderer turns cells into Markdown and
LaTeX, so the published tables and ours are drawn by the same code; a table's CSV is its cells.
Rank shading marks the top three distinct displayed values of each (scale, column)
(``\firstscore{}`` ... in LaTeX, bold / underline / italic in Markdown); a published table
carries the paper's printed ranks instead (docs/tables.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from dashrepro.analysis.tables import EXTERNAL_SOURCES

CELL_COLUMNS = (
    "table",
    "row",
    "label",
    "scale",
    "column",
    "value",
    "std",
    "n_seeds",
    "seeds",
    "selected_steps",
    "source",
)


RANK_LATEX = {1: r"\firstscore", 2: r"\secondscore", 3: r"\thirdscore"}
RANK_MACROS = (
    r"\providecommand{\firstscore}[1]{\textbf{#1}}",
    r"\providecommand{\secondscore}[1]{\underline{#1}}",
    r"\providecommand{\thirdscore}[1]{\textit{#1}}",
)


def mean_std_cell(mean: float, std: float, latex: bool) -> str:
    """``12.34 ± 0.56`` (``$\\pm$`` in LaTeX); the mean alone when the std is undefined."""
    if math.isnan(std):
        return f"{mean:.2f}"
    return f"{mean:.2f} $\\pm$ {std:.2f}" if latex else f"{mean:.2f} ± {std:.2f}"


def escape_latex(text: str) -> str:
    return text.replace("&", r"\&").replace("%", r"\%").replace("_", r"\_")


def cells_frame(records: Sequence[Mapping]) -> pd.DataFrame:
    """Cell records as a frame with every column of ``CELL_COLUMNS``, in that order."""
    frame = pd.DataFrame(list(records), columns=list(CELL_COLUMNS))
    frame["value"] = frame["value"].astype(float)
    frame["std"] = frame["std"].astype(float)
    return frame


def ranks(values: Sequence[float], top: int = 3) -> list[int | None]:
    """Rank 1..``top`` of each value among the distinct values as displayed (two decimals),
    highest first; ties share a rank; the rest and NaN get None."""
    shown = [None if math.isnan(v) else round(v, 2) for v in values]
    distinct = sorted({v for v in shown if v is not None}, reverse=True)[:top]
    return [None if v is None or v not in distinct else distinct.index(v) + 1 for v in shown]


def shade(cells: pd.DataFrame, mode: str) -> pd.Series:
    """Each cell's rank per (scale, column): ``rank`` (top three), ``best`` (top one) or
    ``none``."""
    result = pd.Series([None] * len(cells), index=cells.index, dtype=object)
    if mode == "none":
        return result
    top = 3 if mode == "rank" else 1
    for _, group in cells.groupby(["scale", "column"], sort=False):
        for index, rank in zip(group.index, ranks(list(group["value"]), top), strict=True):
            result[index] = rank
    return result


def cell_ranks(cells: pd.DataFrame, mode: str) -> pd.Series:
    """The rank each cell is marked with: the paper's printed rank where the cells carry one (a
    published table, ``published_cells(..., printed_rank=True)``), else ``shade(cells, mode)``."""
    if "rank" in cells.columns:
        return cells["rank"].map(lambda r: None if pd.isna(r) else int(r)).astype(object)
    return shade(cells, mode)


def _count(value) -> str:
    return "" if value is None or pd.isna(value) else str(int(value))


def _marked(text: str, rank, latex: bool) -> str:
    if rank is None or (isinstance(rank, float) and math.isnan(rank)):
        return text
    rank = int(rank)
    if latex:
        return f"{RANK_LATEX[rank]}{{{text}}}"
    return {1: f"**{text}**", 2: f"<ins>{text}</ins>", 3: f"*{text}*"}[rank]


def _latex_head(
    scales: Sequence[str], columns: Mapping[str, str], scale_labels: Mapping[str, str], width: int
) -> list[str]:
    """The LaTeX table's opening lines down to its header row (a spanning row of scale names
    when there are several)."""
    tex = [*RANK_MACROS, r"\begin{table}[t]", r"\centering", r"\small"]
    tex.append(r"\begin{tabular}{@{}l" + "c" * (width - 1) + "@{}}")
    tex.append(r"\toprule")
    if len(scales) > 1:
        spans, rules = [], []
        for i, scale in enumerate(scales):
            first = 2 + i * len(columns)
            spans.append(
                rf"\multicolumn{{{len(columns)}}}{{c}}{{\textbf{{{escape_latex(scale_labels.get(scale, scale))}}}}}"
            )
            rules.append(rf"\cmidrule(lr){{{first}-{first + len(columns) - 1}}}")
        tex.append("& " + " & ".join(spans) + r" \\")
        tex.append(" ".join(rules))
    tex.append(
        r"\textbf{Method} & "
        + " & ".join(rf"\textbf{{{escape_latex(c)}}}" for _ in scales for c in columns.values())
        + r" \\"
    )
    return tex


def score_table(
    cells: pd.DataFrame,
    *,
    sections: Sequence[tuple[str | None, Sequence[str]]],
    scales: Sequence[str],
    columns: Mapping[str, str],
    scale_labels: Mapping[str, str],
    shading: str,
    caption: str,
    show_seeds: bool = True,
) -> dict[str, str]:
    """Markdown and LaTeX of a rows x (scale, column) score table.

    ``sections`` are (title or None, row ids) blocks, drawn in order with a rule between them
    (a row without cells is left out); external rows (a source in ``EXTERNAL_SOURCES``) get a dagger. ``columns`` maps column id ->
    header label (e.g. the benchmarks, then ``average``)."""
    cells = cells.assign(rank=cell_ranks(cells, shading))
    by_key = {(r.row, r.scale, r.column): r for r in cells.itertuples()}
    labels = dict(zip(cells["row"], cells["label"], strict=False))
    external = {r.row for r in cells.itertuples() if r.source in EXTERNAL_SOURCES}
    n_seeds = {r.row: r.n_seeds for r in cells.itertuples() if r.column == "average"}
    several = len(scales) > 1

    def text(row: str, scale: str, column: str, latex: bool) -> str:
        cell = by_key.get((row, scale, column))
        if cell is None:
            return "--" if latex else "–"
        return _marked(mean_std_cell(cell.value, cell.std, latex), cell.rank, latex)

    def row_label(row: str, latex: bool) -> str:
        label = labels.get(row, row)
        if latex:
            return escape_latex(label) + (r"$^{\dagger}$" if row in external else "")
        return label + ("†" if row in external else "")

    seeds_column = show_seeds and not several and cells["n_seeds"].notna().any()
    header = ["Method"] + [
        (f"{scale_labels.get(s, s)} {c}" if several else c)
        for s in scales
        for c in columns.values()
    ]
    md = ["| " + " | ".join(header + (["Seeds"] if seeds_column else [])) + " |"]
    md.append("|" + "---|" * (len(header) + seeds_column))
    width = 1 + len(scales) * len(columns)
    tex = _latex_head(scales, columns, scale_labels, width)
    for title, members in sections:
        tex.append(r"\midrule")
        if title:
            md.append(f"| *{title}* |" + " |" * (len(header) - 1 + seeds_column))
            tex.append(rf"\multicolumn{{{width}}}{{@{{}}l}}{{\textit{{{escape_latex(title)}}}}} \\")
        for row in members:
            if row not in labels:
                continue
            values = [text(row, s, c, False) for s in scales for c in columns]
            seeds = [_count(n_seeds.get(row))] if seeds_column else []
            md.append("| " + " | ".join([row_label(row, False), *values, *seeds]) + " |")
            values = [text(row, s, c, True) for s in scales for c in columns]
            tex.append(" & ".join([row_label(row, True), *values]) + r" \\")
    tex += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return {"md": "\n".join(md) + "\n", "tex": "\n".join(tex) + "\n"}


def published_cells(
    published: pd.DataFrame, table: str, labels: Mapping[str, str], printed_rank: bool = False
) -> pd.DataFrame:
    """The cells of ``table`` in the paper's published numbers (``dash_paper.csv``); with
    ``printed_rank``, a last column ``rank``: the mark the paper prints on each (1-3, or None),
    which ``cell_ranks`` then uses (for a table drawn wholly from the published numbers, not for
    published rows mixed into ours)."""
    mine = published[published["table"] == table]
    if mine.empty:
        raise ValueError(f"the published numbers hold no table {table!r}")
    cells = cells_frame(
        [
            {
                "table": table,
                "row": r["row"],
                "label": labels.get(r["row"], r["row"]),
                "scale": r["scale"],
                "column": r["column"],
                "value": float(r["value"]),
                "std": float(r["std"]) if pd.notna(r["std"]) else math.nan,
                "n_seeds": None,
                "seeds": None,
                "selected_steps": None,
                "source": r["source"],
            }
            for r in mine.to_dict("records")
        ]
    )
    if printed_rank:
        cells["rank"] = [None if pd.isna(r) else int(r) for r in mine["rank"]]
    return cells
