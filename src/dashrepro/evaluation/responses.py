"""Sampling the responses of one checkpoint (or the base model) on the benchmarks.

For every problem of every benchmark, ``k`` responses are sampled in thinking mode (the student
prompt) -- or, for the privileged teacher's accuracy, with the teacher prompt and no adapter --
through the configured backend (``dashrepro.sampling``), one row per response, in shards of
problems: a rerun reuses the finished shards made from the same inputs and says so in its log.
The frame holds data only (the seconds go into the caller's ``timing`` mapping, then the
provenance record), so the same generation done twice writes the same bytes. Grading is the
next stage (``evaluation.grade``), summarising the one after (``evaluation.scoring``).

    responses = generate_policy_responses(base_model_dir=..., adapter_dir=..., benchmark_files=...,
                                          generation=config["evaluation"], checkpoint="...")
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from dashrepro.data.prompts import (
    EVALUATION_INSTRUCTIONS,
    TeacherProtocol,
    render_student_prompt,
)
from dashrepro.heartbeat import heartbeat
from dashrepro.hub import source_fingerprint
from dashrepro.io import (
    UnreadableFileError,
    read_parquet,
    read_parquet_record,
    sha256_path,
    write_parquet,
)
from dashrepro.sampling import SamplingSettings
from dashrepro.settings import GenerationSettings

RESPONSE_COLUMNS = [
    "checkpoint",
    "benchmark",
    "problem_id",
    "sample_index",
    "seed",
    "prompt_role",
    "response",
    "n_tokens",
    "finish_reason",
    "gold",
]
SAMPLE_COLUMNS = [
    *RESPONSE_COLUMNS,
    "extracted",
    "correct",
    "grading_path",
    "grading_normalisation",
]


def shard_seed(base_seed: int, shard_key: str) -> int:
    """A generation seed for one shard, fixed by the base seed and the shard's problems."""
    digest = hashlib.sha256(f"{base_seed}:{shard_key}".encode()).hexdigest()
    return int(digest[:8], 16)


def adapter_fingerprint(adapter_dir: str | Path) -> str:
    """sha256 of what a PEFT adapter folder holds: its config and its weights (not the
    provenance record or anything else beside them)."""
    folder = Path(adapter_dir)
    return _digest(
        [name, sha256_path(folder / name)]
        for name in ("adapter_config.json", "adapter_model.safetensors")
        if (folder / name).is_file()
    )


def shard_problems_digest(bench: str, rows) -> str:
    """sha256 of what a shard's samples are drawn for: each problem's id, text, solution, answer."""
    payload = [
        [bench, str(r.id), str(r.problem), str(r.reference_solution), str(r.answer)] for r in rows
    ]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


def _digest(items) -> str:
    return hashlib.sha256(json.dumps(list(items)).encode()).hexdigest()


def _shard_mismatch(stored: dict | None, wanted: dict) -> str | None:
    """Why a kept shard cannot be reused (None when every recorded input matches)."""
    if stored is None:
        return "it has no record of what it was made from (written by an older version)"
    reasons = []
    for key, value in wanted.items():
        if stored.get(key) != value:
            before = json.dumps(stored.get(key), sort_keys=True)
            now = json.dumps(value, sort_keys=True)
            reasons.append(f"{key} changed ({before[:80]} when written, {now[:80]} now)")
    return "; ".join(reasons) or None


def _reuse_shard(path: Path, wanted: dict, log) -> pd.DataFrame | None:
    """The kept shard at ``path`` if it was made from exactly ``wanted``, else None (deleted,
    with a log line naming what changed).

    A shard's record holds everything its samples were made from: the sampling settings, the
    content hash of the adapter's files, the base model's fingerprint (its folder's content
    hash, or its hub id), the hashes of the shard's problems and of the rendered prompts; so a
    retrained adapter, an edited benchmark or a new prompt template is never reused, and a
    resumed job's result equals an uninterrupted run's."""
    try:
        reason = _shard_mismatch(read_parquet_record(path), wanted)
        frame = None if reason else read_parquet(path)
    except UnreadableFileError as exc:
        reason = f"it cannot be read ({exc})"
    if reason is None and list(frame.columns) != RESPONSE_COLUMNS:
        reason = f"its columns {list(frame.columns)} are not {RESPONSE_COLUMNS}"
    if reason is None:
        return frame
    if log is not None:
        log(f"discarding kept shard {path.name}: {reason}")
    path.unlink(missing_ok=True)
    return None


