"""Provenance records: what each output was made from.

Every stage writes, next to each output, a small JSON record with the stage name, the config
values it depends on, the code version (package version and git commit, with a dirty flag), and
the sha256 of each input: ``X.provenance.json`` beside a file, ``provenance.json`` in a folder.
Followed from a table cell back, they lead file by file to the samples, the checkpoint and the
data (``python -m dashrepro.provenance results/tiny/tables/main_results.csv``). A record exists
only beside an output that exists (``write_provenance`` refuses otherwise; ``discard_records``
when a job starts or fails; ``trace`` marks orphans, ``--prune-orphans`` removes them).
``--written FILE ...`` says whether each file is the whole output its job wrote: what to check
before keeping a job that outlived a killed Snakemake (docs/troubleshooting.md).
"""

from __future__ import annotations

import datetime as _dt
import functools
import platform
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from dashrepro import __version__
from dashrepro.io import read_json, sha256_path, write_json
from dashrepro.layout import REPO_ROOT


@functools.cache
def code_version() -> dict[str, Any]:
    version: dict[str, Any] = {"dashrepro": __version__, "python": platform.python_version()}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "rules"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        version.update(git_commit=commit, git_dirty=bool(dirty))
    except (OSError, subprocess.CalledProcessError):
        version.update(git_commit=None, git_dirty=None)
    # From the installed distributions' metadata, not by importing them: importing torch and
    # transformers costs ~2.5 s, most of a grading, selection or table job that never uses them.
    for package in ("torch", "transformers"):
        try:
            version[package] = metadata.version(package)
        except metadata.PackageNotFoundError:  # a reporting-only environment
            pass
    return version


def record_path(output: str | Path) -> Path:
    output = Path(output)
    return output / "provenance.json" if output.is_dir() else Path(f"{output}.provenance.json")


def hash_inputs(inputs: Mapping[str, str | Path | list]) -> dict[str, list[dict]]:
    """``{name: [{"path", "sha256"}, ...]}``; a name that is not a local path (a Hugging Face
    model id) is recorded as given, with ``sha256`` None."""
    hashed: dict[str, list[dict]] = {}
    for name, value in inputs.items():
        paths = value if isinstance(value, list | tuple) else [value]
        hashed[name] = [
            {"path": str(p), "sha256": sha256_path(p) if Path(p).exists() else None} for p in paths
        ]
    return hashed


def changed_inputs(hashed: Mapping[str, list[dict]]) -> list[str]:
    """Inputs (``hash_inputs``' result) whose content is not what the job that made them wrote:
    one line per file, naming it, that job's rule and both hashes. An input without a record, or
    whose record predates output hashes, is not judged."""
    lines = []
    for name, items in hashed.items():
        for item in items:
            if item.get("sha256") is None:
                continue
            record_file = record_path(item["path"])
            try:
                record = read_json(record_file) if record_file.is_file() else None
            except (OSError, ValueError):
                record = None
            written = (record or {}).get("output_sha256")
            if written and written != item["sha256"]:
                lines.append(
                    f"{item['path']} (input {name!r}): sha256 {item['sha256'][:12]}… now, "
                    f"{written[:12]}… when rule {record.get('rule')} wrote it"
                )
    return lines


def write_record(output: str | Path, record: Mapping[str, Any]) -> None:
    """Write ``record`` beside ``output``, which must exist (no record outlives its output)."""
    if not Path(output).exists():
        raise FileNotFoundError(f"{output}: no provenance record for an output that does not exist")
    # The output's own sha256: a later job, or the audit, can then tell the file it reads from
    # the one this job wrote (a swapped adapter, an edited table).
    write_json(
        record_path(output),
        {**record, "output": str(output), "output_sha256": sha256_path(output)},
    )


