"""Tests for ``dashrepro.provenance.audit.verify``: it names a file changed since its reader
recorded it (an adapter's config, a model folder's tokenizer file, a hub snapshot's weights
included), and the regrade tells verdicts at a limit from real disagreements."""

from __future__ import annotations

import pandas as pd
import pytest

from dashrepro.provenance.audit.chain import cell_chain
from dashrepro.provenance.audit.verify import check_hashes

from .audit_helpers import RESULTS


def test_verify_names_an_input_changed_since_its_reader_recorded_it(tree):
    chain = cell_chain(tree, RESULTS, "t", "dash", "s", "average")
    assert not [f for f in check_hashes(tree, chain) if f.kind == "changed_input"]
    samples = tree / chain.seeds[0].samples[2]
    pd.read_parquet(samples).assign(correct=True).to_parquet(samples)
    changed = [f for f in check_hashes(tree, chain) if f.kind == "changed_input"]
    assert [f.path for f in changed] == [chain.seeds[0].samples[2]]


def test_a_regrade_tells_verdicts_at_a_limit_from_real_disagreements(tmp_path):
    """A verdict reached at a time limit (or by a grader error) may change with the machine's
    load: the regrade reports it as regrade_at_limit, apart from regrade_mismatch."""
    import pandas as pd

    from dashrepro.evaluation.grade import grade_samples
    from dashrepro.evaluation.responses import RESPONSE_COLUMNS
    from dashrepro.io import write_parquet
    from dashrepro.provenance.audit.verify import _regrade

    rows = [{"checkpoint": "m/s/seed0/step2", "benchmark": "b", "problem_id": f"p{i}",
             "sample_index": 0, "seed": 1, "prompt_role": "student",
             "response": f"\\boxed{{{i}}}", "n_tokens": 3, "finish_reason": "stop",
             "gold": str(i)} for i in range(3)]  # fmt: skip
    responses = pd.DataFrame(rows, columns=RESPONSE_COLUMNS)
    write_parquet(tmp_path / "responses.parquet", responses)
    samples = grade_samples(responses, grading_workers=1)
    assert samples["correct"].all()
    grading = {"grading_workers": 1, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0,
               "grading_memory_gib": 4.0}  # fmt: skip
    assert _regrade(tmp_path, "responses.parquet", "samples.parquet", samples, grading) == []
    samples.loc[0, "correct"] = False  # a disagreement
    samples.loc[1, ["correct", "grading_path"]] = [False, "timeout"]  # graded at the limit
    findings = _regrade(tmp_path, "responses.parquet", "samples.parquet", samples, grading)
    assert [f.kind for f in findings] == ["regrade_mismatch", "regrade_at_limit"]
    assert "'p0'" in findings[0].detail and "'p1'" in findings[1].detail
    assert findings[0].detail.startswith("1 grades") and findings[1].detail.startswith("1 grades")


def test_a_regrade_uses_the_configs_grading_settings_and_names_a_record_that_differs(tmp_path):
    """The settings come from the experiment's config; a samples record that says the samples
    were graded with other settings (records can be edited) is a finding of its own."""
    import pandas as pd

    from dashrepro.evaluation.grade import grade_samples
    from dashrepro.evaluation.responses import RESPONSE_COLUMNS
    from dashrepro.io import write_json, write_parquet
    from dashrepro.provenance.audit.verify import _regrade
    from dashrepro.provenance.records import record_path

    row = {"checkpoint": "m/s/seed0/step2", "benchmark": "b", "problem_id": "p0",
           "sample_index": 0, "seed": 1, "prompt_role": "student", "response": "\\boxed{1}",
           "n_tokens": 3, "finish_reason": "stop", "gold": "1"}  # fmt: skip
    responses = pd.DataFrame([row], columns=RESPONSE_COLUMNS)
    write_parquet(tmp_path / "responses.parquet", responses)
    samples = grade_samples(responses, grading_workers=1)
    config = {"grading_workers": 1, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0,
              "grading_memory_gib": 4.0}  # fmt: skip
    edited = {**config, "grading_timeout_s": 0.001}
    write_json(record_path(tmp_path / "samples.parquet"), {"params": {"grading": edited}})
    findings = _regrade(tmp_path, "responses.parquet", "samples.parquet", samples, config)
    assert [f.kind for f in findings] == ["changed_grading"]
    assert "'grading_timeout_s': 0.001" in findings[0].detail


def _job(rule: str, inputs: dict, outputs: list):
    """A stand-in for the ``snakemake`` object a rule script receives."""
    from types import SimpleNamespace

    class Named(list):
        def __init__(self, mapping):
            super().__init__(mapping.values())
            self._mapping = mapping

        def items(self):
            return self._mapping.items()

    return SimpleNamespace(rule=rule, input=Named(inputs), output=[str(o) for o in outputs],
                           params=Named({}), wildcards=Named({}), threads=1)  # fmt: skip


