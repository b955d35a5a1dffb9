"""Experiment tracking: a run's training steps and its checkpoints' scores, live, in TensorBoard,
Weights & Biases, MLflow or trackio, through accelerate's tracker classes, never at the cost of
the job.

``TrackedRun`` names the one tracker run of an (experiment, method, scale, seed) and where its
local files go; ``RunTracker`` opens it (the same run again when a job resumes or a grading job
adds a checkpoint's scores), logs to it and closes it. A tracker that fails (no network, a full
disk, a bad key) costs a warning in the job's log and a count, never the job. The settings are
``settings.TrackingSettings``; what is logged and how to read it back: docs/tracking.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dashrepro.layout import Results
from dashrepro.settings import TrackingSettings

#: The MLflow tag that holds a run's ``TrackedRun.run_id``: how a resumed job finds its run.
MLFLOW_RUN_TAG = "dashrepro.run_id"
#: Environment variables whose values are secrets: scrubbed from every warning this module logs.
SECRET_VARIABLES = ("WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD")


@dataclass(frozen=True)
class TrackedRun:
    """The tracker run of one (experiment, method, scale, seed), and where local trackers write."""

    settings: TrackingSettings
    directory: str
    experiment: str
    method: str
    scale: str
    seed: int
    #: The code version the job runs (``provenance.records.code_version``), logged with the
    #: run's settings; given by the rule script, since the stages below provenance cannot ask.
    code: Mapping = field(default_factory=dict)

    @classmethod
    def from_config(
        cls, config: Mapping, method: str, scale: str, seed, code: Mapping | None = None
    ) -> TrackedRun | None:
        """The run of a workflow config's ``tracking`` block; None when it names no tracker."""
        settings = TrackingSettings.from_config(config.get("tracking"))
        if not settings.report_to:
            return None
        directory = settings.directory or Results(config["experiment"]).tracking()
        return cls(settings, str(directory), config["experiment"], method, scale, int(seed),
                   dict(code or {}))  # fmt: skip

    @classmethod
    def from_dict(cls, values: Mapping) -> TrackedRun:
        return cls(**{**values, "settings": TrackingSettings.from_config(values["settings"])})

    def to_dict(self) -> dict:
        return {**self.__dict__, "settings": self.settings.to_dict(), "code": dict(self.code)}

    @property
    def name(self) -> str:
        """The run's name in every tracker (TensorBoard's run folder under the project)."""
        return f"{self.method}/{self.scale}/seed{self.seed}"

    @property
    def run_id(self) -> str:
        """The W&B run id (and MLflow tag): the same for every job of the run, so a resumed
        training job and its checkpoints' grading jobs continue one run."""
        return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{self.experiment}.{self.name.replace('/', '.')}")

    @property
    def tags(self) -> dict[str, str]:
        return {
            "experiment": self.experiment,
            "method": self.method,
            "scale": self.scale,
            "seed": str(self.seed),
        }


def flat_config(values: Mapping, prefix: str = "") -> dict:
    """A nested config as ``a.b.c`` keys of scalars (what TensorBoard's and MLflow's hyper-
    parameters take); lists and other values become their text."""
    flat = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_config(value, f"{name}."))
        elif value is None or isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


