"""Every hub download a run is about to make is pinned to a commit, named key by key before any job."""

from __future__ import annotations

import copy

import pytest

from dashrepro.experiment.pins import unpinned_revisions
from dashrepro.experiment.run_matrix import expand_config

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def paper(repo_root):
    from dashrepro.experiment.config import merge_configs, read_config_file

    merged = merge_configs(
        read_config_file(repo_root / "workflow_config.yaml"),
        read_config_file(repo_root / "config/experiments/paper.yaml"),
    )
    return expand_config(merged)


def download_jobs(config):
    """The download and preparation jobs of a run of ``config``, as onstart lists them."""
    jobs = [("prepare_training_set", {})]
    jobs += [("prepare_benchmark", {"bench": bench}) for bench in config["benchmarks"]]
    for spec in config["scales"].values():
        if spec["source"] == "pretrained":
            repo = spec["model"].replace("/", "--")
            jobs.append(("download_model", {"repo": repo, "revision": spec.get("revision")}))
    return jobs


def test_the_paper_names_its_training_set_and_each_model_until_pinned(paper):
    problems = unpinned_revisions(paper, download_jobs(paper) + [("table", {})])
    keys = [problem.split(":")[0] for problem in problems]
    assert keys[0] == "training set 'siyanzhao/Openthoughts_math_30k_opsd'"
    assert "pin data.training_set.revision to the dataset's 40-hex commit" in problems[0]
    assert keys[1:] == [f"scales.{s}.revision" for s in ("qwen3_1p7b", "qwen3_4b", "qwen3_8b")]
    assert all("'main'" in problem for problem in problems)


def test_pinned_sources_and_local_files_pass(paper):
    pinned = copy.deepcopy(paper)
    pinned["data"]["training_set"]["revision"] = COMMIT
    for spec in pinned["scales"].values():
        if spec["source"] == "pretrained":
            spec["revision"] = COMMIT
    assert unpinned_revisions(pinned, download_jobs(pinned)) == []


@pytest.mark.parametrize("revision", ["main", "v1.0", COMMIT[:12], COMMIT.upper(), None])
def test_a_hub_benchmark_at_anything_but_a_commit_is_named_by_its_key(default_config, revision):
    config = copy.deepcopy(default_config)
    config["benchmarks"]["aime2025"]["dataset"] = {
        "hf_id": "yentinglin/aime_2025", "revision": revision, "split": "train",
        "layout": "hf_aime_2024", "expected_size": 30,
    }  # fmt: skip
    jobs = [("prepare_benchmark", {"bench": b}) for b in config["benchmarks"]]
    (problem,) = unpinned_revisions(config, jobs)
    assert problem.startswith(f"benchmark 'yentinglin/aime_2025': revision {revision!r}")
    assert "pin benchmarks.aime2025.dataset.revision to the dataset's 40-hex commit" in problem
    # Only what the jobs about to run would download: a prepared benchmark is not asked about.
    assert unpinned_revisions(config, [("prepare_benchmark", {"bench": "aime2024"})]) == []


def test_the_embedded_default_downloads_nothing(default_config):
    jobs = download_jobs(default_config)
    assert unpinned_revisions(default_config, jobs) == []