def write_provenance(
    output: str | Path,
    stage: str,
    inputs: Mapping[str, str | Path | list] | None = None,
    params: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict:
    """Write the provenance record of ``output`` (which must already exist) and return it.

    Rule jobs do not call this: ``provenance.job`` records every output of a job from the job
    itself. It is for outputs made outside Snakemake (a benchmark script, a notebook).
    """
    record = {
        "stage": stage,
        "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "code": code_version(),
        "params": dict(params or {}),
        "inputs": hash_inputs(inputs or {}),
        "command": " ".join(sys.argv[:1]),
    }
    if extra:
        record["extra"] = dict(extra)
    write_record(output, record)
    return {**record, "output": str(output)}


def trace(
    output: str | Path, root: str | Path | None = None, depth: int = 0, seen: set | None = None
) -> list[str]:
    """Lines describing ``output``'s provenance chain, depth first.

    Records store input paths as the workflow saw them, relative to its working directory;
    ``root`` is that directory (default: the current one).
    """
    seen = set() if seen is None else seen
    root = Path.cwd() if root is None else Path(root)
    lines = []
    output = Path(output)
    path = record_path(output if output.is_absolute() else root / output)
    indent = "  " * depth
    if not path.exists():
        return [f"{indent}{output} (no provenance record)"]
    if not (output if output.is_absolute() else root / output).exists():
        return [f"{indent}{output} (missing; its provenance record {path} is an orphan)"]
    record = read_json(path)
    lines.append(f"{indent}{output}  [stage={record['stage']}]")
    for items in record["inputs"].values():
        for item in items:
            if item["path"] in seen:
                continue
            seen.add(item["path"])
            lines.extend(trace(item["path"], root, depth + 1, seen))
    return lines


def _records_of(output: Path) -> list[Path]:
    """The record files that may describe ``output``: ``X.provenance.json``, and for a file
    inside a folder output (a checkpoint's adapter) the folder's ``provenance.json``."""
    return [Path(f"{output}.provenance.json"), output.parent / "provenance.json"]


def _described_output(record_file: Path) -> Path:
    if record_file.name == "provenance.json":
        return record_file.parent
    return record_file.with_name(record_file.name[: -len(".provenance.json")])


def discard_records(outputs) -> list[Path]:
    """Remove the provenance records of ``outputs`` (a job's, before it runs or after it failed).

    A folder's record is removed only when the folder itself is one of the outputs or contains
    one (a checkpoint folder whose adapter file the job writes).
    """
    removed = []
    for output in map(Path, outputs):
        for record_file in _records_of(output):
            if record_file.is_file():
                record_file.unlink()
                removed.append(record_file)
    return removed


def orphan_records(root: str | Path) -> list[Path]:
    """Records under ``root`` whose output no longer exists (left by killed or failed jobs)."""
    root = Path(root)
    found = [*root.rglob("*.provenance.json"), *root.rglob("provenance.json")]
    return sorted(p for p in found if not _described_output(p).exists())


def written_whole(output: str | Path) -> tuple[bool, str]:
    """(whether ``output`` is the whole file its job wrote, a line saying so or why not): its
    record is written once the job's work has returned, with the output's sha256
    (``provenance.job``), so a record whose sha256 is the file's marks a finished write."""
    output = Path(output)
    if not output.exists():
        return False, f"{output}: missing"
    path = record_path(output)
    if not path.is_file():
        return False, f"{output}: no provenance record (its job did not finish, or wrote none)"
    try:
        record = read_json(path)
    except ValueError as exc:
        return False, f"{output}: its record cannot be read ({exc})"
    written, rule = record.get("output_sha256"), record.get("rule") or record.get("stage")
    if not written:
        return False, f"{output}: its record {path} holds no output sha256 (an older version)"
    if sha256_path(output) != written:
        return False, f"{output}: not the file rule {rule} wrote (sha256 differs)"
    finished = record.get("finished_utc") or record.get("created_utc")
    return True, f"{output}: written whole by rule {rule}, finished {finished}"


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Print the provenance chain of outputs.")
    parser.add_argument("outputs", nargs="+", type=Path)
    parser.add_argument("--root", type=Path, default=None, help="the workflow's working directory")
    parser.add_argument(
        "--prune-orphans",
        action="store_true",
        help="remove the records under OUTPUTS (folders) whose output no longer exists",
    )
    parser.add_argument(
        "--written",
        action="store_true",
        help="say whether each of OUTPUTS is the whole file its job wrote (exit 1 if one is not)",
    )
    args = parser.parse_args()
    if args.written:
        results = [written_whole(output) for output in args.outputs]
        for _, line in results:
            print(line)
        raise SystemExit(0 if all(ok for ok, _ in results) else 1)
    if args.prune_orphans:
        for folder in args.outputs:
            for record_file in orphan_records(folder):
                record_file.unlink()
                print(f"removed orphan record {record_file}")
        return
    for target in args.outputs:
        print("\n".join(trace(target, args.root)))
