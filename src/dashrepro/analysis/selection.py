"""Best-checkpoint selection (paper appendix "Training Budget and Checkpoint Selection").

For one (method, scale, seed) run with candidate checkpoints C = {every, 2*every, ..., steps}:
a_{s,t} = (1/3) sum_b m_{s,t,b} (Eq. supp_checkpoint_score), t* = argmax_t a_{s,t}
(Eq. supp_checkpoint_selection), and *all* reported benchmark scores of the seed come from that
single checkpoint (Eq. supp_selected_benchmark_score). Ties go to the earliest checkpoint (the
paper does not say; the earliest is the cheapest to have trained and the choice is recorded).
This is best-within-budget reporting, not held-out validation: the benchmarks are also the
selection set, as in the paper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def select_best_checkpoint(summaries: Mapping[int, Mapping], benchmarks: Sequence[str]) -> dict:
    """``summaries`` maps checkpoint step -> evaluation summary; returns the selection record."""
    if not summaries:
        raise ValueError("no checkpoint summaries to select from")
    scores = {}
    for step, summary in summaries.items():
        per_bench = summary["benchmarks"]
        missing = [b for b in benchmarks if b not in per_bench]
        if missing:
            raise ValueError(f"checkpoint {step}: no score for benchmarks {missing}")
        scores[int(step)] = sum(per_bench[b]["avg_at_k"] for b in benchmarks) / len(benchmarks)
    best_step = min(scores, key=lambda s: (-scores[s], s))
    chosen = summaries[best_step]["benchmarks"]
    return {
        "selected_step": best_step,
        "selection_score": scores[best_step],
        "scores_by_step": {str(s): scores[s] for s in sorted(scores)},
        "benchmark_scores": {b: chosen[b]["avg_at_k"] for b in benchmarks},
        "tie_break": "earliest step",
    }
