"""Every download a run is about to make must be pinned to a commit, checked before its first job.

A Hugging Face revision that is a branch or a tag (``main``, ``v1.0``) can move under a run: a
finished run's benchmark or base model could change. The download jobs stop on one themselves
(``hub.check_revision``, ``data.datasets``); the workflow's ``onstart`` asks ``unpinned_revisions``
first, with the jobs Snakemake is about to run, so that no job starts (not even one that does not
download) and every unpinned key is named at once. A dry run does not ask: a plan of the paper
works before its revisions are pinned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dashrepro.hub import (
    is_commit,
    model_id_of,
    snapshot_folder,
    unpinned_dataset_message,
    unpinned_hub_dataset,
    unpinned_model_message,
)


def unpinned_revisions(config: Mapping, jobs: Iterable[tuple[str, Mapping[str, str]]]) -> list[str]:
    """One message per config key whose hub source one of ``jobs`` (rule name, wildcards) would
    download at a revision that is not a 40-hex commit, in the order the jobs name them."""
    problems: dict[str, str] = {}
    for rule, wildcards in jobs:
        if rule == "prepare_training_set":
            spec = config["data"]["training_set"]
            key = "data.training_set.revision"
            if unpinned_hub_dataset(spec):
                problems[key] = unpinned_dataset_message(
                    "training set", spec["hf_id"], spec.get("revision"), key
                )
        elif rule == "prepare_benchmark":
            bench = wildcards["bench"]
            spec = config["benchmarks"][bench]["dataset"]
            key = f"benchmarks.{bench}.dataset.revision"
            if unpinned_hub_dataset(spec):
                problems[key] = unpinned_dataset_message(
                    "benchmark", spec["hf_id"], spec.get("revision"), key
                )
        elif rule == "download_model":
            folder = snapshot_folder(model_id_of(wildcards["repo"]), wildcards["revision"])
            for scale, spec in config["scales"].items():
                model, revision = spec.get("model"), spec.get("revision")
                if spec.get("source") == "embedded" or not model:
                    continue
                if snapshot_folder(model, revision) == folder and not is_commit(revision):
                    key = f"scales.{scale}.revision"
                    problems[key] = unpinned_model_message(model, revision, key)
    return list(problems.values())
