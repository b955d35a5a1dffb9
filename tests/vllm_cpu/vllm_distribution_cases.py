"""vLLM's sampler draws from the model's own distribution, at every setting the configs use.

The same grid, sample sizes and false-alarm budget as the HF sampler's test
(tests/sampling/test_goodness_of_fit.py, through ``goodness_of_fit_support``): every token
``VLLMSampler`` draws (seeded per request, as the pipeline seeds) is scored against the HF
policy's warped next-token distribution, with and without a LoRA adapter. A sampler bias of
vLLM (a temperature applied twice or not at all, a top-p boundary off by one token, an adapter
not applied to the sampled logits) fails here, whatever training does with it.

    .venv-vllm/bin/python -m pytest -s tests/vllm_cpu/vllm_distribution_cases.py
"""

from __future__ import annotations

import pytest
from goodness_of_fit_support import ALPHA, MIN_TOKENS, fit, fit_setup, grid_params
from vllm_support import ENGINE_KWARGS

from dashrepro.sampling import make_sampler


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, default_config):
    setup = fit_setup(tmp_path_factory.mktemp("gof"), default_config["protocol"])
    sampler = make_sampler(
        "vllm", base_model=setup["folder"], max_model_len=512, max_lora_rank=8, **ENGINE_KWARGS
    )
    yield {**setup, "sampler": sampler}
    sampler.shutdown()


@pytest.mark.parametrize("settings, adapter", grid_params())
def test_vllm_sampler_draws_from_the_model_distribution(tiny, settings, adapter):
    result = fit(tiny, tiny["sampler"], settings, adapter)
    label = f"{settings.temperature}/{settings.top_p}/{settings.top_k} {adapter}"
    print(f"[vllm] goodness of fit, vllm {label}: {result}")
    assert result.n_tokens > MIN_TOKENS
    assert result.accepts(ALPHA), str(result)
