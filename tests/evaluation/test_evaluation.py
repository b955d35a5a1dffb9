"""Grading stored responses: the regrade stage needs no model, and bad responses lose nothing."""

import pandas as pd
import pytest

from dashrepro.evaluation.grade import grade_and_summarize, grade_samples
from dashrepro.evaluation.responses import RESPONSE_COLUMNS, SAMPLE_COLUMNS


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
        {
            "grading_workers": 0,
            "grading_timeout_s": 5.0,
            "grading_item_timeout_s": 10.0,
            "grading_memory_gib": 4.0,
        },
    )
    bench = summary["benchmarks"]["b"]
    assert bench["avg_at_k"] == pytest.approx(50.0)
    assert bench["n_no_boxed"] == 1
    assert summary["checkpoint"] == "m/s/seed0/step20"


def test_the_summary_counts_the_verdicts_each_answer_form_normalisation_changed():
    """A user sees what the grader did beyond the paper's plain check: per benchmark, how many
    verdicts a normalisation turned right, and by which; plain verdicts carry none."""
    graded, summary = grade_and_summarize(
        responses([("\\boxed{1\\,000}", "1000"), ("\\boxed{12^\\circ}", "12"),
                   ("\\boxed{42 \\pmod{1000}}", "42"), ("\\boxed{3, 375}", "3375"),
                   ("\\boxed{7}", "7"), ("\\boxed{1042 \\pmod{1000}}", "42")]),
        ["b"],
        {"grading_workers": 0, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0, "grading_memory_gib": 4.0},
    )  # fmt: skip
    assert list(graded["correct"]) == [True, True, True, False, True, False]
    names = [n if isinstance(n, str) else None for n in graded["grading_normalisation"]]
    assert names == ["digit_grouping", None, "modulus", None, None, None]
    bench = summary["benchmarks"]["b"]
    assert bench["n_normalised"] == 2
    assert bench["n_normalised_digit_grouping"] == 1 and bench["n_normalised_modulus"] == 1
    assert bench["n_normalised_units"] == 0  # math-verify reads 12^\circ as 12 by itself


def test_the_validation_split_is_graded_and_summarised_apart():
    frame = pd.concat(
        [
            responses([("\\boxed{1}", "1"), ("nothing", "1")]),
            responses([("\\boxed{2}", "2"), ("\\boxed{2}", "2")]).assign(benchmark="validation"),
        ],
        ignore_index=True,
    )
    grading = {
        "grading_workers": 0,
        "grading_timeout_s": 5.0,
        "grading_item_timeout_s": 10.0,
        "grading_memory_gib": 4.0,
    }
    graded, summary = grade_and_summarize(frame, ["b"], grading, validation="validation")
    assert len(graded) == 4
    assert list(summary["benchmarks"]) == ["b"]  # the benchmarks' mean leaves it out
    assert summary["mean_over_benchmarks"] == pytest.approx(50.0)
    assert summary["validation"]["name"] == "validation"
    assert summary["validation"]["avg_at_k"] == pytest.approx(100.0)
    # Responses of a set the caller did not name stop the grading, named.
    with pytest.raises(ValueError, match="validation"):
        grade_and_summarize(frame, ["b"], grading)


def test_grade_samples_names_missing_columns():
    with pytest.raises(ValueError, match="gold"):
        grade_samples(responses([("x", "1")]).drop(columns=["gold"]), grading_workers=0)


@pytest.fixture(scope="module")
def tiny_policy():
    from dashrepro.embedded.synthetic_data import make_dataset
    from dashrepro.embedded.tiny_model import build_tiny_qwen3
    from dashrepro.embedded.tiny_tokenizer import train_tokenizer

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
    from dashrepro.evaluation.responses import generate_samples
    from dashrepro.sampling import SamplingSettings
    from dashrepro.sampling.hf import ModelSampler

    model, tokenizer, benches = policy
    return generate_samples(
        ModelSampler(model, tokenizer), benches, k=2, sampling=SamplingSettings(temperature=temperature, max_new_tokens=8),
        seed=5, checkpoint="c", shard_size=2, shard_dir=shard_dir,
    )  # fmt: skip


