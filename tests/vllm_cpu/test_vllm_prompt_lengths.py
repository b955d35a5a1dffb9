"""``sampling.vllm``'s prompt-length check, without vLLM (runs in .venv)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dashrepro.sampling.vllm import check_prompt_lengths, engine_max_model_len


def test_a_prompt_without_room_for_a_response_is_named_with_the_setting():
    check_prompt_lengths([[1] * 10, [2] * 15], max_model_len=16)  # 15 + one response token fit
    check_prompt_lengths([[1] * 10_000], max_model_len=None)  # unknown limit: vLLM decides
    with pytest.raises(ValueError) as error:
        check_prompt_lengths([[1] * 10, [2] * 16], max_model_len=16)
    message = str(error.value)
    assert "prompt 1 has 16 tokens" in message
    assert "max_model_len=16" in message and "evaluation.vllm.max_model_len" in message


def test_engine_max_model_len_reads_the_engine_config_or_none():
    engine = SimpleNamespace(
        llm_engine=SimpleNamespace(model_config=SimpleNamespace(max_model_len=9216))
    )
    assert engine_max_model_len(engine) == 9216
    assert engine_max_model_len(SimpleNamespace()) is None  # a stand-in LLM without an engine
