"""Tests for dashrepro.embedded.tiny_tokenizer: the embedded default's tiny tokenizer renders
the same chat text as the real Qwen3 tokenizer, round-trips text and splits digits."""

import pytest

from dashrepro.embedded.tiny_tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tiny_tokenizer(default_config):
    return train_tokenizer(["What is 12 + 34?", *default_config["protocol"].values()], 400)


@pytest.mark.parametrize("thinking", [True, False])
def test_tiny_template_matches_qwen3(qwen3_tokenizer, tiny_tokenizer, thinking):
    messages = [{"role": "user", "content": "What is 12 + 34?"}]
    kwargs = {"tokenize": False, "add_generation_prompt": True, "enable_thinking": thinking}
    assert tiny_tokenizer.apply_chat_template(
        messages, **kwargs
    ) == qwen3_tokenizer.apply_chat_template(messages, **kwargs)


def test_tiny_tokenizer_round_trips_and_splits_digits(tiny_tokenizer):
    text = "So 123 + 45 = 168. The answer is $\\boxed{168}$.<|im_end|>"
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tiny_tokenizer.decode(ids) == text
    digits = [
        tiny_tokenizer.decode([i]) for i in ids if tiny_tokenizer.decode([i]).strip().isdigit()
    ]
    assert all(len(d.strip()) == 1 for d in digits)
    assert tiny_tokenizer.eos_token == "<|im_end|>" and tiny_tokenizer.pad_token == "<|endoftext|>"
