"""Tests for dashrepro.embedded.tiny_model: the tiny Qwen3 the embedded default builds."""

from embedded_helpers import ARCHITECTURE

from dashrepro.embedded.tiny_model import build_tiny_qwen3, head_dim


def test_head_dim_is_its_own_key():
    assert head_dim(ARCHITECTURE) == 32
    assert head_dim({**ARCHITECTURE, "head_dim": None}) == 16  # 32 / 2 heads
    model = build_tiny_qwen3(ARCHITECTURE, 50, pad_token_id=0, eos_token_id=1, seed=0)
    assert model.config.head_dim == 32
    assert model.model.layers[0].self_attn.q_proj.out_features == 2 * 32
