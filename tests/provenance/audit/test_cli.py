"""Tests for ``dashrepro.provenance.audit.cli``: the audit's command line answers as documented."""

from __future__ import annotations

import pytest

from dashrepro.provenance.audit.cli import run_cli

from .audit_helpers import RESULTS


def test_the_command_line(tree, capsys):
    with pytest.raises(SystemExit) as stop:
        run_cli(["t", "dash", "--root", str(tree), "--results", RESULTS])
    assert stop.value.code == 2  # a cell is four words
    assert run_cli(["u", "dash", "s", "average", "--root", str(tree), "--results", RESULTS]) == 2
    assert "no table 'u'" in capsys.readouterr().out
    status = run_cli(
        ["t", "base", "s", "average", "--root", str(tree), "--results", RESULTS, "--verify"]
    )
    assert status == 0 and "nothing of ours to check" in capsys.readouterr().out
