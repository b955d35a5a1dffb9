"""``Experiment``: what the rules ask of a config, checked without Snakemake. The DAG tests
(tests/workflow) check that the rules plan what it says; these check what it says."""

from __future__ import annotations

import copy

import pytest

from dashrepro.analysis.registry import INPUT_SETS
from dashrepro.experiment.config import load_config
from dashrepro.experiment.run_matrix import spec_scales
from dashrepro.experiment.workflow import CPU_ENV, GPU_ENV, Experiment
from dashrepro.settings import TrainSettings


@pytest.fixture(scope="module")
def default(repo_root):
    return Experiment(load_config(repo_root / "workflow_config.yaml"))


@pytest.fixture(scope="module")
def paper(repo_root):
    return Experiment(
        load_config(repo_root / "workflow_config.yaml", repo_root / "config/experiments/paper.yaml")
    )


def test_every_input_set_lists_one_key_per_file_in_the_same_order(default):
    """A table module zips a set's files with its keys: the two come from one list."""
    seen = set()
    for group in ("tables", "figures"):
        for name in default.config[group]:
            files = default.report_inputs(group, name)
            keys = default.report_context(group, name)["input_keys"]
            assert files.keys() == keys.keys(), (group, name)
            for need, paths in files.items():
                assert len(paths) == len(keys[need]) > 0, (group, name, need)
                seen.add(need)
                for path, key in zip(paths, keys[need], strict=True):
                    if isinstance(key, list):  # a run or a checkpoint: its folder names it
                        method, scale, seed, *step = key
                        assert f"/{method}/{scale}/seed{seed}" in path, (path, key)
                        assert not step or f"step{step[0]}" in path, (path, key)
    # the default's tables and figures read every input set there is, with the paper's numbers
    # (the reproduction-gap table) read by the statistics rule instead
    assert seen == set(INPUT_SETS) - {"published"}


def test_an_unknown_input_set_is_named(default):
    with pytest.raises(ValueError, match="'checkpoints'"):
        default.result_keys("checkpoints", ["tiny"], ["opsd"])
    with pytest.raises(ValueError, match="'checkpoints'"):
        default.result_file("checkpoints", ["opsd", "tiny", 0])


def test_a_checkpoint_set_has_every_step_of_each_run(default):
    steps = TrainSettings.from_config(default.config["scales"]["tiny"]["train"]).checkpoint_steps()
    keys = default.result_keys("summaries", ["tiny"], ["opsd"])
    assert keys == [["opsd", "tiny", s, t] for s in default.runs[("opsd", "tiny")] for t in steps]
    assert default.steps("tiny") == steps


def test_a_derived_scale_reads_its_base_scales_model_and_base_accuracy(default):
    derived = [s for s, spec in default.config["scales"].items() if spec.get("derive_from")]
    assert derived, "the default has a derived scale (the ablation schedule)"
    for scale in derived:
        base = default.config["scales"][scale]["derive_from"]
        assert default.base_model_dir(scale) == default.layout.base_model(base)
        assert default.result_file("base_accuracy", scale) == (
            f"{default.layout.base_eval(base)}/accuracy.json"
        )
    assert set(default.base_scales) <= set(default.config["scales"]) - set(derived)


def test_generation_and_grading_settings_are_split_by_stage(default, paper):
    # Hugging Face generate: the vLLM block does not change what it samples, so it is left out
    assert default.generation["backend"] == "hf" and "vllm" not in default.generation
    assert paper.generation["backend"] == "vllm" and "vllm" in paper.generation
    assert set(default.grading) == {
        "grading_workers",
        "grading_timeout_s",
        "grading_item_timeout_s",
        "grading_memory_gib",
    }
    assert not set(default.grading) & set(default.generation)
    assert (default.generation_env, default.evaluation_gpus) == (CPU_ENV, 0)
    assert (paper.generation_env, paper.evaluation_gpus) == (GPU_ENV, 1)


