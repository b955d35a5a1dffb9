"""A training run's steps in its experiment trackers, each step sent once across resumes.

``StepTracking`` sends each step's metrics row (on the main process) to the run's trackers and
notes, per tracker, the last step they hold durably, in the run's resume folder: a job killed
after step j and resumed from an earlier state repeats steps it need not send again. TensorBoard
and MLflow write each step as it is sent, so they get it live. W&B (its service process) and
trackio (its sender thread) hold what they are sent until their run is finished, and a kill -9
loses that, so their steps are kept here and sent (the run opened, given them, finished) when a
training state is written and at the end: then a resumed job holds, in each tracker, every step
once. The failures of a step's sending count in that row's ``tracker_failures``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from dashrepro.io import read_json, write_json
from dashrepro.tracking import RunTracker, TrackedRun, scalars

#: The file (in the run's resume folder) that holds, per tracker, the last step it holds.
SENT_STEP_FILE = "tracked_steps.json"
#: Trackers whose writes are durable only once their run is finished (sent at states).
BUFFERED = ("wandb", "trackio")


class StepTracking:
    """The trackers of one training job (none on other processes or without ``tracked``)."""

    def __init__(self, tracked: TrackedRun | None, resume_root: Path, main_process: bool):
        self.tracked = tracked if main_process else None
        # The run as the live trackers see it, and as the buffered ones do (None: no such one).
        self.live_run = _with_trackers(self.tracked, lambda name: name not in BUFFERED)
        self.buffered_run = _with_trackers(self.tracked, lambda name: name in BUFFERED)
        self.record = Path(resume_root) / SENT_STEP_FILE
        self.live: RunTracker | None = None
        self.sent: dict[str, int] = {}
        self.pending: list[tuple[dict, int]] = []
        self.config: dict | None = None
        self.unreported = 0  # failures of opening the live trackers, not in a row yet

    def start(self, config: Mapping, resumed_step: int, log: Callable[[str], None]) -> None:
        """Open the live trackers' run; ``config`` (the run's resolved settings) and the code
        version become the run's hyperparameters when it starts from its first step (a
        resumed job reopens a run that has them)."""
        if self.tracked is None:
            return
        self.log = log
        if self.record.exists():
            self.sent = {name: int(step) for name, step in read_json(self.record).items()}
        if resumed_step == 0 and not self.sent:
            self.config = {"run": dict(config), "code": dict(self.tracked.code)}
        if self.live_run is not None:
            self.live = RunTracker(self.live_run, "train", log).start(self.config)
            self.unreported = self.live.failures  # counted in the first row sent

    def send(self, row: Mapping) -> int:
        """Send a step's row (its numbers, as ``train/<column>``) to each tracker that does
        not hold that step yet; the number of tracker calls that failed."""
        if self.tracked is None:
            return 0
        step, values = int(row["step"]), scalars(row, "train")
        failures, self.unreported = self.unreported, 0
        if self.live is not None and step > self._sent(self.live_run):
            failures += self.live.log(values, step)
            self._note(self.live_run, step)
        if self.buffered_run is not None and step > self._sent(self.buffered_run):
            self.pending.append((values, step))
        return failures

    def flush(self, rows: list[dict]) -> None:
        """Send the kept steps to the buffered trackers (before a state is written, and at
        the end); the failures count in the last row's ``tracker_failures``."""
        if not self.pending or self.buffered_run is None:
            return
        tracker = RunTracker(self.buffered_run, "train", self.log).start(self.config)
        for values, step in self.pending:
            tracker.log(values, step)
        tracker.finish()
        self._note(self.buffered_run, self.pending[-1][1])
        self.pending = []
        rows[-1]["tracker_failures"] += tracker.failures

    def finish(self, rows: list[dict]) -> None:
        """Flush, then close the live trackers."""
        self.flush(rows)
        if self.live is not None:
            self.live.finish()

    def _sent(self, run: TrackedRun) -> int:
        """The last step every tracker of ``run`` holds (0: none)."""
        return min(self.sent.get(name, 0) for name in run.settings.report_to)

    def _note(self, run: TrackedRun, step: int) -> None:
        for name in run.settings.report_to:
            self.sent[name] = step
        self.record.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.record, self.sent)


def _with_trackers(tracked: TrackedRun | None, keep) -> TrackedRun | None:
    """``tracked`` with only the trackers ``keep`` selects; None when that leaves none."""
    if tracked is None:
        return None
    names = tuple(name for name in tracked.settings.report_to if keep(name))
    if not names:
        return None
    settings = dataclasses.replace(tracked.settings, report_to=names)
    return dataclasses.replace(tracked, settings=settings)
