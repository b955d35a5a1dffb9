# Tables and figures: one rule each over the config's registries (`tables:`, `figures:`). The
# kind module named by an entry (dashrepro.analysis.tables.<kind> / figures.<kind>) says which
# result sets it reads; common.smk turns them into files.


rule table:
    input:
        unpack(report_inputs("tables")),
    output:
        csv=report(
            f"{RESULTS}/tables/{{table}}.csv",
            caption="../report/table.rst",
            category="Tables",
            labels={"table": "{table}", "format": "csv"},
        ),
        md=f"{RESULTS}/tables/{{table}}.md",
        tex=f"{RESULTS}/tables/{{table}}.tex",
    log:
        f"{RESULTS}/logs/table/{{table}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/table/{{table}}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        spec=lambda wc: config["tables"][wc.table],
        context=lambda wc: report_context(wc.table, config["tables"][wc.table]),
        caption=lambda wc: kind_caption("tables", wc.table),
    script:
        "scripts/make_table.py"


rule figure:
    input:
        unpack(report_inputs("figures")),
    output:
        png=report(
            f"{RESULTS}/figures/{{figure}}.png",
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
        pdf=f"{RESULTS}/figures/{{figure}}.pdf",
        data=f"{RESULTS}/figures/{{figure}}.json",
    log:
        f"{RESULTS}/logs/figure/{{figure}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figure/{{figure}}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        spec=lambda wc: config["figures"][wc.figure],
        context=lambda wc: report_context(wc.figure, config["figures"][wc.figure]),
        caption=lambda wc: kind_caption("figures", wc.figure),
    script:
        "scripts/make_figure.py"


# The paper's published numbers drawn by the same table code (a self-check of the renderer:
# its main table must shade exactly the cells the paper shades).
rule published_table:
    input:
        published=PUBLISHED,
    output:
        csv="results/published/tables/{table}.csv",
        md="results/published/tables/{table}.md",
        tex="results/published/tables/{table}.tex",
    log:
        "results/published/logs/table/{table}.log",
    benchmark:
        "results/published/benchmarks/table/{table}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        spec=lambda wc: PUBLISHED_TABLES[wc.table],
        context=lambda wc: published_context(wc.table),
    script:
        "scripts/make_published_table.py"


# What the targets will cost (jobs and GPU-hours per rule and scale), before submitting them.
localrules:
    plan,


rule plan:
    output:
        f"{RESULTS}/plan.md",
    log:
        f"{RESULTS}/logs/plan.log",
    benchmark:
        f"{RESULTS}/benchmarks/plan.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        plan=lambda wc: plan_markdown(config),
    script:
        "scripts/make_plan.py"


# Beside every scores-table cell: clustered standard error, seed std, the optimism of selecting
# on the test set, paired differences against the reference; and the reproduction gap against
# the paper's published numbers (dashrepro.analysis.statistics_report).
rule statistics:
    input:
        unpack(statistics_inputs),
    output:
        cells=f"{RESULTS}/statistics/cell_statistics.csv",
        paired=f"{RESULTS}/statistics/paired_differences.csv",
        heldout=f"{RESULTS}/statistics/heldout_selection.csv",
        lift=f"{RESULTS}/statistics/base_lift.csv",
        changes=f"{RESULTS}/statistics/sample_changes.csv",
        gap=report(
            f"{RESULTS}/statistics/reproduction_gap.csv",
            caption="../report/reproduction_gap.rst",
            category="Statistics",
        ),
        gap_png=f"{RESULTS}/statistics/reproduction_gap.png",
        gap_pdf=f"{RESULTS}/statistics/reproduction_gap.pdf",
        report=f"{RESULTS}/statistics/report.md",
    log:
        f"{RESULTS}/logs/statistics.log",
    benchmark:
        f"{RESULTS}/benchmarks/statistics.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        experiment=EXP,
        tables=SCORE_TABLES,
        benchmarks=BENCHMARKS,
        validation=VALIDATION_SET,
        base_scales=SCORE_BASE_SCALES,
        settings=config["statistics"],
    script:
        "scripts/statistics.py"


# Every scores-table cell followed to its raw generations, each recorded hash checked, each
# number derived again; flags changed or stale inputs, mixed code or configs, missing seeds.
rule audit:
    input:
        unpack(audit_inputs),
    output:
        md=f"{RESULTS}/audit/report.md",
        html=report(
            f"{RESULTS}/audit/report.html",
            caption="../report/audit.rst",
            category="Audit",
        ),
    log:
        f"{RESULTS}/logs/audit.log",
    benchmark:
        f"{RESULTS}/benchmarks/audit.tsv"
    conda:
        "../envs/cpu.yaml"
    script:
        "scripts/audit.py"
