"""``get_message`` statuses and limits, as RocketMQ 4.9.7 ``DefaultMessageStore.getMessage``.

Fact sheet §3.2 table: unknown queue -> NO_MATCHED_LOGIC_QUEUE (next 0); offset < min ->
OFFSET_TOO_SMALL (next min); offset == max -> OFFSET_OVERFLOW_ONE (next offset);
offset > max -> OFFSET_OVERFLOW_BADLY (next max); found -> next = offset + units scanned;
nothing matched the filter -> NO_MATCHED_MESSAGE, next advanced past the scanned units.
Batch limits: max_msgs, maxTransferCount/BytesOnMessageInMemory, at least one message.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ledgermq.clock import ManualClock
from ledgermq.store.message_filter import TagFilter
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import AppendResult, GetStatus
from tests.store.rw_helpers import (
    CQ_SEG_UNITS,
    StoreFactory,
    parse_record,
    put,
    record_len,
    wait_until,
)


def _tag_a(_i: int) -> str | None:
    return "TagA"


def _fill(
    store: MessageStore,
    n: int,
    topic: str = "G",
    queue_id: int = 0,
    tag_of: Callable[[int], str | None] = _tag_a,
    size: int = 16,
) -> list[AppendResult]:
    results = []
    for i in range(n):
        body = f"{i:0{size}d}".encode()
        tag = tag_of(i)
        a = put(store, topic, body, queue_id, **({"TAGS": tag} if tag else {})).append
        assert a is not None
        results.append(a)
    assert store.wait_dispatched()
    return results


def _qoffsets(messages: list[bytes]) -> list[int]:
    return [parse_record(m).queue_offset for m in messages]


def test_unknown_topic_or_queue(store_factory: StoreFactory) -> None:
    store = store_factory()
    _fill(store, 3)
    for topic, qid, offset in [("Nope", 0, 0), ("Nope", 0, 7), ("G", 1, 5)]:
        got = store.get_message(topic, qid, offset, 32)
        assert got.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert (got.next_begin_offset, got.min_offset, got.max_offset) == (0, 0, 0)
        assert got.messages == []


def test_offset_equal_to_max_is_overflow_one(store_factory: StoreFactory) -> None:
    store = store_factory()
    _fill(store, 5)
    got = store.get_message("G", 0, 5, 32)
    assert got.status is GetStatus.OFFSET_OVERFLOW_ONE
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (5, 0, 5)
    assert got.messages == []


@pytest.mark.parametrize("offset", [6, 1000])
def test_offset_beyond_max_is_overflow_badly_and_points_at_max(store_factory: StoreFactory, offset: int) -> None:
    """4.9.7: ``nextBeginOffset = nextOffsetCorrection(offset, maxOffset)``, whatever minOffset is.

    (Up to 4.9.3 RocketMQ answered minOffset when minOffset was 0; 4.9.4+ and docs/formats.md
    table say maxOffset.)
    """
    store = store_factory()
    _fill(store, 5)
    got = store.get_message("G", 0, offset, 32)
    assert got.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert (got.min_offset, got.max_offset) == (0, 5)
    assert got.messages == []
    assert got.next_begin_offset == 5


def test_found_returns_exact_records_and_next_offset(store_factory: StoreFactory) -> None:
    store = store_factory()
    results = _fill(store, 10)
    got = store.get_message("G", 0, 3, 5)
    assert got.status is GetStatus.FOUND
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (8, 0, 10)
    assert got.messages == [store.look_message_by_offset(a.wrote_offset) for a in results[3:8]]
    assert got.message_count == 5
    assert got.buffer_total_size == sum(a.wrote_bytes for a in results[3:8])
    assert got.body() == b"".join(got.messages)
    assert not got.suggest_pulling_from_slave
    tail = store.get_message("G", 0, 8, 32)
    assert tail.status is GetStatus.FOUND
    assert _qoffsets(tail.messages) == [8, 9]
    assert tail.next_begin_offset == 10


def test_max_msgs_of_one(store_factory: StoreFactory) -> None:
    store = store_factory()
    _fill(store, 4)
    got = store.get_message("G", 0, 0, 1)
    assert (got.status, _qoffsets(got.messages), got.next_begin_offset) == (GetStatus.FOUND, [0], 1)


def test_filter_excluding_everything_advances_past_scanned_units(store_factory: StoreFactory) -> None:
    store = store_factory()
    _fill(store, 100)
    no_b = TagFilter(["TagB"])
    first = store.get_message("G", 0, 0, 32, no_b)
    assert first.status is GetStatus.NO_MATCHED_MESSAGE
    assert first.messages == []
    assert first.next_begin_offset == CQ_SEG_UNITS  # the whole first CQ segment was scanned
    second = store.get_message("G", 0, first.next_begin_offset, 32, no_b)
    assert (second.status, second.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 100)
    third = store.get_message("G", 0, second.next_begin_offset, 32, no_b)
    assert third.status is GetStatus.OFFSET_OVERFLOW_ONE


def test_untagged_messages_do_not_match_a_tag_filter(store_factory: StoreFactory) -> None:
    store = store_factory()
    _fill(store, 3, tag_of=lambda i: None)
    got = store.get_message("G", 0, 0, 32, TagFilter.parse("TagA"))
    assert (got.status, got.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 3)
    assert store.get_message("G", 0, 0, 32, TagFilter.parse("*")).message_count == 3


def test_filter_scan_is_bounded_by_16000_bytes_of_queue(store_factory: StoreFactory) -> None:
    """maxFilterMessageCount = max(16000, maxMsgNums * 20) bytes of consume queue per call."""
    store = store_factory(mapped_file_size_consume_queue=20 * 2000, mapped_file_size_commitlog=1 << 20)
    _fill(store, 1200, size=1)
    no_b = TagFilter(["TagB"])
    got = store.get_message("G", 0, 0, 32, no_b)
    assert (got.status, got.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 800)
    wide = store.get_message("G", 0, 0, 1000, no_b)
    assert (wide.status, wide.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 1000)
    rest = store.get_message("G", 0, 1000, 32, no_b)
    assert (rest.status, rest.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 1200)


def test_partial_match_returns_matches_and_resumes_at_the_first_unscanned(
    store_factory: StoreFactory,
) -> None:
    store = store_factory()
    _fill(store, 20, tag_of=lambda i: "TagA" if i % 2 == 0 else "TagB")
    only_a = TagFilter.parse("TagA")
    got = store.get_message("G", 0, 0, 3, only_a)
    assert got.status is GetStatus.FOUND
    assert _qoffsets(got.messages) == [0, 2, 4]
    # The batch is full when unit 5 comes up; it is not consumed.
    assert got.next_begin_offset == 5
    either = store.get_message("G", 0, 5, 32, TagFilter.parse("TagA || TagB"))
    assert _qoffsets(either.messages) == list(range(5, 20))
    b_from_1 = store.get_message("G", 0, 1, 2, TagFilter.parse(" TagB || "))
    assert (_qoffsets(b_from_1.messages), b_from_1.next_begin_offset) == ([1, 3], 4)


def test_in_memory_count_limit(store_factory: StoreFactory) -> None:
    store = store_factory(max_transfer_count_in_memory=4)
    _fill(store, 10)
    got = store.get_message("G", 0, 1, 32)
    assert (got.status, _qoffsets(got.messages), got.next_begin_offset) == (GetStatus.FOUND, [1, 2, 3, 4], 5)
    assert store.get_message("G", 0, 0, 2).message_count == 2  # max_msgs below the limit still wins


def test_in_memory_byte_limit(store_factory: StoreFactory) -> None:
    size = record_len(1000, "G", "TAGS\x01TagA")
    store = store_factory(max_transfer_bytes_in_memory=2 * size + size // 2)
    _fill(store, 6, size=1000)
    got = store.get_message("G", 0, 0, 32)
    assert got.status is GetStatus.FOUND
    assert (got.message_count, got.buffer_total_size, got.next_begin_offset) == (2, 2 * size, 2)
    exact = store_factory(root=store.root.parent / "exact", max_transfer_bytes_in_memory=3 * size)
    _fill(exact, 6, size=1000)
    assert exact.get_message("G", 0, 0, 32).message_count == 3  # total + size == limit still fits


def test_at_least_one_message_even_above_the_limits(store_factory: StoreFactory) -> None:
    store = store_factory(max_transfer_bytes_in_memory=10, max_transfer_count_in_memory=1)
    _fill(store, 3, size=500)
    got = store.get_message("G", 0, 0, 32)
    assert (got.status, _qoffsets(got.messages), got.next_begin_offset) == (GetStatus.FOUND, [0], 1)


def test_offset_too_small_after_old_segments_are_deleted(store_factory: StoreFactory) -> None:
    clock = ManualClock(wall_ms=time.time_ns() // 1_000_000)
    store = store_factory(clock=clock, file_reserved_time_hours=1.0)
    _fill(store, 150, size=1000)  # about 2.3 commit-log segments
    clock.advance(2 * 3600)
    store.trigger_delete_files()
    # Both old segments gone, and the round that took the last of them done (its consume-queue
    # correction included): a segment a reader (the scrub) held is left for a later round,
    # and reading the minimum between two rounds compared it with the next round's.
    wait_until(lambda: len(store.commitlog.queue.files) == 1, what="retention to drop old segments")
    cleaner = store.core.cleaner
    assert cleaner is not None
    with cleaner.round_lock:
        pass
    low = store.min_offset_in_queue("G", 0)
    assert low > 0
    assert store.min_phy_offset > 0
    got = store.get_message("G", 0, 0, 32)
    assert got.status is GetStatus.OFFSET_TOO_SMALL
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (low, low, 150)
    assert got.messages == []
    ok = store.get_message("G", 0, low, 4)
    assert (ok.status, _qoffsets(ok.messages)) == (GetStatus.FOUND, list(range(low, low + 4)))