def test_killed_generation_resumes_only_missing_shards(tiny_policy, tmp_path, monkeypatch):
    import dashrepro.sampling.hf as generation

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
    import dashrepro.sampling.hf as generation

    _generate(tiny_policy, tmp_path)
    calls = []
    real = generation.sample_responses
    monkeypatch.setattr(
        generation, "sample_responses", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    _generate(tiny_policy, tmp_path, temperature=0.7)
    assert len(calls) == 4


# ------------------------------------------------------------------ kept shards are content-keyed

KILL_AFTER_FIRST_SHARD = """
import json, os, signal, sys
from dashrepro.evaluation.responses import generate_policy_responses

args = json.loads(sys.argv[1])

def log(message):
    if "generated" in message:  # the first shard is on disk: die as a killed job would
        os.kill(os.getpid(), signal.SIGKILL)

generate_policy_responses(log=log, **args)
"""


def _save_adapter(base_dir, folder, seed):
    """A LoRA adapter with random (not zero) B matrices, so that it changes what is sampled."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir))
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                        init_lora_weights=False)  # fmt: skip
    get_peft_model(model, config).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def generation_job(tmp_path_factory, tiny_setup):
    """Arguments of one checkpoint's generation job (HF backend) and a second adapter."""
    from dashrepro.embedded.synthetic_data import make_dataset

    base_dir, _, _ = tiny_setup
    work = tmp_path_factory.mktemp("generation")
    _, benches = make_dataset(
        10, {"b1": {"task": "add2", "n": 4}, "b2": {"task": "add3", "n": 2}}, 1
    )
    files = {}
    for name, frame in benches.items():
        files[name] = str(work / f"{name}.parquet")
        frame.to_parquet(files[name])
    generation = {"backend": "hf", "samples_per_problem": 2, "temperature": 1.0, "top_p": 1.0,
                  "max_new_tokens": 12, "seed": 7, "shard_size": 2}  # fmt: skip
    args = {
        "base_model_dir": str(base_dir),
        "adapter_dir": str(_save_adapter(base_dir, work / "checkpoint-2", seed=1)),
        "benchmark_files": files,
        "generation": generation,
        "checkpoint": "dash/tiny/seed0/step2",
    }
    return args, _save_adapter(base_dir, work / "retrained", seed=2)


def test_kill_then_swap_adapter_then_rerun_keeps_no_old_row(generation_job, tmp_path):
    """The silent-wrong case: a killed generation's kept shard, then the run is retrained (new
    adapter in the same folder), then the generation reruns: nothing of the old adapter stays."""
    import json
    import shutil
    import subprocess
    import sys

    from dashrepro.evaluation.responses import generate_policy_responses

    job, retrained = generation_job
    job = {**job, "adapter_dir": str(shutil.copytree(job["adapter_dir"], tmp_path / "ckpt"))}
    shards = tmp_path / "shards"
    killed = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_FIRST_SHARD, json.dumps({**job, "shard_dir": str(shards)})],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert [p.name for p in shards.iterdir()] == ["shard-0000.parquet"]

    for name in ("adapter_model.safetensors", "adapter_config.json"):  # the run is retrained
        shutil.copy(retrained / name, tmp_path / "ckpt" / name)
    lines = []
    rerun = generate_policy_responses(shard_dir=shards, log=lines.append, **job)
    discarded = [line for line in lines if line.startswith("discarding kept shard")]
    assert len(discarded) == 1 and "shard-0000.parquet" in discarded[0]
    assert "adapter changed" in discarded[0]
    fresh = generate_policy_responses(**job)  # an uninterrupted run on the new adapter
    pd.testing.assert_frame_equal(rerun, fresh)
    old = generate_policy_responses(**{**job, "adapter_dir": generation_job[0]["adapter_dir"]})
    assert not rerun["response"].equals(old["response"])  # the adapters do sample differently


def test_kept_shard_is_reused_only_for_the_same_problems_and_base_model(
    generation_job, tmp_path, monkeypatch
):
    from dashrepro.evaluation.responses import generate_policy_responses

    job, _ = generation_job
    shards = tmp_path / "shards"
    full = generate_policy_responses(shard_dir=shards, **job)
    lines = []
    again = generate_policy_responses(shard_dir=shards, log=lines.append, **job)
    pd.testing.assert_frame_equal(again, full)
    assert lines == []  # every shard reused, none generated or discarded

    # An edited benchmark problem invalidates exactly the shard that holds it.
    edited = pd.read_parquet(job["benchmark_files"]["b1"])
    edited.loc[3, "problem"] = edited.loc[3, "problem"] + " "
    edited_file = tmp_path / "b1.parquet"
    edited.to_parquet(edited_file)
    files = {**job["benchmark_files"], "b1": str(edited_file)}
    lines = []
    generate_policy_responses(
        shard_dir=shards, log=lines.append, **{**job, "benchmark_files": files}
    )
    discarded = [line for line in lines if line.startswith("discarding")]
    assert len(discarded) == 1 and "shard-0001.parquet" in discarded[0]
    assert "problems changed" in discarded[0] and "prompts changed" in discarded[0]

    # A base model with other contents (same folder name) invalidates every shard.
    lines = []
    monkeypatch.setattr(
        "dashrepro.evaluation.responses.source_fingerprint", lambda path: "sha256:other"
    )
    generate_policy_responses(shard_dir=shards, log=lines.append, **job)
    assert sum("base_model changed" in line for line in lines) == 3  # 4 + 2 problems, shards of 2
    assert sum(line.endswith("generated") for line in lines) == 3


