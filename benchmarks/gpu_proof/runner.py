"""The GPU proof's runner: each stage in a subprocess of its own (this package run again with
``--stage NAME``) under its time limit, ``--stages`` in order and then ``--lanes`` side by side,
the summary written after every stage; and the measurements' JSON lines, one appended the
moment it is made (``record``), which a stage killed or crashed still returns (``recorded``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .shapes import ROOT, STAGE_LIMITS
from .summary import summary_rows, write_json

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_wheels  # noqa: E402  (the wheels a bare GPU machine lacks: scripts/gpu_wheels.py)

#: What runs one stage (``--stage NAME`` and the run's own flags follow): this package's
#: ``__main__`` as a script, as on the command line.
STAGE_COMMAND = (sys.executable, str(Path(__file__).resolve().parent))
#: Every measurement of every stage, one JSON object a line, appended as it is made.
MEASUREMENTS = "measurements.jsonl"
#: What the stages log through ``TORCH_LOGS``: recompiles, graph breaks, CUDA-graph skips.
TORCH_LOGS = "recompiles,graph_breaks,cudagraphs"


def record(out: str | Path, stage: str, section: str, values: dict) -> None:
    """One measurement appended to ``<out>/measurements.jsonl`` at once: a single ``write`` of
    one whole line to a file opened for appending (so that lines of stages running side by side
    never interleave), flushed to the disk before the stage goes on. A stage killed after it
    keeps the line."""
    line = json.dumps({"stage": stage, "section": section, "time": round(time.time(), 1),
                       **values}, default=str) + "\n"  # fmt: skip
    fd = os.open(Path(out) / MEASUREMENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def recorded(out: str | Path, stage: str, since: float = 0.0) -> list[dict]:
    """The measurements ``stage`` recorded at or after ``since`` (a torn last line skipped)."""
    path = Path(out) / MEASUREMENTS
    if not path.exists():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("stage") == stage and entry.get("time", 0) >= since:
            found.append(entry)
    return found


def run_stage(args, stage: str, env: dict, limit: float, extra: tuple = ()) -> dict:
    """``stage`` in a subprocess for at most ``limit`` seconds; its JSON, or the error and the
    end of its output."""
    result_file = Path(args.out) / f"{stage}.json"
    result_file.unlink(missing_ok=True)
    command = [*STAGE_COMMAND, "--stage", stage, "--out", args.out, "--shape", args.shape,
               "--backend", args.backend, "--teacher-context", args.teacher_context,
               "--kv-budget-gib", str(args.kv_budget_gib)]  # fmt: skip
    if args.benchmark:
        command += ["--benchmark", args.benchmark]
    if args.config_json:
        command += ["--config-json", args.config_json]
    command += list(extra)
    log = Path(args.out) / f"{stage}.log"
    t0 = time.perf_counter()
    since = round(time.time(), 1) - 0.1
    with open(log, "w") as handle:
        try:
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT,
                                  env={**env, "TORCH_LOGS": TORCH_LOGS},
                                  timeout=limit).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            code = "timeout"
    seconds = round(time.perf_counter() - t0, 1)
    # The result is written last: a stage cut off after it (while the process exits) measured
    # everything, and says that it was cut.
    if result_file.exists() and code in (0, "timeout"):
        cut = {} if code == 0 else {"note": "cut off at its limit after writing its result"}
        return {"ok": True, "seconds": seconds, **cut, **json.loads(result_file.read_text())}
    tail = log.read_text(errors="replace")[-2500:]
    # A stage killed or crashed keeps what it measured before.
    return {"ok": False, "seconds": seconds, "exit": code, "log_tail": tail,
            "measurements": recorded(args.out, stage, since)}  # fmt: skip


def run_stages(args, out: Path) -> int:
    """--stages in order, then --lanes side by side, each stage in its own process; the summary
    is written after every stage. 0 when every stage ran."""
    started = time.perf_counter()
    env = dict(os.environ)
    if args.wheels:
        target = Path(tempfile.mkdtemp(prefix="gpu_proof_site_"))
        gpu_wheels.install(Path(args.wheels), target)
        env["PYTHONPATH"] = os.pathsep.join([str(target), env.get("PYTHONPATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("PYTHONUNBUFFERED", "1")
    results: dict = {}
    lock = threading.Lock()

    def run_in_order(stages: list[str], beside: list[str]) -> None:
        for stage in stages:
            limit = float(STAGE_LIMITS[stage]) * args.limit_factor
            if args.deadline_s is not None:
                left = args.deadline_s - (time.perf_counter() - started)
                if left < 10:
                    results[stage] = {"ok": False, "seconds": 0,
                                      "exit": "skipped: past the deadline"}  # fmt: skip
                    continue
                limit = min(limit, left)
            print(f"== {stage}", flush=True)
            # Beside train_opsd, the evaluation waits for its first checkpoint.
            extra = (
                ("--wait-for-checkpoint",) if stage == "evaluate" and "train_opsd" in beside else ()
            )
            try:
                result = run_stage(args, stage, env, limit, extra)
            except Exception as error:  # the runner itself failed: recorded, the next runs
                result = {"ok": False, "seconds": 0, "exit": f"{type(error).__name__}: {error}",
                          "log_tail": "", "measurements": recorded(args.out, stage)}  # fmt: skip
            if beside:
                result["beside"] = beside
            with lock:
                results[stage] = result
                print(json.dumps(result, default=str)[:1500], flush=True)
                # After every stage: a run cut short still leaves what it measured.
                write_json(out / "summary.json", results)

    run_in_order([s for s in args.stages.split(",") if s], [])
    lanes = [lane.split(",") for lane in (args.lanes or "").split("|") if lane]
    for stage in sum(lanes, []):  # a stage beside another reads its result file, not a stale one
        (out / f"{stage}.json").unlink(missing_ok=True)
    threads = [
        threading.Thread(target=run_in_order,
                         args=(lane, [s for other in lanes if other is not lane for s in other]))
        for lane in lanes
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = {stage: results[stage] for stage in [*args.stages.split(","), *sum(lanes, [])]
               if stage in results}  # fmt: skip
    write_json(out / "summary.json", results)
    print("\n".join(summary_rows(results)))
    return 0 if all(r.get("ok") for r in results.values()) else 1