def shard_prompts(
    tokenizer, rows, prompt_role: str, protocol: TeacherProtocol | None, instruction: str | None
) -> list[str]:
    """One rendered prompt per problem: the student's (with the evaluation ``instruction``),
    the privileged teacher's (``teacher``: the protocol's message), or the teacher's in another
    of its views (``teacher:<view>``, a name of ``data.views.TEACHER_VIEWS``, e.g.
    ``teacher:answer_only``: what AVSD's teacher reads)."""
    if prompt_role == "student":
        return [render_student_prompt(tokenizer, row.problem, instruction) for row in rows]
    from dashrepro.data.views import TEACHER_VIEWS, render_teacher_view

    views = {"teacher": "full", **{f"teacher:{view}": view for view in TEACHER_VIEWS}}
    if prompt_role in views:
        return [
            render_teacher_view(
                tokenizer, views[prompt_role], row.problem, row.reference_solution,
                str(row.answer), protocol,
            )
            for row in rows
        ]  # fmt: skip
    raise ValueError(
        "prompt_role must be 'student', 'teacher' or 'teacher:<view>' (a view of "
        f"dashrepro.data.views.TEACHER_VIEWS), got {prompt_role!r}"
    )


def shard_frame(samples, rows, k: int, shard_seed_value: int, settings: Mapping) -> pd.DataFrame:
    """The response rows of one shard: ``k`` samples per problem, in problem order."""
    meta = [(row.id, index, str(row.answer)) for row in rows for index in range(k)]
    return pd.DataFrame(
        [
            {
                "checkpoint": settings["checkpoint"],
                "benchmark": settings["benchmark"],
                "problem_id": pid,
                "sample_index": index,
                # vLLM: the request's own seed; HF generate: the shard's.
                "seed": shard_seed_value if sample.seed is None else sample.seed,
                "prompt_role": settings["role"],
                "response": sample.text,
                "n_tokens": len(sample.token_ids),
                "finish_reason": sample.finish_reason,
                "gold": gold,
            }
            for sample, (pid, index, gold) in zip(samples, meta, strict=True)
        ],
        columns=RESPONSE_COLUMNS,
    )


def generate_samples(
    sampler,
    benchmarks: Mapping[str, pd.DataFrame],
    *,
    adapter_dir: str | Path | None = None,
    k: int,
    sampling: SamplingSettings,
    seed: int,
    checkpoint: str,
    prompt_role: str = "student",
    protocol: TeacherProtocol | None = None,
    shard_size: int = 30,
    shard_dir: str | Path | None = None,
    base_model_fingerprint: str | None = None,
    instruction: str | None = None,
    log=None,
    timing: dict | None = None,
) -> pd.DataFrame:
    """k sampled responses per problem of each benchmark, one row per sample, not yet graded.

    ``sampler``: a ``sampling`` backend; ``adapter_dir``: the checkpoint it samples (None: the
    base model). Problems are sampled in shards of ``shard_size`` problems of one benchmark,
    each seeded from ``seed`` and its problem ids; with a ``shard_dir`` every finished shard is
    kept there for a rerun after a killed job (``_reuse_shard``), and a rerun that finds kept
    shards logs how many it reused. ``timing``: a mapping that receives the seconds spent
    sampling (``generation_seconds``, added to what it holds), which the frame does not carry."""
    shards = _shards(benchmarks, shard_size)
    settings = {"k": k, "sampling": asdict(sampling), "seed": seed, "checkpoint": checkpoint,
                "role": prompt_role}  # fmt: skip
    inputs = {
        "settings": settings,
        "adapter": adapter_fingerprint(adapter_dir) if shard_dir and adapter_dir else None,
        "base_model": base_model_fingerprint,
    }
    # Every kept shard is judged before any is generated, so that the log says first what a
    # resumed job reuses and what is left to do.
    planned = []
    for shard_index, (bench, rows) in enumerate(shards):
        prompts = shard_prompts(sampler.tokenizer, rows, prompt_role, protocol, instruction)
        wanted = {
            **inputs,
            "problems": shard_problems_digest(bench, rows),
            "prompts": _digest(prompts),
        }
        kept = Path(shard_dir) / f"shard-{shard_index:04d}.parquet" if shard_dir else None
        found = kept is not None and kept.exists()
        reused = _reuse_shard(kept, wanted, log) if found else None
        planned.append((shard_index, bench, rows, prompts, wanted, kept, found, reused))
    if log is not None:
        resume_line = _resume_line(planned, len(shards))
        if resume_line:
            log(resume_line)
    frames = []
    generation_seconds = 0.0
    for shard_index, bench, rows, prompts, wanted, kept, _, reused in planned:
        if reused is not None:
            frames.append(reused)
            continue
        this_seed = shard_seed(seed, f"{bench}:" + ",".join(str(r.id) for r in rows))
        started = time.perf_counter()
        label = f"shard {shard_index + 1}/{len(shards)} ({bench}, {len(prompts) * k} requests)"
        samples = _sample_shard(sampler, prompts, k, sampling, this_seed, adapter_dir, label, log)
        generation_seconds += time.perf_counter() - started
        shard = shard_frame(samples, rows, k, this_seed, {**settings, "benchmark": bench})
        if kept is not None:
            write_parquet(kept, shard, record=wanted)
        if log is not None:
            log(f"shard {shard_index + 1}/{len(shards)} ({bench}, {len(rows)} problems) generated")
        frames.append(shard)
    if timing is not None:
        timing["generation_seconds"] = timing.get("generation_seconds", 0.0) + generation_seconds
    return pd.concat(frames, ignore_index=True)[RESPONSE_COLUMNS]


