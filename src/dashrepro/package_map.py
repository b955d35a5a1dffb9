"""The architecture page's package map, written from the packages' own docstrings.

``docs/architecture.md`` holds, between its markers, the root package's docstring, each stage
package's summary and each top-level module's (the first paragraph of its docstring), and the
training package's docstring with its subpackages'. The docstrings are read from the files
(``ast``; nothing is imported), so the page says what the code says. ``problems`` lists a
docstring that is not current: a stage the root docstring does not name, or a module a package
docstring names that lives in another package.

    python -m dashrepro.package_map            # rewrite the block
    python -m dashrepro.package_map --check    # exit 1 if it is stale or a docstring is not current
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

from dashrepro.io import with_marked_block, write_text
from dashrepro.layout import REPO_ROOT

PACKAGE = Path(__file__).resolve().parent
PAGE = REPO_ROOT / "docs" / "architecture.md"
BEGIN = "<!-- package-map:begin"
END = "<!-- package-map:end -->"
#: The package whose whole docstring the page shows besides the root's.
DETAILED = "training"
_NAMED = re.compile(r"``([a-z_][a-z0-9_]*)``")
_BULLET = re.compile(r"^\s*- ``([a-z_][a-z0-9_]*)``", re.MULTILINE)


def docstring(path: Path) -> str:
    """The module docstring of ``path`` ('' when it has none)."""
    return ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""


def _markdown(text: str) -> str:
    """A docstring as Markdown: reST's double backticks become single ones."""
    return text.replace("``", "`")


def _summary(text: str) -> str:
    return " ".join(text.split("\n\n")[0].split())


def stages(root: Path = PACKAGE) -> list[str]:
    """The subpackages, in the order the root docstring names them (then any it does not)."""
    found = sorted(p.parent.name for p in root.glob("*/__init__.py"))
    named = [
        n for n in dict.fromkeys(_NAMED.findall(docstring(root / "__init__.py"))) if n in found
    ]
    return named + [n for n in found if n not in named]


def modules(package: Path) -> set[str]:
    """The modules and subpackages of ``package`` (a folder with an ``__init__.py``)."""
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"} | {
        p.parent.name for p in package.glob("*/__init__.py")
    }


def problems(root: Path = PACKAGE) -> list[str]:
    """Why a package docstring is not current (empty: every one is)."""
    found = []
    top = docstring(root / "__init__.py")
    for name in stages(root):
        if f"``{name}``" not in top:
            found.append(f"{root / '__init__.py'}: does not name the package ``{name}``")
    everywhere = {name for p in [root, *(root / s for s in stages(root))] for name in modules(p)}
    for package in [root / s for s in stages(root)]:
        own = modules(package)
        text = docstring(package / "__init__.py")
        if not text:
            found.append(f"{package / '__init__.py'}: no docstring")
        for name in sorted(set(_NAMED.findall(text)) & everywhere - own):
            found.append(f"{package / '__init__.py'}: names ``{name}``, not a module of it")
        for name in sorted(set(_BULLET.findall(text)) - own):
            found.append(f"{package / '__init__.py'}: lists ``{name}``, not a module of it")
    return found


def block(root: Path = PACKAGE) -> str:
    """The text between the page's markers."""
    lines = [
        "From the packages' own docstrings: `src/dashrepro/__init__.py`, each package's",
        "`__init__.py` and each top-level module.",
        "",
        _markdown(docstring(root / "__init__.py")),
        "",
        "| package | what it holds |",
        "|---|---|",
        *[
            f"| `{s}` | {_markdown(_summary(docstring(root / s / '__init__.py')))} |"
            for s in stages(root)
        ],  # fmt: skip
        "",
        "| top-level module | what it is |",
        "|---|---|",
        *[
            f"| `{p.stem}` | {_markdown(_summary(docstring(p)))} |"
            for p in sorted(root.glob("*.py"))
            if p.stem != "__init__"
        ],  # fmt: skip
        "",
        f"## The {DETAILED} package",
        "",
        f"From `src/dashrepro/{DETAILED}/__init__.py`.",
        "",
        _markdown(docstring(root / DETAILED / "__init__.py")),
    ]
    for sub in sorted(p.parent for p in (root / DETAILED).glob("*/__init__.py")):
        where = f"src/dashrepro/{DETAILED}/{sub.name}/__init__.py"
        lines += ["", f"### `{DETAILED}.{sub.name}`", "", f"From `{where}`.", ""]
        lines.append(_markdown(docstring(sub / "__init__.py")))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    page = PAGE.read_text()
    wanted = with_marked_block(page, BEGIN, END, block(), str(PAGE))
    if args.check:
        if wanted != page:
            print(f"{PAGE} is out of date: run python -m {__spec__.name}", file=sys.stderr)
            return 1
        return 1 if found else 0
    write_text(PAGE, wanted)
    print(f"wrote {PAGE}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
