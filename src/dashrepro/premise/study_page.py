"""The premise study's report, written from its files: a record (JSON), a page and its figure.

The registration (``docs/premise-pilot.json``, from ``premise.pilot``) fixes what is read: each
method's Avg@k at the registered step and seeds, each cell's premise statistics from the probe,
the experiment's job timings. The tests are ``premise.study``'s, as registered. The record keeps
every input's sha256; the page gives the cells' statistics, a forest plot of the differences,
their intervals and verdicts, the cells at chance, the false alarms and the secondary
association, whichever way they fall. ``--check``: ``premise.checks``.

    python -m dashrepro.premise.study_page task_families
    python -m dashrepro.premise.study_page task_families --check   # the committed files
    python -m dashrepro.premise.study_page task_families --from-record   # page from the record
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dashrepro import layout
from dashrepro.analysis.run_facts import job_seconds_by_rule
from dashrepro.io import read_csv, sha256_file
from dashrepro.premise.checks import check_or_write, write_or_check
from dashrepro.premise.pilot import PAPER_KAPPA, checkpoint_scores
from dashrepro.premise.study import cell_tests, premise_association

#: Where the registration, the study's record and its page live in the repository.
REGISTRATION = Path("docs") / "premise-pilot.json"
RECORD = Path("docs") / "premise-study-results.json"
PAGE = Path("docs") / "premise-study-results.md"
#: Chance on the families (a one-digit answer), and how near it a cell is at the floor (points).
CHANCE, FLOOR_WITHIN = 10.0, 5.0
#: The premise statistics the secondary analysis sets against DASH - OPSD, across cells.
SECONDARY = ("spearman_D_reward_range", "weight_departure", "spearman_within_excess")
#: The cells' premise statistics the page shows.
CELL_STATISTICS = ("mean_reward", "gate_iqr", "gate_mid_share", "weight_departure",
                   "spearman_within_excess", "spearman_within_p", "spearman_D_reward_range",
                   "spearman_D_future_range")  # fmt: skip


def study_methods(registration: Mapping) -> dict[str, str]:
    """The study's methods by role: the control, DASH, the fixed-λ control and, where the
    probe moved κ, DASH at that κ."""
    methods = {"control": registration["method"], "dash": "dash",
               "fixed": f"fixed_lambda_{layout.value_name(registration['fixed_lambda'])}"}  # fmt: skip
    if registration.get("kappa", PAPER_KAPPA) != PAPER_KAPPA:
        methods["dash_kappa"] = f"dash_k{layout.value_name(registration['kappa'])}"
    return methods


def cell_statistics(statistics: pd.DataFrame, cells: list[str]) -> pd.DataFrame:
    """Each cell's premise statistics (the probe's rows by task), with the within-rollout
    association less its permutation null (``spearman_within_excess``)."""
    missing = sorted(set(cells) - set(statistics["probe"]))
    if missing:
        raise ValueError(f"the probe's statistics have no row for cells {missing}")
    frame = statistics.set_index("probe").loc[cells].apply(pd.to_numeric)
    frame["spearman_within_excess"] = frame["spearman_within"] - frame["spearman_within_null"]
    return frame[list(CELL_STATISTICS)]


def study_record(experiment: str, registration: Mapping, directory: Path, scale: str = "tiny",
                 margin: float = 2.0) -> dict:  # fmt: skip
    """Every number of the report, from the runs' files at the registered step and seeds."""
    methods, step = study_methods(registration), registration["step"]
    seeds, results = registration["study_seeds"], layout.Results(experiment)
    parts, inputs, by_step = [], {}, {}
    for method in dict.fromkeys(methods.values()):
        every = checkpoint_scores(experiment, method, scale, directory)
        every = every[every["seed"].isin(seeds)]
        by_step[method] = {int(s): float(v) for s, v in every.groupby("step")["score"].mean().items()}
        scores = every[every["step"] == step]
        absent = sorted(set(seeds) - set(scores["seed"]))
        if absent:
            raise FileNotFoundError(f"{method!r} has no evaluated step {step} for seeds {absent}")
        parts.append(scores)
        for seed in seeds:
            path = directory / results.checkpoint_file(layout.SUMMARY, method, scale, seed, step)
            inputs[str(path.relative_to(directory))] = sha256_file(path)
    moved = [name for name, digest in (registration.get("inputs") or {}).items()
             if name in inputs and inputs[name] != digest]  # fmt: skip
    if moved:
        raise ValueError(f"files the registration pins have changed since it was written: {moved}")
    scores = pd.concat(parts, ignore_index=True)
    cells = list(dict.fromkeys(scores["cell"]))
    statistics_path = directory / results.premise_file(f"{layout.PREMISE_STATISTICS}.csv", scale)
    inputs[str(statistics_path.relative_to(directory))] = sha256_file(statistics_path)
    statistics = cell_statistics(read_csv(statistics_path, required=["probe"]), cells)
    comparisons = {f"{methods['dash']} - {methods['control']}": ("dash", "control"),
                   f"{methods['dash']} - {methods['fixed']}": ("dash", "fixed")}  # fmt: skip
    if "dash_kappa" in methods:
        comparisons[f"{methods['dash_kappa']} - {methods['control']}"] = ("dash_kappa", "control")
    tests = {name: cell_tests(scores, methods[a], methods[b], margin).to_dict("records")
             for name, (a, b) in comparisons.items()}  # fmt: skip
    primary = {row["cell"]: row["difference"] for row in next(iter(tests.values()))}
    timings = job_seconds_by_rule(directory / results.root)
    return {
        "experiment": experiment,
        "scale": scale,
        "step": step,
        "seeds": seeds,
        "margin": margin,
        "methods": methods,
        "means": scores.groupby(["method", "cell"])["score"].mean().unstack().to_dict("index"),
        "means_by_step": by_step,
        "statistics": statistics.to_dict("index"),
        "tests": tests,
        "secondary": {
            name: premise_association(primary, statistics[name].to_dict()) for name in SECONDARY
        },  # fmt: skip
        "false_alarms": registration["false_alarms"],
        "cost": {
            "job_seconds": sum(s for _, s in timings.values()),
            "by_rule": {rule: list(value) for rule, value in sorted(timings.items())},
        },  # fmt: skip
        "registration_sha256": registration.get("sha256"),
        "inputs": inputs,
    }


