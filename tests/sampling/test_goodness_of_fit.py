"""The HF sampler draws from the model's own distribution, at every setting the configs use.

``sampling.goodness_of_fit`` scores every drawn token against the policy's warped next-token
distribution; here against HF ``generate`` through ``HFSampler`` (the pipeline's CPU backend),
with and without a LoRA adapter. tests/vllm_cpu/vllm_distribution_cases.py runs the same grid
on vLLM. False alarms: at most ``FAMILY_ALPHA`` (1e-3) for the family of sampler tests, by design
(``goodness_of_fit_support``); the power tests show that the same sample sizes reject the
mistakes a sampler could make.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from goodness_of_fit_support import (
    ALPHA,
    DEFAULT,
    FAMILY_ALPHA,
    MAX_NEW,
    MIN_TOKENS,
    fit,
    fit_setup,
    grid_params,
    sampling_grid,
)
from random_models import TINY_ARCH

from dashrepro.sampling import SamplingSettings, make_sampler
from dashrepro.sampling.goodness_of_fit import randomized_pit, warped_probabilities


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One torch thread for this module's draws. The vLLM cases run beside the suite on one of
    the two cores, and two threads here then wait on each other: the grid took 40-90 s per
    setting in CI, against about 8 s alone. With one thread always, the seeded draws (and so the
    verdicts) are the same whatever runs beside them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, default_config):
    setup = fit_setup(tmp_path_factory.mktemp("gof"), default_config["protocol"])
    return {**setup, "sampler": make_sampler("hf", base_model=setup["folder"])}


def test_the_grid_covers_every_setting_the_configs_sample_at(default_config):
    settings = sampling_grid(default_config)
    assert settings == sampling_grid(DEFAULT)
    assert (1.0, 1.0, None) in settings  # evaluation
    assert (1.1, 0.95, 20) in settings  # rollouts
    assert {(1.0, 0.95, None), (1.1, 1.0, None)} <= set(settings)
    assert TINY_ARCH["head_dim"] == default_config["scales"]["tiny"]["architecture"]["head_dim"]


def test_warped_probabilities_follow_hf_generate_warpers():
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0)) * 2
    for t, p, k in [(1.0, 1.0, None), (1.1, 0.95, 20), (0.7, 0.5, None), (1.3, 1.0, 5)]:
        scores = TemperatureLogitsWarper(t)(None, logits.clone())
        if k:
            scores = TopKLogitsWarper(k)(None, scores)
        if p < 1.0:
            scores = TopPLogitsWarper(p)(None, scores)
        ours = warped_probabilities(logits, SamplingSettings(t, p, k))
        torch.testing.assert_close(ours, scores.double().softmax(-1), rtol=1e-6, atol=1e-9)


def test_exact_draws_pass_and_their_pits_are_uniform():
    """Tokens drawn by torch.multinomial from the warped distribution itself are accepted."""
    from scipy import stats

    logits = torch.randn(20000, 300, generator=torch.Generator().manual_seed(1))
    probabilities = warped_probabilities(logits, SamplingSettings(1.1, 0.95, 20))
    tokens = torch.multinomial(probabilities, 1, generator=torch.Generator().manual_seed(2))[:, 0]
    u, p = randomized_pit(probabilities, tokens, np.random.default_rng(0))
    assert (p > 0).all()
    assert stats.kstest(u, "uniform").pvalue > FAMILY_ALPHA
    # A hotter sampler (temperature 1.3 scored at 1.1) reaches into the tail: u rises.
    hot = torch.multinomial(warped_probabilities(logits, SamplingSettings(1.3, 0.95, 20)), 1,
                            generator=torch.Generator().manual_seed(2))[:, 0]  # fmt: skip
    u_hot, _ = randomized_pit(probabilities, hot, np.random.default_rng(0))
    assert u_hot.mean() > 0.5 and stats.kstest(u_hot, "uniform").pvalue < 1e-12


@pytest.mark.parametrize("settings, adapter", grid_params())
def test_hf_sampler_draws_from_the_model_distribution(tiny, settings, adapter):
    result = fit(tiny, tiny["sampler"], settings, adapter)
    print(f"[gof] hf {settings.temperature}/{settings.top_p}/{settings.top_k} {adapter}: {result}")
    assert result.n_tokens > MIN_TOKENS
    assert result.accepts(ALPHA), str(result)


def test_the_test_rejects_a_sampler_at_the_wrong_setting(tiny):
    """Power at these sample sizes: the mistakes a backend could make are each rejected."""
    sampler = tiny["sampler"]
    evaluation = SamplingSettings(1.0, 1.0, None, MAX_NEW)
    # Temperature 1.0 where 1.1 was asked for (the rollout temperature ignored).
    cold = fit(tiny, sampler, evaluation, None, reference=SamplingSettings(1.1, 1.0, None, MAX_NEW))
    print(f"[gof] power, T 1.0 scored at 1.1: {cold}")
    assert cold.p_value < 1e-6 and cold.mean_u < 0.5
    # A 5 % temperature error is still seen.
    near = fit(
        tiny, sampler, evaluation, None, reference=SamplingSettings(1.05, 1.0, None, MAX_NEW)
    )
    print(f"[gof] power, T 1.0 scored at 1.05: {near}")
    assert near.p_value < ALPHA
    # top_p or top_k not applied: tokens outside the support.
    for reference in (SamplingSettings(1.0, 0.95, None, MAX_NEW),
                      SamplingSettings(1.0, 1.0, 20, MAX_NEW)):  # fmt: skip
        loose = fit(tiny, sampler, evaluation, None, reference=reference)
        print(f"[gof] power, untruncated scored at {reference}: {loose}")
        assert loose.out_of_support > 0 and not loose.accepts(FAMILY_ALPHA)
