"""premise.page: the premise page's measured block, written from a run's probe files with where
they came from; a missing run is named."""

from __future__ import annotations

import json

import pytest

from dashrepro import layout
from dashrepro.io import sha256_file
from dashrepro.premise.page import BEGIN, END, main, page_text
from dashrepro.premise.report import statistics_frame
from dashrepro.premise.statistics import STATISTICS


def make_run(directory, scale="tiny"):
    results = layout.Results("tiny")
    values = {key: (7 if key.startswith("n_") else 0.25) for key in STATISTICS}
    statistics = directory / results.premise_file(f"{layout.PREMISE_STATISTICS}.csv", scale)
    statistics.parent.mkdir(parents=True)
    statistics_frame({scale: values}).to_csv(statistics, index=False)
    record = {
        "rule": f"premise_probe_{scale}", "finished_utc": "2026-11-29T01:00:00+00:00",
        "code": {"git_commit": "0123456789abcdef", "git_dirty": False},
        "numerics": {"cpu": "Test CPU", "aten_cpu_capability": "AVX2", "torch_threads": 2},
    }  # fmt: skip
    (statistics.parent / "statistics.csv.provenance.json").write_text(json.dumps(record))
    timing = directory / results.job_timing("premise_probe", scale)
    timing.parent.mkdir(parents=True)
    timing.write_text("s\th:m:s\n24.44\t0:00:24\n")
    return statistics


PAGE = f"# Premise\n\nIntro.\n\n{BEGIN} (generated) -->\nold\n{END}\n\nAfter.\n"


def test_the_block_holds_each_probes_table_and_its_sources(tmp_path):
    statistics = make_run(tmp_path)
    text = page_text(["tiny"], tmp_path, PAGE)
    assert text.startswith("# Premise\n\nIntro.\n") and text.endswith(f"{END}\n\nAfter.\n")
    assert "old" not in text
    assert "### tiny, scale tiny" in text
    assert "| `n_tokens` | 7 | response tokens scored |" in text
    assert "| `gate_mid_share` | 0.250 |" in text
    assert f"sha256 `{sha256_file(statistics)[:16]}`" in text
    assert "at commit `0123456789` on 2026-11-29, on Test CPU with torch's AVX2 kernels" in text
    assert "the job took 24 s" in text


def test_main_rewrites_the_page_and_a_missing_run_is_named(tmp_path, capsys):
    page = tmp_path / "premise.md"
    page.write_text(PAGE)
    with pytest.raises(FileNotFoundError, match="no premise probe of experiment 'tiny'"):
        main(["tiny", "--directory", str(tmp_path), "--page", str(page)])
    make_run(tmp_path)
    assert main(["tiny", "--directory", str(tmp_path), "--page", str(page)]) == 0
    assert "| `n_tokens` | 7 |" in page.read_text()
    assert capsys.readouterr().out == f"wrote {page}\n"