def scalars(values: Mapping, prefix: str) -> dict[str, float]:
    """The numbers among ``values``, keyed ``<prefix>/<key>`` (booleans as 0/1, NaN kept)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, bool | int | float):
            out[f"{prefix}/{key}"] = float(value)
        elif hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalars
            out[f"{prefix}/{key}"] = float(value.item())
    return out


def checkpoint_scores(summary: Mapping) -> dict[str, float]:
    """A graded checkpoint's summary as tracker values: Avg@k, pass@k and the stderr of each
    benchmark, and the mean over benchmarks."""
    values = {"checkpoint/mean_avg_at_k": float(summary["mean_over_benchmarks"])}
    for bench, scores in summary["benchmarks"].items():
        for key in ("avg_at_k", "pass_at_k", "stderr"):
            values[f"checkpoint/{bench}/{key}"] = float(scores[key])
    return values


def scrub(text: str) -> str:
    """``text`` with the value of every secret variable (``SECRET_VARIABLES``) masked."""
    for variable in SECRET_VARIABLES:
        secret = os.environ.get(variable)
        if secret:
            text = text.replace(secret, "***")
    return text


class RunTracker:
    """The trackers of one job on one ``TrackedRun``: ``start``, ``log`` (or
    ``log_checkpoint``), ``finish``. Every call on a tracker is guarded: a failure logs one
    warning line and counts in ``failures``; the job goes on with the other trackers."""

    def __init__(self, run: TrackedRun, job: str, log: Callable[[str], None] = print):
        self.run, self.job, self.warn = run, job, log
        self.trackers: list = []
        self.failures = 0

    def start(self, config: Mapping | None = None) -> RunTracker:
        """Open (or reopen) the run in every tracker; ``config``, when given, becomes the run's
        hyperparameters (a training job that starts from step 0 gives it, a resumed one not)."""
        for name in self.run.settings.report_to:
            tracker = self._guard(
                name, "start", lambda name=name: _started(name, self.run, self.job)
            )
            if tracker is None:
                continue
            self.trackers.append(tracker)
            if config is not None:
                self._guard(name, "config", lambda t=tracker: _store_config(t, config))
        return self

    def log(self, values: Mapping[str, float], step: int) -> int:
        """Send ``values`` at ``step`` to every tracker; the number of trackers that failed."""
        before = self.failures
        for tracker in self.trackers:
            self._guard(tracker.name, "log", lambda t=tracker: t.log(dict(values), step=step))
        return self.failures - before

    def log_checkpoint(self, values: Mapping[str, float], step: int) -> int:
        """A checkpoint's scores at its training step. W&B drops a step below one it has seen,
        so there they carry their step as ``checkpoint/step``, the x-axis declared for them."""
        before = self.failures
        for tracker in self.trackers:
            if tracker.name == "wandb":

                def send(t=tracker):
                    t.tracker.define_metric("checkpoint/*", step_metric="checkpoint/step")
                    t.log({**values, "checkpoint/step": step})
            else:

                def send(t=tracker):
                    t.log(dict(values), step=step)

            self._guard(tracker.name, "log", send)
        return self.failures - before

    def finish(self) -> None:
        for tracker in self.trackers:
            self._guard(tracker.name, "finish", tracker.finish)
        self.trackers = []

    def _guard(self, name: str, what: str, call: Callable):
        try:
            return call()
        except Exception as error:  # a tracker never fails the job, whatever it raises
            self.failures += 1
            self.warn(
                f"[tracking] warning: {name} {what} failed for run {self.run.name} "
                f"({type(error).__name__}: {scrub(str(error))[:300]}); the job goes on"
            )
            return None


def _store_config(tracker, config: Mapping) -> None:
    """The run's settings as its hyperparameters. TensorBoard gets them as a text at step 0:
    its hyperparameter summary (``SummaryWriter.add_hparams``) writes a second run folder for
    every run, which would double the run list (and TensorBoard selects no run past 40)."""
    if tracker.name == "tensorboard":
        text = json.dumps(config, indent=2, default=str)
        tracker.log({"config": "\n".join(f"    {line}" for line in text.splitlines())}, step=0)
    elif tracker.name == "trackio":
        # accelerate's store_init_configuration passes W&B's allow_val_change keyword on to
        # trackio's config, a plain dict, which would keep it as a setting.
        tracker.tracker.config.update(flat_config(config))
    else:
        tracker.store_init_configuration(flat_config(config))


def _started(name: str, run: TrackedRun, job: str):
    """accelerate's tracker ``name`` for ``run``, started."""
    from accelerate import tracking

    directory = Path(run.directory)
    project = run.settings.project
    if name == "tensorboard":
        tracker = tracking.TensorBoardTracker(run.name, directory / "tensorboard" / project)
    elif name == "wandb":
        (directory / "wandb").mkdir(parents=True, exist_ok=True)
        tracker = tracking.WandBTracker(
            project,
            id=run.run_id,
            name=run.name,
            group=run.experiment,
            tags=[f"{key}:{value}" for key, value in run.tags.items()],
            job_type=job,
            dir=str(directory / "wandb"),
            # Offline, each job writes its own run folder under the run's id, and `wandb sync`
            # joins them; online, a resumed or grading job continues the run on the server.
            mode="offline" if run.settings.offline else "online",
            **({} if run.settings.offline else {"resume": "allow"}),
            # No console capture or system metrics: the job's log stays the job's, and no
            # sampling thread competes with training.
            settings={"console": "off", "x_disable_stats": True, "silent": True},
        )
    elif name == "mlflow":
        tracker = _mlflow_tracker(run, directory, project)
    elif name == "trackio":
        tracker = _trackio_tracker(run, directory, project)
    else:
        raise ValueError(f"tracking.report_to: unknown tracker {name!r}")
    tracker.start()
    return tracker


