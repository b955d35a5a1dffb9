"""Tests of dashrepro.training.fingerprint: the run config's fingerprint."""

import pytest

from dashrepro.training.fingerprint import config_fingerprint


def test_config_fingerprint_is_canonical():
    a = {"train": {"lr": 1e-3, "steps": 4}, "methods": ("opsd", "dash")}
    b = {"methods": ["opsd", "dash"], "train": {"steps": 4, "lr": 1e-3}}
    assert config_fingerprint(a) == config_fingerprint(b)
    assert config_fingerprint(a) != config_fingerprint({**b, "train": {"steps": 4, "lr": 2e-3}})
    assert config_fingerprint({"x": 1}) != config_fingerprint({"x": 1.0})
    assert len(config_fingerprint(a)) == 64
    with pytest.raises(TypeError):
        config_fingerprint({"x": object()})
