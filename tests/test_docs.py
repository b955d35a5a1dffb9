"""The documentation: the README stays a short front door, the MkDocs site builds with
--strict (a broken link or anchor, a reference that does not resolve, a page left out of the
navigation all fail), and the pages written from files agree with them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from dashrepro.analysis import expected_results


def test_the_readme_is_a_short_front_door(repo_root):
    lines = (repo_root / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; details belong in docs/"


def test_the_site_builds_strictly(repo_root, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=repo_root, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's end-of-life banner
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    for page in ("index.html", "reference/configuration/index.html", "methods/index.html",
                 "expected-results/index.html", "reference/api/index.html"):  # fmt: skip
        assert (tmp_path / "site" / page).is_file(), page
    # The equations reach the page as MathJax's input, the function links as resolved anchors.
    methods = (tmp_path / "site" / "methods" / "index.html").read_text()
    assert 'class="arithmatex"' in methods
    assert re.search(r'href="\.\./reference/api/#dashrepro\.objectives\.', methods)


def test_every_docs_page_is_in_the_navigation(repo_root):
    """mkdocs reports an omitted page; this names it without a build."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("tag:", lambda *_: None)  # mkdocs.yml's !! tags, if any
    config = yaml.load((repo_root / "mkdocs.yml").read_text(), Loader=_Loader)

    def pages(nav):
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from pages(value) if isinstance(value, list) else [value]

    listed = set(pages(config["nav"]))
    present = {str(p.relative_to(repo_root / "docs")) for p in (repo_root / "docs").rglob("*.md")}
    assert present - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - present == set(), "nav entries without a page"


def test_the_readme_block_and_the_expected_results_page_come_from_one_run(repo_root):
    """Both are written by one command from one run's files: the README's table is the page's
    "How noisy" table, line for line, and its measurement line is the page's."""
    readme = (repo_root / "README.md").read_text()
    block = readme[readme.index(expected_results.BEGIN) : readme.index(expected_results.END)]
    page = (repo_root / "docs" / "expected-results.md").read_text()
    table = [line for line in block.splitlines() if line.startswith("|")]
    assert len(table) >= 3 and "\n".join(table) in page  # header, rule, a row at least
    measured = re.search(r"Measured: (.*)\.", block).group(1)
    assert measured[0].upper() + measured[1:] in page
    assert (repo_root / "docs" / "assets" / f"{expected_results.FIGURE}.png").is_file()


def test_the_expected_results_page_and_the_readme_block_are_rendered_from_the_record(repo_root):
    """The committed record (what `dashrepro compare` reads) gives the page and the README's
    block as committed, word for word: the numbers a user compares against are the page's."""
    record = expected_results.read_record(repo_root / expected_results.RECORD)
    wanted = expected_results.rendered(record, repo_root)
    for path, text in wanted.items():
        assert path.read_text() == text, f"{path} is not what its record renders"


def test_the_screenshot_script_shoots_the_three_pages(repo_root, tmp_path):
    """scripts/docs_screenshots.sh as docs/index.md gives it (where Chromium is installed)."""
    import shutil

    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        import pytest

        pytest.skip("needs Chromium (apt-get install chromium)")
    done = subprocess.run(
        ["bash", "scripts/docs_screenshots.sh", str(tmp_path)], cwd=repo_root,
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("home", "configuration-reference", "methods"):
        png = (tmp_path / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 20_000, name
