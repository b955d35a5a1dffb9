"""workflow_config.yaml is validated on load; every error names the offending key."""

import copy

import pytest

from dashrepro.experiment.config import ConfigError, load_config, validate_config


def test_default_config_is_valid(repo_root):
    config = load_config(repo_root / "workflow_config.yaml")
    assert config["experiment"] == "tiny"
    assert set(config["tables"]["main_results"]["methods"]) <= set(config["methods"])


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c.update(unknown_key=1), "'unknown_key' was unexpected"),
        (lambda c: c["evaluation"].update(samples_per_problem=0), "evaluation.samples_per_problem"),
        (lambda c: c["evaluation"].update(grading_workers=0), "evaluation.grading_workers"),
        (
            lambda c: c["evaluation"].update(grading_item_timeout_s=5.0),
            "evaluation.grading_item_timeout_s: 5.0 is not above evaluation.grading_timeout_s",
        ),
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
            lambda c: c["tables"]["main_results"].update(methods=["opsd", "nope"]),
            "tables.main_results.methods",
        ),
        (
            lambda c: c["figures"]["checkpoint_curves"].update(kind="no_such_kind"),
            "figures.checkpoint_curves.kind",
        ),
        (
            lambda c: c["tables"]["main_results"].update(options={"colour": True}),
            "tables.main_results.options.colour",
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


def test_experiment_overlays_are_valid(repo_root, default_config_file):
    """Every file in config/experiments/, merged over the default as Snakemake does, validates."""
    import yaml
    from snakemake.utils import update_config

    overlays = sorted((repo_root / "config" / "experiments").glob("*.yaml"))
    assert overlays
    for overlay in overlays:
        config = copy.deepcopy(default_config_file)
        update_config(config, yaml.safe_load(overlay.read_text()))
        validate_config(config, source=str(overlay))


# ------------------------------------------------------------------ ranges, before any job

BAD_VALUES = [
    # (method entry changes, key named, range named)
    ({"dash": {"params": {"kappa": -5}}}, "methods.dash.params.kappa", "kappa >= 0"),
    ({"dash": {"params": {"kappa": float("nan")}}}, "methods.dash.params.kappa", "kappa >= 0"),
    ({"entropy_gate_k5": {"params": {"kappa": True}}}, "methods.entropy_gate_k5.params.kappa", "kappa >= 0"),
    ({"fixed_lambda_0p5": {"params": {"lam": 1.5}}}, "methods.fixed_lambda_0p5.params.lam", "0 <= lam <= 1"),
    ({"pw_opsd": {"params": {"position_s": 0}}}, "methods.pw_opsd.params.position_s", "position_s > 0"),
    ({"pw_opsd": {"params": {"position_w_min": -0.1}}}, "methods.pw_opsd.params.position_w_min", "0 <= position_w_min <= 1"),
    ({"eopd": {"objective_params": {"top_k": 0}}}, "methods.eopd.objective_params.top_k", "top_k >= 1, an integer"),
    ({"eopd": {"objective_params": {"entropy_threshold": -1}}}, "methods.eopd.objective_params.entropy_threshold", "entropy_threshold >= 0"),
    ({"dash": {"tau": -0.05}}, "methods.dash.tau", "less than or equal to the minimum of 0"),
    ({"dash_top100": {"top_k": 0}}, "methods.dash_top100.top_k", "less than the minimum of 1"),
    ({"dash_grpo_eta0p3_k8": {"grpo": {"eta": -0.3}}}, "methods.dash_grpo_eta0p3_k8.grpo.eta", "less than the minimum of 0"),
    ({"dash_grpo_eta0p3_k8": {"grpo": {"group_size": 1}}}, "methods.dash_grpo_eta0p3_k8.grpo.group_size", "less than the minimum of 2"),
    ({"dash_grpo_eta0p3_k8": {"grpo": {"gamma": 1.5}}}, "methods.dash_grpo_eta0p3_k8.grpo.gamma", "greater than the maximum of 1"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "key", "allowed"), BAD_VALUES)
def test_out_of_range_values_name_key_and_range(default_config, change, key, allowed):
    from snakemake.utils import update_config

    config = copy.deepcopy(default_config)
    # The grid-made methods are already expanded; without the grids, each is an entry of its own.
    config.pop("method_grids")
    update_config(config["methods"], copy.deepcopy(change))
    with pytest.raises(ConfigError) as info:
        validate_config(config, source="test.yaml")
    line = next(line for line in str(info.value).splitlines() if key in line)
    assert allowed in line


def _snakemake_dry_run(repo_root, tmp_path, overlay: dict):
    import subprocess
    import sys

    import yaml

    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(tmp_path), "-n", "all_tables",
           f"--configfile={tmp_path / 'overlay.yaml'}"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_bad_values_stop_the_dry_run_naming_key_range_and_file(repo_root, tmp_path):
    """`snakemake -n` stops at parse time -- no job starts, no output is deleted."""
    overlay = {"methods": {"dash": {"params": {"kappa": -5}},
                           "pw_opsd": {"params": {"position_s": 0}},
                           "eopd": {"objective_params": {"top_k": 0}}}}  # fmt: skip
    done = _snakemake_dry_run(repo_root, tmp_path, overlay)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "methods.dash.params.kappa: -5 is out of range (kappa >= 0" in out
    assert "methods.pw_opsd.params.position_s: 0 is out of range (position_s > 0" in out
    assert "methods.eopd.objective_params.top_k: 0 is out of range (top_k >= 1" in out
    assert f"[set in {tmp_path / 'overlay.yaml'}]" in out
    assert "workflow_config.yaml + " in out  # the files actually merged
    assert not (tmp_path / "results").exists()


def test_misspelt_dataset_key_is_named(default_config):
    config = copy.deepcopy(default_config)
    config["benchmarks"]["aime2024"]["dataset"] = {
        "path": "a.jsonl", "sha265": "0" * 64, "layout": "local_benchmark",
    }  # fmt: skip
    with pytest.raises(ConfigError) as info:
        validate_config(config, source="test.yaml")
    message = str(info.value)
    assert "benchmarks.aime2024.dataset.sha265: Additional properties are not allowed" in message
    assert "is not valid under any of the given schemas" not in message


def test_cli_validates_an_overlay_merged_over_the_base(repo_root, tmp_path):
    import subprocess
    import sys

    overlay = tmp_path / "exp.yaml"
    overlay.write_text("evaluation:\n  temperature: -1.0\n")
    cli = [
        sys.executable,
        "-m",
        "dashrepro.experiment.config",
        str(repo_root / "workflow_config.yaml"),
    ]
    ok = subprocess.run([*cli, str(repo_root / "config/experiments/paper.yaml")],
                        capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.strip() == "ok", ok.stderr
    bad = subprocess.run([*cli, str(overlay)], capture_output=True, text=True)
    assert bad.returncode != 0
    assert "evaluation.temperature: -1.0 is less than or equal to the minimum of 0" in bad.stderr
    assert f"[set in {overlay}]" in bad.stderr


def test_a_methods_training_keys_are_declared_once(repo_root):
    """The schema's method entry, MethodSpec and the trainer's resume fingerprint all hold
    exactly ``training.methods.METHOD_TRAINING_KEYS`` (with the label, the name): a key added to
    one and not the others would train, resume or rerun under a config that does not say so."""
    import dataclasses

    import yaml

    from dashrepro.training.methods import METHOD_TRAINING_KEYS, MethodSpec

    schema = yaml.safe_load((repo_root / "src/dashrepro/experiment/config_schema.yaml").read_text())
    entry = schema["properties"]["methods"]["additionalProperties"]["properties"]
    assert set(entry) == {*METHOD_TRAINING_KEYS, "label"}
    assert {f.name for f in dataclasses.fields(MethodSpec)} == {*METHOD_TRAINING_KEYS, "name"}
    config = load_config(repo_root / "workflow_config.yaml")
    method = MethodSpec.from_config("dash", config["methods"]["dash"])
    assert list(method.training_config()) == list(METHOD_TRAINING_KEYS)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("..", "starts with '.'"),
        (".", "starts with '.'"),
        (".hidden", "starts with '.'"),
        ("published", "reserved for the paper's published tables"),
        ("README.md", "reserved for the results folder's README"),
    ],
)
def test_an_experiment_name_outside_results_or_on_a_folder_it_owns_is_refused(
    repo_root, tmp_path, name, why
):
    """``..`` would put data/, runs/ and logs/ beside results/; ``published`` would write into
    the published tables: refused before any job, through the command line too."""
    import subprocess
    import sys

    overlay = tmp_path / "exp.yaml"
    overlay.write_text(f"experiment: '{name}'\n")
    cli = [sys.executable, "-m", "dashrepro.experiment.config",
           str(repo_root / "workflow_config.yaml"), str(overlay)]  # fmt: skip
    refused = subprocess.run(cli, capture_output=True, text=True)
    assert refused.returncode != 0 and f"experiment: {name!r} " in refused.stderr
    assert why in refused.stderr, refused.stderr
    config = load_config(repo_root / "workflow_config.yaml")
    config["experiment"] = "my.run-2"  # dots inside a name stay allowed
    validate_config(config)


