"""workflow_config.yaml is validated on load; every error names the offending key."""

import copy

import pytest

from dashrepro.config import ConfigError, load_config, validate_config


def test_default_config_is_valid(repo_root):
    config = load_config(repo_root / "workflow_config.yaml")
    assert config["experiment"] == "tiny"
    assert set(config["report"]["main_table"]["methods"]) <= set(config["methods"])


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c.update(unknown_key=1), "'unknown_key' was unexpected"),
        (lambda c: c["evaluation"].update(samples_per_problem=0), "evaluation.samples_per_problem"),
        (lambda c: c["scales"]["tiny"]["train"].update(lr="fast"), "scales.tiny.train.lr"),
        (
            lambda c: c["scales"]["tiny"]["lora"].update(target_modules=["lm_head"]),
            "scales.tiny.lora.target_modules.0",
        ),
        (lambda c: c["methods"]["opsd"].update(divergence="kl"), "methods.opsd.divergence"),
        (
            lambda c: c["scales"]["tiny"]["train"].update(checkpoint_every=7),
            "scales.tiny.train.checkpoint_every",
        ),
        (lambda c: c["methods"]["opsd"]["params"].update(kappa=5.0), "methods.opsd.params.kappa"),
        (lambda c: c["methods"]["dash"].update(aggregation="dasch"), "methods.dash.aggregation"),
        (
            lambda c: c["report"]["main_table"].update(methods=["opsd", "nope"]),
            "report.main_table.methods",
        ),
        (lambda c: c["evaluation"].pop("seed"), "'seed' is a required property"),
        # A local dataset must be pinned by its sha256, a hub dataset by its revision.
        (
            lambda c: c["benchmarks"]["aime2024"].update(
                dataset={"path": "a.jsonl", "layout": "local_benchmark"}
            ),
            "benchmarks.aime2024.dataset",
        ),
        (
            lambda c: c["data"].update(
                training_set={
                    "hf_id": "siyanzhao/Openthoughts_math_30k_opsd",
                    "layout": "opsd_train",
                }
            ),
            "data.training_set",
        ),
        (
            lambda c: c["data"].update(
                training_set={"hf_id": "a/b", "revision": "abc", "layout": "hf_aime_2024"}
            ),
            "data.training_set.layout",
        ),
        (
            lambda c: c["benchmarks"]["aime2025"].update(
                dataset={"hf_id": "a/b", "revision": "abc", "layout": "opsd_train"}
            ),
            "benchmarks.aime2025.dataset.layout",
        ),
        (lambda c: c["benchmarks"]["hmmt_feb2025"].pop("task"), "benchmarks.hmmt_feb2025"),
    ],
)
def test_invalid_config_names_the_key(default_config, mutate, expected):
    config = copy.deepcopy(default_config)
    mutate(config)
    with pytest.raises(ConfigError) as info:
        validate_config(config, source="test.yaml")
    assert expected in str(info.value)
    assert "test.yaml" in str(info.value)


def test_malformed_yaml_names_the_file(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("experiment: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_config(bad)


def test_real_dataset_specs_are_accepted(default_config):
    config = copy.deepcopy(default_config)
    config["data"]["training_set"] = {
        "hf_id": "siyanzhao/Openthoughts_math_30k_opsd",
        "revision": "0123abc",
        "split": "train",
        "layout": "opsd_train",
    }
    del config["benchmarks"]["aime2024"]["task"]  # a real benchmark needs no stand-in
    config["benchmarks"]["aime2024"]["dataset"] = {
        "path": "data/aime2024.jsonl",
        "sha256": "d" * 64,
        "layout": "local_benchmark",
    }
    validate_config(config, source="test.yaml")


def test_experiment_overlays_are_valid(repo_root, default_config):
    """Every file in config/experiments/, merged over the default as Snakemake does, validates."""
    import yaml
    from snakemake.utils import update_config

    overlays = sorted((repo_root / "config" / "experiments").glob("*.yaml"))
    assert overlays
    for overlay in overlays:
        config = copy.deepcopy(default_config)
        update_config(config, yaml.safe_load(overlay.read_text()))
        validate_config(config, source=str(overlay))
