"""Rule sft_base_model: build the tiny Qwen3 model and warm-start it by SFT, or reuse a shipped
warm start when the run asks for exactly its recipe (dashrepro.embedded.warm_start)."""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    import pandas as pd

    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.embedded import warm_start
    from dashrepro.embedded.sft import run_sft
    from dashrepro.embedded.tiny_model import build_tiny_qwen3, count_parameters
    from dashrepro.io import atomic_dir, load_tokenizer, read_parquet, write_parquet
    from dashrepro.layout import SFT_HISTORY

    sft = snakemake.params.sft
    architecture = snakemake.params.architecture
    tokenizer_dir = Path(snakemake.input.tokenizer).parent
    tokenizer = load_tokenizer(tokenizer_dir)
    protocol = TeacherProtocol.from_config(snakemake.params.protocol)
    frame = read_parquet(snakemake.input.train)
    examples = warm_start.sft_examples_for(
        frame, tokenizer, protocol, sft, snakemake.params.teacher_views
    )
    special = {"pad": tokenizer.pad_token_id, "eos": tokenizer.eos_token_id}
    recipe = warm_start.make_recipe(architecture, sft, examples, special)
    out_dir = Path(snakemake.output.weights).parent

    if sft.get("reuse_shipped", False):
        folder, differ = warm_start.find_shipped(recipe)
        if folder is not None:
            with atomic_dir(out_dir) as tmp:
                digest = warm_start.reuse_shipped(tmp, recipe, folder)
                tokenizer.save_pretrained(str(tmp))
            log.info(
                "reused the shipped warm start %r (model sha256 %s): its recipe is this run's",
                folder.name,
                digest,
            )
            return
        log.info(
            "training the warm start: no shipped one was made from this recipe (%s differ)",
            ", ".join(differ),
        )

    model = build_tiny_qwen3(
        architecture,
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        sft["seed"],
    )
    log.info("tiny Qwen3: %d parameters", count_parameters(model))
    history = run_sft(model, examples, sft, sft["seed"], log=log.info)
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(str(tmp))  # safetensors
        tokenizer.save_pretrained(str(tmp))
        write_parquet(tmp / SFT_HISTORY, pd.DataFrame(history))
        warm_start.write_trained_record(tmp, recipe)


if __name__ == "__main__":
    run(main, snakemake)