def test_an_overlay_removes_an_entry_by_setting_it_to_null(repo_root, tmp_path):
    """A merge adds and changes entries; null takes a benchmark, table or figure away."""
    from dashrepro.experiment.config import REMOVABLE, drop_removed_entries, load_config

    overlay = tmp_path / "exp.yaml"
    overlay.write_text(
        "benchmarks:\n  hmmt_feb2025: null\ntables:\n  grpo_hybrid: null\n"
        "figures:\n  prop_kappa: null\n"
    )
    config = load_config(repo_root / "workflow_config.yaml", overlay)
    assert list(config["benchmarks"]) == ["aime2024", "aime2025"]
    assert "grpo_hybrid" not in config["tables"] and "prop_kappa" not in config["figures"]
    assert drop_removed_entries({"data": {"validation": None}}) == {"data": {"validation": None}}
    assert set(REMOVABLE) <= set(config)


# --------------------------------------------------------------------------- issue 66, item 3


@pytest.mark.parametrize(
    ("evaluation", "key"),
    [({"dtype": "bfloat16"}, "evaluation.dtype"),
     ({"kv_cache_budget_gib": 8.0}, "evaluation.kv_cache_budget_gib")],
)  # fmt: skip
def test_a_key_its_backend_does_not_read_is_named_with_its_file(
    repo_root, tmp_path, evaluation, key
):
    """On backend hf, dtype and kv_cache_budget_gib are a config error like any other (the
    files merged, the file that set the key), not a traceback."""
    import yaml

    overlay = tmp_path / "exp.yaml"
    overlay.write_text(yaml.safe_dump({"evaluation": evaluation}))
    with pytest.raises(ConfigError) as info:
        load_config(repo_root / "workflow_config.yaml", overlay)
    message = str(info.value)
    assert message.startswith(f"invalid configuration in {repo_root / 'workflow_config.yaml'} + {overlay}")  # fmt: skip
    assert f"  - {key}: only the hf_compiled" in message
    assert f"the backend is hf [set in {overlay}]" in message


