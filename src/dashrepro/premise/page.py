"""The premise page's measured part, written from a run's probe: docs/premise.md between its markers.

For each probed scale of the experiment: the statistics table of ``report.statistics_markdown``,
then where it came from (the file and its sha256, the rule, the code's commit, the CPU and the
kernels, the day and the job's seconds from its provenance record and Snakemake's timing file).

    python -m dashrepro.premise.page tiny task_families   # after each one's `premise` target
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dashrepro import layout
from dashrepro.io import read_csv, read_job_seconds, sha256_file, with_marked_block, write_text
from dashrepro.premise.report import statistics_markdown
from dashrepro.premise.statistics import STATISTICS

PAGE = layout.REPO_ROOT / "docs" / "premise.md"
BEGIN = "<!-- premise-probe:begin"
END = "<!-- premise-probe:end -->"


def probed_scales(experiment: str, directory: Path) -> list[str]:
    """The scales of the experiment whose probe statistics are in ``directory``'s results."""
    folder = directory / layout.Results(experiment).root / "premise"
    return sorted(p.parent.name for p in folder.glob(f"*/{layout.PREMISE_STATISTICS}.csv"))


def probe_block(experiment: str, scale: str, directory: Path) -> str:
    """One scale's table and its sources, as Markdown."""
    results = layout.Results(experiment)
    statistics = directory / results.premise_file(f"{layout.PREMISE_STATISTICS}.csv", scale)
    record = json.loads(Path(f"{statistics}.provenance.json").read_text())
    frame = read_csv(statistics, required=["probe", *STATISTICS])
    counts = [key for key in STATISTICS if key.startswith("n_")]
    frame[counts] = frame[counts].astype(int)
    frame[[k for k in STATISTICS if k not in counts]] = frame[
        [k for k in STATISTICS if k not in counts]
    ].astype(float)
    timing = directory / results.job_timing("premise_probe", scale)
    seconds = read_job_seconds(timing) if timing.is_file() else None
    code, numerics = record["code"], record["numerics"]
    table = statistics_markdown(frame, f"{experiment}, scale {scale}").replace("# ", "### ", 1)
    commit = code["git_commit"][:10] + (" (uncommitted changes)" if code.get("git_dirty") else "")
    took = "" if seconds is None else f"; the job took {seconds:,.0f} s"
    return (
        f"{table}\n"
        f"From `{results.premise_file(f'{layout.PREMISE_STATISTICS}.csv', scale)}` (sha256 "
        f"`{sha256_file(statistics)[:16]}`), made by rule `{record['rule']}` at commit "
        f"`{commit}` on {record['finished_utc'][:10]}, on {numerics.get('cpu', 'an unnamed CPU')} "
        f"with torch's {numerics.get('aten_cpu_capability', 'default')} kernels and "
        f"{_threads(numerics.get('torch_threads'))}{took}. One probe, one seed: "
        "the sampling noise of a statistic is not measured here (the within statistic's "
        "permutation p-value is its only test).\n"
    )


def _threads(count) -> str:
    return (
        "an unrecorded number of threads"
        if count is None
        else (f"{count} thread" + ("" if int(count) == 1 else "s"))
    )


def page_text(experiments: list[str], directory: Path, page: str) -> str:
    """``page`` with its marked block written from the runs of ``experiments``, in order."""
    blocks = []
    for experiment in experiments:
        scales = probed_scales(experiment, directory)
        if not scales:
            raise FileNotFoundError(
                f"no premise probe of experiment {experiment!r} under {directory}: run "
                "`snakemake --cores 2 premise` (with the experiment's overlay) first"
            )
        blocks += [probe_block(experiment, scale, directory) for scale in scales]
    return with_marked_block(page, BEGIN, END, "\n".join(blocks), str(PAGE))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", default=["tiny"])
    parser.add_argument("--directory", type=Path, default=Path("."))
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    text = page_text(args.experiments, args.directory, args.page.read_text())
    write_text(args.page, text)
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
