"""docs/extending.md's section "Extending", followed literally: a new aggregation with one
parameter and a new table of an existing kind, added in a copy of the repository from the page's
own code blocks; the DAG plans the new method, trains it at the embedded scale and builds the
table.

The page's command runs as written, with one overlay before the page's: the workflow tests'
smoke settings (``smoke_config``, experiment ``tiny``), so that the run takes a minute or two.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from dashrepro.embedded.smoke_config import smoke_config

BLOCK = re.compile(r"```(python|yaml)\n# (append to |)(\S+?):?(?: [^\n]*)?\n(.*?)```", re.DOTALL)
COMMAND = re.compile(r"Then `(snakemake [^`]+)`")


#: The page whose section "Extending" the test follows.
PAGE = "docs/extending.md"


def extending_section(page: str) -> str:
    return page.split("## Extending\n", 1)[1].split("\n## ", 1)[0]


def bullet_files(section: str, title: str) -> set[str]:
    """The file names a bullet of the section names in backticks (paths and file names)."""
    bullet = section.split(f"- **{title}**", 1)[1].split("\n- **", 1)[0].split("```", 1)[0]
    return {name for name in re.findall(r"`([^`]+)`", bullet) if re.search(r"\.\w+$", name)}


@pytest.fixture(scope="module")
def extended(repo_root, tmp_path_factory, default_config):
    """The copy with the page's changes made, and what was changed."""
    from conftest import copy_tracked_files

    copy = copy_tracked_files(repo_root, tmp_path_factory.mktemp("extended"))
    section = extending_section((repo_root / PAGE).read_text())
    changed = []
    for _language, append, path, body in BLOCK.findall(section):
        target = copy / path
        if append:
            assert target.is_file(), f"{PAGE} appends to {path}, which does not exist"
            target.write_text(target.read_text() + "\n\n" + body)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
        changed.append(path)
    (command,) = COMMAND.findall(section)
    argv = command.split()
    (copy / "smoke.yaml").write_text(yaml.safe_dump(smoke_config(default_config, "tiny")))
    at = argv.index("--configfile") + 1
    argv[at:at] = ["smoke.yaml"]
    return copy, section, changed, argv


def test_the_page_names_exactly_the_files_the_extension_changes(extended):
    _, section, changed, _ = extended
    overlay = "config/experiments/my_extension.yaml"
    assert set(changed) == {
        "src/dashrepro/objectives/aggregations.py",
        "src/dashrepro/objectives/registry.py",
        overlay,
    }
    aggregation = bullet_files(section, "Add an aggregation")
    # The bullet names the two source files by path; the third is the user's overlay.
    assert {
        "src/dashrepro/objectives/aggregations.py",
        "src/dashrepro/objectives/registry.py",
    } <= {f"src/dashrepro/{name}" if not name.startswith("src/") else name for name in aggregation}
    assert "(3 files)" in section.split("- **Add an aggregation**", 1)[1][:20]
    assert "(1 file)" in section.split("- **Add a table of an existing kind**", 1)[1][:20]


def test_the_new_aggregation_trains_and_its_table_is_built(extended):
    copy, _, _, argv = extended
    assert argv[0] == "snakemake"
    command = [sys.executable, "-m", "snakemake", *argv[1:]]
    plan = subprocess.run([*command, "-n"], cwd=copy, capture_output=True, text=True, timeout=600)
    assert plan.returncode == 0, (plan.stdout + plan.stderr)[-3000:]
    assert "results/tiny/runs/scaled_opsd_half/tiny/seed0" in plan.stdout  # planned, seeds: [0, 1]
    done = subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    table = (copy / "results/tiny/tables/scaled_opsd_check.md").read_text()
    assert re.search(r"^\| OPSD x 0\.5 \| [*<>a-z]*\d+\.\d\d", table, re.MULTILINE), table
    # The run trained with the new aggregation and its parameter: every gradient-carrying
    # coefficient it traced is the weight, 0.5.
    from dashrepro.io import read_parquet

    runs = sorted((copy / "results/tiny/runs/scaled_opsd_half/tiny").glob("seed*"))
    assert runs, "no run of the new method"
    traces = read_parquet(runs[0] / "token_traces.parquet")
    coefficients = traces.loc[traces["coefficient"].notna(), "coefficient"]
    assert len(coefficients) and (coefficients == 0.5).all(), coefficients.describe()
