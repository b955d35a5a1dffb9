"""Tests for dashrepro.analysis.tables.result_provenance: the run-matrix counts."""

from __future__ import annotations

from ..conftest import context_of


def test_result_provenance_counts_the_run_matrix(paper_config):
    from dashrepro.analysis.tables import result_provenance

    spec = paper_config["tables"]["supp_result_provenance"]
    context = context_of(paper_config, "supp_result_provenance")
    cells = result_provenance.build(spec, {}, context)
    rendered = result_provenance.render(cells, spec, context)
    assert "| EOPD | Our rerun | One (s = 0) |" in rendered["md"]
    assert "| OPSD | Our rerun | s in {0,1,2,3} |" in rendered["md"]
    assert "| Base | Zhao et al. | Not applicable |" in rendered["md"]
    assert r"$s\in\{0,1,2,3\}$" in rendered["tex"]
