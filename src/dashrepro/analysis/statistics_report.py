"""The statistics report and the reproduction gap of an experiment, from its graded samples.

For every cell of every scores table (kinds ``method_scores``, ``seed_statistics``), beside the
paper's number (mean over seeds of the selected checkpoint's Avg@k, ``analysis.statistics``):
the seed std, the standard error clustered by problem, the optimism of selecting the checkpoint
on the test benchmarks themselves (a bootstrap over problems and seeds that redoes the selection
in every replicate) with the interval of the re-selected value, and per benchmark the paired
difference against the reference method (OPSD) on the same problems and seeds with its
bootstrap interval; and, with a validation split (``data.validation``), the test Avg@k of the
checkpoint selected on it beside the paper's choice (``experiment_heldout``). The reproduction
gap puts every published cell beside ours, with that interval and whether the paper's value
lies inside it; a cell either side lacks is listed.

    snakemake --cores 2 results/tiny/statistics/report.md     # the rule `statistics`
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from dashrepro.analysis import per_problem as pp
from dashrepro.analysis import statistics as st
from dashrepro.analysis.registry import SCORE_KINDS
from dashrepro.analysis.tables import published_table_id

KEY = ["table", "row", "scale", "column"]
#: The reference of the lift rows: the base student (the base model, adapter off, problem only).
BASE_ROW = "base_student"


def score_pairs(tables: Mapping[str, Mapping]) -> list[tuple[str, str, str]]:
    """(table, method, scale) of every scores table's cells, in the config's order."""
    pairs = []
    for table, spec in tables.items():
        if spec["kind"] not in SCORE_KINDS:
            continue
        scales = [spec["scale"]] if isinstance(spec["scale"], str) else list(spec["scale"])
        pairs += [(table, method, scale) for scale in scales for method in spec["methods"]]
    return pairs


def experiment_statistics(
    tables: Mapping[str, Mapping],
    benchmarks: Sequence[str],
    per_problem_of: Callable[[str, str], pd.DataFrame],
    *,
    reference: str,
    n_resamples: int,
    seed: int,
    confidence: float,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cell statistics, paired differences) of every scores-table cell. ``per_problem_of(method,
    scale)`` gives a run's ``analysis.statistics`` per-problem frame (every seed and candidate
    checkpoint); each (method, scale) is computed once however many tables show it."""
    cells, paired, done = [], [], {}
    for table, method, scale in score_pairs(tables):
        if (method, scale) not in done:
            per_problem = per_problem_of(method, scale)
            stats = st.cell_statistics(per_problem, benchmarks)
            optimism = st.selection_optimism(
                per_problem, benchmarks, n_resamples=n_resamples, seed=seed,
                confidence=confidence,
            )  # fmt: skip
            extra = [c for c in optimism.columns if c not in stats.columns or c == "column"]
            done[(method, scale)] = (per_problem, stats.merge(optimism[extra], on="column"))
        per_problem, stats = done[(method, scale)]
        cells.append(stats.assign(table=table, row=method, scale=scale))
        if method == reference or reference not in tables[table]["methods"]:
            continue
        if (reference, scale) not in done:
            ref = per_problem_of(reference, scale)
            done[(reference, scale)] = (ref, None)
        ref = done[(reference, scale)][0]
        common = sorted(set(per_problem["seed"]) & set(ref["seed"]))
        if not common:
            continue
        difference = st.paired_difference(
            pp.selected_problem_accuracy(per_problem[per_problem["seed"].isin(common)], benchmarks),
            pp.selected_problem_accuracy(ref[ref["seed"].isin(common)], benchmarks),
            benchmarks, confidence=confidence, n_resamples=n_resamples, seed=seed,
        )  # fmt: skip
        paired.append(difference.assign(table=table, row=method, scale=scale, reference=reference))
    cell_frame = pd.concat(cells, ignore_index=True) if cells else pd.DataFrame(columns=KEY)
    paired_frame = pd.concat(paired, ignore_index=True) if paired else pd.DataFrame(columns=KEY)
    first = lambda frame: frame[[*KEY, *[c for c in frame.columns if c not in KEY]]]  # noqa: E731
    return first(cell_frame), first(paired_frame)