def _mlflow_tracker(run: TrackedRun, directory: Path, project: str):
    """accelerate's MLflow tracker on the run's existing MLflow run (found by its tag) or a new
    one; the file store under ``directory`` unless ``MLFLOW_TRACKING_URI`` names a server."""
    import mlflow
    from accelerate.tracking import MLflowTracker

    user_uri = os.environ.get("MLFLOW_TRACKING_URI")
    if user_uri:
        mlflow.set_tracking_uri(user_uri)  # over a file store this process set before
    else:
        # MLflow 3 keeps its file store in maintenance mode behind this opt-in. It is the
        # store that takes many jobs writing at once on a cluster's shared filesystem (a SQLite
        # file there does not); a server or database goes in MLFLOW_TRACKING_URI instead.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow.set_tracking_uri((directory / "mlruns").resolve().as_uri())
        # set_tracking_uri exports MLFLOW_TRACKING_URI too: a process started after it (a
        # trainer a test launches, say) would take this run's store for a user's server.
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    found = mlflow.search_runs(
        experiment_names=[project],
        filter_string=f"tags.`{MLFLOW_RUN_TAG}` = '{run.run_id}'",
        output_format="list",
    )
    return MLflowTracker(
        experiment_name=project,
        run_id=found[0].info.run_id if found else None,
        tags={**run.tags, MLFLOW_RUN_TAG: run.run_id},
        run_name=run.name,
    )


def _trackio_tracker(run: TrackedRun, directory: Path, project: str):
    """accelerate's trackio tracker on the run (found again by its name) in trackio's SQLite
    store under ``directory``, unless TRACKIO_SERVER_URL or TRACKIO_SPACE_ID names a server."""
    from accelerate import PartialState
    from accelerate.tracking import TrackioTracker

    store = (directory / "trackio").resolve()
    if "trackio" not in sys.modules:
        # trackio reads its folder from TRACKIO_DIR once, at its first import. It is set for that
        # import only, so that no process started later takes this run's store for its own.
        before = os.environ.get("TRACKIO_DIR")
        os.environ["TRACKIO_DIR"] = str(store)
        try:
            import trackio  # noqa: F401
        finally:
            if before is None:
                del os.environ["TRACKIO_DIR"]
            else:
                os.environ["TRACKIO_DIR"] = before
    import trackio.utils
    from trackio.sqlite_storage import SQLiteStorage

    if Path(trackio.utils.TRACKIO_DIR).resolve() != store:  # never in a job: it opens one run
        raise RuntimeError(
            f"trackio writes to {trackio.utils.TRACKIO_DIR} in this process (fixed at its first "
            f"import), not to {store}"
        )
    # accelerate runs its trackio tracker on every process, so the tracker builds no accelerate
    # state, which accelerate's logging needs (a grading job has none).
    PartialState()
    # trackio replaces a run's stored config with that of each job that opens the run: a job
    # that has none of its own (a resumed or a grading job) passes the stored one on.
    stored = SQLiteStorage.get_run_config(project, run.name) or {}

    class QuietTrackioTracker(TrackioTracker):
        """trackio prints a banner whenever a run opens or closes: the job's log stays the
        job's (its warnings go to stderr and stay)."""

        def start(self):
            with contextlib.redirect_stdout(io.StringIO()):
                super().start()

        def finish(self):
            # trackio's own finish: accelerate's leaves the run current, and trackio would
            # finish it again (and print again) when the process exits.
            with contextlib.redirect_stdout(io.StringIO()):
                trackio.finish()

    return QuietTrackioTracker(
        project,
        name=run.name,
        group=run.experiment,
        config={key: value for key, value in stored.items() if not key.startswith("_")},
        resume="allow",
        embed=False,
        auto_log_cpu=False,  # no sampling thread competes with training
        auto_log_gpu=False,
    )


def selection_values(record: Mapping) -> dict[str, float]:
    """A selection record as tracker values: the selected step and its selection score."""
    return {
        "checkpoint/selected_step": float(record["selected_step"]),
        "checkpoint/selection_score": float(record["selection_score"]),
    }


def send_checkpoint_values(
    run: TrackedRun | None,
    values: Mapping[str, float],
    step: int,
    job: str,
    log: Callable[[str], None],
) -> int:
    """A grading or selection job's part: its values into the run's tracker run at the
    checkpoint's training ``step``; the number of tracker calls that failed (0: no tracker)."""
    if run is None:
        return 0
    tracker = RunTracker(run, job, log).start()
    tracker.log_checkpoint(values, step)
    tracker.finish()
    return tracker.failures
