"""Offset and time queries: SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME, store times,
and the commit log's own min/max offsets (docs/formats.md §3.3)."""

from __future__ import annotations

from ledgermq.clock import ManualClock
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import AppendResult
from tests.store.rw_helpers import SEG, StoreFactory, parse_record, put, read_commitlog_file_bytes

T0 = 1_700_000_000_000


def _timed_store(
    store_factory: StoreFactory, n: int = 10, queue_id: int = 0, step_s: float = 1.0
) -> tuple[MessageStore, ManualClock, list[AppendResult]]:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    results = []
    for i in range(n):
        a = put(store, "Time", f"m{i}".encode(), queue_id).append
        assert a is not None
        results.append(a)
        clock.advance(step_s)
    assert store.wait_dispatched()
    return store, clock, results


def test_store_timestamps_come_from_the_clock(store_factory: StoreFactory) -> None:
    store, _clock, results = _timed_store(store_factory)
    for k, a in enumerate(results):
        assert a.store_timestamp == T0 + 1000 * k
        assert parse_record(read_commitlog_file_bytes(store, a.wrote_offset, a.wrote_bytes)).store_ts == T0 + 1000 * k
        assert store.message_store_timestamp("Time", 0, k) == T0 + 1000 * k
    assert store.message_store_timestamp("Time", 0, 10) == -1
    assert store.message_store_timestamp("Time", 1, 0) == -1
    assert store.message_store_timestamp("Nope", 0, 0) == -1


def test_offset_by_exact_and_out_of_range_times(store_factory: StoreFactory) -> None:
    store, _clock, _ = _timed_store(store_factory)
    for k in range(10):
        assert store.offset_in_queue_by_time("Time", 0, T0 + 1000 * k) == k
    assert store.offset_in_queue_by_time("Time", 0, T0 - 60_000) == 0
    assert store.offset_in_queue_by_time("Time", 0, 0) == 0
    assert store.offset_in_queue_by_time("Time", 1, T0) == 0  # no such queue
    assert store.offset_in_queue_by_time("Nope", 0, T0) == 0


def test_offset_by_time_between_and_after_matches_rocketmq(store_factory: StoreFactory) -> None:
    """As RocketMQ 4.9.7 ``ConsumeQueue.getOffsetInQueueByTime``: between two store times the
    nearer message (the older on a tie); after the last message, the last message (max - 1)."""
    store, _clock, _ = _timed_store(store_factory)
    assert store.offset_in_queue_by_time("Time", 0, T0 + 2500) == 2  # tie: the older one
    assert store.offset_in_queue_by_time("Time", 0, T0 + 2001) == 2
    assert store.offset_in_queue_by_time("Time", 0, T0 + 2999) == 3
    assert store.offset_in_queue_by_time("Time", 0, T0 + 9001) == 9
    assert store.offset_in_queue_by_time("Time", 0, T0 + 10**9) == 9


def test_offset_by_time_with_equal_store_times_finds_the_first(store_factory: StoreFactory) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    for _ in range(3):
        put(store, "Same")
    clock.advance(1)
    for _ in range(3):
        put(store, "Same")
    assert store.wait_dispatched()
    assert store.offset_in_queue_by_time("Same", 0, T0 + 1000) == 3
    assert store.offset_in_queue_by_time("Same", 0, T0 + 999) == 3


def test_offset_by_time_per_queue(store_factory: StoreFactory) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    for i in range(12):
        put(store, "Multi", queue_id=i % 2)
        clock.advance(1)
    assert store.wait_dispatched()
    # Queue 0 holds times T0, +2s, +4s ...; queue 1 holds +1s, +3s, ...
    assert store.offset_in_queue_by_time("Multi", 0, T0 + 4000) == 2
    assert store.offset_in_queue_by_time("Multi", 1, T0 + 5000) == 2
    assert store.offset_in_queue_by_time("Multi", 1, T0 + 4000) == 1  # +3s and +5s tie: the older
    assert store.earliest_message_time("Multi", 0) == T0
    assert store.earliest_message_time("Multi", 1) == T0 + 1000


def test_earliest_message_time(store_factory: StoreFactory) -> None:
    store, clock, _ = _timed_store(store_factory, n=3)
    assert store.earliest_message_time("Time", 0) == T0
    assert store.earliest_message_time("Time", 5) == -1
    assert store.earliest_message_time("Nope", 0) == -1
    clock.advance(100)
    put(store, "Time")
    assert store.wait_dispatched()
    assert store.earliest_message_time("Time", 0) == T0


def test_store_times_never_go_back_when_the_wall_clock_does(store_factory: StoreFactory) -> None:
    """Binary search by time relies on store times being non-decreasing in the commit log."""
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    first = put(store, "Back").append
    clock.advance(-5)
    second = put(store, "Back").append
    assert second.store_timestamp == first.store_timestamp == T0
    clock.advance(10)
    assert put(store, "Back").append.store_timestamp == T0 + 5000


def test_commitlog_min_and_max_offsets(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert (store.min_phy_offset, store.max_phy_offset) == (0, 0)
    a = put(store, body=b"x" * 100).append
    assert (store.min_phy_offset, store.max_phy_offset) == (0, a.wrote_bytes)
    big = put(store, body=b"y" * (SEG - a.wrote_bytes - 200)).append  # leaves under 200 bytes
    assert store.max_phy_offset == big.next_offset
    c = put(store, body=b"z" * 300).append  # rolls over
    assert c.wrote_offset == SEG
    assert (store.min_phy_offset, store.max_phy_offset) == (0, SEG + c.wrote_bytes)
    assert store.wait_dispatched()
    assert store.dispatch_behind_bytes == 0
    info = store.runtime_info()
    assert (info["commitLogMinOffset"], info["commitLogMaxOffset"]) == ("0", str(SEG + c.wrote_bytes))
