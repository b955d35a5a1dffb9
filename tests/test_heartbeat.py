"""A long blocking call logs a line every few minutes (here: every 50 ms) and stops with it."""

from __future__ import annotations

import time

from dashrepro.heartbeat import heartbeat


def test_a_heartbeat_logs_while_the_block_runs_and_stops_after():
    lines = []
    with heartbeat(lines.append, "shard 1/3 (aime2025, 96 requests)", every_s=0.05):
        time.sleep(0.32)
    during = len(lines)
    time.sleep(0.15)
    assert 4 <= during <= 7 and len(lines) == during  # nothing after the block
    assert lines[0].startswith("shard 1/3 (aime2025, 96 requests): still running after 0 s")
    assert all("still running after" in line for line in lines)


def test_a_block_faster_than_the_interval_logs_nothing():
    lines = []
    with heartbeat(lines.append, "quick", every_s=10):
        pass
    assert lines == []
