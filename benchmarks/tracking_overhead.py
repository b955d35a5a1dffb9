"""What experiment tracking costs a training job, per tracker: opening the run, each step's
sending, and closing it, measured on a training row of the default's columns.

TensorBoard and MLflow are sent each step as it ends (``training.step_tracking``); W&B and
trackio get the steps of each training state at once (the run opened, given them, finished), so
their cost is per state, shown here per step for ``--steps-per-state`` steps. The per-step
numbers are what a step of a training job pays; compare them with a step's seconds
(``seconds_*`` in train_metrics.parquet: several seconds for the embedded default on two
cores).

    python benchmarks/tracking_overhead.py                   # all four, 200 steps
    python benchmarks/tracking_overhead.py --trackers tensorboard --steps 50
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

from dashrepro.numerics import cpu_model
from dashrepro.settings import TRACKER_PACKAGES, TrackingSettings
from dashrepro.tracking import RunTracker, TrackedRun, scalars
from dashrepro.training.step_tracking import BUFFERED, StepTracking

#: A step row's columns (train_metrics.parquet of the embedded default has 29).
COLUMNS = 29


def row(step: int) -> dict:
    return {"step": step, **{f"metric_{i}": 1.0 / (step + i) for i in range(COLUMNS - 2)},
            "tracker_failures": 0}  # fmt: skip


def measure(name: str, steps: int, per_state: int, folder: Path) -> dict:
    settings = TrackingSettings.from_config({"report_to": [name]})
    run = TrackedRun(settings, str(folder), "bench", "dash", "tiny", 0)
    config = {"train": {"lr": 1e-5, "steps": steps}, "lora": {"r": 64}}
    if name in BUFFERED:  # the training job's path: kept, sent at each state
        tracking = StepTracking(run, folder / ".resume", main_process=True)
        started = time.perf_counter()
        tracking.start(config, resumed_step=0, log=print)
        opened = time.perf_counter() - started
        rows, sends = [], []
        for step in range(1, steps + 1):
            rows.append(row(step))
            t0 = time.perf_counter()
            tracking.send(rows[-1])
            if step % per_state == 0:
                tracking.flush(rows)
            sends.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tracking.finish(rows)
        closed = time.perf_counter() - t0
        failures = sum(r["tracker_failures"] for r in rows)
    else:
        tracker = RunTracker(run, "train", print)
        started = time.perf_counter()
        tracker.start({"run": config})
        opened = time.perf_counter() - started
        sends = []
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            tracker.log(scalars(row(step), "train"), step)
            sends.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tracker.finish()
        closed = time.perf_counter() - t0
        failures = tracker.failures
    return {
        "tracker": name,
        "open_s": opened,
        "per_step_ms": 1e3 * sum(sends) / steps,
        "median_step_ms": 1e3 * statistics.median(sends),
        "max_step_ms": 1e3 * max(sends),
        "close_s": closed,
        "failures": failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trackers", nargs="+", default=list(TRACKER_PACKAGES))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--steps-per-state", type=int, default=25)
    args = parser.parse_args()
    print(f"{args.steps} steps of {COLUMNS} columns; W&B and trackio sent every "
          f"{args.steps_per_state} steps (a state); {cpu_model()}, "
          f"{platform.python_version()}")  # fmt: skip
    print("| tracker | open (s) | per step (ms) | median step (ms) | max step (ms) | close (s) "
          "| failures |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for name in args.trackers:
        with tempfile.TemporaryDirectory() as folder:
            r = measure(name, args.steps, args.steps_per_state, Path(folder))
        print(f"| {r['tracker']} | {r['open_s']:.2f} | {r['per_step_ms']:.2f} | "
              f"{r['median_step_ms']:.2f} | {r['max_step_ms']:.1f} | {r['close_s']:.2f} "
              f"| {r['failures']} |")  # fmt: skip


if __name__ == "__main__":
    main()
