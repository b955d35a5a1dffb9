"""Tests for dashrepro.evaluation.responses: generation in shards, resumed after a kill, and kept
shards reused only for the same problems, prompts, base model and adapter."""

import pandas as pd
import pytest


class ModelSampler:
    """An already loaded model behind the evaluation's ``Sampler`` interface (these tests only:
    the pipeline loads its policies through ``sampling.hf.HFSampler``). HF ``generate`` draws
    from one torch generator per call, so every sample records the call's seed."""

    def __init__(self, model, tokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer

    def sample(self, prompts, settings, seed, adapter_dir=None, adapter_version=None):
        from dashrepro.sampling import hf  # looked up at each call: a test may wrap it

        assert adapter_dir is None, "ModelSampler samples its loaded model"
        samples = hf.sample_responses(self.model, self.tokenizer, prompts, settings, seed=seed)
        for sample in samples:
            sample.seed = seed
        return samples


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


def _generate(policy, shard_dir, temperature=1.0, timing=None):
    from dashrepro.evaluation.responses import generate_samples
    from dashrepro.sampling import SamplingSettings

    model, tokenizer, benches = policy
    return generate_samples(
        ModelSampler(model, tokenizer), benches, k=2, sampling=SamplingSettings(temperature=temperature, max_new_tokens=8),
        seed=5, checkpoint="c", shard_size=2, shard_dir=shard_dir, timing=timing,
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


def test_a_resumed_generation_says_what_it_reused(tiny_policy, tmp_path):
    """A rerun after a killed job names, before it generates anything, the shards it reuses,
    how many kept ones it discarded and how many are left; a first attempt says nothing."""
    from dashrepro.evaluation.responses import generate_samples
    from dashrepro.sampling import SamplingSettings

    model, tokenizer, benches = tiny_policy

    def generate(log, temperature=1.0):
        return generate_samples(
            ModelSampler(model, tokenizer), benches, k=2,
            sampling=SamplingSettings(temperature=temperature, max_new_tokens=8), seed=5,
            checkpoint="c", shard_size=2, shard_dir=tmp_path, log=log,
        )  # fmt: skip

    first = []
    generate(first.append)
    assert not [line for line in first if line.startswith("resuming")]
    (tmp_path / "shard-0002.parquet").unlink()  # the job died while generating shard 3
    lines = []
    generate(lines.append)
    assert lines[0] == (
        "resuming: 3 of 4 shards finished, reused (shard-0000, shard-0001, shard-0003); "
        "1 to generate"
    )
    assert [line for line in lines if line.endswith("generated")] == [
        "shard 3/4 (b2, 2 problems) generated"
    ]
    # Kept shards of other settings: each discarded (named in its own line), and counted.
    lines = []
    generate(lines.append, temperature=0.5)
    resumed = [line for line in lines if line.startswith("resuming")]
    assert resumed == [
        "resuming: 0 of 4 shards finished, reused; 4 kept shard(s) discarded; 4 to generate"
    ]
    assert lines.index(resumed[0]) == 4  # after the four lines that say why


def test_the_same_generation_and_grading_write_the_same_bytes(tiny_policy, tmp_path):
    """Measured seconds are not data: two runs of the same generation, and of the same grading,
    write files with the same sha256 (the times go to the ``timing`` mapping, which the rules
    put in the output's provenance record)."""
    from dashrepro.evaluation.grade import grade_samples
    from dashrepro.io import read_parquet, sha256_file, write_parquet

    digests, samples_digests = [], []
    for attempt in range(2):
        timing = {}
        frame = _generate(tiny_policy, None, timing=timing)
        assert timing["generation_seconds"] > 0 and not frame.attrs
        path = tmp_path / f"responses{attempt}.parquet"
        write_parquet(path, frame)
        digests.append(sha256_file(path))
        graded_timing = {}
        graded = grade_samples(read_parquet(path), grading_workers=0, timing=graded_timing)
        assert graded_timing["graded_answers"] == len(frame)
        assert graded_timing["grading_seconds"] >= graded_timing["grading_seconds_max"] > 0
        assert "grading_seconds" not in graded.columns and not graded.attrs
        write_parquet(tmp_path / f"samples{attempt}.parquet", graded)
        samples_digests.append(sha256_file(tmp_path / f"samples{attempt}.parquet"))
    assert digests[0] == digests[1] and samples_digests[0] == samples_digests[1]


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
    # Every shard reused, none generated or discarded, and the log says so.
    assert lines == [
        "resuming: 3 of 3 shards finished, reused (shard-0000, shard-0001, shard-0002); "
        "0 to generate"
    ]

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