def test_an_exponent_without_a_dot_gets_the_spelling_yaml_reads_as_a_number(repo_root, tmp_path):
    overlay = tmp_path / "exp.yaml"
    overlay.write_text("evaluation:\n  backend: hf_compiled\n  kv_cache_budget_gib: 1e-9\n")
    with pytest.raises(ConfigError) as info:
        load_config(repo_root / "workflow_config.yaml", overlay)
    assert (
        "evaluation.kv_cache_budget_gib: '1e-9' is not of type 'number'; YAML reads 1e-9 as a "
        "string, not a number (its floats need a dot and a signed exponent): write 1.0e-9 "
        f"[set in {overlay}]"
    ) in str(info.value)
    overlay.write_text("evaluation:\n  backend: hf_compiled\n  kv_cache_budget_gib: 1.0e-9\n")
    config = load_config(repo_root / "workflow_config.yaml", overlay)
    assert config["evaluation"]["kv_cache_budget_gib"] == 1e-9


def test_a_cuda_device_this_machine_lacks_still_validates_and_plans_a_gpu_job(repo_root, tmp_path):
    """The device is checked by the job that would load the model (sampling.devices), not at
    parse: a login node without a GPU plans the cluster's GPU jobs."""
    from dashrepro.experiment.workflow import Experiment

    overlay = tmp_path / "exp.yaml"
    overlay.write_text("evaluation:\n  backend: hf_compiled\n  device: cuda\n")
    experiment = Experiment(load_config(repo_root / "workflow_config.yaml", overlay))
    assert experiment.evaluation_gpus == 1 and experiment.generation["device"] == "cuda"


def test_the_jobs_are_told_which_file_set_each_evaluation_key(repo_root, tmp_path, monkeypatch):
    from dashrepro import config_sources
    from dashrepro.experiment.config import snakemake_config_sources

    monkeypatch.setenv(config_sources.VARIABLE, "")  # restored after the test
    overlay = tmp_path / "exp.yaml"
    overlay.write_text("evaluation:\n  device: cuda\n")
    workflow = repo_root / "workflow_config.yaml"
    label, _ = snakemake_config_sources(workflow, [overlay], {"evaluation": {"seed": 1}})
    assert label == f"{workflow} + {overlay} + --config"
    assert config_sources.set_in("evaluation.device") == f"set in {overlay}"
    assert config_sources.set_in("evaluation.backend") == f"set in {workflow}"
    assert config_sources.set_in("evaluation.seed") == "set in --config"
