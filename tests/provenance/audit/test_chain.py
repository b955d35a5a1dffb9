"""Tests for ``dashrepro.provenance.audit.chain``: it follows a cell to its seeds' checkpoints
and names what it cannot follow."""

from __future__ import annotations

import json

import pytest

from dashrepro.provenance.audit.chain import AuditError, cell_chain, render_chain

from .audit_helpers import RESULTS


def test_the_chain_follows_each_seed_to_its_checkpoints(tree):
    chain = cell_chain(tree, RESULTS, "t", "dash", "s", "average")
    assert chain.value == 75.0 and chain.declared_seeds == [0] and len(chain.seeds) == 1
    seed = chain.seeds[0]
    # The step of each checkpoint comes from the selection job's params, beside its inputs.
    assert seed.selected_step == 4 and sorted(seed.samples) == [2, 4]
    assert seed.samples[4].endswith("step4/samples.parquet")
    text = render_chain(tree, chain)
    assert "seed 0: results/x/selection/dash/s/seed0.json" in text
    assert "every candidate's mean Avg@k: 2: 25.00, 4: 75.00 *" in text
    assert "training run: no provenance record" in text  # what is missing is said, not skipped
    copied = cell_chain(tree, RESULTS, "t", "base", "s", "average")
    assert copied.copied_from.startswith("Zhao et al.: copied") and not copied.seeds


def test_the_chain_names_what_it_cannot_follow(tree):
    with pytest.raises(AuditError, match=r"no table 'u' .*\['t'\]"):
        cell_chain(tree, RESULTS, "u", "dash", "s", "average")
    with pytest.raises(AuditError, match="no cell"):
        cell_chain(tree, RESULTS, "t", "opsd", "s", "average")
    record = tree / RESULTS / "tables/t.csv.provenance.json"
    data = json.loads(record.read_text())
    del data["params"]["context"]["input_keys"]
    record.write_text(json.dumps(data))
    with pytest.raises(AuditError, match="older version: rerun the table"):
        cell_chain(tree, RESULTS, "t", "dash", "s", "average")