def experiment_base_lift(
    tables: Mapping[str, Mapping],
    benchmarks: Sequence[str],
    per_problem_of: Callable[[str, str], pd.DataFrame],
    base_student_of: Callable[[str], pd.DataFrame],
    *,
    n_resamples: int,
    seed: int,
    confidence: float,
) -> pd.DataFrame:
    """Every scores-table cell's paired difference against the base student it was trained
    from (``base_student_of(scale)``: the base model's per-problem accuracy on the benchmarks,
    a frame of ``analysis.per_problem.PER_PROBLEM_COLUMNS`` without seeds or steps): what
    training added, on the same problems. The base model is one fixed model, so each seed of
    the method is paired with it and the bootstrap resamples problems (and the method's seeds)."""
    rows, done = [], {}
    for table, method, scale in score_pairs(tables):
        if (method, scale) not in done:
            selected = pp.selected_problem_accuracy(per_problem_of(method, scale), benchmarks)
            base = base_student_of(scale)
            seeds = sorted(set(selected["seed"]))
            paired_base = pd.concat([base.assign(seed=s) for s in seeds], ignore_index=True)[
                list(pp.SELECTED_COLUMNS)
            ]
            done[(method, scale)] = st.paired_difference(
                selected, paired_base, benchmarks, confidence=confidence,
                n_resamples=n_resamples, seed=seed,
            )  # fmt: skip
        rows.append(
            done[(method, scale)].assign(table=table, row=method, scale=scale, reference=BASE_ROW)
        )
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=KEY)
    return frame[[*KEY, *[c for c in frame.columns if c not in KEY]]]


HELDOUT_COLUMNS = [*KEY, "best_on_test", "heldout", "difference", "steps_best_on_test",
                   "steps_heldout", "n_seeds", "validation"]  # fmt: skip


def experiment_heldout(
    tables: Mapping[str, Mapping],
    benchmarks: Sequence[str],
    per_problem_of: Callable[[str, str], pd.DataFrame],
    validation: str,
) -> pd.DataFrame:
    """Held-out selection beside the paper's, for every scores-table cell: per seed the
    checkpoint with the best Avg@k on the ``validation`` split, its test Avg@k averaged over the
    seeds (``heldout``), against the checkpoint best on the test benchmarks themselves
    (``best_on_test``, the paper's rule); ``difference`` = heldout - best_on_test, the part of
    the paper's number that selecting on the test set adds (never positive per seed). Columns
    HELDOUT_COLUMNS; the steps each rule chose, one per seed."""
    rows, done = [], {}
    for table, method, scale in score_pairs(tables):
        if (method, scale) not in done:
            per_problem = per_problem_of(method, scale)
            if validation not in set(per_problem["benchmark"]):
                raise ValueError(
                    f"{method} at {scale}: no graded samples of the validation split "
                    f"{validation!r} (evaluated before data.validation was set?)"
                )
            done[(method, scale)] = st.heldout_selection(
                pp.checkpoint_benchmark_scores(per_problem, [validation]),
                pp.checkpoint_benchmark_scores(per_problem, benchmarks),
                benchmarks,
            )
        frame = done[(method, scale)]
        rule = {name: part.set_index("column") for name, part in frame.groupby("rule")}
        for column in rule["heldout"].index:
            test, held = rule["best_on_test"].loc[column], rule["heldout"].loc[column]
            rows.append(
                {"table": table, "row": method, "scale": scale, "column": column,
                 "best_on_test": test["value"], "heldout": held["value"],
                 "difference": held["value"] - test["value"],
                 "steps_best_on_test": test["selected_steps"],
                 "steps_heldout": held["selected_steps"], "n_seeds": int(held["n_seeds"]),
                 "validation": validation}
            )  # fmt: skip
    return pd.DataFrame(rows, columns=HELDOUT_COLUMNS)


