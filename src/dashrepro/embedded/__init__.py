"""The embedded default experiment, made offline: synthetic arithmetic data, a small BPE
tokenizer with Qwen3's chat template, a tiny Qwen3-architecture model and its warm-start SFT."""
