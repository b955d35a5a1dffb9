"""Tests for dashrepro.data.reading: local files and hub datasets read as raw rows, and the
messages that name a malformed file and its line."""

from __future__ import annotations

import sys

import pytest

from dashrepro.data import datasets as ds
from dashrepro.data import layouts, reading


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "problem": "p", "answer": "1"}\n\n{"id": "b", "problem": \n')
    with pytest.raises(layouts.DataError) as info:
        reading.load_table(path, layout="local_benchmark")
    assert str(path) in str(info.value) and "line 3 is not valid JSON" in str(info.value)


@pytest.mark.parametrize("suffix", ["jsonl", "json"])
def test_non_utf8_byte_names_file_and_line(tmp_path, suffix):
    path = tmp_path / f"latin1.{suffix}"
    rows = [
        '{"id": "a", "problem": "p", "answer": "1"}',
        '{"id": "b", "problem": "caf\xe9", "answer": "2"}',
    ]
    body = "\n".join(rows) if suffix == "jsonl" else "[" + ",\n".join(rows) + "]"
    path.write_bytes(body.encode("latin-1"))
    with pytest.raises(layouts.DataError) as info:
        reading.load_table(path, layout="local_benchmark")
    message = str(info.value)
    assert str(path) in message and "line 2 is not UTF-8" in message and "0xe9" in message


def test_jsonl_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text('{"id": "a", "problem": "p", "answer": "1"}\n[1, 2]\n')
    with pytest.raises(layouts.DataError, match=r"line 2 holds a JSON list, expected an object"):
        reading.load_table(path, layout="local_benchmark")


def test_json_must_be_a_list_of_objects(tmp_path):
    path = tmp_path / "obj.json"
    path.write_text('{"id": "a"}')
    with pytest.raises(layouts.DataError, match=r"expected a JSON list of objects"):
        reading.load_table(path, layout="local_benchmark")
    path.write_text('[{"id": "a", "problem": "p", "answer": 1},\n 3]')
    with pytest.raises(layouts.DataError, match=r"row 1 holds a JSON int"):
        reading.load_table(path, layout="local_benchmark")
    path.write_text('[{"id": "a",\n "problem": }]')
    with pytest.raises(layouts.DataError, match=r"not valid JSON at line 2"):
        reading.load_table(path, layout="local_benchmark")


def test_unsupported_extension_and_missing_file(tmp_path):
    path = tmp_path / "bench.csv"
    path.write_text("id,problem,answer\na,p,1\n")
    with pytest.raises(layouts.DataError, match=r"unsupported file type '\.csv'"):
        reading.load_table(path, layout="local_benchmark")
    with pytest.raises(layouts.DataError, match=r"no such file"):
        reading.load_table(str(tmp_path / "absent.jsonl"), layout="local_benchmark")
    with pytest.raises(layouts.DataError, match=r"unknown layout 'nope'"):
        reading.load_table(path, layout="nope")


def test_hub_without_datasets_package_names_the_id(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    spec = {
        "hf_id": "siyanzhao/Openthoughts_math_30k_opsd",
        "revision": "0123abc" * 5 + "01234",  # a 40-hex commit
        "layout": "opsd_train",
    }
    with pytest.raises(layouts.DataError) as info:
        ds.load_training_set(spec)
    message = str(info.value)
    assert "'siyanzhao/Openthoughts_math_30k_opsd'" in message and "`datasets`" in message
    with pytest.raises(layouts.DataError, match=r"'HuggingFaceH4/aime_2024'"):
        reading.load_table("HuggingFaceH4/aime_2024", layout="hf_aime_2024", revision="r")
