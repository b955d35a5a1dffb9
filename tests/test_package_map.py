"""package_map: the architecture page's package map, from the packages' docstrings."""

from __future__ import annotations


def test_the_architecture_pages_package_map_is_the_packages_docstrings(tmp_path):
    """docs/architecture.md's package list is written from the docstrings (regenerate with
    `python -m dashrepro.package_map`), and every package docstring names only its own
    modules and the root one every stage."""
    from dashrepro import package_map

    assert package_map.problems() == []
    assert package_map.main(["--check"]) == 0, "docs/architecture.md's package map is stale"
    # A docstring gone stale is named: a package that lists another package's module.
    fake = tmp_path / "dashrepro"
    (fake / "stage").mkdir(parents=True)
    (fake / "__init__.py").write_text('"""Stages: ``stage``."""\n')
    (fake / "core.py").write_text('"""A core."""\n')
    (fake / "stage" / "__init__.py").write_text('"""A stage.\n\n- ``core``: not here.\n"""\n')
    assert package_map.problems(fake) == [
        f"{fake / 'stage' / '__init__.py'}: names ``core``, not a module of it",
        f"{fake / 'stage' / '__init__.py'}: lists ``core``, not a module of it",
    ]
