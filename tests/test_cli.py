"""cli: the ``dashrepro`` console command hands each subcommand its own arguments."""

from __future__ import annotations

import pytest

from dashrepro import cli


def test_no_or_an_unknown_subcommand_prints_the_usage(capsys):
    assert cli.main([]) == 2
    assert cli.main(["nothing"]) == 2
    assert "usage: dashrepro {audit,compare}" in capsys.readouterr().out


def test_a_subcommand_gets_the_arguments_after_its_name(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["audit", "--help"])
    assert done.value.code == 0
    assert "--report" in capsys.readouterr().out
