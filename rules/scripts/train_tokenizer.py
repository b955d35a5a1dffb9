"""Rule train_tokenizer: BPE on the training text and the protocol's prompt strings."""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)

    from dashrepro.embedded.tiny_tokenizer import build_and_save
    from dashrepro.io import atomic_dir, read_parquet

    frame = read_parquet(snakemake.input.train)
    protocol = snakemake.params.protocol
    texts = [*frame["problem"], *frame["reference_solution"], *protocol.values()]
    out_dir = Path(snakemake.output.tokenizer).parent
    with atomic_dir(out_dir) as tmp:
        build_and_save(texts, snakemake.params.vocab_size, tmp)
    log.info("tokenizer written to %s", out_dir)


if __name__ == "__main__":
    run(main, snakemake)
