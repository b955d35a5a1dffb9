"""A small BPE tokenizer for the embedded default, with a Qwen3-style chat template.

Trained offline with Hugging Face ``tokenizers`` on the synthetic training text and the
protocol's prompt strings. It keeps what the real pipeline relies on:

- Qwen3's special tokens: ``<|endoftext|>`` (padding), ``<|im_start|>``, ``<|im_end|>``
  (end of turn = EOS), ``<think>`` and ``</think>``;
- a chat template with Qwen3's turn layout and its ``enable_thinking`` switch, so prompts are
  rendered through ``tokenizer.apply_chat_template`` exactly as for the real Qwen3 tokenizer;
- digits split one per token (column arithmetic is then learnable by a tiny model);
- byte-level pre-tokenisation, so decoding returns the exact text (``\\boxed{...}`` intact).

    python -m dashrepro.embedded.tiny_tokenizer --train data/train.parquet --out tokenizer/
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, "<|im_start|>", EOS_TOKEN, "<think>", "</think>"]

# Qwen3's turn layout: <|im_start|>{role}\n{content}<|im_end|>\n ; the generation prompt opens an
# assistant turn, and enable_thinking=False pre-fills an empty think block (as Qwen3 does).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train the BPE model on ``texts`` and wrap it as a transformers fast tokenizer."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        padding_side="right",
        model_max_length=4096,
    )


def build_and_save(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> None:
    tokenizer = train_tokenizer(texts, vocab_size)
    tokenizer.save_pretrained(str(out_dir))


def main() -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vocab-size", type=int, default=512)
    args = parser.parse_args()
    frame = pd.read_parquet(args.train)
    texts = list(frame["problem"]) + list(frame["reference_solution"])
    build_and_save(texts, args.vocab_size, args.out)


if __name__ == "__main__":
    main()
