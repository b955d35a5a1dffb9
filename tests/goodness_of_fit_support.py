"""What the sampler goodness-of-fit tests share across the two environments: the grid of
settings, the sample sizes, the false-alarm budget, the model and prompts they draw from.

tests/sampling/test_goodness_of_fit.py runs the grid on HF (.venv), and
tests/vllm_cpu/vllm_distribution_cases.py on vLLM (.venv-vllm). Each sampler test rejects at
``ALPHA``: the family of one backend's sampler tests has a false-alarm rate of at most
``FAMILY_ALPHA`` by design (Bonferroni over the grid).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT
from random_models import save_random_lora, trainable_base

from dashrepro.sampling import SamplingSettings
from dashrepro.sampling.goodness_of_fit import Fit, draw_responses, responses_fit

N_PROMPTS = 8
REPEATS = 256  # responses per prompt: 9,000-30,000 scored tokens per setting
MAX_NEW = 16
MIN_TOKENS = 8000
FAMILY_ALPHA = 1e-3
ADAPTERS = (None, "a8")


def sampling_grid(config: dict) -> list[tuple[float, float, int | None]]:
    """The (temperature, top_p, top_k) settings a config samples at (evaluation, and each
    scale's rollouts), and every temperature crossed with every top_p without top-k, so that
    each truncation is also tested on its own."""
    used = {(config["evaluation"]["temperature"], config["evaluation"]["top_p"], None)}
    for scale in config["scales"].values():
        train = scale.get("train", {})
        if "temperature" in train:
            used.add((train["temperature"], train.get("top_p", 1.0), train.get("top_k") or None))
    temperatures = sorted({t for t, _, _ in used})
    top_ps = sorted({p for _, p, _ in used}, reverse=True)
    used |= {(t, p, None) for t in temperatures for p in top_ps}
    return sorted(used, key=lambda s: (s[0], -s[1], s[2] or 0))


DEFAULT = yaml.safe_load((REPO_ROOT / "workflow_config.yaml").read_text())
#: Each sampler test's false-alarm rate: the family's, split over the grid.
ALPHA = FAMILY_ALPHA / (len(sampling_grid(DEFAULT)) * len(ADAPTERS))


def grid_params(config: dict = DEFAULT) -> list:
    """``(settings, adapter)`` pytest params over the grid and the adapters."""
    return [
        pytest.param(SamplingSettings(t, p, k, MAX_NEW), adapter, id=f"T{t}-p{p}-k{k}-{adapter}")
        for t, p, k in sampling_grid(config)
        for adapter in ADAPTERS
    ]


def fit_setup(folder: Path, protocol: dict) -> dict:
    """The random model (``random_models.trainable_base``) in ``folder``, a random rank-8
    adapter beside it, the HF policies the tokens are scored with, and the prompts."""
    from dashrepro.data.prompts import render_student_prompt
    from dashrepro.io import read_parquet
    from dashrepro.sampling.hf import load_policy

    folder, data, tokenizer = trainable_base(folder, protocol)
    adapter = save_random_lora(folder, folder.parent / f"{folder.name}-a8", 8, seed=1)
    adapters = {None: None, "a8": adapter}
    problems = read_parquet(data)["problem"][:N_PROMPTS]
    return {
        "folder": folder,
        "adapters": adapters,
        "policies": {name: load_policy(folder, path) for name, path in adapters.items()},
        "prompts": [render_student_prompt(tokenizer, p) for p in problems],
    }


def fit(setup: dict, sampler, settings, adapter, reference=None, seed: int = 3) -> Fit:
    """The sampler's fit at ``settings``, scored at ``reference`` (default: ``settings``). A draw
    is kept in ``setup``: the power tests score a sampler test's draw again at other settings
    instead of drawing it again (the same sampler, setting, adapter and seed give the same
    tokens)."""
    key = (id(sampler), settings, adapter, seed)
    draws = setup.setdefault("draws", {})
    if key not in draws:
        draws[key] = draw_responses(
            sampler, setup["prompts"], settings, seed=seed, repeats=REPEATS,
            adapter_dir=setup["adapters"][adapter],
        )  # fmt: skip
    policy = setup["policies"][adapter]
    return responses_fit(
        sampler.tokenizer, policy, setup["prompts"], draws[key], reference or settings
    )
