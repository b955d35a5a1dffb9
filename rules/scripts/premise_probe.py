"""Rule premise_probe_<scale>: a base model's rollouts scored before training and the premise
statistics (``dashrepro.premise``): the tokens, rollouts and branch points, a table, a figure."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake)
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.io import save_figure, write_json, write_parquet, write_text
    from dashrepro.premise.probe import run_probe
    from dashrepro.premise.report import premise_figure, statistics_frame, statistics_markdown
    from dashrepro.premise.statistics import statistics_by_task
    from dashrepro.training.methods import MethodSpec

    params, out = snakemake.params, snakemake.output
    method = MethodSpec.from_config(params.method["name"], params.method["entry"])
    tokens, rollouts = run_probe(
        params.base_model, snakemake.input.train, params.probe, params.train, params.lora,
        method, TeacherProtocol.from_config(params.protocol), log.info,
    )  # fmt: skip
    rows, branches, within = statistics_by_task(tokens)
    frame = statistics_frame(rows)
    title = f"Premise probe of {method.name} at {params.scale}, before training"
    write_parquet(out.tokens, tokens)
    write_parquet(out.rollouts, rollouts)
    write_parquet(out.branches, branches)
    write_text(out.csv, frame.to_csv(index=False))
    write_text(out.md, statistics_markdown(frame, title))
    write_json(out.json, {"scale": params.scale, "method": method.name, "statistics": rows})
    figure = premise_figure(tokens, within, branches, rows["all"], title)
    save_figure(figure, {"png": out.png, "pdf": out.pdf})
    log.info("premise probe: %s", rows["all"])


if __name__ == "__main__":
    run(main, snakemake)