def test_truncated_adapter_names_its_file(generation_job, tmp_path):
    import shutil

    from dashrepro.adapters import AdapterFileError
    from dashrepro.sampling.hf import load_policy

    job, _ = generation_job
    folder = shutil.copytree(job["adapter_dir"], tmp_path / "checkpoint-4")
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(AdapterFileError) as info:
        load_policy(job["base_model_dir"], folder)
    assert str(weights) in str(info.value) and "truncated" in str(info.value)
    (folder / "adapter_config.json").write_text("{not json")
    with pytest.raises(AdapterFileError, match="adapter_config.json"):
        load_policy(job["base_model_dir"], folder)


# ------------------------------------------------------------------ summaries match their samples


def _graded_checkpoint(tmp_path):
    from dashrepro.io import write_json, write_parquet

    frame = responses([("\\boxed{1}", "1"), ("\\boxed{2}", "1"), ("\\boxed{3}", "3"), ("x", "3")])
    samples, summary = grade_and_summarize(
        frame,
        ["b"],
        {
            "grading_workers": 1,
            "grading_timeout_s": 5,
            "grading_item_timeout_s": 10,
            "grading_memory_gib": 4,
        },
    )
    write_parquet(tmp_path / "samples.parquet", samples)
    write_json(tmp_path / "summary.json", summary)
    return tmp_path / "summary.json", tmp_path / "samples.parquet"


def test_summary_is_checked_against_its_samples(tmp_path):
    from dashrepro.evaluation.scoring import SummaryMismatchError, load_checked_summary
    from dashrepro.io import UnreadableFileError, read_json, write_json, write_parquet

    summary_path, samples_path = _graded_checkpoint(tmp_path)
    assert load_checked_summary(summary_path, samples_path, ["b"]) == read_json(summary_path)

    samples = pd.read_parquet(samples_path)
    flipped = samples.copy()
    flipped.loc[1, "correct"] = True  # an edited grade
    write_parquet(samples_path, flipped)
    with pytest.raises(SummaryMismatchError) as info:
        load_checked_summary(summary_path, samples_path, ["b"])
    message = str(info.value)
    assert str(summary_path) in message and str(samples_path) in message
    assert "b.avg_at_k: 50.0 in the summary, 75.0 from the samples" in message

    write_parquet(samples_path, samples)
    edited = read_json(summary_path)
    edited["benchmarks"]["b"]["avg_at_k"] = 99.0  # an edited summary
    write_json(summary_path, edited)
    with pytest.raises(SummaryMismatchError, match="b.avg_at_k: 99.0 in the summary"):
        load_checked_summary(summary_path, samples_path, ["b"])

    samples_path.write_bytes(b"garbage")  # a corrupt samples file
    with pytest.raises(UnreadableFileError, match="samples.parquet: cannot read as parquet"):
        load_checked_summary(summary_path, samples_path, ["b"])


def test_evaluation_prompt_setting_reaches_the_sampled_prompts(generation_job, tmp_path):
    from dashrepro.evaluation.responses import generate_policy_responses

    job, _ = generation_job
    shards = tmp_path / "shards"
    generate_policy_responses(shard_dir=shards, **job)
    boxed = {**job, "generation": {**job["generation"], "prompt": "boxed_instruction"}}
    lines = []
    generate_policy_responses(shard_dir=shards, log=lines.append, **boxed)
    discarded = [line for line in lines if line.startswith("discarding")]
    assert len(discarded) == 3 and all("prompts changed" in line for line in discarded)


def test_the_configured_limits_per_answer_reach_the_grader(monkeypatch):
    """evaluation.grading_item_timeout_s (the limit grade_batch kills a worker at; it was a fixed
    10 s) and grading_memory_gib reach the grader from the config's grading settings."""
    import dashrepro.evaluation.grade as grade

    seen = {}
    real = grade.grade_batch

    def spy(responses, golds, **kwargs):
        seen.update(kwargs)
        return real(responses, golds, **kwargs)

    monkeypatch.setattr(grade, "grade_batch", spy)
    frame = responses([("\\boxed{1}", "1")])
    grading = {"grading_workers": 1, "grading_timeout_s": 2.5, "grading_item_timeout_s": 7.5,
               "grading_memory_gib": 3.0}  # fmt: skip
    samples, _ = grade.grade_and_summarize(frame, ["b"], grading)
    assert seen == {"workers": 1, "timeout_s": 2.5, "item_timeout_s": 7.5, "memory_gib": 3.0}
    assert bool(samples["correct"].iloc[0])
