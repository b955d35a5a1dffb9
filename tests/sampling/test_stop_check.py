"""``sampling.stop_check``: transformers' deferred stop check, opened to a device, gives the
synchronous check's tokens with the caches our samplers pass, and stays shut on a CPU.

CPU tensors have no events, so the end-to-end case stands in a no-op event for them (on a
device that runs every operation before returning, recording and waiting are no-ops): the
deferral then runs transformers' own code, its extra step and its undo, on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from random_models import TINY_ARCH, save_model
from sampling_helpers import save_tiny_model
from transformers.generation import utils

from dashrepro.sampling.base import SamplingSettings
from dashrepro.sampling.hf import left_pad, load_policy, sample_responses
from dashrepro.sampling.hf_compiled import StaticCaches
from dashrepro.sampling.kv_cache import preallocated_cache
from dashrepro.sampling.stop_check import RESET_BEFORE_REUSE, can_defer, deferred_stop_check


class NoOpEvent:
    """A CPU stand-in for ``torch.Event``: every operation has finished when it returns."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def record(self, *args) -> None:
        pass

    def synchronize(self) -> None:
        pass


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A random model whose EOS is likely: some calls end before their cap, some at it."""
    _, tokenizer, prompts = save_tiny_model(tmp_path_factory.mktemp("tok"), TINY_ARCH)
    folder = save_model(tmp_path_factory.mktemp("base"), tokenizer, TINY_ARCH, eos_scale=6.0)
    return load_policy(folder, None), tokenizer, prompts


def test_the_rule_is_transformers_own_with_a_reset_cache_counted_as_not_returned():
    croppable, fixed = preallocated_cache(8), type("Fixed", (), {"is_croppable": False})()
    assert not can_defer("cpu", None, False, devices=("cuda",))
    assert can_defer("cuda", None, False, devices=("cuda",))
    assert can_defer("cuda", croppable, True, devices=("cuda",))  # rolled back by a crop
    assert not can_defer("cuda", fixed, True, devices=("cuda",))  # a static cache, returned
    setattr(fixed, RESET_BEFORE_REUSE, True)
    assert can_defer("cuda", fixed, True, devices=("cuda",))  # ours: reset before reuse
    assert can_defer("cuda", fixed, False, devices=("cuda",))


def test_the_shipped_check_is_back_after_the_block():
    shipped = utils.DeferredStopCheck
    with deferred_stop_check() as available:
        assert available and utils.DeferredStopCheck is not shipped
    assert utils.DeferredStopCheck is shipped


@pytest.mark.parametrize("cache_kind", ["preallocated", "static"])
def test_a_deferred_check_gives_the_synchronous_tokens(model, monkeypatch, cache_kind):
    """Seeds where every row ends by EOS (the extra step undone) and where the cap ends them:
    the same sequences either way, with each kind of cache our samplers pass."""
    policy, tokenizer, prompts = model
    monkeypatch.setattr(torch, "Event", NoOpEvent)
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts] * 2
    ids, mask = left_pad(encoded, tokenizer.pad_token_id)
    statics = StaticCaches(policy.config, keep=1)

    def generate(seed: int, cap: int):
        torch.manual_seed(seed)
        with torch.inference_mode():  # as sample_responses calls it, the cache's reset included
            cache = (preallocated_cache(ids.shape[1] + cap) if cache_kind == "preallocated"
                     else statics(len(encoded), ids.shape[1] + cap))  # fmt: skip
            return policy.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=cap,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                past_key_values=cache,
            )  # fmt: skip

    undone = []
    for seed, cap in [(0, 48), (1, 48), (2, 48), (3, 2)]:
        synchronous = generate(seed, cap)
        with deferred_stop_check(devices=("cpu",)):
            finish = utils.DeferredStopCheck.finish
            monkeypatch.setattr(utils.DeferredStopCheck, "finish",
                                lambda self, f=finish: undone.append(f(self)) or undone[-1])  # fmt: skip
            deferred = generate(seed, cap)
        assert torch.equal(synchronous, deferred), (seed, cap)
    # The deferral ran every time; some calls ended by EOS (one step undone), one at the cap.
    assert len(undone) == 4 and 1 in undone and undone[-1] == 0, undone


def test_on_a_cpu_the_check_stays_synchronous(model):
    """The default device list is CUDA's: a CPU call samples what it always did."""
    policy, tokenizer, prompts = model
    settings = SamplingSettings(max_new_tokens=24, batch_size=4)
    plain = sample_responses(policy, tokenizer, prompts * 2, settings, 5)
    deferred = sample_responses(policy, tokenizer, prompts * 2, settings, 5, defer_stop_check=True)
    assert [s.token_ids for s in plain] == [s.token_ids for s in deferred]
    assert {s.finish_reason for s in plain} == {"stop", "length"}
