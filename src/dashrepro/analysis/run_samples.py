"""The graded samples a statistics job reads, by run: ``RunSamples``.

Every candidate checkpoint's ``samples.parquet`` of every (method, scale) run, named by the key
beside it (the rule's ``input_keys``, never parsed from a path), and the base student's samples
by scale. Each run's per-problem frame is read once and kept; the texts of each seed's selected
checkpoint are read for the sample-change check.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import pandas as pd

from dashrepro.analysis import per_problem as pp
from dashrepro.analysis import sample_changes as sc
from dashrepro.io import read_parquet

#: What the sample-change check compares.
TEXT_COLUMNS = ["benchmark", "problem_id", "sample_index", "seed", "response"]
GRADE_COLUMNS = ["benchmark", "problem_id", "correct"]


class RunSamples:
    """The samples files of an experiment's runs and base students (see the module docstring)."""

    def __init__(
        self,
        samples: Sequence[str],
        sample_keys: Sequence[Sequence],
        base_samples: Sequence[str],
        base_keys: Sequence[str],
        base_scales: Mapping[str, str],
        benchmarks: Sequence[str],
    ):
        self.paths: dict[tuple[str, str], dict[tuple[int, int], str]] = {}
        for path, (method, scale, seed, step) in zip(samples, sample_keys, strict=True):
            self.paths.setdefault((method, scale), {})[(int(seed), int(step))] = path
        self.base_files = dict(zip(base_keys, base_samples, strict=True))
        self.base_scales = dict(base_scales)
        self.benchmarks = list(benchmarks)
        # Each run's files read once, for its cells, its lift and its sample changes.
        self.per_problem = functools.cache(self._per_problem)

    def _per_problem(self, method: str, scale: str) -> pd.DataFrame:
        return pp.checkpoint_problem_accuracy({
            key: read_parquet(path, columns=GRADE_COLUMNS)
            for key, path in self.paths[(method, scale)].items()
        })  # fmt: skip

    def base_student(self, scale: str) -> pd.DataFrame:
        """The per-problem frame of the base student that ``scale`` trains from."""
        samples = read_parquet(self.base_files[self.base_scales[scale]], columns=GRADE_COLUMNS)
        return pp.per_problem_accuracy(samples[samples["benchmark"].isin(self.benchmarks)])

    def sample_changes(self) -> pd.DataFrame:
        """Each run's samples at its selected checkpoints against the base student's (the same
        seeds), with the other runs whose samples are identical on every problem."""
        selected = {}
        for method, scale in self.paths:
            chosen = pp.select_checkpoints(self.per_problem(method, scale), self.benchmarks)
            for seed, step in zip(chosen["seed"], chosen["selected_step"], strict=True):
                path = self.paths[(method, scale)][(int(seed), int(step))]
                selected[(method, scale, int(seed))] = read_parquet(path, columns=TEXT_COLUMNS)
        changes = sc.sample_changes(
            selected,
            {scale: read_parquet(self.base_files[base], columns=TEXT_COLUMNS)
             for scale, base in self.base_scales.items()},
        )  # fmt: skip
        identical = sc.identical_runs(selected)
        changes["identical_to"] = [
            ";".join(sorted({b if a == row.method else a for c, s, a, b in identical
                             if c == row.scale and s == row.seed and row.method in (a, b)}))
            for row in changes.itertuples()
        ]  # fmt: skip
        return changes
