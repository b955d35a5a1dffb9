# Tables and figures: one rule each over the config's registries (`tables:`, `figures:`). The
# kind module named by an entry (dashrepro.analysis.tables.<kind> / figures.<kind>) says which
# result sets it reads; common.smk turns them into files.


rule table:
    input:
        unpack(get_report_inputs("tables")),
    output:
        csv=report(
            LAYOUT.table(ext="csv"),
            caption="../report/table.rst",
            category="Tables",
            labels={"table": "{table}", "format": "csv"},
        ),
        md=LAYOUT.table(ext="md"),
        tex=LAYOUT.table(ext="tex"),
    log:
        LAYOUT.log("table", "{table}"),
    benchmark:
        LAYOUT.job_timing("table", "{table}")
    conda:
        "../envs/cpu.yaml"
    params:
        spec=lambda wc: config["tables"][wc.table],
        context=lambda wc: EXPERIMENT.report_context("tables", wc.table),
        caption=lambda wc: EXPERIMENT.kind_caption("tables", wc.table),
    script:
        "scripts/make_table.py"


rule figure:
    input:
        unpack(get_report_inputs("figures")),
    output:
        png=report(
            LAYOUT.figure(ext="png"),
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
        pdf=LAYOUT.figure(ext="pdf"),
        data=LAYOUT.figure(ext="json"),
    log:
        LAYOUT.log("figure", "{figure}"),
    benchmark:
        LAYOUT.job_timing("figure", "{figure}")
    conda:
        "../envs/cpu.yaml"
    params:
        spec=lambda wc: config["figures"][wc.figure],
        context=lambda wc: EXPERIMENT.report_context("figures", wc.figure),
        caption=lambda wc: EXPERIMENT.kind_caption("figures", wc.figure),
    script:
        "scripts/make_figure.py"


# The paper's published numbers drawn by the same table code (a self-check of the renderer:
# its main table must shade exactly the cells the paper shades).
rule published_table:
    input:
        published=EXPERIMENT.published,
    output:
        csv=PUBLISHED_LAYOUT.table(ext="csv"),
        md=PUBLISHED_LAYOUT.table(ext="md"),
        tex=PUBLISHED_LAYOUT.table(ext="tex"),
    log:
        PUBLISHED_LAYOUT.log("table", "{table}"),
    benchmark:
        PUBLISHED_LAYOUT.job_timing("table", "{table}")
    conda:
        "../envs/cpu.yaml"
    params:
        spec=lambda wc: EXPERIMENT.published_tables[wc.table],
        context=lambda wc: EXPERIMENT.published_context(wc.table),
    script:
        "scripts/make_published_table.py"


# What the targets will cost (jobs and GPU-hours per rule and scale), before submitting them.
localrules:
    plan,


rule plan:
    output:
        LAYOUT.plan(),
    log:
        LAYOUT.log("plan"),
    benchmark:
        LAYOUT.job_timing("plan")
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
        unpack(get_statistics_inputs),
    output:
        cells=LAYOUT.statistics(CELL_STATISTICS),
        paired=LAYOUT.statistics(PAIRED_DIFFERENCES),
        heldout=LAYOUT.statistics(HELDOUT_SELECTION),
        lift=LAYOUT.statistics(BASE_LIFT),
        changes=LAYOUT.statistics(SAMPLE_CHANGES),
        gap=report(
            LAYOUT.statistics(f"{REPRODUCTION_GAP}.csv"),
            caption="../report/reproduction_gap.rst",
            category="Reproduction gap",
        ),
        gap_png=LAYOUT.statistics(f"{REPRODUCTION_GAP}.png"),
        gap_pdf=LAYOUT.statistics(f"{REPRODUCTION_GAP}.pdf"),
        report=LAYOUT.statistics(STATISTICS_REPORT),
    log:
        LAYOUT.log("statistics"),
    benchmark:
        LAYOUT.job_timing("statistics")
    conda:
        "../envs/cpu.yaml"
    params:
        experiment=EXPERIMENT.name,
        tables=EXPERIMENT.score_tables,
        benchmarks=EXPERIMENT.benchmarks,
        validation=EXPERIMENT.validation_set,
        base_scales=EXPERIMENT.score_base_scales,
        settings=config["statistics"],
        input_keys=EXPERIMENT.statistics_keys(),
    script:
        "scripts/statistics.py"


# Every scores-table cell followed to its raw generations, each recorded hash checked, each
# number derived again; flags changed or stale inputs, mixed code or configs, missing seeds.
rule audit:
    input:
        unpack(get_audit_inputs),
    output:
        md=LAYOUT.audit(f"{AUDIT_REPORT}.md"),
        html=report(
            LAYOUT.audit(f"{AUDIT_REPORT}.html"),
            caption="../report/audit.rst",
            category="Audit",
        ),
    log:
        LAYOUT.log("audit"),
    benchmark:
        LAYOUT.job_timing("audit")
    conda:
        "../envs/cpu.yaml"
    params:
        experiment=EXPERIMENT.name,
        tables=list(EXPERIMENT.score_tables),
    script:
        "scripts/audit.py"
