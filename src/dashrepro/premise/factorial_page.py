"""The factorial study's report, written from its files: a record (JSON), a page and two figures.

The registration (``docs/factorial-pilot.json``, from ``premise.factorial_pilot``) fixes the
cells, the read step, κ, the arms and the seeds; this reads each arm's Avg@k at every evaluated
checkpoint of the study's scale, and the runs' per-step diagnostics (``train_metrics.parquet``),
and applies ``premise.factorial``'s tests as registered, whichever way they fall.

    python -m dashrepro.premise.factorial_page task_families
    python -m dashrepro.premise.factorial_page task_families --check   # the committed files
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dashrepro import layout
from dashrepro.analysis.run_facts import job_seconds_by_rule
from dashrepro.io import read_json, read_parquet, sha256_file
from dashrepro.premise import factorial
from dashrepro.premise.checks import write_or_check
from dashrepro.premise.factorial_pilot import RECORD as REGISTRATION
from dashrepro.premise.factorial_pilot import STUDY_SCALE
from dashrepro.premise.pilot import checkpoint_scores

RECORD = Path("docs") / "factorial-study-results.json"
PAGE = Path("docs") / "factorial-study-results.md"
#: The per-step diagnostics the page shows per arm (means over a run's steps, then over seeds).
DIAGNOSTICS = ("gate_high_share", "gate_low_share", "weight_top3_share", "weight_third_3",
               "effective_rollouts", "update_norm")  # fmt: skip


def arm_scores(experiment: str, arms: Mapping[str, str], seeds: list[int], directory: Path):
    """Every arm's Avg@k at every evaluated checkpoint of the study's scale, for the registered
    seeds, and the summary files read (a registered seed an arm lacks is an error naming it)."""
    parts = []
    for method in dict.fromkeys(arms.values()):
        scores = checkpoint_scores(experiment, method, STUDY_SCALE, directory)
        scores = scores[scores["seed"].isin(seeds)]
        absent = sorted(set(seeds) - set(scores["seed"]))
        if absent:
            raise FileNotFoundError(f"{method!r} has no evaluated checkpoint for seeds {absent}")
        parts.append(scores)
    return pd.concat(parts, ignore_index=True)


def diagnostics(experiment: str, arms: Mapping[str, str], seeds: list[int], directory: Path):
    """Each arm's diagnostics: per run the mean over its steps, then mean and 95 % interval over
    seeds; the files read."""
    results, values, read = layout.Results(experiment), {}, []
    for method in dict.fromkeys(arms.values()):
        runs = []
        for seed in seeds:
            path = directory / results.run_file(layout.TRAIN_METRICS, method, STUDY_SCALE, seed)
            read.append(path)
            frame = read_parquet(path)
            runs.append({name: float(frame[name].mean()) if name in frame else float("nan")
                         for name in DIAGNOSTICS})  # fmt: skip
        runs_frame = pd.DataFrame(runs)
        values[method] = {name: factorial.summary_interval(runs_frame[name].dropna())
                          if runs_frame[name].notna().sum() > 1 else (float("nan"),) * 3
                          for name in DIAGNOSTICS}  # fmt: skip
    return values, read


def machines(experiment: str, arms: Mapping[str, str], seeds: list[int], step: int,
             directory: Path) -> tuple[str, list[Path]]:  # fmt: skip
    """The CPUs and kernel paths the study's runs were trained on, from their adapters'
    provenance records (``numerics``): where the numbers were measured; the records read."""
    results, found, read = layout.Results(experiment), set(), []
    for method in dict.fromkeys(arms.values()):
        for seed in seeds:
            adapter = directory / results.adapter(method, STUDY_SCALE, seed, step)
            path = Path(f"{adapter}.provenance.json")
            read.append(path)
            record = read_json(path)
            numerics = record.get("numerics") or {}
            found.add(f"{numerics.get('cpu')} ({numerics.get('aten_cpu_capability')} kernels, "
                      f"{record.get('threads')} thread(s) a job)")  # fmt: skip
    return "; ".join(sorted(found)), read


def study_record(experiment: str, registration: Mapping, directory: Path) -> dict:
    """Every number of the report, as registered."""
    arms, cells = registration["arms"], registration["cells"]
    seeds, step = registration["study_seeds"], registration["schedule"]["step"]
    scores = arm_scores(experiment, arms, seeds, directory)
    frame = factorial.endpoints(scores, cells)
    factorial_arms = {role: arms[role] for role in factorial.FACTORIAL}
    wide = factorial.endpoint_table(frame, list(dict.fromkeys(arms.values())), step)
    best = factorial.endpoint_table(factorial.best_checkpoint_endpoints(frame),
                                    list(dict.fromkeys(arms.values())), 0)  # fmt: skip
    results = layout.Results(experiment)
    base_path = directory / results.base_eval_file(layout.BASE_ACCURACY, "tiny")
    base = read_json(base_path)["student"]["benchmarks"]
    base_endpoint = sum(float(base[c]["avg_at_k"]) for c in cells) / len(cells)
    clipped = float(wide[arms["clipped_opsd"]].mean())
    clip_learns = clipped >= base_endpoint + factorial.LEARNED_ABOVE
    secondary = {"scale": factorial.scale_equivalence(wide, factorial_arms),
                 "best_checkpoint": factorial.coprimary_tests(best, factorial_arms)}  # fmt: skip
    extra = {"repeat - opsd": (arms["repeat"], arms["opsd"])}
    if clip_learns:
        extra["clipped_dash - clipped_opsd"] = (arms["clipped_dash"], arms["clipped_opsd"])
    for name, (a, b) in extra.items():
        mean, low, high = factorial.summary_interval(wide[a] - wide[b])
        secondary[name] = {"contrast": name, "difference": mean, "low": low, "high": high}
    diag, diag_files = diagnostics(experiment, arms, seeds, directory)
    timings = job_seconds_by_rule(directory / results.root)
    read = sorted({str(p) for p in scores["summary_file"]}) + [str(base_path)]
    read += [str(p) for p in diag_files]
    machine, records = machines(experiment, arms, seeds, step, directory)
    read += [str(p) for p in records]
    return {
        "experiment": experiment,
        "step": step,
        "seeds": seeds,
        "cells": cells,
        "arms": arms,
        "kappa": registration["kappa"]["kappa"],
        "base_endpoint": base_endpoint,
        "endpoint_means": {m: float(wide[m].mean()) for m in wide.columns},
        "means_by_step": {m: {int(s): float(v) for s, v in block.groupby("step")["endpoint"]
                              .mean().items()} for m, block in frame.groupby("method")},  # fmt: skip
        "coprimary": factorial.coprimary_tests(wide, factorial_arms),
        "secondary": secondary,
        "clip_learns": clip_learns,
        "cells_contrasts": factorial.cell_contrasts(
            scores[scores["step"] == step], factorial_arms, cells
        ),
        "diagnostics": diag,
        "machine": machine,
        "cost": {"job_seconds": sum(s for _, s in timings.values()),
                 "by_rule": {rule: list(v) for rule, v in sorted(timings.items())}},  # fmt: skip
        "registration_sha256": registration.get("sha256"),
        "inputs": {str(Path(p).relative_to(directory)): sha256_file(p) for p in read},
    }


def _n(value: float, digits: int = 2) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def forest_rows(record: Mapping) -> list[dict]:
    """The endpoint's contrasts (emphasised), then each contrast per cell."""
    rows = [{"label": f"{row['contrast']} (endpoint)", "difference": row["difference"],
             "low": row["low"], "high": row["high"], "emphasis": True}
            for row in [*record["coprimary"], record["secondary"]["scale"]]]  # fmt: skip
    rows += [{"label": f"{row['contrast']}: {row['cell']}", "difference": row["difference"],
              "low": row["low"], "high": row["high"]} for row in record["cells_contrasts"]]  # fmt: skip
    return rows


