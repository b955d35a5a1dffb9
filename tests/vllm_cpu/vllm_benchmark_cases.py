"""``benchmarks/sampling.py`` (docs/performance.md's HF-vs-vLLM speed command) runs and
reports, in .venv-vllm.

A smoke run on a small random model: one sample per problem and 8 tokens, so the numbers mean
nothing; what is checked is that both backends ran through the samplers and the report holds a
row for each and the ratio line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from vllm_support import TINY_ARCH, save_model

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_sampling_benchmark_reports_both_backends(tmp_path):
    from dashrepro.embedded.synthetic_data import make_dataset
    from dashrepro.embedded.tiny_tokenizer import train_tokenizer

    train, _ = make_dataset(30, {"b": {"task": "add2", "n": 2}}, 0)
    tokenizer = train_tokenizer([*train["problem"], *train["reference_solution"]], 400)
    folder = save_model(tmp_path / "model", tokenizer, TINY_ARCH, eos_scale=3.0)
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "sampling.py"), "--models", "embedded",
         "--embedded", str(folder), "--k", "1", "--max-new-tokens", "8"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(r"^\| embedded \| (hf|vllm) \| [\d.]+ \| [\d.]+ \| (\d+) \| \d+ \|$",
                      done.stdout, re.MULTILINE)  # fmt: skip
    assert [backend for backend, _ in rows] == ["hf", "vllm"], done.stdout
    assert all(0 < int(tokens) <= 30 * 8 for _, tokens in rows), rows
    assert re.search(r"^- embedded: vLLM / HF tokens per second [\d.]+x", done.stdout, re.M)