def test_a_scales_own_evaluation_keys_override_the_global_ones(default):
    config = copy.deepcopy(default.config)
    config["scales"]["tiny"]["evaluation"] = {"max_new_tokens": 7}
    experiment = Experiment(config)
    assert experiment.generation_of("tiny")["max_new_tokens"] == 7
    assert experiment.generation["max_new_tokens"] == default.generation["max_new_tokens"]


def test_an_hf_generation_on_cuda_gets_a_gpu_and_its_settings_reach_the_params(paper):
    """The paper overlay with HF generation instead of vLLM: its jobs get one GPU and the GPU
    environment (sampling.backends), and the fast path's settings are in the jobs' params."""
    config = copy.deepcopy(paper.config)
    fast = {"backend": "hf_compiled", "device": "cuda", "dtype": "bfloat16",
            "kv_cache_budget_gib": 100.0}  # fmt: skip
    config["evaluation"] = {**config["evaluation"], **fast}
    experiment = Experiment(config)
    assert (experiment.generation_env, experiment.evaluation_gpus) == (GPU_ENV, 1)
    assert {k: experiment.generation[k] for k in fast} == fast
    assert "vllm" not in experiment.generation
    config["evaluation"]["device"] = "cpu"
    assert Experiment(config).evaluation_gpus == 0


def test_training_env_and_gpus_follow_the_scales_train_settings(default, paper):
    assert default.training_env("tiny") == CPU_ENV and default.training_gpus("tiny") == 0
    released = {s: v for s, v in paper.config["scales"].items() if v["source"] != "embedded"}
    assert released
    for scale, spec in released.items():
        assert paper.training_env(scale) == GPU_ENV
        assert paper.training_gpus(scale) == spec["train"]["num_processes"]


def test_the_premise_probe_runs_at_each_base_model_on_its_training_devices(default, paper):
    assert default.premise_scales == ["tiny"] and default.premise_gpus("tiny") == 0
    files = default.premise_files()
    assert len(files) == 8 and all(f.startswith("results/tiny/premise/tiny/") for f in files)
    assert default.premise_method() == {
        "name": "dash",
        "entry": {key: value for key, value in default.config["methods"]["dash"].items()
                  if key != "label"},
    }  # fmt: skip
    assert paper.premise_scales == paper.base_scales
    assert all(paper.premise_gpus(scale) == 1 for scale in paper.premise_scales)
    config = {k: v for k, v in default.config.items() if k != "premise_probe"}
    assert Experiment(config).premise_files() == [] and Experiment(config).premise_probe is None


def test_statistics_keys_sit_beside_their_files(default):
    files, keys = default.statistics_inputs(), default.statistics_keys()
    assert len(files["samples"]) == len(keys["samples"]) > 0
    for path, (method, scale, seed, step) in zip(files["samples"], keys["samples"], strict=True):
        assert (
            path == f"{default.layout.checkpoint_eval(method, scale, seed, step)}/samples.parquet"
        )
    assert len(files["base_samples"]) == len(keys["base_samples"])
    assert files["tables"] == [default.layout.table(t, "csv") for t in keys["tables"]]
    # the audit follows the same checkpoints
    assert default.audit_inputs()["samples"] == files["samples"]


def test_targets_list_every_format_of_every_output(default):
    tables, figures = default.config["tables"], default.config["figures"]
    assert len(default.table_files()) == 3 * len(tables)
    assert len(default.figure_files()) == 3 * len(figures)
    assert default.layout.table(next(iter(tables)), "tex") in default.table_files()
    published = default.published_table_files()
    assert published and all(p.startswith("results/published/tables/") for p in published)


def test_the_published_context_uses_the_published_scales_not_the_experiments(default, paper):
    for name in default.published_tables:
        context = default.published_context(name)
        assert context == paper.published_context(name)
        assert context["scales"] == spec_scales(default.published_tables[name])
        assert "tiny" not in context["scales"]
