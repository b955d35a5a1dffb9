"""``dashrepro audit``: one cell's chain (``--verify``, ``--regrade``), or ``--report``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dashrepro.layout import Results
from dashrepro.provenance.audit.chain import AuditError, cell_chain, render_chain
from dashrepro.provenance.audit.report import audit_report
from dashrepro.provenance.audit.verify import verify


def run_cli(args: Iterable[str] | None = None) -> int:
    """``dashrepro audit``: see the module docstring. Returns the exit status."""
    import argparse

    parser = argparse.ArgumentParser(prog="dashrepro audit", description=__doc__.splitlines()[0])
    parser.add_argument("cell", nargs="*", metavar="TABLE ROW SCALE COLUMN")
    parser.add_argument("--results", default=None, help="results/<experiment> (default: the "
                        "experiment of workflow_config.yaml)")  # fmt: skip
    parser.add_argument("--root", default=".", help="the workflow's working directory")
    parser.add_argument("--verify", action="store_true", help="check hashes, derive again")
    parser.add_argument(
        "--regrade",
        action="store_true",
        help="with --verify: regrade too, with the grading settings of the experiment's config",
    )
    parser.add_argument("--config", nargs="+", default=None, metavar="FILE",
                        help="the experiment's config: base and overlays (default: "
                        "workflow_config.yaml under --root)")  # fmt: skip
    parser.add_argument("--report", action="store_true", help="audit every cell")
    parser.add_argument("--out", default=None, help="--report: folder for report.{md,html}")
    options = parser.parse_args(list(args) if args is not None else None)
    root = Path(options.root)
    results = options.results or _default_results(root)
    grading = _config_grading(root, options.config) if options.regrade else None
    if options.report:
        from dashrepro.io import write_text
        from dashrepro.layout import AUDIT_REPORT

        rows, markdown, page = audit_report(root, results, grading)
        out = Path(options.out) if options.out else root / results / "audit"
        write_text(out / f"{AUDIT_REPORT}.md", markdown)
        write_text(out / f"{AUDIT_REPORT}.html", page)
        print(markdown)
        return 1 if any(r["status"] != "ok" for r in rows) else 0
    if len(options.cell) != 4:
        parser.error("give a cell as TABLE ROW SCALE COLUMN, or --report")
    try:
        chain = cell_chain(root, results, *options.cell)
    except AuditError as exc:
        print(f"dashrepro audit: {exc}")
        return 2
    print(render_chain(root, chain))
    if not (options.verify or options.regrade):
        return 0
    findings = verify(root, chain, grading)
    print()
    if chain.copied_from:
        print("verify: a copied number; nothing of ours to check")
        return 0
    print(
        "verify: "
        + ("every hash and number agrees" if not findings else f"{len(findings)} problems")
    )
    for finding in findings:
        print("  " + finding.line())
    return 1 if findings else 0


def _config_grading(root: Path, files: list[str] | None) -> dict:
    """The grading settings of the experiment's config (a regrade takes them from there, not
    from the records in the results folder, which anyone can edit)."""
    from dashrepro.experiment.config import load_config
    from dashrepro.settings import GradingSettings

    paths = [Path(f) for f in files] if files else [root / "workflow_config.yaml"]
    if not paths[0].is_file():
        raise SystemExit(
            f"dashrepro audit: --regrade grades with the experiment config's settings; "
            f"{paths[0]} is not a file (give --config BASE [OVERLAY ...])"
        )
    config = load_config(*paths)
    return GradingSettings.job_params(config["evaluation"])


def _default_results(root: Path) -> str:
    import yaml

    config = root / "workflow_config.yaml"
    experiment = yaml.safe_load(config.read_text())["experiment"] if config.is_file() else "tiny"
    return Results(experiment).root
