"""The shipped warm start: reused byte for byte when its recipe is the run's, trained otherwise.

The first test is the one that keeps the shipped weights honest: it makes the default's training
set and tokenizer with the real rules (in a copy of the repository), computes the recipe the SFT
rule would ask for, and requires it to be the shipped one -- so a change to the default's data,
SFT settings, architecture, prompts or SFT code fails here, naming the keys, until a warm start
of the new recipe is trained and shipped (docs/reproducibility.md, "Which digits hold on another machine").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dashrepro.embedded import warm_start
from dashrepro.io import read_json, sha256_file

SFT_OUTPUT = "results/tiny/base_model/tiny/model.safetensors"


def _snakemake(workdir: Path, *targets: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--cores", "2", *targets]
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=1200)


def _recipe(workdir: Path, *overlays: str, experiment: str = "tiny") -> dict:
    """The recipe rule sft_base_model computes for an experiment, from the files the rules made."""
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.experiment.config import load_config
    from dashrepro.experiment.run_matrix import expand_config
    from dashrepro.experiment.workflow import Experiment
    from dashrepro.io import load_tokenizer, read_parquet

    paths = [workdir / "workflow_config.yaml", *(workdir / o for o in overlays)]
    config = expand_config(load_config(*paths))
    scale = config["scales"]["tiny"]
    tokenizer = load_tokenizer(workdir / f"results/{experiment}/tokenizer")
    examples = warm_start.sft_examples_for(
        read_parquet(workdir / f"results/{experiment}/data/train.parquet"),
        tokenizer,
        TeacherProtocol.from_config(config["protocol"]),
        scale["sft"],
        Experiment(config).teacher_views,
    )
    special = {"pad": tokenizer.pad_token_id, "eos": tokenizer.eos_token_id}
    return warm_start.make_recipe(scale["architecture"], scale["sft"], examples, special)


@pytest.mark.slow
def test_the_default_reuses_the_shipped_warm_start_byte_for_byte(repo_root, tmp_path):
    from conftest import copy_tracked_files

    workdir = copy_tracked_files(repo_root, tmp_path / "repo")
    made = _snakemake(
        workdir, "results/tiny/data/train.parquet", "results/tiny/tokenizer/tokenizer.json"
    )
    assert made.returncode == 0, made.stderr[-3000:]

    differ = warm_start.shipped_differences(_recipe(workdir))
    assert not differ, (
        f"the shipped warm start was made from another recipe ({', '.join(differ)} differ): "
        "run the default (its SFT trains, since the recipe is new) and ship the result: "
        "python -m dashrepro.embedded.warm_start results/tiny/base_model/tiny"
    )

    done = _snakemake(workdir, SFT_OUTPUT)
    assert done.returncode == 0, done.stderr[-3000:]
    shipped = read_json(warm_start.SHIPPED / warm_start.RECIPE)
    assert sha256_file(workdir / SFT_OUTPUT) == shipped["model_sha256"]
    log = (workdir / "results/tiny/logs/sft_base_model/tiny.log").read_text()
    assert "reused the shipped warm start" in log
    # The model folder records what it copied: the shipped files' sha256, and no machine.
    record = read_json(workdir / "results/tiny/base_model/tiny" / warm_start.RECIPE)
    assert record["reused"] == "dashrepro.embedded.warm_start" and "made_with" not in record
    assert record["shipped_sha256"]["model.safetensors"] == shipped["model_sha256"]
    assert record["shipped_sha256"] == warm_start.shipped_hashes()
    # The ship command of docs/reproducibility.md refuses a folder that only copied the shipped warm start.
    ship = subprocess.run(
        [sys.executable, "-m", "dashrepro.embedded.warm_start", "results/tiny/base_model/tiny"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(workdir / "src")},
        capture_output=True,
        text=True,
    )
    assert ship.returncode != 0 and "not a trained warm start" in ship.stderr, ship.stderr


@pytest.mark.slow
def test_the_task_families_recipe_is_the_shipped_task_families_warm_start(repo_root, tmp_path):
    """The premise studies' warm start ships too (docs/factorial-study.md): their recipe finds it."""
    from conftest import copy_tracked_files

    workdir = copy_tracked_files(repo_root, tmp_path / "repo")
    overlay = "config/experiments/task_families.yaml"
    made = _snakemake(
        workdir,
        "results/task_families/data/train.parquet",
        "results/task_families/tokenizer/tokenizer.json",
        "--configfile",
        overlay,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    folder, differ = warm_start.find_shipped(_recipe(workdir, overlay, experiment="task_families"))
    assert folder == warm_start.SHIPPED_ROOT / "task_families", (
        f"no shipped warm start has the task families' recipe ({', '.join(differ)} differ): "
        "train it and ship it: python -m dashrepro.embedded.warm_start "
        "results/task_families/base_model/tiny --name task_families"
    )


def test_the_shipped_warm_start_is_found_by_its_recipe_among_several(tmp_path):
    root = tmp_path / "warm_starts"
    for name, steps in (("first", 1), ("second", 2)):
        (root / name).mkdir(parents=True)
        recipe = {"recipe": {"sft": {"steps": steps, "lr": 0.1}}}
        (root / name / warm_start.RECIPE).write_text(json.dumps(recipe))
    assert warm_start.shipped_folders(root) == [root / "first", root / "second"]
    assert warm_start.find_shipped({"sft": {"steps": 2, "lr": 0.1}}, root) == (root / "second", [])
    # None matches: the nearest one's differences, named by its folder.
    folder, differ = warm_start.find_shipped({"sft": {"steps": 2, "lr": 0.2}}, root)
    assert folder is None and differ == ["second: sft.lr"]
    assert warm_start.find_shipped({}, tmp_path / "empty") == (
        None,
        [f"no {warm_start.RECIPE} under {tmp_path / 'empty'}"],
    )


def test_every_shipped_warm_start_is_whole():
    """Each shipped folder's weights are the ones its recipe records (a damaged clone fails)."""
    folders = warm_start.shipped_folders()
    assert warm_start.SHIPPED in folders
    for folder in folders:
        record = read_json(folder / warm_start.RECIPE)
        assert "made_with" in record, folder
        assert sha256_file(folder / "model.safetensors") == record["model_sha256"], folder


def test_a_recipe_differs_by_its_dotted_keys_and_not_by_how_it_is_obtained():
    examples = [([1, 2, 3], 1), ([4, 5], 1)]
    base = warm_start.make_recipe(
        {"hidden_size": 8}, {"steps": 10, "lr": 0.1}, examples, {"pad": 0}
    )
    same = warm_start.make_recipe(
        {"hidden_size": 8}, {"lr": 0.1, "steps": 10, "reuse_shipped": True}, examples, {"pad": 0}
    )
    assert warm_start.recipe_differences(same, base) == []
    other = warm_start.make_recipe(
        {"hidden_size": 8}, {"steps": 11, "lr": 0.1}, [([1, 2, 3], 2), ([4, 5], 1)], {"pad": 0}
    )
    assert warm_start.recipe_differences(other, base) == ["examples_sha256", "sft.steps"]
    assert warm_start.recipe_differences({**base, "extra": 1}, base) == ["extra"]


def test_a_damaged_shipped_model_stops_the_copy_naming_the_file(tmp_path):
    folder = tmp_path / "shipped"
    shutil.copytree(warm_start.SHIPPED, folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="model.safetensors: sha256 .* records"):
        warm_start.copy_shipped(tmp_path / "out", folder)


def test_only_a_trained_warm_start_can_be_shipped(tmp_path):
    trained = tmp_path / "trained"
    trained.mkdir()
    for name in warm_start.FILES:
        shutil.copyfile(warm_start.SHIPPED / name, trained / name)
    made = {"recipe": {"sft": {"steps": 1}}, "made_with": {"torch": "x"}}
    (trained / warm_start.RECIPE).write_text(json.dumps(made))
    record = warm_start.ship(trained, tmp_path / "shipped")
    assert record["model_sha256"] == sha256_file(warm_start.SHIPPED / "model.safetensors")
    assert warm_start.shipped_differences({"sft": {"steps": 1}}, tmp_path / "shipped") == []
    assert warm_start.shipped_differences({"sft": {"steps": 2}}, tmp_path / "shipped") == [
        "sft.steps"
    ]
    (trained / warm_start.RECIPE).write_text(json.dumps({"reused": "x", "recipe": {}}))
    with pytest.raises(ValueError, match="not a trained warm start"):
        warm_start.ship(trained, tmp_path / "again")
