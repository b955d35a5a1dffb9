"""Each module with logic has its tests in tests/<package>/test_<module>.py, or is listed here
with where it is tested instead. A new module without a test file fails here, and so does a
listed one that has gained its file (the list only shrinks)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "dashrepro"

#: Modules whose tests live under another name: a test file of their own name would clash with
#: another basename (pytest's default import mode).
ELSEWHERE = {
    "data/report.py": "tests/data/test_data_report.py (test_report.py is the audit report's)",
    "experiment/workflow.py": "tests/experiment/test_experiment.py (test_workflow.py is the DAG's)",
}


def has_logic(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef | ast.ClassDef) for n in tree.body)


def test_every_module_with_logic_has_its_test_file_or_says_where_it_is_tested():
    without = set()
    for path in sorted(SRC.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or not has_logic(path):
            continue
        module = path.relative_to(SRC)
        test_file = ROOT / "tests" / module.parent / f"test_{path.stem.lstrip('_')}.py"
        if not test_file.exists():
            without.add(module.as_posix())
    assert without - set(ELSEWHERE) == set(), "modules with no test file and no entry here"
    assert set(ELSEWHERE) - without == set(), "listed modules that have their file now"


def test_no_two_test_files_share_a_basename_outside_a_package():
    """pytest's default import mode imports a test file by its basename where its folder is no
    package: two such files of one name stop the collection."""
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if (path.parent / "__init__.py").exists():
            continue
        assert path.name not in seen, f"{path} and {seen[path.name]}"
        seen[path.name] = path


def test_every_module_docstring_says_what_the_module_is_for_in_at_most_15_lines():
    """What a module holds, not a specification: those live in docs/."""
    long = {}
    for path in sorted(SRC.rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text()))
        if docstring and len(docstring.splitlines()) > 15:
            long[str(path.relative_to(SRC))] = len(docstring.splitlines())
    assert long == {}, "module docstrings over 15 lines"
