"""The workflow on a real SLURM cluster: one table of the embedded default through the CI variant
of the cluster profile, with a preemption notice and a kill without notice injected (marked
slow: ~5-7 minutes on 2 CPUs).

The cluster is one real node (slurmctld, slurmd, slurmdbd on MariaDB for `sacct`, munge; fake
GPUs as GRES) made from Debian's packages by ``scripts/ci_slurm_up.sh``. The module fixture
starts it where the machine can (root and apt-get) and stops it with ``scripts/ci_slurm_down.sh``
if it started it, and removes SLURM's client again from a machine that had none (see the
fixture); elsewhere these tests are skipped with the reason (``DASHREPRO_NO_SLURM=1`` skips them
too). The profile is ``profiles/slurm-ci``: ``profiles/slurm-a800`` with the test
cluster's partitions, account and sizes, and nothing else
(``test_ci_profile_differs_only_in_partition_account_and_sizes``, not slow).

The DAG of ``results/e2e/tables/main_results.csv`` (``smoke_config``, the table cut to METHODS,
training raised to STEPS steps with a training state after every step) runs twice at once:
through SLURM and locally (``--cores 2``, no profile). While the SLURM run trains, one training
job gets ``scancel --signal=TERM`` (SLURM's notice to the job steps: the trainer saves a state and
exits 75) and every process of another gets ``kill -9`` (a lost node, an OOM kill: no notice),
each once its run has the training state of step INTERRUPT_AFTER. Checked on SLURM's own records
(``sacct``: state, partition, account, comment, the ``sbatch`` line): every job that is not a
localrule, and only those, was submitted with ``sbatch`` -- grading packed into group jobs -- on
its partition and account; both interrupted jobs failed, were resubmitted as new SLURM jobs and
resumed from their last training state; every adapter and the table equal the local,
uninterrupted run's byte for byte.

The test passes ``--slurm-init-seconds-before-status-checks 5`` (when the executor first asks
``sacct``, and its polling interval, which grows by 10 s per check that finds nothing finished;
default 40 s): a harness setting that only shortens the waits, not part of the profile.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from dashrepro.embedded.smoke_config import smoke_config

TABLE = "main_results"
METHODS = ("opsd", "dash")  # the table's rows this test keeps (2 methods x the config's seeds)
TARGET = f"results/e2e/tables/{TABLE}.csv"
STEPS = 8  # training steps of every run here (smoke_config's 4 end too soon to interrupt)
INTERRUPT_AFTER = 3  # interrupt a training job once it has the state of this step
ACCOUNT = "ci_account"
RUN_TIMEOUT_S = 1200
SEP = "#~#"
SACCT_FIELDS = ("JobID", "State", "ExitCode", "Partition", "Account", "Comment", "SubmitLine")

slow = pytest.mark.slow  # all but the profile check, which is instant

UP_SCRIPT = Path("scripts/ci_slurm_up.sh")
DOWN_SCRIPT = Path("scripts/ci_slurm_down.sh")
CI_PROFILE = Path("profiles/slurm-ci/config.v8+.yaml")
USER_PROFILE = Path("profiles/slurm-a800/config.v8+.yaml")


def profile(repo_root: Path, path: Path = CI_PROFILE) -> dict:
    return yaml.safe_load((repo_root / path).read_text())


# --- the profile -------------------------------------------------------------------------------

# Keys whose values may differ between profiles/slurm-a800 and profiles/slurm-ci.
PARTITION_ACCOUNT_AND_SIZES = {"slurm_partition", "slurm_account", "mem_mb", "runtime",
                               "cpus_per_gpu", "jobs"}  # fmt: skip


def profile_differences(user, ci, path=""):
    """The places where the two profiles differ in anything but partition, account and sizes."""
    if isinstance(user, dict) and isinstance(ci, dict):
        if user.keys() != ci.keys():
            return [f"{path or '/'}: keys {sorted(user)} != {sorted(ci)}"]
        return [d for key in user for d in profile_differences(user[key], ci[key], f"{path}/{key}")]
    if isinstance(user, list) and isinstance(ci, list) and path == "/group-components":
        # grading=16 vs grading=2: the same groups, other sizes
        names = [[item.split("=")[0] for item in items] for items in (user, ci)]
        return [] if names[0] == names[1] else [f"{path}: {user} != {ci}"]
    if user == ci:
        return []
    key = path.rsplit("/", 1)[-1]
    size = path.startswith("/set-threads/") and isinstance(ci, int)
    return [] if key in PARTITION_ACCOUNT_AND_SIZES or size else [f"{path}: {user!r} != {ci!r}"]


def test_ci_profile_differs_only_in_partition_account_and_sizes(repo_root):
    user, ci = profile(repo_root, USER_PROFILE), profile(repo_root)
    assert profile_differences(user, ci) == []
    partitions = {r.get("slurm_partition") for r in ci["set-resources"].values()} - {None}
    assert partitions == {"ci-gpu"} and ci["default-resources"]["slurm_partition"] == "ci-cpu"
    assert ci["default-resources"]["slurm_account"] == ACCOUNT


# --- the cluster -------------------------------------------------------------------------------


def cannot_run_slurm() -> str | None:
    """Why this machine cannot host the test cluster, or None."""
    if os.environ.get("DASHREPRO_NO_SLURM", "") not in ("", "0"):
        return "DASHREPRO_NO_SLURM is set"
    if not sys.platform.startswith("linux"):
        return f"scripts/ci_slurm_up.sh needs Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return (
            "scripts/ci_slurm_up.sh needs root to install slurm-wlm and munge and start slurmctld"
        )
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        return (
            "no apt-get to install slurm-wlm from (scripts/ci_slurm_up.sh uses Debian's packages)"
        )
    return None


def controller_up() -> bool:
    if shutil.which("scontrol") is None:
        return False
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    return ping.returncode == 0 and "UP" in ping.stdout


@pytest.fixture(scope="module")
def slurm_cluster(repo_root):
    reason = cannot_run_slurm()
    if reason:
        pytest.skip(f"no SLURM test cluster here: {reason}")
    was_up = controller_up()
    had_client = shutil.which("sinfo") is not None
    up = subprocess.run(["bash", str(repo_root / UP_SCRIPT)], capture_output=True, text=True,
                        timeout=1200)  # fmt: skip
    assert up.returncode == 0, f"{UP_SCRIPT} failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
    yield
    if not was_up:  # leave a cluster that was running before as it was
        subprocess.run(["bash", str(repo_root / DOWN_SCRIPT)], capture_output=True, timeout=300)
    if not had_client:
        # Leave a machine without SLURM's client without it: with the client installed and its
        # controller down, every later Snakemake start waits ~9 s (the SLURM executor plugin
        # runs `scontrol show config` when it is imported, and scontrol retries the controller).
        subprocess.run(["apt-get", "remove", "-y", "-q", "slurm-client"], capture_output=True,
                       timeout=300, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip


@slow
def test_gpu_requests_schedule_on_the_fake_gpus(slurm_cluster, tmp_path):
    out = tmp_path / "gpu.log"
    job = subprocess.run(
        ["sbatch", "--parsable", "--wait", "-p", "ci-gpu", "-A", ACCOUNT, "--gpus=a800:1",
         "-t", "5", "--mem", "100", "-o", str(out), "--wrap", "echo gpus=$CUDA_VISIBLE_DEVICES"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr
    assert out.read_text().strip() == "gpus=0"
    record = sacct(["-j", job.stdout.strip().split(";")[0]], ("AllocTRES",))
    assert "gres/gpu=1" in record[0]["AllocTRES"], record


# --- SLURM records -----------------------------------------------------------------------------


def sacct(selection: list[str], fields=SACCT_FIELDS) -> list[dict[str, str]]:
    """sacct's records (allocations only), oldest first; SubmitLine may hold any character."""
    done = subprocess.run(
        ["sacct", "-X", "-n", "-P", f"--delimiter={SEP}", "-o", ",".join(fields), *selection],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = [dict(zip(fields, line.split(SEP, len(fields) - 1), strict=True))
            for line in done.stdout.splitlines() if line.strip()]  # fmt: skip
    return sorted(rows, key=lambda row: int(row.get("JobID", "0").split("_")[0]))


def running_job(run_id: str, comment: str) -> str | None:
    """The SLURM id of this run's running job with this comment (rule and wildcards)."""
    queue = subprocess.run(["squeue", "-h", "-t", "RUNNING", "--name", run_id, "-o", "%i|%k"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    for line in queue.stdout.splitlines():
        job, _, job_comment = line.partition("|")
        if job_comment.strip() == comment:
            return job.strip()
    return None


def job_ended(job: str) -> bool:
    queue = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    return queue.stdout.strip() in ("", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def job_processes(job: str) -> dict[int, list[bytes]]:
    """The processes of SLURM job ``job`` (their argv): the batch script, the job step's
    Snakemake, srun, the inner Snakemake and the rule's script; not SLURM's own daemons."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job}".encode() in environ:
            found[int(proc.name)] = argv
    return found


# --- the two runs ------------------------------------------------------------------------------


@dataclass
class Fault:
    method: str
    seed: int
    how: str  # "TERM" (scancel --signal=TERM) or "KILL" (kill -9 of every process of the job)
    job: str | None = None  # the interrupted SLURM job
    state_seen: int | None = None  # newest training state when interrupted
    last_state: int | None = None  # newest training state once the job had ended
    first_log: str = ""  # the rule log of the interrupted attempt (the retry truncates it)
    killed: list[str] = field(default_factory=list)  # KILL: the processes killed
    done: bool = False

    def comment(self, scale: str) -> str:
        return f"rule_train_lora_{scale}_wildcards_{self.method}_{self.seed}"


@dataclass
class Runs:
    local: Path
    cluster: Path
    config: dict
    scale: str
    run_id: str
    faults: list[Fault]
    dry_run: str
    output: str
    wall_s: float
    records: list[dict[str, str]] = field(default_factory=list)


def states(run_dir: Path) -> list[int]:
    """Steps of the complete training states kept in a run folder."""
    found = []
    for marker in (run_dir / ".resume").glob("step-*/trainer_state.json"):
        found.append(int(marker.parent.name.split("-")[1]))
    return sorted(found)


def snakemake(workdir: Path, repo_root: Path, *args: str, **popen) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "snakemake",
        "-s", str(repo_root / "Snakefile"),
        "--directory", str(workdir),
        "--configfile", str(workdir / "config.yaml"),
        *args,
    ]  # fmt: skip
    return subprocess.Popen(cmd, cwd=workdir, text=True, **popen)


def cluster_config(default_config: dict) -> dict:
    """smoke_config with the table restricted to METHODS, training long enough to interrupt (a
    training state after every step, one checkpoint at the end) and a shorter SFT: what this
    test checks needs no more, and the run must fit in minutes on 2 CPUs."""
    config = smoke_config(default_config)
    table = config["tables"][TABLE]
    table["methods"] = [method for method in table["methods"] if method in METHODS]
    assert len(table["methods"]) >= 2, f"{TABLE} reports fewer than two of {METHODS}"
    if "sections" in table.get("options", {}):
        table["options"]["sections"] = [{"methods": table["methods"]}]
    scale = config["scales"][table["scale"]]
    scale["train"].update(steps=STEPS, checkpoint_every=STEPS, state_every_minutes=1e-4)
    scale["sft"]["steps"] = 2
    return config


def inject(fault: Fault, runs_dir: Path, scale: str, run_id: str) -> None:
    """One step of a fault's life: interrupt its job once it has a state of step
    INTERRUPT_AFTER; once the job has ended, note its newest state and its rule log."""
    run_dir = runs_dir / fault.method / scale / f"seed{fault.seed}"
    if fault.job is None:
        kept = states(run_dir)
        if not kept or kept[-1] < INTERRUPT_AFTER:
            return
        job = running_job(run_id, fault.comment(scale))
        if job is None:
            return
        if fault.how == "TERM":
            # SLURM's notice: SIGTERM to the job's steps (srun and what runs under it), so the
            # trainer saves a state and exits 75 and the job fails, to be resubmitted.
            subprocess.run(["scancel", "--signal=TERM", job], check=True, timeout=60)
        else:
            processes = job_processes(job)
            if not any(len(a) > 1 and a[1].endswith(b"train_lora.py") for a in processes.values()):
                return  # the trainer has not started yet
            for pid in processes:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            fault.killed = [b" ".join(argv)[:120].decode(errors="replace")
                            for argv in processes.values()]  # fmt: skip
        fault.job, fault.state_seen = job, kept[-1]
    elif job_ended(fault.job):
        kept = states(run_dir)
        fault.last_state = kept[-1] if kept else None
        log = run_dir.parents[3] / "logs" / "train_lora" / fault.method / scale
        fault.first_log = (log / f"seed{fault.seed}.log").read_text()
        fault.done = True


@pytest.fixture(scope="module")
def runs(slurm_cluster, tmp_path_factory, repo_root, default_config) -> Runs:
    config = cluster_config(default_config)
    scale = config["tables"][TABLE]["scale"]
    table = config["tables"][TABLE]
    pairs = [(m, s) for m in table["methods"] for s in config["seeds"]]
    assert len(pairs) >= 2, pairs
    faults = [Fault(*pairs[0], how="TERM"), Fault(*pairs[-1], how="KILL")]
    local, cluster = (tmp_path_factory.mktemp(name) for name in ("local", "slurm"))
    for workdir in (local, cluster):
        (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    args = ["--profile", str(repo_root / CI_PROFILE.parent),
            "--slurm-init-seconds-before-status-checks", "5"]  # fmt: skip
    dry = snakemake(cluster, repo_root, *args, "-n", TARGET, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT)  # fmt: skip
    dry_out = dry.communicate(timeout=600)[0]
    assert dry.returncode == 0, dry_out[-3000:]

    start = time.monotonic()
    out_path = cluster / "snakemake.out"
    with open(local / "snakemake.out", "w") as local_out, open(out_path, "w") as cluster_out:
        local_run = snakemake(local, repo_root, "--cores", "2", TARGET, stdout=local_out,
                              stderr=subprocess.STDOUT)  # fmt: skip
        cluster_run = snakemake(cluster, repo_root, *args, TARGET, stdout=cluster_out,
                                stderr=subprocess.STDOUT)  # fmt: skip
        run_id = None
        try:
            while cluster_run.poll() is None:
                assert time.monotonic() - start < RUN_TIMEOUT_S, "the SLURM run did not finish"
                if run_id is None:
                    found = re.search(r"SLURM run ID: (\S+)", out_path.read_text())
                    run_id = found and found.group(1)
                for fault in faults:
                    if run_id and not fault.done:
                        inject(fault, cluster / "results" / "e2e" / "runs", scale, run_id)
                time.sleep(0.1)
            local_run.wait(timeout=max(60, RUN_TIMEOUT_S - (time.monotonic() - start)))
        finally:
            for process in (cluster_run, local_run):
                if process.poll() is None:
                    process.kill()
            if run_id:
                subprocess.run(["scancel", "--name", run_id], timeout=60)
    wall = time.monotonic() - start
    output = out_path.read_text()
    local_output = (local / "snakemake.out").read_text()
    assert cluster_run.returncode == 0, output[-5000:]
    assert local_run.returncode == 0, local_output[-5000:]
    assert run_id, output[-3000:]
    runs = Runs(local, cluster, config, scale, run_id, faults, dry_out, output, wall)
    runs.records = sacct(["--name", run_id, "-S", "now-2hours", "-E", "now"])
    print(f"\nSLURM run {run_id}: {wall:.0f} s wall, SLURM and local runs side by side")
    for record in runs.records:
        print(f"  {record['JobID']} {record['State']} {record['Comment']}: "
              f"{record['SubmitLine'].split(' --wrap')[0]}")  # fmt: skip
    for fault in faults:
        saved = re.findall(r"\[train\] SIGTERM.*", fault.first_log)
        print(f"  {fault.how} {fault.method} seed {fault.seed}: SLURM job {fault.job} "
              f"interrupted at state {fault.state_seen}, ended with state {fault.last_state} "
              f"{saved or fault.killed}")  # fmt: skip
    return runs


# --- what the dry run plans --------------------------------------------------------------------


def printed_jobs(output: str) -> list[dict]:
    """The job blocks Snakemake prints: rule, `localrule` or `rule`, inside a group job or not
    (indented), and the `wildcards:` line."""
    jobs, current = [], None
    for line in output.splitlines():
        header = re.match(r"^(\s*)(localrule|rule) (\w+):$", line)
        if header:
            current = {"rule": header.group(3), "local": header.group(2) == "localrule",
                       "grouped": bool(header.group(1)), "wildcards": ""}  # fmt: skip
            jobs.append(current)
        elif current is not None and line.strip().startswith("wildcards: "):
            current["wildcards"] = line.strip().removeprefix("wildcards: ")
    return jobs


def comment(job: dict) -> str:
    """The executor plugin's --comment for a job: rule_<rule>[_wildcards_<values>]."""
    values = "_".join(pair.split("=", 1)[1] for pair in job["wildcards"].split(", ") if pair)
    return f"rule_{job['rule']}" + (f"_wildcards_{values}" if values else "")


def partition_of(rule: str, ci: dict) -> str:
    own = ci["set-resources"].get(rule, {}).get("slurm_partition")
    return own or ci["default-resources"]["slurm_partition"]


# --- the checks --------------------------------------------------------------------------------


@slow
def test_every_job_but_the_localrules_went_through_sbatch(runs, repo_root):
    ci = profile(repo_root)
    planned = printed_jobs(runs.dry_run)  # every job of the target, once
    # Which rules ran where Snakemake runs: the run prints those jobs as `localrule`.
    printed = printed_jobs(runs.output)
    local_rules = {job["rule"] for job in printed if job["local"]}
    assert {job["rule"] for job in planned} == {job["rule"] for job in printed}
    assert local_rules and not local_rules & {j["rule"] for j in printed if not j["local"]}
    remote = [j for j in planned if j["rule"] not in local_rules and not j["grouped"]]
    grouped = [j for j in planned if j["grouped"]]
    assert remote and grouped
    by_comment: dict[str, list[dict]] = {}
    for record in runs.records:
        by_comment.setdefault(record["Comment"], []).append(record)
    interrupted = {fault.comment(runs.scale) for fault in runs.faults}
    for job in remote:
        attempts = by_comment.pop(comment(job), [])
        expected = 2 if comment(job) in interrupted else 1  # an interrupted job: resubmitted
        assert len(attempts) == expected, (f"{len(attempts)} SLURM jobs, not {expected}", job)
        assert attempts[-1]["State"] == "COMPLETED", attempts
        for record in attempts:
            assert record["Partition"] == partition_of(job["rule"], ci), record
    # The grading jobs, packed `group-components` to a SLURM job on the default partition;
    # each group job's log shows the grading jobs it ran.
    (size,) = [int(item.split("=")[1]) for item in ci["group-components"] if "grading=" in item]
    groups = [
        r for c in list(by_comment) if c.startswith("rule_grading") for r in by_comment.pop(c)
    ]
    assert len(groups) == math.ceil(len(grouped) / size), groups
    ran = []
    for record in groups:
        assert record["State"] == "COMPLETED", record
        assert record["Partition"] == ci["default-resources"]["slurm_partition"], record
        (log,) = (runs.cluster / "logs" / "slurm").glob(f"group_grading*/{record['JobID']}.log")
        ran += [
            j["wildcards"] for j in printed_jobs(log.read_text()) if j["rule"] == "grade_checkpoint"
        ]
    assert sorted(set(ran)) == sorted(j["wildcards"] for j in grouped)
    assert by_comment == {}, f"SLURM jobs of no planned job: {by_comment}"
    # Everything went through sbatch, with the profile's account; no localrule did.
    for record in runs.records:
        assert record["Account"] == ACCOUNT, record
        assert record["SubmitLine"].startswith("sbatch "), record
        assert f"--comment {record['Comment']}" in record["SubmitLine"], record
        assert f"-A {ACCOUNT} -p {record['Partition']}" in record["SubmitLine"], record
        rule = record["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        assert rule not in local_rules, record


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@slow
def test_table_equals_the_local_runs(runs):
    for suffix in (".csv", ".md", ".tex"):
        name = Path(TARGET).with_suffix(suffix)
        assert (runs.cluster / name).read_bytes() == (runs.local / name).read_bytes(), name


@slow
def test_every_adapter_equals_the_local_uninterrupted_runs(runs):
    cluster = sorted((runs.cluster / "results").rglob("checkpoint-*/adapter_model.safetensors"))
    local = sorted((runs.local / "results").rglob("checkpoint-*/adapter_model.safetensors"))
    table = runs.config["tables"][TABLE]
    train = runs.config["scales"][runs.scale]["train"]
    per_run = train["steps"] // train["checkpoint_every"]
    assert len(cluster) == len(table["methods"]) * len(runs.config["seeds"]) * per_run
    assert [p.relative_to(runs.cluster) for p in cluster] == [
        p.relative_to(runs.local) for p in local
    ]
    for mine, theirs in zip(cluster, local, strict=True):
        assert sha256(mine) == sha256(theirs), mine.relative_to(runs.cluster)


@slow
@pytest.mark.parametrize("how", ["TERM", "KILL"])
def test_an_interrupted_training_job_is_resubmitted_and_resumes(runs, how):
    (fault,) = [f for f in runs.faults if f.how == how]
    assert fault.job and fault.done, f"the {how} fault was never injected: {fault}"
    attempts = [r for r in runs.records if r["Comment"] == fault.comment(runs.scale)]
    logs = runs.cluster / "logs" / "slurm" / f"rule_train_lora_{runs.scale}"
    first_slurm_log = (logs / f"{fault.method}_{fault.seed}" / f"{fault.job}.log").read_text()
    assert "Trying to restart job" not in first_slurm_log, (
        "the Snakemake inside the SLURM job reran the interrupted job in place instead of "
        "failing the SLURM job: a rule's `retries` applies there too (retry only where "
        "workflow.exec_mode is ExecMode.DEFAULT)"
    )
    assert [r["JobID"] for r in attempts][0] == fault.job and len(attempts) == 2, attempts
    assert [r["State"] for r in attempts] == ["FAILED", "COMPLETED"], attempts
    first = fault.first_log
    if how == "TERM":
        # The trainer caught SIGTERM, finished its step, saved a state and exited 75.
        saved = re.search(r"SIGTERM: state saved after step (\d+); exiting to resume", first)
        assert saved, first[-3000:]
        assert int(saved.group(1)) == fault.last_state
    else:
        assert "state saved after step" not in first, first[-3000:]
    assert fault.last_state is not None and INTERRUPT_AFTER <= fault.state_seen
    assert fault.state_seen <= fault.last_state < STEPS, fault
    log = (runs.cluster / "results" / "e2e" / "logs" / "train_lora" / fault.method / runs.scale
           / f"seed{fault.seed}.log").read_text()  # fmt: skip
    resumed = f"resuming {fault.method} seed {fault.seed} after step {fault.last_state}"
    assert resumed in log, log[-3000:]
    # Each attempt was its own SLURM job, with its own log.
    for record in attempts:
        assert (logs / f"{fault.method}_{fault.seed}" / f"{record['JobID']}.log").exists()