def gap_table(
    our_tables: Mapping[str, pd.DataFrame],
    tables: Mapping[str, Mapping],
    published: pd.DataFrame,
    cell_stats: pd.DataFrame,
) -> pd.DataFrame:
    """The reproduction gap over the experiment's scores tables: each of our cells under the
    published table it reproduces (option ``published_table``), the selection bootstrap's
    interval as ours."""
    renamed, names = [], {}
    for table, cells in our_tables.items():
        spec = tables[table]
        if spec["kind"] not in SCORE_KINDS:
            continue
        name = published_table_id(table, spec)
        names[table] = name
        renamed.append(cells.assign(table=name))
    ours = (
        pd.concat(renamed, ignore_index=True) if renamed else pd.DataFrame(columns=[*KEY, "value"])
    )
    intervals = cell_stats.assign(table=cell_stats["table"].map(names))[
        [*KEY, "ci_low", "ci_high"]
    ].drop_duplicates(KEY)
    return st.reproduction_gap(ours, published, intervals, tables=sorted(set(names.values())))


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def markdown_table(frame: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in frame.itertuples(index=False):
        values = row._asdict()
        lines.append("| " + " | ".join(_fmt(values[c]) for c in columns) + " |")
    return lines


def _section(title: str, text: str, frame: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    """A report section: its heading, what it shows, the table of ``frame``'s ``columns``."""
    shown = [c for c in columns if c in frame.columns]
    return ["", f"## {title}", "", text, "", *markdown_table(frame, shown)]


def report_markdown(
    experiment: str,
    cell_stats: pd.DataFrame,
    paired: pd.DataFrame,
    gap: pd.DataFrame,
    settings: Mapping,
    heldout: pd.DataFrame | None = None,
    lift: pd.DataFrame | None = None,
    changes: pd.DataFrame | None = None,
) -> str:
    """The statistics report: definitions, every cell's statistics, the paired differences,
    held-out selection beside the paper's (None: no validation split configured), and the
    reproduction gap's counts and compared cells."""
    lines = _intro_lines(experiment, settings)
    columns = [c for c in (*KEY, "value", "seed_std", "clustered_se", "optimism", "corrected",
                           "ci_low", "ci_high", "n_seeds") if c in cell_stats.columns]  # fmt: skip
    lines += markdown_table(cell_stats, columns)
    lines += ["", f"## Paired differences against {settings['reference']}", ""]
    if paired.empty:
        lines.append("No table shows the reference beside another method.")
    else:
        columns = [c for c in (*KEY, "difference", "ci_low", "ci_high", "se_clustered",
                               "excludes_zero") if c in paired.columns]  # fmt: skip
        lines += markdown_table(paired, columns)
    if lift is not None:
        lines += _section(
            "Lift over the base student",
            "Each cell minus the base student's score (the model it was trained from, evaluated "
            "on the same problems), with its paired interval: what training added.",
            lift,
            (*KEY, "method_value", "reference_value", "difference", "ci_low", "ci_high",
             "excludes_zero"),
        )  # fmt: skip
    if changes is not None:
        lines += _section(
            "Did training change the samples?",
            "Per run, at its selected checkpoint: the share of samples whose text differs from "
            "the base student's under the same seeds (NaN where the two were not drawn alike), "
            "and the other methods whose samples are the same on every problem.",
            changes,
            changes.columns,
        )
    lines += _heldout_lines(heldout)
    lines += _gap_lines(gap)
    return "\n".join(lines) + "\n"


def _intro_lines(experiment: str, settings: Mapping) -> list[str]:
    """The report's title and what its numbers are."""
    return [
        f"# Statistics of experiment {experiment}",
        "",
        "Beside each number of the tables: the seed std, the standard error clustered by problem "
        "(samples of a problem are not independent), the optimism of selecting the checkpoint on "
        "the test benchmarks (a bootstrap over problems and seeds that redoes the selection in "
        "each replicate; `corrected` = value - optimism) with the interval of the re-selected "
        f"value, and the paired difference against {settings['reference']} on the same problems "
        f"and seeds. {settings['n_resamples']} bootstrap resamples, seed {settings['seed']}, "
        f"{100 * settings['confidence']:.0f}% intervals (scipy.stats.bootstrap). Definitions: "
        "`dashrepro.analysis.statistics`.",
        "",
        "## Cells",
        "",
    ]


def _heldout_lines(heldout: pd.DataFrame | None) -> list[str]:
    """The held-out selection section (or why there is none)."""
    lines = ["", "## Held-out selection", ""]
    if heldout is None:
        lines.append(
            "No validation split is configured (`data.validation`): every checkpoint is "
            "selected on the test benchmarks, as in the paper."
        )
    else:
        lines += [
            "Per seed, the checkpoint best on the validation split (problems of the training "
            "distribution never trained on) and its test Avg@k (`heldout`), beside the "
            "checkpoint best on the test benchmarks themselves (`best_on_test`, the paper's "
            "rule); `difference` = heldout - best_on_test. Steps: one per seed.",
            "",
        ]
        lines += markdown_table(heldout, [c for c in HELDOUT_COLUMNS if c != "validation"])
    return lines


def _gap_lines(gap: pd.DataFrame) -> list[str]:
    """The reproduction gap's counts and its compared cells."""
    lines = ["", "## Reproduction gap", ""]
    counts = gap["status"].value_counts()
    lines.append(
        ", ".join(
            f"{counts.get(s, 0)} {s.replace('_', ' ')}"
            for s in ("compared", "missing_ours", "missing_published")
        )  # fmt: skip
        + " (`reproduction_gap.csv` lists every cell)."
    )
    compared = gap[gap["status"] == "compared"]
    if not compared.empty:
        inside = int(compared["paper_inside_interval"].fillna(False).sum())
        lines += [f"The paper's value lies inside our interval in {inside} of {len(compared)}.", ""]
        lines += markdown_table(
            compared, [*KEY, "ours", "published", "difference", "ci_low", "ci_high",
                       "paper_inside_interval"],
        )  # fmt: skip
    return lines


def gap_figure(gap: pd.DataFrame, experiment: str):
    """Ours against the paper's value per compared cell, our interval as an error bar; the
    title counts the cells either side lacks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    compared = gap[gap["status"] == "compared"]
    counts = gap["status"].value_counts()
    if compared.empty:
        ax.text(0.5, 0.5, "no cell of this run has a published counterpart",
                ha="center", va="center", transform=ax.transAxes)  # fmt: skip
    else:
        low = (compared["ours"] - compared["ci_low"]).clip(lower=0).fillna(0)
        high = (compared["ci_high"] - compared["ours"]).clip(lower=0).fillna(0)
        inside = compared["paper_inside_interval"].fillna(False).astype(bool)
        for mask, colour, label in ((inside, "tab:green", "paper inside our interval"),
                                    (~inside, "tab:red", "paper outside / no interval")):  # fmt: skip
            ax.errorbar(compared["published"][mask], compared["ours"][mask],
                        yerr=[low[mask], high[mask]], fmt="o", color=colour, label=label,
                        capsize=2)  # fmt: skip
        lo = float(min(compared["published"].min(), compared["ours"].min())) - 2
        hi = float(max(compared["published"].max(), compared["ours"].max())) + 2
        ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel("published (Avg@k, %)")
    ax.set_ylabel(f"ours, {experiment} (Avg@k, %)")
    ax.set_title(
        f"Reproduction gap: {counts.get('compared', 0)} compared, "
        f"{counts.get('missing_ours', 0)} missing here, {counts.get('missing_published', 0)} "
        "not in the paper",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