def figures(record: Mapping) -> tuple[bytes, bytes]:
    """The forest plot and the diagnostics per arm, as the page's figure files hold them."""
    from dashrepro.premise.forest import arm_panels, forest_plot

    with tempfile.TemporaryDirectory() as folder:
        forest, arms = Path(folder) / "forest.png", Path(folder) / "arms.png"
        forest_plot(forest_rows(record), forest, f"Contrasts at step {record['step']} "
                    f"({len(record['seeds'])} seeds, 95 % intervals; scale: 90 %)",
                    margin=factorial.SCALE_MARGIN)  # fmt: skip
        by_name = {name: {m: tuple(v[name]) for m, v in record["diagnostics"].items()}
                   for name in DIAGNOSTICS}  # fmt: skip
        arm_panels(by_name, arms, "Diagnostics per arm (mean over steps; 95 % over seeds)")
        return forest.read_bytes(), arms.read_bytes()


def page_text(record: Mapping, record_name: str, forest: str, arms: str) -> str:
    """The page: verdicts first, then the figures and the tables behind them."""
    lines = ["# The factorial study: results", "",
             f"Written by `python -m dashrepro.premise.factorial_page {record['experiment']}` "
             f"from the files its record (`{record_name}`) names, with their sha256; the "
             "analysis is the [pre-registration](factorial-study.md)'s.", "",
             f"Cells {', '.join(f'`{c}`' for c in record['cells'])}; every arm at step "
             f"{record['step']}, seeds {record['seeds']}, κ = {record['kappa']:g}. The endpoint is "
             f"the mean Avg@k over the cells (the base student: {_n(record['base_endpoint'])}).",
             "", "## Co-primary (one-sided, Holm over the two)", "",
             "| contrast | seeds | difference | 95 % interval | p | p (Holm) | verdict |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in record["coprimary"]:
        lines.append(f"| {row['contrast']} | {row['n_seeds']} | {_n(row['difference'])} | "
                     f"[{_n(row['low'])}, {_n(row['high'])}] | {_n(row['p'], 3)} | "
                     f"{_n(row['p_holm'], 3)} | **{row['verdict']}** |")  # fmt: skip
    scale = record["secondary"]["scale"]
    lines += ["", f"![Contrasts]({forest})", "", "## Secondary", "",
              f"- The scale effect: {_n(scale['difference'])} points, 90 % interval "
              f"[{_n(scale['low'])}, {_n(scale['high'])}] against ±{scale['margin']:g}: "
              f"**{scale['verdict']}**."]  # fmt: skip
    for row in record["secondary"]["best_checkpoint"]:
        lines.append(f"- The paper's selection (each run at its best checkpoint), "
                     f"{row['contrast']}: {_n(row['difference'])} [{_n(row['low'])}, "
                     f"{_n(row['high'])}], Holm p {_n(row['p_holm'], 3)}.")  # fmt: skip
    for name in ("repeat - opsd", "clipped_dash - clipped_opsd"):
        if name in record["secondary"]:
            row = record["secondary"][name]
            lines.append(f"- {name}: {_n(row['difference'])} [{_n(row['low'])}, "
                         f"{_n(row['high'])}] (95 %, descriptive).")  # fmt: skip
    if not record["clip_learns"]:
        lines.append("- OPSD at τ = 0.05 did not beat the base student by "
                     f"{factorial.LEARNED_ABOVE:g} points, so DASH at τ = 0.05 is not compared.")
    lines += ["", "## Mean endpoint by arm and step", "",
              "| arm | " + " | ".join(f"step {s}" for s in sorted(
                  {int(s) for c in record["means_by_step"].values() for s in c})) + " |"]  # fmt: skip
    steps = sorted({int(s) for c in record["means_by_step"].values() for s in c})
    lines.append("|---" * (len(steps) + 1) + "|")
    for arm, curve in record["means_by_step"].items():
        cells = [_n(curve.get(str(s), curve.get(s, float("nan")))) for s in steps]
        lines.append(f"| `{arm}` | " + " | ".join(cells) + " |")
    lines += ["", "## Where the weight goes and how the gates sit, per arm", "",
              f"![Diagnostics per arm]({arms})", "",
              "| arm | " + " | ".join(f"`{d}`" for d in DIAGNOSTICS) + " |",
              "|---" * (len(DIAGNOSTICS) + 1) + "|"]  # fmt: skip
    for arm, values in record["diagnostics"].items():
        lines.append(f"| `{arm}` | " + " | ".join(_n(values[d][0], 3) for d in DIAGNOSTICS) + " |")
    cost = record["cost"]
    lines += ["", f"Measured on {record['machine']}, 2 cores.", "",
              f"Cost: {cost['job_seconds']:,.0f} job-seconds in the experiment, by rule: "
              + ", ".join(f"`{r}` {n} × {s:,.0f} s" for r, (n, s) in cost["by_rule"].items())
              + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("--directory", type=Path, default=Path("."))
    parser.add_argument("--registration", type=Path, default=REGISTRATION)
    parser.add_argument("--record", type=Path, default=RECORD)
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--check", action="store_true",
                        help="compare the committed record, page and figures with the inputs")  # fmt: skip
    args = parser.parse_args(argv)
    forest = args.page.parent / "assets" / f"{args.page.stem}-forest.png"
    arms = args.page.parent / "assets" / f"{args.page.stem}-arms.png"

    def derived(record: dict) -> dict[Path, str | bytes]:
        forest_png, arms_png = figures(record)
        text = page_text(record, args.record.name, f"assets/{forest.name}", f"assets/{arms.name}")
        return {args.page: text, forest: forest_png, arms: arms_png}

    def compute() -> dict:
        registration = json.loads(args.registration.read_text())
        registration["sha256"] = sha256_file(args.registration)
        return study_record(args.experiment, registration, args.directory)

    return write_or_check(args.record, compute, derived, args.check)


if __name__ == "__main__":
    raise SystemExit(main())
