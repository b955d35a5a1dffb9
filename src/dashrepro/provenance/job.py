"""Provenance records written from the Snakemake job itself, for every output of the job.

A rule script does not pick what to record: ``record_job`` reads the ``snakemake`` object the
script directive injects and records, beside each declared output, the rule, its wildcards,
every input with its sha256, the files of a model folder the job reads beside its declared
input (``read_files``: an adapter's or a base model's config, tokenizer files, chat template;
``provenance.model_files``) with theirs, every param, the code version, the host and its
floating-point kernels (``numerics``), the start and end time, the SLURM job id when there is
one, what the script returned as ``extra`` (the measured seconds of generation and grading,
which the data files do not hold), and the output's own sha256. ``rules/scripts/_bootstrap.run`` calls it after the
script's ``main`` returns, so a failed job writes no record. Before the work, ``check_inputs``
refuses an input whose content is not what the job that made it wrote (a swapped adapter, an
edited table), naming the file: Snakemake sees only that it is newer and would rerun on it.

    record_job(snakemake, started_utc="2026-11-23T19:00:00+00:00", extra={"seconds": 12.3})
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from collections.abc import Mapping
from typing import Any

from dashrepro.numerics import kernel_record
from dashrepro.provenance.model_files import model_folder_files
from dashrepro.provenance.records import changed_inputs, code_version, hash_inputs, write_record


class ChangedInputError(RuntimeError):
    """An input of a job is not the file the job that made it wrote."""


def check_inputs(snakemake) -> dict[str, list[dict]]:
    """The job's inputs with their sha256 (for its record), after checking each against the
    sha256 its maker recorded; ``ChangedInputError`` names every one that differs."""
    hashed = hash_inputs(named_files(snakemake.input))
    changed = changed_inputs(hashed)
    if changed:
        listing = "\n  ".join(changed)
        raise ChangedInputError(
            f"rule {snakemake.rule}: {len(changed)} input(s) changed since the job that made "
            f"them:\n  {listing}\nRestore the file, or make it again "
            f"(snakemake --forcerun <that rule> <the file>) and rerun."
        )
    return hashed


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _named(namedlist, unnamed: str) -> dict[str, Any]:
    """A Snakemake ``Namedlist`` as ``{name: value}``; items without a name go under ``unnamed``."""
    named = {name: value for name, value in namedlist.items()}
    covered = set()
    for value in named.values():
        covered.update(map(str, value) if isinstance(value, list | tuple) else [str(value)])
    rest = [item for item in namedlist if isinstance(item, str) and item not in covered]
    if rest:
        named[unnamed] = rest
    return named


def named_files(namedlist, unnamed: str = "input") -> dict[str, list[str]]:
    """A Snakemake input/output list as ``{name: [paths]}`` (a single file as a one-item list;
    files without a name under ``unnamed``)."""
    return {
        name: [str(value)] if isinstance(value, str) else [str(v) for v in value]
        for name, value in _named(namedlist, unnamed).items()
    }


def job_record(
    snakemake,
    started_utc: str,
    extra: Mapping[str, Any] | None = None,
    inputs: Mapping[str, list[dict]] | None = None,
) -> dict:
    """The record of one finished job (the same for each of its outputs); ``inputs``: the
    inputs as ``check_inputs`` hashed them (hashed here when not given)."""
    declared = named_files(snakemake.input)
    record = {
        "stage": snakemake.rule,
        "rule": snakemake.rule,
        "wildcards": dict(snakemake.wildcards.items()),
        "inputs": dict(inputs) if inputs is not None else hash_inputs(declared),
        # What loading a model read beside the declared file: audited like the inputs.
        "read_files": hash_inputs(model_folder_files(declared)),
        "params": _named(snakemake.params, "params"),
        "outputs": [str(path) for path in snakemake.output],
        "threads": snakemake.threads,
        "code": code_version(),
        "host": socket.gethostname(),
        "numerics": kernel_record(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "started_utc": started_utc,
        "finished_utc": utc_now(),
    }
    if extra:
        record["extra"] = dict(extra)
    return record


def record_job(
    snakemake,
    started_utc: str,
    extra: Mapping[str, Any] | None = None,
    inputs: Mapping[str, list[dict]] | None = None,
) -> dict:
    """Write the job's record beside every one of its outputs; return it."""
    record = job_record(snakemake, started_utc, extra, inputs)
    for output in snakemake.output:
        write_record(output, record)
    return record
