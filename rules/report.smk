# Tables and figures: four-seed (here: configured seeds) aggregation of the selected checkpoints.


rule main_results_table:
    input:
        selections=table_selections,
    output:
        csv=f"{RESULTS}/tables/main_results.csv",
        markdown=f"{RESULTS}/tables/main_results.md",
        latex=f"{RESULTS}/tables/main_results.tex",
    log:
        f"{RESULTS}/logs/main_results_table.log",
    benchmark:
        f"{RESULTS}/benchmarks/main_results_table.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        methods=TABLE["methods"],
        scale=TABLE["scale"],
        seeds=SEEDS,
        method_labels={m: spec["label"] for m, spec in config["methods"].items()},
        benchmark_labels={b: spec["label"] for b, spec in config["benchmarks"].items()},
        experiment=EXP,
    script:
        "scripts/main_results_table.py"


rule checkpoint_curves_figure:
    input:
        summaries=table_summaries,
        samples=table_samples,
        selections=table_selections,
        base_accuracy=base_accuracy_files(),
    output:
        png=f"{RESULTS}/figures/checkpoint_curves.png",
        pdf=f"{RESULTS}/figures/checkpoint_curves.pdf",
    log:
        f"{RESULTS}/logs/checkpoint_curves_figure.log",
    benchmark:
        f"{RESULTS}/benchmarks/checkpoint_curves_figure.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        methods=TABLE["methods"],
        scale=TABLE["scale"],
        seeds=SEEDS,
        benchmarks=BENCHMARKS,
        method_labels={m: spec["label"] for m, spec in config["methods"].items()},
        experiment=EXP,
    script:
        "scripts/checkpoint_curves_figure.py"


rule divergence_association_figure:
    input:
        traces=table_traces,
    output:
        png=f"{RESULTS}/figures/divergence_association.png",
        pdf=f"{RESULTS}/figures/divergence_association.pdf",
        stats=f"{RESULTS}/figures/divergence_association.json",
    log:
        f"{RESULTS}/logs/divergence_association_figure.log",
    benchmark:
        f"{RESULTS}/benchmarks/divergence_association_figure.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        experiment=EXP,
    script:
        "scripts/divergence_association_figure.py"
