"""Rule audit: every scores-table cell followed to its raw generations, checked, reported."""

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.io import write_text
    from dashrepro.layout import Results
    from dashrepro.provenance.audit.report import audit_report

    # The scores tables of this experiment's config, not whatever else its folder holds.
    results = Results(snakemake.params.experiment).root
    rows, markdown, page = audit_report(".", results, tables=snakemake.params.tables)
    write_text(snakemake.output.md, markdown)
    write_text(snakemake.output.html, page)
    flagged = [r for r in rows if r["status"] != "ok"]
    log.info("%d cells audited, %d flagged", len(rows), len(flagged))
    for row in flagged:
        log.warning("%s / %s / %s / %s: %s", row["table"], row["row"], row["scale"],
                    row["column"], "; ".join(row["findings"]))  # fmt: skip


if __name__ == "__main__":
    run(main, snakemake)
