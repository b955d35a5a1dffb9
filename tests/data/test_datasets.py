"""Tests for dashrepro.data.datasets: loading a training set or benchmark through each source
layout, cleaning, malformed files, size and hash checks, hub pins, the CLI, the held-out
validation split, and the real benchmarks (marker ``shared_data``: skipped when the benchmark
files are absent). The modules it re-exports have their own files: test_layouts.py,
test_reading.py, test_data_report.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from data_helpers import write_jsonl, write_parquet

from dashrepro.data import datasets as ds
from dashrepro.data import layouts, reading
from dashrepro.data import report as data_report
from dashrepro.io import sha256_file

# sha256 of the three shared benchmark files, as recorded in their SOURCES.md.
SHARED_SHA256 = {
    "aime2024.jsonl": "d12717df5ad9eab388585ac16186612bfbff4ac551475e9b4b7d5938ad768ae6",
    "aime2025.jsonl": "618d86e2719edefa85b039766f7f284dc9b6b2dcc81ae1a51dc8692d0e09ee59",
    "hmmt_feb2025.jsonl": "9ae5de33c793fa471580b3eca8a339be41680147b3707217853c5e0a761d6a97",
}


def local(path, **keys) -> dict:
    """A spec of the local file ``path``, pinned to its content (``sha256``)."""
    return {"path": path, "sha256": sha256_file(path), **keys}


def bench_rows(n: int, prefix: str = "b") -> list[dict]:
    return [
        {"id": f"{prefix}-{i}", "problem": f"What is {i}+1?", "answer": str(i + 1)}
        for i in range(n)
    ]


# ------------------------------------------------------------------------------ layouts


def test_opsd_train_parquet_normalised(tmp_path):
    rows = [
        {
            "Question": "Q0",
            "solution": "S0 \\boxed{25}",
            "Answer": "25",
            "generated_token_count": 10,
        },
        {"Question": "Q1", "solution": None, "Answer": "1", "generated_token_count": 5},
        {"Question": "  ", "solution": "S2", "Answer": "2", "generated_token_count": 5},
        {
            "Question": "Q3",
            "solution": "S3",
            "Answer": " \\frac{1}{2} ",
            "generated_token_count": 7,
        },
        {"Question": "Q4\n", "solution": "S4", "Answer": "", "generated_token_count": 7},
    ]
    path = write_parquet(tmp_path / "train-00000-of-00002.parquet", rows)
    frame, report = ds.load_training_set(local(path, layout="opsd_train"))
    assert list(frame.columns) == list(layouts.COLUMNS)
    assert list(frame["id"]) == ["openthoughts-00000", "openthoughts-00003"]
    assert list(frame["answer"]) == ["25", "\\frac{1}{2}"]
    # S3 has no boxed answer: the teacher must see it, so it is appended (and reported).
    assert list(frame["reference_solution"]) == [
        "S0 \\boxed{25}",
        "S3\n\nThe final answer is \\boxed{\\frac{1}{2}}.",
    ]
    assert report.answers_appended == [frame["id"].iloc[1]]
    assert set(frame["source"]) == {"file:train-00000-of-00002.parquet"}
    assert report.column_map["problem"] == "Question"
    counts = report.counts()
    assert counts[data_report.MISSING_REFERENCE] == 1 and report.ids(
        data_report.MISSING_REFERENCE
    ) == ["openthoughts-00001"]
    assert counts[data_report.MISSING_PROBLEM] == 1 and report.rows(
        data_report.MISSING_PROBLEM
    ) == [2]
    assert counts[data_report.MISSING_ANSWER] == 1 and report.ids(data_report.MISSING_ANSWER) == [
        "openthoughts-00004"
    ]
    assert (report.rows_read, report.rows_kept, report.n_dropped) == (5, 2, 3)


def test_opsd_train_falls_back_to_problem_column_and_min_rows(tmp_path):
    rows = [{"problem": f"P{i}", "solution": f"S{i}", "Answer": i} for i in range(3)]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    frame, report = ds.load_training_set(local(path, layout="opsd_train", min_rows=3))
    assert report.column_map["problem"] == "problem"
    assert list(frame["answer"]) == ["0", "1", "2"]
    with pytest.raises(layouts.DataError, match=r"at least 4 rows.*got 3"):
        ds.load_training_set(local(path, layout="opsd_train", min_rows=4))


@pytest.mark.parametrize("suffix", ["parquet", "jsonl", "json"])
def test_hf_aime_2024_layout(tmp_path, suffix):
    rows = [
        {
            "id": 60 + i,
            "problem": f"P{i}",
            "solution": f"sol {i}",
            "answer": "025" if i == 0 else str(100 + i),
            "url": f"https://artofproblemsolving.com/{i}",
            "year": "2024",
        }
        for i in range(3)
    ]
    path = tmp_path / f"aime_2024.{suffix}"
    if suffix == "parquet":
        write_parquet(path, rows)
    elif suffix == "jsonl":
        write_jsonl(path, rows)
    else:
        path.write_text(json.dumps(rows))
    frame, report = ds.load_benchmark(local(path, layout="hf_aime_2024", expected_size=3))
    assert list(frame["id"]) == ["aime2024-60", "aime2024-61", "aime2024-62"]
    assert frame["answer"].iloc[0] == "025"  # strings are kept as given
    assert list(frame["reference_solution"]) == ["sol 0", "sol 1", "sol 2"]
    assert report.n_dropped == 0


def test_matharena_layout_parquet_int_answers_and_prefix(tmp_path):
    aime = [
        {"problem_idx": i + 1, "problem": f"P{i}", "answer": 70 + i, "problem_type": ["Algebra"]}
        for i in range(4)
    ]
    path = write_parquet(tmp_path / "aime_2025.parquet", aime)
    frame, _ = ds.load_benchmark(local(path, layout="matharena", expected_size=4))
    assert list(frame["id"]) == ["aime_2025-1", "aime_2025-2", "aime_2025-3", "aime_2025-4"]
    assert list(frame["answer"]) == ["70", "71", "72", "73"]
    assert frame["reference_solution"].isna().all()
    assert frame["reference_solution"].iloc[0] is None

    hmmt = [{"problem_idx": 10, "problem": "P", "answer": "\\frac{-1+\\sqrt{17}}{2}"}]
    path = write_jsonl(tmp_path / "hmmt_feb_2025.jsonl", hmmt)
    frame, _ = ds.load_benchmark(local(path, layout="matharena", expected_size=1, id_prefix="hmmt"))
    assert frame["id"].iloc[0] == "hmmt-10"
    assert frame["answer"].iloc[0] == "\\frac{-1+\\sqrt{17}}{2}"


def test_yentinglin_layout_and_index_fallback(tmp_path):
    rows = [
        {"id": i, "problem": f"P{i}", "solution": "s", "answer": "70", "url": "u", "year": 2025}
        for i in range(2)
    ]
    frame, _ = ds.load_benchmark(
        local(
            write_jsonl(tmp_path / "aime25.jsonl", rows),
            layout="yentinglin_aime_2025",
            expected_size=2,
        )
    )
    assert list(frame["id"]) == ["aime2025-0", "aime2025-1"]
    no_ids = [{"problem": "P", "answer": "1"}, {"problem": "Q", "answer": "2"}]
    frame, _ = ds.normalise(
        pd.DataFrame(no_ids), "yentinglin_aime_2025", "hf:yentinglin/aime_2025@x"
    )
    assert list(frame["id"]) == ["aime2025-0", "aime2025-1"]


def test_local_benchmark_layout_ignores_extra_columns(tmp_path):
    rows = [dict(r, source_repo="eth-sri/matharena", source_path="p.tex") for r in bench_rows(3)]
    path = write_jsonl(tmp_path / "bench.jsonl", rows)
    frame, report = ds.load_benchmark(local(path, layout="local_benchmark", expected_size=3))
    assert list(frame.columns) == list(layouts.COLUMNS)
    assert list(frame["id"]) == ["b-0", "b-1", "b-2"]
    assert report.column_map == {
        "problem": "problem",
        "reference_solution": None,
        "answer": "answer",
        "id": "id",
    }


# ------------------------------------------------------------------------------ answers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (25, "25"),
        (np.int64(25), "25"),
        (25.0, "25"),
        (np.float64(7.0), "7"),
        (0.5, "0.5"),
        ("025", "025"),
        ("  7 \n", "7"),
        ("\\sqrt{17}", "\\sqrt{17}"),
        ("", None),
        ("   ", None),
        (None, None),
        (float("nan"), None),
        (pd.NA, None),
    ],
)
def test_an_answer_cell_reads_as_stripped_text_or_none(value, expected):
    assert ds._scalar_text(value, column="answer", row=0, where="x.parquet", strip=True) == expected


def test_parquet_int_answers_promoted_to_float_by_a_null(tmp_path):
    frame = pd.DataFrame(
        {"id": ["a", "b", "c"], "problem": ["p", "q", "r"], "answer": [25, None, 7]}
    )
    assert frame["answer"].dtype == np.float64  # what pandas makes of it
    path = tmp_path / "b.parquet"
    frame.to_parquet(path)
    out, report = ds.normalise(
        reading.load_table(path, layout="local_benchmark"), "local_benchmark", "s"
    )
    assert list(out["answer"]) == ["25", "7"]
    assert report.ids(data_report.MISSING_ANSWER) == ["b"]


def test_non_scalar_answer_is_an_error():
    frame = pd.DataFrame({"id": ["a"], "problem": ["p"], "answer": [[1, 2]]})
    with pytest.raises(layouts.DataError, match=r"row 0: column 'answer' holds a list"):
        ds.normalise(frame, "local_benchmark", "src")


# ------------------------------------------------------------------------------ cleaning report


def test_duplicates_and_empty_rows_reported_by_count_and_id(tmp_path):
    rows = [
        {"id": "x-1", "problem": "P1", "answer": "1"},
        {"id": "x-2", "problem": "", "answer": "2"},
        {"id": "x-3", "problem": "P3", "answer": None},
        {"id": "x-1", "problem": "P1 again", "answer": "1"},
        {"id": "x-4", "problem": "P4", "answer": "  "},
        {"id": "x-2", "problem": "P2 fixed", "answer": "2"},  # first *valid* x-2 is kept
        {"id": "", "problem": "P5", "answer": "5"},
        {"id": "x-1", "problem": "P1 a third time", "answer": "1"},
    ]
    path = write_jsonl(tmp_path / "dups.jsonl", rows)
    frame, report = ds.normalise(
        reading.load_table(path, layout="local_benchmark"), "local_benchmark", "file:dups.jsonl"
    )
    assert list(frame["id"]) == ["x-1", "x-2"]
    assert frame.set_index("id").loc["x-2", "problem"] == "P2 fixed"
    assert report.counts() == {
        data_report.MISSING_ID: 1,
        data_report.MISSING_PROBLEM: 1,
        data_report.MISSING_ANSWER: 2,
        data_report.MISSING_REFERENCE: 0,
        data_report.DUPLICATE_ID: 2,
    }
    assert report.ids(data_report.DUPLICATE_ID) == ["x-1", "x-1"]
    assert report.rows(data_report.DUPLICATE_ID) == [3, 7]
    assert report.rows(data_report.MISSING_ANSWER) == [2, 4]
    assert report.rows(data_report.MISSING_ID) == [6]
    summary = report.summary()
    lines = summary.splitlines()
    assert lines[0] == "file:dups.jsonl [layout local_benchmark]: 8 rows read, 2 kept, 6 dropped"
    assert len(lines) == 5  # headline + one line per reason that dropped rows
    assert "duplicate id (first kept): 2 row(s): row 3 (id x-1, first seen at row 0)" in summary
    assert "missing or empty answer: 2 row(s): row 2 (id x-3), row 4 (id x-4)" in summary
    assert "missing or empty id: 1 row(s): row 6 (no id)" in summary
    json.dumps(report.to_dict())  # serialisable for provenance


# ------------------------------------------------------------------------------ specs


def test_wrong_benchmark_size_stops(tmp_path):
    rows = bench_rows(30)
    rows[5]["answer"] = ""  # cleaned away: 29 left
    path = write_jsonl(tmp_path / "short.jsonl", rows)
    spec = local(path, layout="local_benchmark", expected_size=30)
    with pytest.raises(layouts.DataError) as info:
        ds.load_benchmark(spec, name="AIME short")
    message = str(info.value)
    assert "benchmark AIME short: expected 30 problems after cleaning, got 29" in message
    assert "row 5 (id b-5)" in message
    with pytest.raises(layouts.DataError, match=r"benchmark file:short\.jsonl: expected 30"):
        ds.load_benchmark(spec)
    with pytest.raises(layouts.DataError, match=r"needs 'expected_size'"):
        ds.load_benchmark(local(path, layout="local_benchmark"))


def test_sha256_verified(tmp_path):
    path = write_jsonl(tmp_path / "bench.jsonl", bench_rows(2))
    good = sha256_file(path)
    spec = {"path": path, "layout": "local_benchmark", "expected_size": 2, "sha256": good.upper()}
    frame, _ = ds.load_benchmark(spec)
    assert len(frame) == 2
    wrong = "0" * 64
    with pytest.raises(layouts.DataError) as info:
        ds.load_benchmark(dict(spec, sha256=wrong))
    message = str(info.value)
    assert str(path) in message and wrong in message and good in message


def test_relative_path_resolved_against_base_dir(tmp_path):
    write_jsonl(tmp_path / "bench.jsonl", bench_rows(2))
    spec = {"path": "bench.jsonl", "layout": "local_benchmark", "expected_size": 2}
    spec["sha256"] = sha256_file(tmp_path / "bench.jsonl")
    frame, _ = ds.load_benchmark(spec, base_dir=tmp_path)
    assert len(frame) == 2


@pytest.mark.parametrize("revision", ["main", "0123abc", "v1.0"])
def test_hub_training_set_must_be_pinned_to_a_commit(monkeypatch, revision):
    """Checked before anything is downloaded: `datasets` is never imported."""
    monkeypatch.setitem(sys.modules, "datasets", None)
    spec = {"hf_id": "siyanzhao/Openthoughts_math_30k_opsd", "revision": revision,
            "layout": "opsd_train", "expected_size": 29434}  # fmt: skip
    with pytest.raises(layouts.DataError) as info:
        ds.load_training_set(spec)
    message = str(info.value)
    assert f"revision {revision!r} is not a commit" in message and "40-hex" in message


@pytest.mark.parametrize("revision", ["main", "0123abc"])
def test_hub_benchmark_must_be_pinned_to_a_commit_too(monkeypatch, revision):
    """A benchmark at a branch could change under a finished run: refused before any download,
    naming the config key."""
    monkeypatch.setitem(sys.modules, "datasets", None)
    spec = {"hf_id": "HuggingFaceH4/aime_2024", "revision": revision, "split": "train",
            "layout": "hf_aime_2024", "expected_size": 30}  # fmt: skip
    with pytest.raises(layouts.DataError) as info:
        ds.load_benchmark(spec, name="aime2024")
    message = str(info.value)
    assert f"revision {revision!r} is not a commit" in message
    assert "benchmarks.aime2024.dataset.revision" in message and "40-hex" in message


def test_training_set_size_after_cleaning_is_checked(tmp_path):
    rows = [
        {"problem": f"p{i}", "solution": f"s{i} \\boxed{{{i}}}", "Answer": str(i)} for i in range(4)
    ]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    spec = {"path": str(path), "sha256": sha256_file(path), "layout": "opsd_train"}
    frame, _ = ds.load_training_set({**spec, "expected_size": 4})
    assert len(frame) == 4
    with pytest.raises(layouts.DataError, match="expected 29434 rows after cleaning, got 4"):
        ds.load_training_set({**spec, "expected_size": 29434})


def test_cli_writes_parquet(tmp_path, capsys):
    src = write_jsonl(tmp_path / "bench.jsonl", bench_rows(3))
    out = tmp_path / "out" / "bench.parquet"
    # without --sha256 it stops, giving the file's hash to pin it with
    assert ds.main(["--path", str(src), "--layout", "local_benchmark"]) == 1
    assert f"--path needs --sha256 ({src}: {sha256_file(src)})" in capsys.readouterr().err
    argv = ["--path", str(src), "--sha256", sha256_file(src), "--layout", "local_benchmark"]
    argv += ["--expected-size", "3"]
    assert ds.main([*argv, "--out", str(out)]) == 0
    assert "3 rows read, 3 kept, 0 dropped" in capsys.readouterr().out
    assert list(pd.read_parquet(out).columns) == list(layouts.COLUMNS)
    assert ds.main([*argv[:-1], "4"]) == 1
    assert "expected 4 problems" in capsys.readouterr().err


# ------------------------------------------------------------------------------ real benchmarks


def _shared_benchmarks(repo_root: Path) -> Path:
    default = repo_root.parent / "shared" / "data" / "benchmarks"
    return Path(os.environ.get("DASHREPRO_SHARED_BENCHMARKS", default))


@pytest.mark.shared_data
@pytest.mark.parametrize("file_name", sorted(SHARED_SHA256))
def test_real_benchmarks_load(repo_root, file_name):
    folder = _shared_benchmarks(repo_root)
    if not folder.is_dir():
        pytest.skip(f"shared benchmarks not found at {folder}")
    spec = {
        "path": folder / file_name,
        "layout": "local_benchmark",
        "expected_size": 30,
        "sha256": SHARED_SHA256[file_name],
    }
    frame, report = ds.load_benchmark(spec)
    assert len(frame) == 30 and frame["id"].is_unique
    assert report.n_dropped == 0
    assert list(frame.columns) == list(layouts.COLUMNS)
    assert all(isinstance(a, str) and a for a in frame["answer"])
    if file_name == "hmmt_feb2025.jsonl":
        answer = frame.set_index("id").loc["hmmt_feb2025-10", "answer"]
        assert "\\sqrt{17}" in answer


def test_training_solutions_without_the_final_answer_get_it_appended(tmp_path):
    rows = [
        {"problem": "p0", "solution": "2+2=4, so $\\boxed{4}$.", "Answer": "4"},
        {"problem": "p1", "solution": "Three plus three is six.", "Answer": "6"},
    ]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    spec = {"path": str(path), "sha256": sha256_file(path), "layout": "opsd_train"}
    frame, report = ds.load_training_set(spec)
    assert list(frame["reference_solution"]) == [
        "2+2=4, so $\\boxed{4}$.",
        "Three plus three is six.\n\nThe final answer is \\boxed{6}.",
    ]
    assert report.answers_appended == [frame["id"].iloc[1]]
    assert "final answer appended to the reference solution: 1 row(s)" in report.summary()
    assert report.to_dict()["answers_appended"] == [frame["id"].iloc[1]]


def _rows(n):
    return pd.DataFrame(
        {"id": [f"r{i}" for i in range(n)], "problem": [f"q{i}" for i in range(n)],
         "reference_solution": ["s"] * n, "answer": [str(i) for i in range(n)],
         "source": ["t"] * n}
    )  # fmt: skip


def test_hold_out_validation_takes_seeded_rows_out_of_training():
    frame = _rows(50)
    train, validation = ds.hold_out_validation(frame, 10, seed=3)
    assert len(train) == 40 and len(validation) == 10
    assert not set(train["id"]) & set(validation["id"])
    assert set(train["id"]) | set(validation["id"]) == set(frame["id"])
    # Source order kept, the same rows for the same seed, other rows for another.
    assert list(validation["id"]) == sorted(validation["id"], key=lambda i: int(i[1:]))
    assert validation.equals(ds.hold_out_validation(frame, 10, seed=3)[1])
    assert not validation.equals(ds.hold_out_validation(frame, 10, seed=4)[1])


def test_hold_out_validation_refuses_a_set_too_small():
    with pytest.raises(layouts.DataError, match="cannot spare 30"):
        ds.hold_out_validation(_rows(50), 30, seed=0)
    with pytest.raises(layouts.DataError, match="at least one"):
        ds.hold_out_validation(_rows(50), 0, seed=0)