def _resume_line(planned, total: int) -> str | None:
    """The log line of a rerun that found kept shards: how many it reused, how many it
    discarded (each named in a line of its own), how many are left to generate; None when
    there were none (a first attempt)."""
    found = sum(1 for *_, was_kept, _ in planned if was_kept)
    if not found:
        return None
    reused = [entry[0] for entry in planned if entry[-1] is not None]
    todo = total - len(reused)
    names = ", ".join(f"shard-{index:04d}" for index in reused)
    return (
        f"resuming: {len(reused)} of {total} shards finished, reused"
        + (f" ({names})" if reused else "")
        + (f"; {found - len(reused)} kept shard(s) discarded" if found > len(reused) else "")
        + f"; {todo} to generate"
    )


def _shards(benchmarks: Mapping[str, pd.DataFrame], shard_size: int) -> list[tuple[str, list]]:
    """(benchmark, rows) of every shard: ``shard_size`` problems at a time, within a benchmark."""
    shards = []
    for bench, frame in benchmarks.items():
        rows = list(frame.itertuples(index=False))
        for start in range(0, len(rows), shard_size):
            shards.append((bench, rows[start : start + shard_size]))
    return shards


def _sample_shard(sampler, prompts, k: int, sampling, seed: int, adapter_dir, label: str, log):
    """k samples of each prompt, problem by problem, with a heartbeat in the log while it runs."""
    requests = [prompt for prompt in prompts for _ in range(k)]
    with heartbeat(log or (lambda _: None), label):
        return sampler.sample(requests, sampling, seed, adapter_dir=adapter_dir)


def has_reference_solutions(benchmark: pd.DataFrame) -> bool:
    """Whether every problem has a reference solution (the privileged teacher's context)."""
    solutions = benchmark["reference_solution"]
    return bool(len(solutions)) and bool(
        solutions.map(lambda s: isinstance(s, str) and s.strip() != "").all()
    )


def make_generation_sampler(base_model_dir: str | Path, generation: GenerationSettings | Mapping):
    """The sampler of the generation's backend for ``base_model_dir``, with its engine options.
    A vLLM engine costs seconds to minutes to start: a job that samples several prompt roles of
    one base model makes one and passes it to each call. A device this machine lacks is named
    first, before any model loads (``sampling.devices``)."""
    from dashrepro.sampling import make_sampler
    from dashrepro.sampling.devices import check_device

    generation = GenerationSettings.from_config(generation)
    check_device(generation.backend, generation.device)
    return make_sampler(
        generation.backend, base_model=str(base_model_dir), **generation.engine_options()
    )


def generate_policy_responses(
    *,
    base_model_dir: str | Path,
    adapter_dir: str | Path | None,
    benchmark_files: Mapping[str, str | Path],
    generation: GenerationSettings | Mapping,
    checkpoint: str,
    prompt_role: str = "student",
    protocol: TeacherProtocol | None = None,
    shard_dir: str | Path | None = None,
    log=None,
    sampler=None,
    timing: dict | None = None,
) -> pd.DataFrame:
    """Sample ``generation.samples_per_problem`` responses per benchmark problem.

    The privileged teacher (``prompt_role="teacher"`` or ``"teacher:<view>"``) is the base
    model without the adapter. ``sampler``: one ``make_generation_sampler`` made for this base
    model, shared by several calls (absent: one made for this call). ``timing``: receives the
    seconds spent sampling (``generate_samples``).
    """
    generation = GenerationSettings.from_config(generation)
    if sampler is None:
        sampler = make_generation_sampler(base_model_dir, generation)
    benchmarks = {name: read_parquet(path) for name, path in benchmark_files.items()}
    return generate_samples(
        sampler,
        benchmarks,
        # The privileged teacher is the base model without the adapter.
        adapter_dir=adapter_dir if prompt_role == "student" else None,
        k=generation.samples_per_problem,
        sampling=generation.sampling(),
        seed=generation.seed,
        checkpoint=checkpoint,
        prompt_role=prompt_role,
        protocol=protocol,
        shard_size=generation.shard_size,
        shard_dir=shard_dir,
        base_model_fingerprint=source_fingerprint(base_model_dir) if shard_dir else None,
        instruction=EVALUATION_INSTRUCTIONS[generation.prompt],
        log=log,
        timing=timing,
    )
