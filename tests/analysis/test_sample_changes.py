"""Sample texts against the base model's and each other's (analysis.sample_changes)."""

import pandas as pd

from dashrepro.analysis.sample_changes import changed_fraction, identical_runs, sample_changes


def _samples(texts: list[str], k: int = 2, seed: int = 7) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"benchmark": "b", "problem_id": f"p{i // k}", "sample_index": i % k, "seed": seed,
             "response": text}
            for i, text in enumerate(texts)
        ]
    )  # fmt: skip


def test_changed_fraction_counts_differing_texts_of_samples_drawn_alike():
    base = _samples(["a", "b", "c", "d"])
    assert changed_fraction(base, base) == 0.0
    assert changed_fraction(_samples(["a", "x", "c", "y"]), base) == 0.5
    # Drawn otherwise: other seeds, or another number of samples per problem -> not comparable.
    assert changed_fraction(_samples(["a", "b", "c", "d"], seed=8), base) is None
    assert changed_fraction(_samples(["a", "b", "c", "d"], k=4), base) is None
    # Another set (e.g. the validation split beside the benchmarks) is left out.
    extra = pd.concat([base, _samples(["z", "z"]).assign(benchmark="validation")])
    assert changed_fraction(extra, base) == 0.0


def test_per_run_changes_and_identical_pairs():
    base = _samples(["a", "b", "c", "d"])
    runs = {
        ("opsd", "s", 0): _samples(["a", "b", "c", "x"]),
        ("dash", "s", 0): _samples(["a", "b", "c", "x"]),
        ("lam", "s", 0): base,
        ("opsd", "s", 1): _samples(["a", "b", "c", "x"]),
    }
    out = sample_changes(runs, {"s": base}).set_index(["method", "seed"])
    assert out.loc[("opsd", 0), "differs_from_base"] == 0.25
    assert out.loc[("lam", 0), "differs_from_base"] == 0.0
    assert out["comparable"].all() and (out["n_samples"] == 4).all()
    # Same scale and seed only: opsd seed 1 is not paired with dash seed 0.
    assert identical_runs(runs) == [("s", 0, "dash", "opsd")]
