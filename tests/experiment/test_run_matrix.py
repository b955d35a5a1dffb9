"""Tests for ``dashrepro.experiment.run_matrix``: method grids and defaults, derived scales, and
the runs a config trains (the paper's 149)."""

import json
import re

import pytest

from dashrepro.experiment.config import ConfigError, load_config, validate_config


def test_the_paper_overlay_runs_the_papers_149_runs(repo_root):
    """The paper's protocol, once: 149 training runs (the one count a test pins; the DAG tests
    count from the config, so an added method or table changes no other test)."""
    from dashrepro.experiment.run_matrix import run_matrix

    config = load_config(
        repo_root / "workflow_config.yaml", repo_root / "config/experiments/paper.yaml"
    )
    assert all(m["tau"] == 0.05 for m in config["methods"].values())  # method_defaults
    runs = run_matrix(config)
    assert sum(len(seeds) for seeds in runs.values()) == 149
    assert runs[("eopd", "qwen3_8b")] == [0] and runs[("dash_k20", "qwen3_1p7b")] == [0, 1, 2, 3]
    assert ("dash_k20", "qwen3_8b") not in runs  # ablations run at 1.7B only
    assert config["methods"]["dash_grpo_noagg_eta0p5_k4"]["grpo"] == {
        "aggregate": False,
        "eta": 0.5,
        "group_size": 4,
    }


def test_a_method_grid_expands_to_named_points_with_labels():
    from dashrepro.experiment.run_matrix import expand_methods

    config = {
        "methods": {"fixed_lambda_0p5": {"label": "kept", "aggregation": "fixed_lambda",
                                         "divergence": "forward_kl", "params": {"lam": 0.5}}},
        "method_defaults": {"tau": None},
        "method_grids": {"lam": {
            "name": "fixed_lambda_{lam}", "label": "Fixed $\\lambda={lam}$",
            "method": {"aggregation": "fixed_lambda", "divergence": "forward_kl"},
            "vary": {"params.lam": [0.1, 0.5]},
        }},
    }  # fmt: skip
    methods = expand_methods(config)["methods"]
    assert methods["fixed_lambda_0p1"] == {
        "aggregation": "fixed_lambda", "divergence": "forward_kl", "params": {"lam": 0.1},
        "label": "Fixed $\\lambda=0.1$", "tau": None,
    }  # fmt: skip
    assert methods["fixed_lambda_0p5"]["label"] == "kept"  # the explicit entry wins
    config["method_grids"]["lam"]["vary"] = {"params.lam": [0.1, 0.5, 0.7]}
    config["methods"]["fixed_lambda_0p7"] = {**methods["fixed_lambda_0p5"], "params": {"lam": 0.9}}
    with pytest.raises(ValueError, match="fixed_lambda_0p7.*other training values"):
        expand_methods(config)


def test_a_derived_scale_takes_its_base_scales_keys_and_base_model(default_config_file):
    from dashrepro.experiment.run_matrix import base_scale, expand_config, scale_evaluation

    config = expand_config(json.loads(json.dumps(default_config_file)))
    tiny, ablation = config["scales"]["tiny"], config["scales"]["tiny_ablation"]
    own = default_config_file["scales"]["tiny_ablation"]
    for key in ("source", "architecture", "sft", "lora"):
        assert ablation[key] == tiny[key]
    assert ablation["label"] == own["label"] != tiny["label"]  # the label is never inherited
    assert ablation["train"] == {**tiny["train"], **own["train"]}  # merged key by key
    assert ablation["train"]["steps"] != tiny["train"]["steps"]
    assert base_scale(config, "tiny_ablation") == "tiny" == base_scale(config, "tiny")
    # A scale's own `evaluation` keys replace the experiment's: the default's main schedule
    # samples more per checkpoint, and its ablation, derived from it, sets the base model's back.
    assert scale_evaluation(config, "tiny") == {**config["evaluation"], **tiny["evaluation"]}
    assert (
        scale_evaluation(config, "tiny")["samples_per_problem"]
        != config["evaluation"]["samples_per_problem"]
    )
    assert scale_evaluation(config, "tiny_ablation") == config["evaluation"]
    config["scales"]["tiny_ablation"]["evaluation"] = {"samples_per_problem": 2}
    assert scale_evaluation(config, "tiny_ablation") == {
        **config["evaluation"],
        "samples_per_problem": 2,
    }
    again = expand_config(json.loads(json.dumps(config)))
    assert again["scales"] == config["scales"]  # expanding twice changes nothing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["tiny_ablation"].update(derive_from="nope"),
         "scales.tiny_ablation.derive_from: unknown scale 'nope'"),
        (lambda s: s["tiny_ablation"].update(sft={"steps": 1}),
         "scales.tiny_ablation.sft: a derived scale trains from scales.tiny's base model"),
        (lambda s: s.update(other={"derive_from": "tiny_ablation"}),
         "scales.other.derive_from: scale 'tiny_ablation' is itself derived"),
    ],
)  # fmt: skip
def test_a_bad_derived_scale_stops_the_run_naming_the_key(default_config_file, change, message):
    config = json.loads(json.dumps(default_config_file))
    change(config["scales"])
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_config(config)


def test_a_runs_group_naming_an_unknown_method_is_an_error(repo_root):
    from dashrepro.experiment.config import read_config_file

    config = read_config_file(repo_root / "workflow_config.yaml")
    config["runs"] = [{"methods": ["dash_k3"], "scales": ["tiny"], "seeds": [0]}]
    with pytest.raises(ConfigError, match="runs.0.methods: unknown method 'dash_k3'"):
        validate_config(config)
