"""Hub access the cluster way: a released model fetched once, at a pinned commit, into a folder.

Compute nodes often have no internet, and a branch name (``main``) can move under a run. So the
``download_model`` rule (a ``localrule``: it runs where Snakemake runs, on a login node) fetches
each pretrained scale's ``model`` at its 40-hex ``revision`` into ``resources/models/<scale>/``,
and every job that loads the model takes that folder's snapshot record as an input. The record,
``dashrepro_snapshot.json`` inside the folder, names the model, the commit, and the sha256 of
every file, computed once here; it stands for the folder's content wherever a job fingerprints
its base model (``source_fingerprint``), so no job hashes gigabytes of weights.

    python -m dashrepro.hub Qwen/Qwen3-1.7B <40-hex commit> resources/models/qwen3_1p7b
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

#: The record a downloaded snapshot carries (see the module docstring).
SNAPSHOT_RECORD = "dashrepro_snapshot.json"
#: What a model needs to load and to tokenize: no optimizer states, no other formats.
MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]

_COMMIT = re.compile(r"[0-9a-f]{40}")


def snapshot_folder(model_id: str, revision: str | None) -> str:
    """Where ``download_model`` puts ``model_id`` at ``revision``: one folder per model and
    commit (``/`` in the id becomes ``--``, which hub ids cannot contain), so experiments share a
    download and a new commit never overwrites an old one."""
    return f"resources/models/{model_id.replace('/', '--')}/{revision or 'unpinned'}"


def model_id_of(folder_name: str) -> str:
    """The hub id of a ``snapshot_folder`` name: ``Qwen--Qwen3-1.7B`` -> ``Qwen/Qwen3-1.7B``."""
    return folder_name.replace("--", "/", 1)


class UnpinnedRevisionError(ValueError):
    """A model without a 40-hex commit: the paper run stops and says how to pin it."""


def is_commit(revision: object) -> bool:
    """Whether ``revision`` is a full 40-hex commit hash: a branch or tag (``main``, ``v1.0``)
    can move under a run, a short hash can become ambiguous."""
    return isinstance(revision, str) and _COMMIT.fullmatch(revision) is not None


def unpinned_hub_dataset(spec: object) -> bool:
    """Whether ``spec`` is a hub dataset (``hf_id``) whose ``revision`` is not a commit."""
    return isinstance(spec, Mapping) and "hf_id" in spec and not is_commit(spec.get("revision"))


def unpinned_model_message(model_id: str, revision: object, where: str) -> str:
    """What to say of a model at ``revision`` that is not a commit: the key and how to pin it."""
    return (
        f"{where}: model {model_id!r} is at revision {revision!r}, not a commit. Pin it to the "
        "model's 40-hex commit hash (the model page's 'Files and versions' > 'History', or "
        f'`python -c "import huggingface_hub as h; print(h.HfApi().model_info({model_id!r}).sha)"`) '
        "so that every job of the run loads the same weights"
    )


def unpinned_dataset_message(what: str, dataset_id: str, revision: object, key: str) -> str:
    """What to say of a hub dataset at ``revision`` that is not a commit: the key and how."""
    return (
        f"{what} {dataset_id!r}: revision {revision!r} is not a commit; pin {key} to the "
        "dataset's 40-hex commit hash (the dataset page's 'History', or "
        "huggingface_hub.HfApi().dataset_info(id).sha) so the data cannot change under the run"
    )


def check_revision(model_id: str, revision: object, where: str) -> str:
    """``revision`` if it is a 40-hex commit, else ``UnpinnedRevisionError`` naming ``where``."""
    if is_commit(revision):
        return revision
    raise UnpinnedRevisionError(unpinned_model_message(model_id, revision, where))


def source_fingerprint(source: str | os.PathLike) -> str:
    """What identifies a model or data source by content: the sha256 of a local file or folder,
    or, for a name that is not a local path (a Hugging Face id), the name itself. A model
    snapshot fetched here is identified by its record, which holds the sha256 of every file
    (computed once at download, not again in every job that loads gigabytes)."""
    from dashrepro.io import sha256_file, sha256_path

    record = Path(source) / SNAPSHOT_RECORD
    if record.is_file():
        return f"snapshot:{sha256_file(record)}"
    return f"sha256:{sha256_path(source)}" if Path(source).exists() else f"name:{source}"


def download_model(model_id: str, revision: str, folder: str | Path, where: str) -> dict:
    """Fetch ``model_id`` at ``revision`` into ``folder`` with its snapshot record; returns the
    record. The files land in a sibling ``.partial`` folder first and replace ``folder`` in one
    rename, so a killed download never leaves a folder that looks complete."""
    from huggingface_hub import snapshot_download

    from dashrepro.io import sha256_file, write_json

    check_revision(model_id, revision, where)
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    snapshot_download(
        repo_id=model_id, revision=revision, local_dir=partial, allow_patterns=MODEL_FILES
    )
    # huggingface_hub keeps its download bookkeeping in <local_dir>/.cache; not model content.
    shutil.rmtree(partial / ".cache", ignore_errors=True)
    files = sorted(p for p in partial.rglob("*") if p.is_file())
    if not any(p.suffix == ".safetensors" for p in files):
        raise FileNotFoundError(
            f"{where}: {model_id}@{revision} has no .safetensors weights (files: "
            f"{[p.name for p in files]})"
        )
    record = {
        "model": model_id,
        "revision": revision,
        "files": {str(p.relative_to(partial)): sha256_file(p) for p in files},
    }
    write_json(partial / SNAPSHOT_RECORD, record)
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_id")
    parser.add_argument("revision")
    parser.add_argument("folder")
    args = parser.parse_args()
    record = download_model(args.model_id, args.revision, args.folder, where="command line")
    print(f"{args.model_id}@{args.revision}: {len(record['files'])} files in {args.folder}")


if __name__ == "__main__":
    main()
