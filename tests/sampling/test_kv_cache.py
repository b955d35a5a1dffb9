"""``sampling.kv_cache``: generation with the preallocated cache gives the samples and the logits
of transformers' own dynamic cache, bit for bit, and the layer behaves like a ``DynamicLayer``
under the operations a cache may undergo (growth past its size, a crop, a batch selection)."""

from __future__ import annotations

import pytest
import torch
from random_models import TINY_ARCH
from sampling_helpers import save_random_lora, save_tiny_model
from transformers.cache_utils import DynamicLayer

from dashrepro.sampling.hf import left_pad, load_policy
from dashrepro.sampling.kv_cache import PreallocatedLayer, preallocated_cache


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The default's tiny architecture with a LoRA adapter, as a checkpoint is sampled."""
    folder, tokenizer, prompts = save_tiny_model(tmp_path_factory.mktemp("base"), TINY_ARCH)
    adapter = tmp_path_factory.mktemp("adapter")
    save_random_lora(folder, adapter, rank=4, seed=2)
    return load_policy(folder, adapter), tokenizer, prompts


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (1.1, 0.95)])
def test_the_preallocated_cache_samples_what_the_dynamic_cache_samples(policy, temperature, top_p):
    model, tokenizer, prompts = policy
    # Prompts of different lengths (left padding), repeated as k samples per problem are.
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts] * 6
    encoded = [ids[: len(ids) - i % 5] for i, ids in enumerate(encoded)]
    ids, mask = left_pad(encoded, tokenizer.pad_token_id)

    def generate(**cache):
        torch.manual_seed(7)
        return model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=temperature,
            top_p=top_p, top_k=0, max_new_tokens=40, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, output_logits=True,
            return_dict_in_generate=True, **cache,
        )  # fmt: skip

    dynamic = generate()
    cache = preallocated_cache(ids.shape[1] + 40)
    preallocated = generate(past_key_values=cache)
    assert len(cache.layers) == TINY_ARCH["num_hidden_layers"]
    # generate used this cache, and never needed more room than it was given
    assert all(layer.key_buffer.shape[-2] == ids.shape[1] + 40 for layer in cache.layers)
    assert torch.equal(dynamic.sequences, preallocated.sequences)
    assert len(dynamic.logits) == len(preallocated.logits) > 1
    assert all(torch.equal(a, b) for a, b in zip(dynamic.logits, preallocated.logits, strict=True))


def test_the_layer_follows_a_dynamic_layer_through_growth_crop_and_selection():
    torch.manual_seed(0)
    dynamic, preallocated = DynamicLayer(), PreallocatedLayer(capacity=6)

    def step(length: int, batch: int = 3):
        keys, values = torch.randn(batch, 2, length, 4), torch.randn(batch, 2, length, 4)
        expected = dynamic.update(keys, values)
        got = preallocated.update(keys, values)
        assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))

    step(4)  # the prompt
    step(1)
    step(1)  # the buffers are full
    step(1)  # past their size: copied into larger ones
    assert preallocated.key_buffer.shape[-2] == 7
    for layer in (dynamic, preallocated):
        layer.crop(-2)
    step(1)  # written over the cropped positions
    indices = torch.tensor([2, 0])
    for layer in (dynamic, preallocated):
        layer.batch_select_indices(indices)
    step(1, batch=2)  # the selected rows, in buffers of their own
    assert preallocated.get_seq_length() == dynamic.get_seq_length() == 7
