"""The policy copy: base plus the adapter's delta, written in place, never drifting.

After many optimizer steps the copy's adapted weights are exactly ``base + scaling * B @ A``
computed in fp32 and rounded once to the copy's dtype, at the same addresses; its logits match
the PEFT model's; a saved adapter folder gives the same deltas as the live model; no deltas is
the base model, bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from sampling_helpers import ARCH, TARGETS, save_tiny_model

from dashrepro.sampling.policy_copy import PolicyCopy, folder_deltas, live_deltas, merged_weight
from dashrepro.settings import LoraSettings


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("copy-base"), {**ARCH, "num_hidden_layers": 2})


def student(folder):
    from dashrepro.training.model import load_lora_student

    lora = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=tuple(TARGETS))
    return load_lora_student(folder, lora, seed=0)


def train_steps(policy, steps: int, seed: int = 0) -> None:
    """``steps`` AdamW steps on a random objective, so that B and A both move."""
    generator = torch.Generator().manual_seed(seed)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    for _ in range(steps):
        ids = torch.randint(3, 40, (2, 12), generator=generator)
        loss = policy(input_ids=ids).logits.float().logsumexp(-1).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_copy_is_base_plus_delta_after_many_steps_at_the_same_addresses(base, dtype):
    folder, _, _ = base
    policy = student(folder)
    copy = PolicyCopy.load(folder, dtype, "cpu")
    addresses = {name: w.data_ptr() for name, w in copy.weights.items()}
    for _ in range(10):
        train_steps(policy, 5)
        copy.refresh(live_deltas(policy))
    deltas = live_deltas(policy)
    assert len(deltas) == 2 * len(TARGETS)
    assert {name: w.data_ptr() for name, w in copy.weights.items()} == addresses
    for delta in deltas:
        exact = merged_weight(delta.base, delta)  # fp32
        weight = copy.weights[delta.name]
        assert torch.equal(weight, exact.to(dtype))  # rounded once: no drift
        assert (weight.float() - exact).abs().max() <= exact.abs().max() * 2**-8
        assert not torch.equal(delta.lora_b, torch.zeros_like(delta.lora_b))  # it moved
    if dtype == torch.float32:
        ids = torch.randint(3, 40, (2, 10), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = policy.eval()(input_ids=ids).logits
            # x (W + sBA) against x W + s (x A) B: the same in fp32 up to summation order.
            torch.testing.assert_close(
                copy.model(input_ids=ids).logits, expected, atol=1e-4, rtol=1e-4
            )


def test_a_saved_adapter_gives_the_live_deltas_and_none_gives_the_base(base, tmp_path):
    from dashrepro.adapters import save_adapter

    folder, _, _ = base
    policy = student(folder)
    train_steps(policy, 3)
    save_adapter(policy, tmp_path / "adapter")
    live = {d.name: d for d in live_deltas(policy)}
    saved = folder_deltas(tmp_path / "adapter")
    assert sorted(d.name for d in saved) == sorted(live)
    for delta in saved:
        assert torch.equal(delta.lora_a, live[delta.name].lora_a)
        assert torch.equal(delta.lora_b, live[delta.name].lora_b)
        assert delta.scaling == live[delta.name].scaling == 2.0

    copy = PolicyCopy.load(folder, torch.float32, "cpu")
    before = {name: w.clone() for name, w in copy.weights.items()}
    copy.refresh(saved)
    changed = [name for name, w in copy.weights.items() if not torch.equal(w, before[name])]
    assert sorted(changed) == sorted(live)
    copy.refresh([])
    assert all(torch.equal(w, before[name]) for name, w in copy.weights.items())


def test_a_delta_for_a_weight_the_model_lacks_is_named(base):
    from dashrepro.sampling.policy_copy import LoraDelta

    folder, _, _ = base
    copy = PolicyCopy.load(folder, torch.float32, "cpu")
    stray = LoraDelta("model.layers.9.mlp.up_proj", torch.zeros(1, 1), torch.zeros(1, 1), 1.0)
    with pytest.raises(KeyError, match="model.layers.9.mlp.up_proj"):
        copy.refresh([stray])
