"""Files for the tests in tests/data: rows written as a JSON Lines or a parquet file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path
