"""Grading stored responses: the regrade stage needs no model, and bad responses lose nothing."""

import pandas as pd
import pytest

from dashrepro.evaluation import (
    RESPONSE_COLUMNS,
    SAMPLE_COLUMNS,
    grade_and_summarize,
    grade_samples,
)


def responses(texts_and_golds):
    rows = []
    for index, (text, gold) in enumerate(texts_and_golds):
        rows.append(
            {"checkpoint": "m/s/seed0/step20", "benchmark": "b", "problem_id": f"p{index // 2}",
             "sample_index": index % 2, "seed": 1, "prompt_role": "student", "response": text,
             "n_tokens": len(text), "finish_reason": "stop", "gold": gold}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=RESPONSE_COLUMNS)


def test_grade_samples_adds_verdicts_and_keeps_every_row():
    frame = responses(
        [
            ("so \\boxed{\\frac{1}{2}}", "0.5"),
            ("no answer here", "3"),
            ("\\boxed{4} then \\boxed{5}", "5"),
            ("\\boxed{7", "7"),
        ]
    )
    graded = grade_samples(frame, grading_workers=0)
    assert list(graded.columns) == SAMPLE_COLUMNS
    assert list(graded["correct"]) == [True, False, True, False]
    assert list(graded["grading_path"]) == ["math_verify", "no_boxed", "math_verify", "no_boxed"]
    assert graded["response"].equals(frame["response"])


def test_grade_and_summarize_counts_flags():
    graded, summary = grade_and_summarize(
        responses([("\\boxed{1}", "1"), ("nothing", "1")]),
        ["b"],
        {"grading_workers": 0, "grading_timeout_s": 5.0},
    )
    bench = summary["benchmarks"]["b"]
    assert bench["avg_at_k"] == pytest.approx(50.0)
    assert bench["n_no_boxed"] == 1
    assert summary["checkpoint"] == "m/s/seed0/step20"


def test_grade_samples_names_missing_columns():
    with pytest.raises(ValueError, match="gold"):
        grade_samples(responses([("x", "1")]).drop(columns=["gold"]), grading_workers=0)


@pytest.fixture(scope="module")
def tiny_policy():
    from dashrepro.synthetic_data import make_dataset
    from dashrepro.tiny_model import build_tiny_qwen3
    from dashrepro.tiny_tokenizer import train_tokenizer

    train, benches = make_dataset(
        20, {"b1": {"task": "add2", "n": 3}, "b2": {"task": "add3", "n": 3}}, 0
    )
    tokenizer = train_tokenizer([*train["problem"], *train["reference_solution"]], 400)
    arch = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
            "num_key_value_heads": 1, "max_position_embeddings": 256}  # fmt: skip
    model = build_tiny_qwen3(
        arch, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, 0
    )
    return model, tokenizer, benches


def _generate(policy, shard_dir, temperature=1.0):
    from dashrepro.evaluation import generate_samples
    from dashrepro.generation import ModelSampler, SamplingSettings

    model, tokenizer, benches = policy
    return generate_samples(
        ModelSampler(model, tokenizer), benches, k=2, sampling=SamplingSettings(temperature=temperature, max_new_tokens=8),
        seed=5, checkpoint="c", shard_size=2, shard_dir=shard_dir,
    )  # fmt: skip


def test_killed_generation_resumes_only_missing_shards(tiny_policy, tmp_path, monkeypatch):
    import dashrepro.generation as generation

    full = _generate(tiny_policy, tmp_path)
    shards = sorted(tmp_path.glob("shard-*.parquet"))
    assert len(shards) == 4  # 3 problems per benchmark in shards of 2 -> 2 + 2
    assert full["seed"].nunique() == 4  # one recorded seed per shard
    shards[2].unlink()  # as if the job died while generating shard 3

    calls = []
    real = generation.sample_responses
    monkeypatch.setattr(
        generation, "sample_responses", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    resumed = _generate(tiny_policy, tmp_path)
    assert len(calls) == 1
    pd.testing.assert_frame_equal(resumed, full)
    # An uninterrupted run without shard files gives the same samples.
    pd.testing.assert_frame_equal(_generate(tiny_policy, None), full)


def test_changed_settings_do_not_reuse_shards(tiny_policy, tmp_path, monkeypatch):
    import dashrepro.generation as generation

    _generate(tiny_policy, tmp_path)
    calls = []
    real = generation.sample_responses
    monkeypatch.setattr(
        generation, "sample_responses", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    _generate(tiny_policy, tmp_path, temperature=0.7)
    assert len(calls) == 4
