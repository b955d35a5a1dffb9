"""The evaluation batch planned from a key/value budget, checked at the paper's shapes and caps
without a GPU: the rows fit the budget, one more would not, and a row that cannot fit at all is
an error naming the setting."""

from __future__ import annotations

import pytest

from dashrepro.sampling.memory_plan import GIB, CacheShape, planned_batch

# The Qwen3 configs' (num_hidden_layers, num_key_value_heads, head_dim) of the paper's scales.
PAPER_SHAPES = {"qwen3_1p7b": (28, 8, 128), "qwen3_4b": (36, 8, 128), "qwen3_8b": (36, 8, 128)}
PAPER_CAP = 38_912  # evaluation.max_new_tokens of config/experiments/paper.yaml
PROMPT = 512  # a generous prompt width for a competition problem with the instruction


def test_a_position_costs_a_key_and_a_value_per_layer_and_head():
    shape = CacheShape(*PAPER_SHAPES["qwen3_1p7b"])
    assert shape.bytes_per_position(2) == 2 * 28 * 8 * 128 * 2 == 114_688  # 112 KiB in bf16
    assert shape.bytes_per_position(4) == 2 * shape.bytes_per_position(2)


def test_the_shape_is_read_from_a_models_config():
    qwen3 = {"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 128, "hidden_size": 2048}  # fmt: skip
    assert CacheShape.of_config(qwen3) == CacheShape(28, 8, 128)
    older = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    assert CacheShape.of_config(older) == CacheShape(2, 4, 16)  # no GQA, head_dim from hidden


@pytest.mark.parametrize("scale", sorted(PAPER_SHAPES))
@pytest.mark.parametrize("cap", [512, 4096, 16_384, PAPER_CAP])
@pytest.mark.parametrize("budget_gib", [40.0, 100.0])
def test_the_planned_batch_fills_the_budget_at_the_papers_shapes(scale, cap, budget_gib):
    shape = CacheShape(*PAPER_SHAPES[scale])
    row_tokens = PROMPT + cap
    rows = planned_batch(budget_gib=budget_gib, shape=shape, dtype_bytes=2,
                         row_tokens=row_tokens, requests=10**6)  # fmt: skip
    row_bytes = row_tokens * shape.bytes_per_position(2)
    assert rows * row_bytes <= budget_gib * GIB < (rows + 1) * row_bytes
    print(f"[plan] {scale} cap {cap} budget {budget_gib} GiB bf16: {rows} rows")


def test_the_papers_cap_plans_these_batches():
    """A shard of the paper overlay is 360 requests (30 problems x 12 samples)."""
    plans = {
        scale: planned_batch(
            budget_gib=100,
            shape=CacheShape(*dims),
            dtype_bytes=2,
            row_tokens=PROMPT + PAPER_CAP,
            requests=360,
        )  # fmt: skip
        for scale, dims in PAPER_SHAPES.items()
    }
    # 1.7B: 39,424 positions x 112 KiB = 4.21 GiB a row; 4B and 8B: x 144 KiB = 5.41 GiB.
    assert plans == {"qwen3_1p7b": 23, "qwen3_4b": 18, "qwen3_8b": 18}


def test_short_responses_are_capped_at_the_requests():
    shape = CacheShape(*PAPER_SHAPES["qwen3_8b"])
    assert planned_batch(budget_gib=100, shape=shape, dtype_bytes=2, row_tokens=600,
                         requests=360) == 360  # fmt: skip


def test_a_response_that_cannot_fit_is_an_error_naming_the_budget():
    shape = CacheShape(*PAPER_SHAPES["qwen3_8b"])
    with pytest.raises(ValueError, match=r"5\.41 GiB.*evaluation\.kv_cache_budget_gib"):
        planned_batch(budget_gib=4, shape=shape, dtype_bytes=2, row_tokens=PROMPT + PAPER_CAP,
                      requests=360)  # fmt: skip
