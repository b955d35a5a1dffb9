"""premise.checks: writing or checking a study's generated files, and the statuses a script can
tell apart (0 as committed, 1 different and named, 3 nothing to compare)."""

from __future__ import annotations

import json

from dashrepro.premise.checks import (
    CANNOT_CHECK,
    DIFFERENT,
    SAME,
    check_committed_only,
    check_or_write,
    input_differences,
    write_or_check,
)


def test_write_then_check_then_a_changed_byte_is_named(tmp_path, capsys):
    page, figure = tmp_path / "page.md", tmp_path / "figure.png"
    files = {page: "# page\n", figure: b"\x89PNG..."}
    assert check_or_write(files, check=False) == SAME and figure.read_bytes() == b"\x89PNG..."
    assert check_or_write(files, check=True) == SAME
    assert check_or_write({**files, figure: b"\x89PNG!!!"}, check=True) == DIFFERENT
    assert f"{figure}: differs" in capsys.readouterr().out
    page.unlink()
    assert check_or_write(files, check=True) == DIFFERENT
    assert f"{page}: missing" in capsys.readouterr().out


def test_the_moved_inputs_of_a_record_are_listed_by_name():
    lines = input_differences({"a": "1" * 64, "b": "2" * 64, "gone": "3" * 64},
                              {"a": "1" * 64, "b": "4" * 64, "new": "5" * 64})  # fmt: skip
    assert lines == ["  b: sha256 222222222222... now 444444444444...",
                     "  gone: in the committed record, not read now",
                     "  new: read now, not in the committed record"]  # fmt: skip


def test_without_inputs_only_the_record_is_read_and_a_bad_one_cannot_be_compared(tmp_path, capsys):
    record, page = tmp_path / "record.json", tmp_path / "page.md"

    def derive(r):
        return {page: f"value {r['value']}\n"}

    assert check_committed_only(record, derive, FileNotFoundError("no runs")) == CANNOT_CHECK
    record.write_text("{not json")
    assert check_committed_only(record, derive, FileNotFoundError("no runs")) == CANNOT_CHECK
    record.write_text(json.dumps({"other": 1}))
    assert check_committed_only(record, derive, FileNotFoundError("no runs")) == CANNOT_CHECK
    assert "malformed record (KeyError" in capsys.readouterr().out
    record.write_text(json.dumps({"value": 3}))
    page.write_text("value 3\n")
    assert check_committed_only(record, derive, FileNotFoundError("no runs")) == SAME
    assert "inputs absent (no runs)" in capsys.readouterr().out


def test_a_command_run_computes_writes_checks_and_names_what_it_cannot_read(tmp_path, capsys):
    record, page = tmp_path / "record.json", tmp_path / "page.md"

    def derive(r):
        return {page: f"value {r['value']}\n"}

    def compute(value=2):
        return {"value": value, "inputs": {"x": str(value) * 64}}

    assert write_or_check(record, compute, derive, check=False) == SAME
    assert write_or_check(record, compute, derive, check=True) == SAME
    assert write_or_check(record, lambda: compute(5), derive, check=True) == DIFFERENT
    assert "x: sha256 222222222222... now 555555555555..." in capsys.readouterr().out

    def absent():
        raise FileNotFoundError("results/fam: no evaluated checkpoint")

    assert write_or_check(record, absent, derive, check=False) == CANNOT_CHECK
    assert "error: results/fam: no evaluated checkpoint" in capsys.readouterr().out
    assert write_or_check(record, absent, derive, check=True) == SAME  # the page vs its record
