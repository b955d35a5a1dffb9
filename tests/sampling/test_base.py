"""Tests for dashrepro.sampling.base: the per-request seeds every backend samples with."""

from dashrepro.sampling import request_seed


def test_request_seed_is_deterministic_distinct_and_31_bit():
    seeds = [request_seed(7, i) for i in range(1000)]
    assert seeds == [request_seed(7, i) for i in range(1000)]
    assert len(set(seeds)) == 1000
    assert all(0 <= s < 2**31 for s in seeds)
    # Neighbouring base seeds do not share request seeds (no base + index collisions).
    assert set(seeds).isdisjoint(request_seed(8, i) for i in range(1000))
    assert request_seed(0, 1) != request_seed(1, 0)
