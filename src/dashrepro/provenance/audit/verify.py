"""Checks on a chain: every recorded input hash against the file as it is now (the declared
inputs, the model folders' files each job read beside them, the files a hub snapshot's record
lists), every number derived again (``regrade``: from the raw responses), one code version and
configuration."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dashrepro.hub import SNAPSHOT_RECORD
from dashrepro.io import read_json, sha256_path
from dashrepro.provenance.audit.chain import (
    CellChain,
    output_record,
    record_inputs,
)

#: Relative tolerance when a number is derived again (a CSV holds floats to full precision).
TOLERANCE = 1e-9
#: Grading paths whose verdict was reached at a limit (time) or by a grader error.
LIMIT_PATHS = ("timeout", "error")


@dataclass
class Finding:
    """One problem on a chain: ``kind`` (changed_input, changed_output, stale_input,
    missing_file, mismatch, regrade_mismatch, regrade_at_limit, changed_grading, mixed_code,
    mixed_config, fewer_seeds), the file
    it concerns, and what."""

    kind: str
    path: str
    detail: str

    def line(self) -> str:
        return f"[{self.kind}] {self.path}: {self.detail}"


def _records_on(root: Path, chain: CellChain) -> list[tuple[str, dict]]:
    """(output, record) of every job on the chain, once each: the table, each seed's selection,
    and for every candidate checkpoint (the selection compared them all) its grading, its
    generation and the training run that wrote its adapter."""
    found, seen = [], set()

    def add(output: str | None) -> dict | None:
        record = output_record(root, output) if output else None
        if record and output not in seen:
            seen.add(output)
            found.append((output, record))
        return record

    add(chain.table_csv)
    for seed in chain.seeds:
        add(seed.selection)
        for samples in seed.samples.values():
            for responses in record_inputs(add(samples), "responses"):
                for adapter in record_inputs(add(responses["path"]), "adapter"):
                    add(adapter["path"])
        for output in (seed.responses, seed.adapter):
            add(output)
    return found


def _parse_time(text: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def check_hashes(root: str | Path, chain: CellChain, cache: dict | None = None) -> list[Finding]:
    """Every recorded input hash on the chain against the file now; a file written after the job
    that read it finished is reported as stale even where its hash still agrees; every output of
    those jobs against the sha256 it was written with (``changed_output``)."""
    root, cache = Path(root), {} if cache is None else cache
    findings: list[Finding] = []
    seen: set[str] = set()
    for output, record in _records_on(root, chain):
        finished = _parse_time(record.get("finished_utc"))
        # Declared inputs, then the model folders' files the job read beside them.
        read = [(name, "input", items) for name, items in (record.get("inputs") or {}).items()]
        read += [(name, "file read beside an input", items)
                 for name, items in (record.get("read_files") or {}).items()]  # fmt: skip
        for name, what, items in read:
            for item in items:
                if item.get("sha256") is None:
                    continue  # a name, not a file (a hub id), recorded as given
                path = root / item["path"]
                if not path.exists():
                    findings.append(
                        Finding("missing_file", item["path"], f"{what} {name!r} of {output}")
                    )
                    continue
                now = _hashed(root, item["path"], cache)
                if now != item["sha256"]:
                    findings.append(Finding(
                        "changed_input", item["path"],
                        f"sha256 {now[:12]}… now, {item['sha256'][:12]}… when "
                        f"{record.get('rule')} made {output} ({what} {name!r})",
                    ))  # fmt: skip
                elif finished is not None and path.stat().st_mtime > finished + 1.0:
                    findings.append(Finding(
                        "stale_input", item["path"],
                        f"written after {record.get('rule')} made {output} (same content)",
                    ))  # fmt: skip
                if path.name == SNAPSHOT_RECORD:
                    findings.extend(_snapshot_files(root, item["path"], cache))
        findings.extend(_changed_outputs(root, record, cache, seen))
    return findings


def _snapshot_files(root: Path, snapshot: str, cache: dict) -> list[Finding]:
    """Every file a hub snapshot's record lists (weights, config, tokenizer, chat template)
    against the folder now: a job records the snapshot's record, not gigabytes of weights
    hashed again, so the audit is where a file edited in the folder after its download shows.
    Once per snapshot (``cache``)."""
    key = f"snapshot:{snapshot}"
    if key in cache:
        return []
    cache[key] = True
    try:
        listed = dict(read_json(root / snapshot).get("files") or {})
    except (OSError, ValueError, AttributeError) as exc:
        return [Finding("missing_file", snapshot, f"the snapshot's record cannot be read ({exc})")]
    findings = []
    folder = Path(snapshot).parent
    for name, digest in sorted(listed.items()):
        relative = str(folder / name)
        path = root / relative
        if not path.is_file():
            findings.append(Finding("missing_file", relative, f"listed in {snapshot}"))
            continue
        now = _hashed(root, relative, cache)
        if now != digest:
            findings.append(Finding(
                "changed_input", relative,
                f"sha256 {now[:12]}… now, {str(digest)[:12]}… when downloaded "
                f"({snapshot})",
            ))  # fmt: skip
    return findings


def _changed_outputs(root: Path, record: Mapping, cache: dict, seen: set) -> list[Finding]:
    """Every output of a job on the chain (a table's CSV, Markdown and LaTeX; a run's
    adapters) against the sha256 its own record says the job wrote."""
    findings = []
    for output in record.get("outputs") or []:
        if output in seen:
            continue
        seen.add(output)
        own = output_record(root, output)
        written = (own or {}).get("output_sha256")
        path = root / output
        if not written or not path.exists():
            continue
        now = _hashed(root, output, cache)
        if now != written:
            findings.append(Finding(
                "changed_output", output,
                f"sha256 {now[:12]}… now, {written[:12]}… when {record.get('rule')} "
                "wrote it",
            ))  # fmt: skip
    return findings


def _hashed(root: Path, relative: str, cache: dict) -> str:
    """The sha256 of ``root / relative``, computed once per audit (``cache``)."""
    if relative not in cache:
        cache[relative] = sha256_path(root / relative)
    return cache[relative]


def _close(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def rederive(root: str | Path, chain: CellChain, regrade: Mapping | None = None) -> list[Finding]:
    """Summaries, selection and the cell derived again from the graded samples (``regrade``,
    the experiment config's grading settings: the selected checkpoints' samples graded again
    from their raw responses first, with those settings)."""
    import pandas as pd

    from dashrepro.analysis.selection import select_best_checkpoint
    from dashrepro.evaluation.scoring import summarize_samples, summary_differences
    from dashrepro.io import read_parquet

    root = Path(root)
    findings, per_seed = [], []
    for seed in chain.seeds:
        summaries = {}
        for step, path in sorted(seed.samples.items()):
            samples = read_parquet(root / path)
            summaries[step] = summarize_samples(samples, chain.benchmarks)
            stored = root / seed.summaries.get(step, "")
            if seed.summaries.get(step) and stored.is_file():
                for line in summary_differences(
                    read_json(stored), summaries[step], chain.benchmarks
                ):
                    findings.append(Finding("mismatch", seed.summaries[step], line))
            if regrade is not None and step == seed.selected_step and seed.responses:
                findings += _regrade(root, seed.responses, path, samples, regrade)
        again = select_best_checkpoint(summaries, chain.benchmarks)
        if again["selected_step"] != seed.selected_step:
            findings.append(Finding(
                "mismatch", seed.selection,
                f"selected step {seed.selected_step}, the samples select {again['selected_step']}",
            ))  # fmt: skip
        per_seed.append(again["benchmark_scores"])
    if not per_seed:
        return [*findings, Finding("missing_file", chain.table_csv, "no selection on the chain")]
    frame = pd.DataFrame(per_seed)
    if chain.column == "average":
        value = float(frame[chain.benchmarks].mean().mean())
        std = math.nan
    else:
        value = float(frame[chain.column].mean())
        std = float(frame[chain.column].std(ddof=1)) if len(frame) > 1 else math.nan
    if not _close(value, chain.value) or not _close(std, chain.std):
        findings.append(Finding(
            "mismatch", chain.table_csv,
            f"cell {chain.value!r} ± {chain.std!r}, the samples give {value!r} ± {std!r}",
        ))  # fmt: skip
    return findings


def _regrade(
    root: Path, responses_path: str, samples_path: str, samples, grading: Mapping
) -> list[Finding]:
    """The samples' verdicts against their responses graded again with ``grading`` (the config's
    settings, not the samples' own record, which anyone can edit); a record that says the
    samples were graded otherwise is a finding of its own."""
    from dashrepro.evaluation.grade import grade_samples
    from dashrepro.io import read_parquet
    from dashrepro.settings import GradingSettings

    record = output_record(root, samples_path) or {}
    recorded = (record.get("params") or {}).get("grading")
    findings = []
    if recorded is not None and dict(recorded) != dict(grading):
        findings.append(Finding(
            "changed_grading", samples_path,
            f"graded with {dict(recorded)}, the config says {dict(grading)}",
        ))  # fmt: skip
    settings = GradingSettings.from_config(grading)
    regraded = grade_samples(read_parquet(root / responses_path), **settings.to_dict())
    keys = ["benchmark", "problem_id", "prompt_role", "sample_index"]
    if len(regraded) != len(samples):
        return [*findings, Finding("regrade_mismatch", samples_path,
                                   f"{len(samples)} graded rows, {len(regraded)} responses")]  # fmt: skip
    left = samples.sort_values(keys).reset_index(drop=True)
    right = regraded.sort_values(keys).reset_index(drop=True)
    differ = left["correct"].astype(bool) != right["correct"].astype(bool)
    # A verdict reached at a limit (math-verify's timeout, the hard limit, a grader error) can
    # change with the machine's load: told apart from a real disagreement of the grader.
    at_limit = left["grading_path"].isin(LIMIT_PATHS) | right["grading_path"].isin(LIMIT_PATHS)
    for kind, rows, what in (
        ("regrade_mismatch", differ & ~at_limit, "grades differ from the responses' regrade"),
        ("regrade_at_limit", differ & at_limit,
         "grades differ from the regrade where one of them was reached at a time limit or a "
         "grader error (the machine's load can change those)"),
    ):  # fmt: skip
        if rows.any():
            where = left.loc[rows, keys].head(3).to_dict("records")
            findings.append(Finding(kind, samples_path, f"{int(rows.sum())} {what}, e.g. {where}"))
    return findings


def consistency(root: str | Path, chain: CellChain) -> list[Finding]:
    """Chains mixing code versions or training configurations, and missing seeds."""
    root = Path(root)
    findings = []
    versions = {}
    for output, record in _records_on(root, chain):
        code = record.get("code") or {}
        versions.setdefault((code.get("git_commit"), code.get("git_dirty")), output)
    if len(versions) > 1:
        listing = "; ".join(
            f"{c[0] and c[0][:10]}{' dirty' if c[1] else ''} ({o})" for c, o in versions.items()
        )
        findings.append(Finding("mixed_code", chain.table_csv, f"the chain's jobs ran {listing}"))
    configs = {}
    for seed in chain.seeds:
        params = dict((seed.run_record or {}).get("params") or {})
        key = repr(
            {k: params.get(k) for k in ("method", "train", "lora", "protocol", "base_model")}
        )
        configs.setdefault(key, []).append(seed.seed)
    if len(configs) > 1:
        findings.append(Finding(
            "mixed_config", chain.table_csv,
            f"seeds {list(configs.values())} were trained with different configurations",
        ))  # fmt: skip
    have = [s.seed for s in chain.seeds]
    if chain.declared_seeds and len(have) < len(chain.declared_seeds):
        findings.append(Finding(
            "fewer_seeds", chain.table_csv,
            f"{len(have)} seeds {have}, the run matrix declares {chain.declared_seeds}",
        ))  # fmt: skip
    return findings


def verify(root: str | Path, chain: CellChain, regrade: Mapping | None = None) -> list[Finding]:
    """Every check on one cell: hashes, derivation (and regrading with ``regrade``, the
    config's grading settings), consistency."""
    if chain.copied_from:
        return []
    return [*check_hashes(root, chain), *rederive(root, chain, regrade), *consistency(root, chain)]
