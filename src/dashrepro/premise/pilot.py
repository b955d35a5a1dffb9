"""The study's OPSD-only pilot: which checkpoint the study evaluates, and how many seeds it needs.

From one method's runs (OPSD's: the pre-registration may look at it, never at DASH) of an
experiment, every checkpoint's Avg@k per cell (benchmark): the checkpoint with the highest mean
over seeds and cells is the one the study evaluates; at it, the method's seeds split in two
halves give the spread of a paired difference between runs of one method (the largest over the
cells) and the false alarms of the study's tests; ``study.seeds_for_power`` turns that spread
into the seeds that detect ``effect`` points at ``power``. From the probe's tokens come the
fixed-λ control and κ (``probe_choices``); the record names every file it read, with its sha256.

    python -m dashrepro.premise.pilot task_families --method opsd --scale tiny
    python -m dashrepro.premise.pilot task_families --out docs/premise-pilot.json \\
        --most-seeds 14 --check   # the committed record against its inputs (premise.checks)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dashrepro import layout
from dashrepro.io import read_parquet, sha256_file
from dashrepro.premise.study import (
    detectable_effect,
    false_alarms,
    fixed_lambda_from_probe,
    gate_iqr,
    kappa_for_gate_spread,
    seeds_for_power,
)

#: DASH's κ in the paper, kept unless the probe's gates show it does not fit the signal.
PAPER_KAPPA = 5.0
#: The interquartile range of the gates at which κ is taken to fit (docs/premise-study.md).
TARGET_GATE_IQR = 0.25


def checkpoint_scores(experiment: str, method: str, scale: str, directory: Path) -> pd.DataFrame:
    """Avg@k of every evaluated checkpoint of ``method`` at ``scale``: seed, step, cell, score,
    and the summary file each row was read from (``summary_file``, the records' inputs)."""
    results = layout.Results(experiment)
    folder = directory / results.root / "eval" / method / scale
    rows = []
    for path in sorted(folder.glob(f"seed*/step*/{layout.SUMMARY}")):
        summary = json.loads(path.read_text())
        for cell, values in summary["benchmarks"].items():
            rows.append({"seed": int(summary["seed"]), "step": int(summary["step"]),
                         "cell": cell, "method": method, "score": float(values["avg_at_k"]),
                         "summary_file": path})  # fmt: skip
    if not rows:
        raise FileNotFoundError(f"no evaluated checkpoint of {method!r} at {scale!r} in {folder}")
    return pd.DataFrame(rows)


def pilot_summary(scores: pd.DataFrame, method: str, effect: float = 2.0, power: float = 0.8,
                  alpha: float = 0.05) -> dict:  # fmt: skip
    """The checkpoint, the per-cell scores and spreads there, the false alarms, the seeds."""
    means = scores.groupby("step")["score"].mean()
    step = int(means.idxmax())
    at = scores[scores["step"] == step]
    tests = false_alarms(at, method, margin=effect, alpha=alpha)
    cells = list(dict.fromkeys(at["cell"]))
    sd = float(tests["sd"].max())
    return {
        "method": method,
        "seeds": sorted(int(s) for s in at["seed"].unique()),
        "mean_by_step": {int(k): float(v) for k, v in means.items()},
        "step": step,
        "cell_means": at.groupby("cell")["score"].mean().reindex(cells).to_dict(),
        "cell_seed_sd": at.groupby("cell")["score"].std(ddof=1).reindex(cells).to_dict(),
        "split_tests": tests.to_dict("records"),
        "false_alarms": int(tests["verdict"].isin(["better", "worse"]).sum()),
        "difference_sd": sd,
        "seeds_needed": seeds_for_power(sd, effect, power, alpha, cells=len(cells)),
        "effect": effect,
        "power": power,
        "alpha": alpha,
    }


def probe_choices(tokens: pd.DataFrame) -> dict:
    """The fixed-λ control (the median used gate at the paper's κ) and κ: the paper's where its
    gates on the probe already spread to ``TARGET_GATE_IQR``; else the smallest κ on the grid
    whose gates do; else (none does) the paper's again."""
    at_paper = gate_iqr(tokens, PAPER_KAPPA)
    kappa = kappa_for_gate_spread(tokens, TARGET_GATE_IQR)
    moved = at_paper < TARGET_GATE_IQR and gate_iqr(tokens, kappa) >= TARGET_GATE_IQR
    return {
        "fixed_lambda": fixed_lambda_from_probe(tokens, PAPER_KAPPA),
        "gate_iqr_at_paper_kappa": at_paper,
        "kappa_for_gate_spread": kappa if moved else None,
        "kappa": kappa if moved else PAPER_KAPPA,
    }


def study_seeds(summary: Mapping, most: int | None) -> dict:
    """The study's seeds (0, 1, ...): those the power analysis asks for, or the ``most`` that the
    budget fits, with the effect so many detect at the summary's power."""
    n = summary["seeds_needed"] if most is None else min(most, summary["seeds_needed"])
    cells = len(summary["cell_means"])
    effect = detectable_effect(
        summary["difference_sd"], n, summary["power"], summary["alpha"], cells
    )
    return {"study_seeds": list(range(n)), "detectable_effect": effect}


def pilot_record(experiment: str, method: str, scale: str, directory: Path,
                 most_seeds: int | None) -> dict:  # fmt: skip
    """The pilot's record: its summary, the study's seeds, the probe's choices, its inputs."""
    scores = checkpoint_scores(experiment, method, scale, directory)
    summary = pilot_summary(scores, method)
    summary.update(study_seeds(summary, most_seeds))
    results = layout.Results(experiment)
    tokens = directory / results.premise_file(layout.PREMISE_TOKENS, scale)
    if tokens.is_file():
        summary.update(probe_choices(read_parquet(tokens)))
    read = sorted(set(scores["summary_file"])) + [tokens] * tokens.is_file()
    summary["inputs"] = {str(path.relative_to(directory)): sha256_file(path) for path in read}
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("--method", default="opsd")
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--directory", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, help="write the summary here as JSON")
    parser.add_argument(
        "--most-seeds", type=int, help="the most seeds the study's budget fits (absent: no limit)"
    )
    parser.add_argument("--check", action="store_true",
                        help="compare the record at --out with what the inputs give now")  # fmt: skip
    args = parser.parse_args(argv)
    from dashrepro.premise.checks import CANNOT_CHECK, check_or_write

    if args.check and args.out is None:
        parser.error("--check needs --out (the committed record)")
    try:
        summary = pilot_record(args.experiment, args.method, args.scale, args.directory,
                               args.most_seeds)  # fmt: skip
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}" + ("; the record derives no other file, so nothing is compared"
                                   if args.check else ""))  # fmt: skip
        return CANNOT_CHECK
    text = json.dumps(summary, indent=2, default=str)
    if args.out:
        return check_or_write({args.out: text + "\n"}, args.check)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
