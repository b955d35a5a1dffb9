"""Provenance records written from the Snakemake job itself, for every output of the job.

A rule script does not pick what to record: ``record_job`` reads the ``snakemake`` object the
script directive injects and records, beside each declared output, the rule, its wildcards,
every input with its sha256, every param, the code version, the host and its floating-point kernels (``numerics``), the start and end time,
the SLURM job id when there is one, and what the script returned as ``extra`` (e.g. generation
seconds). ``rules/scripts/_bootstrap.run`` calls it after the script's ``main`` returns, so a
failed job writes no record.

    record_job(snakemake, started_utc="2026-11-23T19:00:00+00:00", extra={"seconds": 12.3})
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from collections.abc import Mapping
from typing import Any

from dashrepro.numerics import kernel_record
from dashrepro.provenance.records import code_version, hash_inputs, write_record


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


def job_record(snakemake, started_utc: str, extra: Mapping[str, Any] | None = None) -> dict:
    """The record of one finished job (the same for each of its outputs)."""
    record = {
        "stage": snakemake.rule,
        "rule": snakemake.rule,
        "wildcards": dict(snakemake.wildcards.items()),
        "inputs": hash_inputs(named_files(snakemake.input)),
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


def record_job(snakemake, started_utc: str, extra: Mapping[str, Any] | None = None) -> dict:
    """Write the job's record beside every one of its outputs; return it."""
    record = job_record(snakemake, started_utc, extra)
    for output in snakemake.output:
        write_record(output, record)
    return record
