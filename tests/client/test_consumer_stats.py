"""A push consumer's rates for admin tools (``ConsumerStats``): sums over the last minute,
kept in one-second buckets so that each consumed message adds no object of its own."""

from __future__ import annotations

import pytest

from ledgermq.client.push.state import ConsumerStats
from ledgermq.clock import ManualClock


def test_rates_are_the_last_minutes_sums_and_older_seconds_drop_out() -> None:
    clock = ManualClock(monotonic=100.0)
    stats = ConsumerStats(clock)
    for _ in range(600):
        stats.consumed("T", 1, 0)
    stats.consumed("T", 0, 3)
    stats.pulled("T", 4.0, 32)
    stats.pulled("T", 2.0, 32)
    clock.advance(30.0)
    stats.consumed("T", 60, 0)
    stats.pulled("T", 9.0, 10)
    status = stats.status("T")
    assert status["consumeOKTPS"] == pytest.approx(660 / 60)
    assert status["consumeFailedTPS"] == pytest.approx(3 / 60)
    assert status["consumeFailedMsgs"] == 3
    assert status["pullTPS"] == pytest.approx(74 / 60)
    assert status["pullRT"] == pytest.approx(5.0)  # the mean round trip of the three pulls

    clock.advance(31.0)  # the first second is over a minute old now
    status = stats.status("T")
    assert status["consumeOKTPS"] == pytest.approx(60 / 60)
    assert status["pullRT"] == pytest.approx(9.0)
    assert status["consumeFailedMsgs"] == 3  # a total, not a rate
    assert stats.status("Other")["consumeOKTPS"] == 0.0


def test_a_busy_second_is_one_bucket() -> None:
    clock = ManualClock(monotonic=5.25)
    stats = ConsumerStats(clock)
    for _ in range(10_000):
        stats.consumed("T", 1, 0)
    clock.advance(0.5)
    stats.consumed("T", 1, 0)
    clock.advance(0.5)  # 6.25: the next second
    stats.consumed("T", 1, 0)
    assert [b[1:] for b in stats._buckets["T"]["consumeOKTPS"]] == [[10_001, 10_001], [1, 1]]
    for _ in range(120):  # a quiet topic's buckets go as minutes pass
        clock.advance(1.0)
        stats.consumed("T", 1, 0)
    assert len(stats._buckets["T"]["consumeOKTPS"]) <= 62
