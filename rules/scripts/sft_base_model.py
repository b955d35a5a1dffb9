"""Rule sft_base_model: build the tiny Qwen3 model and warm-start it by SFT."""

from pathlib import Path

from _bootstrap import setup


def main(snakemake) -> None:
    log = setup(snakemake)
    import pandas as pd
    from transformers import AutoTokenizer

    from dashrepro.io import atomic_dir, read_parquet, write_parquet
    from dashrepro.prompts import TeacherProtocol
    from dashrepro.provenance import write_provenance
    from dashrepro.sft import build_sft_examples, run_sft
    from dashrepro.tiny_model import build_tiny_qwen3, count_parameters

    sft = snakemake.params.sft
    architecture = snakemake.params.architecture
    tokenizer_dir = Path(snakemake.input.tokenizer).parent
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
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
    examples = build_sft_examples(frame, tokenizer, protocol, sft["teacher_fraction"], sft["seed"])
    history = run_sft(model, examples, sft, sft["seed"], log=log.info)
    out_dir = Path(snakemake.output.weights).parent
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(str(tmp))  # safetensors
        tokenizer.save_pretrained(str(tmp))
        write_parquet(tmp / "sft_history.parquet", pd.DataFrame(history))
    write_provenance(
        out_dir,
        "sft_base_model",
        inputs={"train": snakemake.input.train, "tokenizer": str(tokenizer_dir)},
        params={"architecture": architecture, "sft": sft, "protocol": snakemake.params.protocol},
        extra={"parameters": count_parameters(model), "final_loss": history[-1]["loss"]},
    )


if __name__ == "__main__":
    main(snakemake)
