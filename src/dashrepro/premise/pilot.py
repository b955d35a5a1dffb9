"""The study's OPSD-only pilot: which checkpoint the study evaluates, and how many seeds it needs.

From one method's runs (OPSD's: the pre-registration may look at it, never at DASH) of an
experiment, every checkpoint's Avg@k per cell (benchmark): the checkpoint with the highest mean
over seeds and cells is the one the study evaluates; at it, the method's seeds split in two
halves give the spread of a paired difference between runs of one method (the largest over the
cells) and the false alarms of the study's tests; ``study.seeds_for_power`` turns that spread
into the seeds that detect ``effect`` points at ``power``.

    python -m dashrepro.premise.pilot task_families --method opsd --scale tiny
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from dashrepro import layout
from dashrepro.premise.study import false_alarms, seeds_for_power


def checkpoint_scores(experiment: str, method: str, scale: str, directory: Path) -> pd.DataFrame:
    """Avg@k of every evaluated checkpoint of ``method`` at ``scale``: seed, step, cell, score."""
    results = layout.Results(experiment)
    folder = directory / results.root / "eval" / method / scale
    rows = []
    for path in sorted(folder.glob(f"seed*/step*/{layout.SUMMARY}")):
        summary = json.loads(path.read_text())
        for cell, values in summary["benchmarks"].items():
            rows.append({"seed": int(summary["seed"]), "step": int(summary["step"]),
                         "cell": cell, "method": method, "score": float(values["avg_at_k"])})  # fmt: skip
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("--method", default="opsd")
    parser.add_argument("--scale", default="tiny")
    parser.add_argument("--directory", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, help="write the summary here as JSON")
    args = parser.parse_args(argv)
    scores = checkpoint_scores(args.experiment, args.method, args.scale, args.directory)
    summary = pilot_summary(scores, args.method)
    text = json.dumps(summary, indent=2, default=str)
    if args.out:
        from dashrepro.io import write_text

        write_text(args.out, text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
