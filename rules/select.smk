# Best-checkpoint selection per (method, scale, seed): the paper's best-within-budget rule.


rule select_best_checkpoint:
    input:
        summaries=get_run_summaries,
        samples=get_run_samples,
    output:
        selection=LAYOUT.selection(),
    log:
        LAYOUT.log("select_best_checkpoint", run_key()),
    benchmark:
        LAYOUT.job_timing("select_best_checkpoint", run_key())
    conda:
        "../envs/cpu.yaml"
    params:
        benchmarks=EXPERIMENT.benchmarks,
        steps=lambda wc: EXPERIMENT.steps(wc.scale),
    script:
        "scripts/select_best_checkpoint.py"