@pytest.fixture
def generated(tree, monkeypatch):
    """``tree`` with what its two checkpoints were made from, each file with the record its job
    writes: a hub model's snapshot (weights, config, tokenizer config, its record), the training
    run's adapters and adapter configs, each checkpoint's generation and grading."""
    import json
    from pathlib import Path

    from dashrepro.io import sha256_file
    from dashrepro.provenance.job import record_job
    from dashrepro.provenance.records import write_provenance

    monkeypatch.chdir(tree)  # records name their inputs as the workflow does: relative paths
    base = Path("resources/models/q/abc")
    base.mkdir(parents=True)
    for name, text in (("model.safetensors", "weights"), ("config.json", '{"layers": 1}'),
                       ("tokenizer_config.json", '{"chat_template": "{{ x }}"}')):  # fmt: skip
        (base / name).write_text(text)
    snapshot = base / "dashrepro_snapshot.json"
    files = {p.name: sha256_file(p) for p in sorted(base.iterdir())}
    snapshot.write_text(json.dumps({"model": "q", "revision": "abc", "files": files}))
    adapters, configs = [], []
    for step in (2, 4):
        folder = Path(f"{RESULTS}/runs/dash/s/seed0/checkpoint-{step}")
        folder.mkdir(parents=True)
        (folder / "adapter_model.safetensors").write_text(f"adapter {step}")
        (folder / "adapter_config.json").write_text('{"lora_alpha": 16, "r": 8}')
        adapters.append(folder / "adapter_model.safetensors")
        configs.append(folder / "adapter_config.json")
    record_job(_job("train_lora_s", {"base_model": str(snapshot)}, [*adapters, *configs]), "t0")
    for step, adapter, config in zip((2, 4), adapters, configs, strict=True):
        folder = Path(f"{RESULTS}/eval/dash/s/seed0/step{step}")
        (folder / "responses.parquet").write_text(f"responses {step}")
        inputs = {"base_model": str(snapshot), "adapter": str(adapter),
                  "adapter_config": str(config)}  # fmt: skip
        record_job(_job("generate_checkpoint_responses", inputs, [folder / "responses.parquet"]),
                   "t0")  # fmt: skip
        write_provenance(folder / "samples.parquet", "grade_checkpoint",
                         inputs={"responses": [str(folder / "responses.parquet")]})  # fmt: skip
    return tree


def test_verify_names_a_changed_adapter_config_tokenizer_or_model_file(generated):
    """The reliability probe's case: `lora_alpha` edited to 999 in a checkpoint's
    adapter_config.json passed the audit. Now every file that shapes a sampled response is on
    the chain: the adapter's config (of every candidate checkpoint, not only the selected one),
    the model folder's files read beside the declared input, and each file a hub snapshot's
    record lists."""
    from dashrepro.provenance.audit.chain import render_chain

    chain = cell_chain(generated, RESULTS, "t", "dash", "s", "average")
    assert check_hashes(generated, chain) == []
    text = render_chain(generated, chain)
    assert f"adapter config: {RESULTS}/runs/dash/s/seed0/checkpoint-4/adapter_config.json" in text
    assert (
        "model files read beside them: 2, each hashed (config.json, tokenizer_config.json)" in text
    )

    def named(path, edit):
        original = (generated / path).read_bytes()
        (generated / path).write_text(edit(original.decode()))
        try:
            found = check_hashes(generated, chain)
        finally:
            (generated / path).write_bytes(original)
        return {(f.kind, f.path) for f in found if f.kind != "stale_input"}, found

    config = f"{RESULTS}/runs/dash/s/seed0/checkpoint-2/adapter_config.json"  # not the selected
    kinds, _ = named(config, lambda text: text.replace('"lora_alpha": 16', '"lora_alpha": 999'))
    assert kinds == {("changed_input", config), ("changed_output", config)}

    tokenizer = "resources/models/q/abc/tokenizer_config.json"
    kinds, found = named(tokenizer, lambda text: text.replace("x", "y"))
    assert ("changed_input", tokenizer) in kinds
    assert any("file read beside an input 'base_model_files'" in f.detail for f in found)
    assert any("when downloaded" in f.detail for f in found)  # and against the snapshot's record

    weights = "resources/models/q/abc/model.safetensors"
    kinds, found = named(weights, lambda text: "other weights")
    assert kinds == {("changed_input", weights)}
    changed = [f for f in found if f.kind == "changed_input"]
    assert "when downloaded (resources/models/q/abc/dashrepro_snapshot.json)" in changed[0].detail
