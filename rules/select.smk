# Best-checkpoint selection per (method, scale, seed): the paper's best-within-budget rule.


rule select_best_checkpoint:
    input:
        summaries=run_summaries,
        samples=run_samples,
    output:
        selection=f"{RESULTS}/selection/{{method}}/{{scale}}/seed{{seed}}.json",
    log:
        f"{RESULTS}/logs/select_best_checkpoint/{{method}}/{{scale}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/select_best_checkpoint/{{method}}/{{scale}}/seed{{seed}}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        benchmarks=BENCHMARKS,
        steps=lambda wc: steps_for_scale(wc.scale),
    script:
        "scripts/select_best_checkpoint.py"
