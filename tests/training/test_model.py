"""Tests of dashrepro.training.model: the LoRA student."""

import torch
from training_helpers import LORA

from dashrepro.training.model import load_lora_student


def test_disabled_adapter_is_the_base_model(tiny_setup):
    folder, _, _ = tiny_setup
    student = load_lora_student(folder, LORA, seed=0)
    # Make the adapter non-trivial (B starts at zero), then compare with the adapter disabled.
    with torch.no_grad():
        for name, param in student.named_parameters():
            if "lora_B" in name:
                param.normal_()
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(folder))
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        with student.disable_adapter():
            teacher = student(input_ids=ids).logits
        adapted = student(input_ids=ids).logits
        reference = base(input_ids=ids).logits
    assert torch.equal(teacher, reference)
    assert not torch.allclose(adapted, reference)
