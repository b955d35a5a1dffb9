"""Tests of dashrepro.training.resume._fingerprint: the run config's fingerprint."""

import pytest

from dashrepro.training.resume._fingerprint import config_diff, config_fingerprint


def test_config_fingerprint_is_canonical():
    a = {"train": {"lr": 1e-3, "steps": 4}, "methods": ("opsd", "dash")}
    b = {"methods": ["opsd", "dash"], "train": {"steps": 4, "lr": 1e-3}}
    assert config_fingerprint(a) == config_fingerprint(b)
    assert config_fingerprint(a) != config_fingerprint({**b, "train": {"steps": 4, "lr": 2e-3}})
    assert config_fingerprint({"x": 1}) != config_fingerprint({"x": 1.0})
    assert len(config_fingerprint(a)) == 64
    with pytest.raises(TypeError):
        config_fingerprint({"x": object()})


def test_config_diff_names_every_differing_leaf_by_its_path():
    old = {"train": {"lr": 2e-3, "steps": 12, "views": [1, 2]}, "seed": 3}
    new = {"train": {"lr": 1e-3, "steps": 12, "views": [1, 3], "warmup": 5}, "seed": 3}
    assert config_diff(old, new) == [
        "train.lr: 0.002 (checkpoint) != 0.001 (now)",
        "train.views[1]: 2 (checkpoint) != 3 (now)",
        "train.warmup: <absent> (checkpoint) != 5 (now)",
    ]
    # Spellings, not values: 1 and 1.0 fingerprint differently, so they differ here too.
    assert config_diff({"x": 1}, {"x": 1.0}) == ["x: 1 (checkpoint) != 1.0 (now)"]
    assert config_diff(old, old) == []
