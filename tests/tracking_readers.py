"""What the experiment trackers hold, read back with each library's own reader: TensorBoard's
event accumulator, W&B's offline run files (its datastore and record protobufs), MLflow's client
on its file store, trackio's SQLite storage. Each gives ``{key: [(step, value), ...]}`` in the
order logged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from dashrepro.tracking import MLFLOW_RUN_TAG


def tensorboard_scalars(run_folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard run folder (all its event files)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_folder), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def tensorboard_text(run_folder: Path, tag: str) -> str:
    """The text a TensorBoard run folder holds under ``tag`` (its first)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(run_folder), size_guidance={"tensors": 0})
    events.Reload()
    tensor = events.Tensors(f"{tag}/text_summary")[0].tensor_proto
    return tensor_util.make_ndarray(tensor).item().decode()


def wandb_records(wandb_dir: Path) -> list[tuple[str, dict]]:
    """(record type, content) of every run file under a W&B directory, file by file in the
    order the runs started; history records as ``{key: value}``."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    records = []
    for path in sorted(Path(wandb_dir).glob("wandb/offline-run-*/run-*.wandb")):
        store = datastore.DataStore()
        store.open_for_scan(str(path))
        while (data := store.scan_data()) is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                # A key with "/" is stored as its parts (nested_key).
                items = {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
                records.append((kind, items))
            elif kind == "run":
                records.append((kind, {"id": record.run.run_id, "group": record.run.run_group,
                                       "tags": list(record.run.tags)}))  # fmt: skip
    return records


def wandb_scalars(wandb_dir: Path, step_key: str = "_step") -> dict[str, list[tuple[int, float]]]:
    """Every history value of a W&B directory's runs at its ``step_key``."""
    scalars = defaultdict(list)
    for kind, items in wandb_records(wandb_dir):
        if kind != "history":
            continue
        step = int(items[step_key]) if step_key in items else int(items["_step"])
        for key, value in items.items():
            if not key.startswith("_"):
                scalars[key].append((step, value))
    return dict(scalars)


def mlflow_run(mlruns: Path, project: str, run_id: str):
    """The MLflow client on a file store, and the run tagged with ``run_id``."""
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=Path(mlruns).resolve().as_uri())
    experiment = client.get_experiment_by_name(project)
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{MLFLOW_RUN_TAG}` = '{run_id}'"
    )
    assert len(runs) == 1, f"{len(runs)} MLflow runs tagged {run_id}"
    return client, runs[0]


def mlflow_scalars(mlruns: Path, project: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric's history of the run tagged ``run_id``, by step."""
    client, run = mlflow_run(mlruns, project, run_id)
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
    }


#: Run in a fresh interpreter: trackio fixes its folder (TRACKIO_DIR) when it is first imported.
TRACKIO_READER = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage
project, name = sys.argv[1:3]
print(json.dumps({"runs": SQLiteStorage.get_runs(project),
                  "logs": SQLiteStorage.get_logs(project, name),
                  "config": SQLiteStorage.get_run_config(project, name)}))
"""


def trackio_run(store: Path, project: str, name: str) -> tuple[dict, dict, list[str]]:
    """The metrics (by step, in the order logged), the config and the project's run names of
    the trackio run ``name`` in the store folder ``store``."""
    env = {**os.environ, "TRACKIO_DIR": str(store)}
    done = subprocess.run([sys.executable, "-c", TRACKIO_READER, project, name], env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    held = json.loads(done.stdout.splitlines()[-1])
    scalars = defaultdict(list)
    for entry in held["logs"]:
        for key, value in entry.items():
            if key not in ("step", "timestamp"):
                scalars[key].append((entry["step"], value))
    return dict(scalars), held["config"] or {}, held["runs"]


def trackio_scalars(store: Path, project: str, name: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric of the trackio run ``name``, by step."""
    return trackio_run(store, project, name)[0]
