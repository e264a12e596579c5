"""LatencyFaultTolerance / FaultStrategy driven by a ManualClock (MQFaultStrategy 4.9.7)."""

from __future__ import annotations

import pytest

from ledgermq.client.producer.fault import (
    LATENCY_MAX_MS,
    NOT_AVAILABLE_DURATION_MS,
    FaultStrategy,
    LatencyFaultTolerance,
)
from ledgermq.clock import ManualClock


def test_the_4_9_7_tables() -> None:
    assert LATENCY_MAX_MS == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_DURATION_MS == (0, 0, 30000, 60000, 120000, 180000, 600000)


@pytest.mark.parametrize(
    ("latency", "duration"),
    [(0, 0), (49, 0), (50, 0), (549, 0), (550, 30000), (999, 30000), (1000, 60000), (2000, 120000),
     (2999, 120000), (3000, 180000), (14999, 180000), (15000, 600000), (10**9, 600000)],
)  # fmt: skip
def test_latency_to_duration(latency: int, duration: int) -> None:
    assert FaultStrategy(True).compute_not_available_duration(latency) == duration


def test_window_opens_and_closes_with_the_clock() -> None:
    clock = ManualClock()
    fs = FaultStrategy(True, clock=clock)
    fs.update_fault_item("a", 600, isolation=False)  # 30 s out
    assert not fs.is_available("a") and fs.is_available("b")
    clock.advance(29.9)
    assert not fs.is_available("a")
    clock.advance(0.1)
    assert fs.is_available("a")


def test_isolation_counts_as_30s_latency_and_success_clears_it() -> None:
    clock = ManualClock()
    fs = FaultStrategy(True, clock=clock)
    fs.update_fault_item("a", 5, isolation=True)
    clock.advance(599)
    assert not fs.is_available("a")
    clock.advance(1)
    assert fs.is_available("a")
    fs.update_fault_item("a", 5, isolation=True)
    fs.update_fault_item("a", 10, isolation=False)  # a fast success: available at once
    assert fs.is_available("a")


def test_disabled_records_nothing() -> None:
    fs = FaultStrategy(False, clock=ManualClock())
    fs.update_fault_item("a", 20000, isolation=True)
    assert fs.is_available("a") and fs.tolerance.items == {}


def test_pick_one_at_least_prefers_available_then_low_latency() -> None:
    clock = ManualClock()
    lft = LatencyFaultTolerance(clock)
    assert lft.pick_one_at_least() is None
    lft.update_fault_item("slow", 3000, 180_000)
    assert lft.pick_one_at_least() == "slow"  # the only one
    lft.update_fault_item("fast", 600, 30_000)
    lft.update_fault_item("worst", 20000, 600_000)
    lft.update_fault_item("ok", 10, 0)
    # sorted: ok (available), fast, slow, worst; half = 2 -> round-robin over ok and fast
    picks = {lft.pick_one_at_least() for _ in range(4)}
    assert picks == {"ok", "fast"}
    lft.remove("ok")
    assert "ok" not in lft.items


def test_mismatched_tables_refused() -> None:
    with pytest.raises(ValueError):
        FaultStrategy(True, latency_max_ms=(1, 2), not_available_duration_ms=(0,))