def _number(value: float, digits: int = 2) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def study_markdown(record: Mapping) -> str:
    """The report's body: the cells' statistics, the tests, the secondary, the cost."""
    cells = list(record["statistics"])
    methods = record["methods"]
    lines = [f"Experiment `{record['experiment']}`, scale `{record['scale']}`, every method at "
             f"step {record['step']}, seeds {record['seeds']} (paired by seed). Avg@k in "
             "points; intervals are 95 % t intervals over seeds; p-values are Holm-adjusted "
             f"across the {len(cells)} cells; equivalence is two one-sided tests at "
             f"±{record['margin']:g} points.", "", "### Each cell's premise statistics", "",
             "| statistic | " + " | ".join(f"`{c}`" for c in cells) + " |",
             "|---" * (len(cells) + 1) + "|"]  # fmt: skip
    for name in CELL_STATISTICS:
        values = [_number(record["statistics"][c][name], 3) for c in cells]
        lines.append(f"| `{name}` | " + " | ".join(values) + " |")
    lines += ["", "### Mean Avg@k by method", "",
              "| method | " + " | ".join(f"`{c}`" for c in cells) + " |",
              "|---" * (len(cells) + 1) + "|"]  # fmt: skip
    for method in dict.fromkeys(methods.values()):
        values = [_number(record["means"][method][c]) for c in cells]
        lines.append(f"| `{method}` | " + " | ".join(values) + " |")
    for name, rows in record["tests"].items():
        lines += ["", f"### {name}", "",
                  "| cell | seeds | difference | 95 % interval | p (Holm) | equivalence p (Holm) "
                  "| verdict |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for row in rows:
            lines.append(
                f"| `{row['cell']}` | {row['n_seeds']} | {_number(row['difference'])} | "
                f"[{_number(row['low'])}, {_number(row['high'])}] | {_number(row['p_holm'], 3)} "
                f"| {_number(row['p_equivalence_holm'], 3)} | **{row['verdict']}** |"
            )
    lines += ["", "### Secondary: DASH − OPSD against the premise, across cells (descriptive)",
              "", "| premise statistic | cells | Spearman |", "|---|---|---|"]  # fmt: skip
    for name, value in record["secondary"].items():
        lines.append(f"| `{name}` | {value['n_cells']} | {_number(value['spearman'])} |")
    cost = record["cost"]
    lines += ["", f"False alarms in the pilot (two halves of `{methods['control']}`'s seeds, "
              f"tested as above): {record['false_alarms']} of {len(cells)} cells.", "",
              f"Cost: {cost['job_seconds']:,.0f} job-seconds in all (the experiment's every "
              "job: warm start, probe, pilot and study), by rule: "
              + ", ".join(f"`{rule}` {n} × {s:,.0f} s" for rule, (n, s) in cost["by_rule"].items())
              + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def floor_cells(record: Mapping, chance: float = CHANCE, within: float = FLOOR_WITHIN) -> list:
    """The cells where every method's mean lies within ``within`` points of chance: a difference
    there says nothing about a method (nothing was learned to lose or gain)."""
    means = record["means"]
    return [cell for cell in record["statistics"]
            if all(abs(means[m][cell] - chance) <= within for m in means)]  # fmt: skip


def forest_rows(record: Mapping) -> list[dict]:
    """The forest plot's rows: each comparison in each cell."""
    return [{"label": f"{name}: {row['cell']}", "difference": row["difference"],
             "low": row["low"], "high": row["high"]}
            for name, rows in record["tests"].items() for row in rows]  # fmt: skip


def figure_bytes(record: Mapping) -> bytes:
    """The forest plot of ``record``, as the page's figure file holds it."""
    import tempfile

    from dashrepro.premise.forest import forest_plot

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "forest.png"
        forest_plot(forest_rows(record), path, f"Each comparison per cell at step "
                    f"{record['step']} (95 % t intervals over {len(record['seeds'])} seeds)",
                    margin=record["margin"])  # fmt: skip
        return path.read_bytes()


def page_text(record: Mapping, record_name: str, figure: str) -> str:
    """The whole page: where it comes from, the forest plot, the caveats, the tables."""
    floor = floor_cells(record)
    lines = ["# The premise study: results", "",
             "Written by `python -m dashrepro.premise.study_page "
             f"{record['experiment']}` from the files its record (`{record_name}`) names, with "
             "their sha256; the analysis is the [pre-registration](premise-study.md)'s, and what "
             "it did not test is listed there (Deviations).", "",
             f"![Each comparison per cell]({figure})", ""]  # fmt: skip
    if floor:
        lines += [f"At chance: in {', '.join(f'`{c}`' for c in floor)} every method's mean is "
                  f"within {FLOOR_WITHIN:g} points of chance ({CHANCE:g} %), so a difference "
                  "there is a floor effect, not evidence about a method.", ""]  # fmt: skip
    by_step = record.get("means_by_step")
    if by_step:
        steps = sorted({int(s) for curve in by_step.values() for s in curve})
        lines += ["### Mean Avg@k over cells at every evaluated step", "",
                  "| method | " + " | ".join(f"step {s}" for s in steps) + " |",
                  "|---" * (len(steps) + 1) + "|"]  # fmt: skip
        for method, curve in by_step.items():
            values = [_number(curve.get(str(s), curve.get(s))) for s in steps]
            lines.append(f"| `{method}` | " + " | ".join(values) + " |")
        lines.append("")
    return "\n".join(lines) + "\n" + study_markdown(record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--directory", type=Path, default=Path("."))
    parser.add_argument("--registration", type=Path, default=REGISTRATION)
    parser.add_argument("--record", type=Path, default=RECORD)
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--check", action="store_true",
                        help="compare the committed record, page and figure with the inputs")  # fmt: skip
    parser.add_argument("--from-record", action="store_true",
                        help="write the page and figure from the committed record alone")  # fmt: skip
    args = parser.parse_args(argv)
    figure = args.page.parent / "assets" / f"{args.page.stem}-forest.png"
    relative = f"assets/{figure.name}"

    def derived(record: dict) -> dict[Path, str | bytes]:
        return {args.page: page_text(record, args.record.name, relative),
                figure: figure_bytes(record)}

    if args.from_record:
        return check_or_write(derived(json.loads(args.record.read_text())), check=False)
    def compute() -> dict:
        registration = json.loads(args.registration.read_text())
        registration["sha256"] = sha256_file(args.registration)
        return study_record(args.experiment, registration, args.directory, args.scale)

    return write_or_check(args.record, compute, derived, args.check)


if __name__ == "__main__":
    raise SystemExit(main())
