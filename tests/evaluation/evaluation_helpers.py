"""Stored responses for the tests in tests/evaluation: rows as the generation stage writes them."""

import pandas as pd

from dashrepro.evaluation.responses import RESPONSE_COLUMNS


def responses(texts_and_golds):
    rows = []
    for index, (text, gold) in enumerate(texts_and_golds):
        rows.append(
            {"checkpoint": "m/s/seed0/step20", "benchmark": "b", "problem_id": f"p{index // 2}",
             "sample_index": index % 2, "seed": 1, "prompt_role": "student", "response": text,
             "n_tokens": len(text), "finish_reason": "stop", "gold": gold}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=RESPONSE_COLUMNS)
