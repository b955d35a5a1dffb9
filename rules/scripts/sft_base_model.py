"""Rule sft_base_model: build the tiny Qwen3 model and warm-start it by SFT."""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    import pandas as pd

    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.embedded.sft import build_sft_examples, run_sft
    from dashrepro.embedded.tiny_model import build_tiny_qwen3, count_parameters
    from dashrepro.io import atomic_dir, load_tokenizer, read_parquet, write_parquet

    sft = snakemake.params.sft
    architecture = snakemake.params.architecture
    tokenizer_dir = Path(snakemake.input.tokenizer).parent
    tokenizer = load_tokenizer(tokenizer_dir)
    protocol = TeacherProtocol.from_config(snakemake.params.protocol)
    model = build_tiny_qwen3(
        architecture,
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        sft["seed"],
    )
    log.info("tiny Qwen3: %d parameters", count_parameters(model))
    frame = read_parquet(snakemake.input.train)
    examples = build_sft_examples(
        frame,
        tokenizer,
        protocol,
        sft["teacher_fraction"],
        sft["seed"],
        teacher_views=tuple(snakemake.params.teacher_views),
        no_thinking_fraction=sft.get("no_thinking_fraction", 0.0),
    )
    history = run_sft(model, examples, sft, sft["seed"], log=log.info)
    out_dir = Path(snakemake.output.weights).parent
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(str(tmp))  # safetensors
        tokenizer.save_pretrained(str(tmp))
        write_parquet(tmp / "sft_history.parquet", pd.DataFrame(history))


if __name__ == "__main__":
    run(main, snakemake)
