"""The package's import graph has no cycle, hidden or not.

A cycle hidden behind a function-level import still ties two modules together (neither can be
understood, tested or moved without the other), so the graph here holds every import statement
of every module, at any depth, resolved to the modules it loads (importing ``a.b.c`` runs
``a.b``'s ``__init__`` too). Two graphs must be acyclic: the modules', and the one of the
top-level subpackages and modules (``dashrepro.training`` -> ``dashrepro.sampling``), so the
stages stay layered. Every module also imports in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "dashrepro"


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name``'s import statements load, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".")
            else:
                base = node.module or ""
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            # Loading a.b.c runs a.b's __init__ first: each enclosing package is loaded too.
            found |= {".".join(parts[:k]) for k in range(2, len(parts) + 1)} & known
    return found - {name} - {p for p in found if name.startswith(p + ".")}


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    modules = module_files()
    known = set(modules) - {PACKAGE}
    by_module = {name: imported_modules(name, path, known) for name, path in modules.items()}

    def stage(name: str) -> str:
        return ".".join(name.split(".")[:2])

    by_stage: dict[str, set[str]] = {}
    for name, targets in by_module.items():
        by_stage.setdefault(stage(name), set()).update(
            stage(t) for t in targets if stage(t) != stage(name)
        )
    return by_module, by_stage


def test_a_cycle_is_found_where_there_is_one():
    assert a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert a_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_graph_has_no_cycle():
    by_module, by_stage = graphs()
    assert len(by_module) > 50 and by_module["dashrepro.training.recipe"]  # the graph is real
    assert a_cycle(by_module) is None, f"modules import each other: {a_cycle(by_module)}"
    assert a_cycle(by_stage) is None, f"stages import each other: {a_cycle(by_stage)}"


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(module_files())
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    done = subprocess.run(
        [sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
