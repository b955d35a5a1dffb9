"""Rule audit: every scores-table cell followed to its raw generations, checked, reported."""

from pathlib import Path

from _bootstrap import run, setup


def main(snakemake) -> None:
    log = setup(snakemake, threads=1)
    from dashrepro.io import write_text
    from dashrepro.provenance.audit import audit_report

    # results/<experiment>, from results/<experiment>/audit/report.md
    results = str(Path(snakemake.output.md).parents[1])
    rows, markdown, page = audit_report(".", results)
    write_text(snakemake.output.md, markdown)
    write_text(snakemake.output.html, page)
    flagged = [r for r in rows if r["status"] != "ok"]
    log.info("%d cells audited, %d flagged", len(rows), len(flagged))
    for row in flagged:
        log.warning("%s / %s / %s / %s: %s", row["table"], row["row"], row["scale"],
                    row["column"], "; ".join(row["findings"]))  # fmt: skip


if __name__ == "__main__":
    run(main, snakemake)
