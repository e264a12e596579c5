"""``get_message`` reads runs of adjacent records with one commit-log read each.

The batch is chosen from the consume-queue units (tag codes, max_msgs, the in-memory and
on-disk caps), then read run by run; a run ends where the next chosen record does not
follow the previous one in the commit log (a filtered-out record between them, a segment
end). A failed read falls back to reading message by message, which decides statuses as
before. Every case is checked against that message-by-message path (``_get_each``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from ledgermq.store.message_filter import MessageFilter, TagFilter
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import AppendResult, GetResult, GetStatus
from tests.store.rw_helpers import SEG, StoreFactory, parse_record, put, record_len


def _fill(store: MessageStore, n: int, size: int = 16, tag_of: Any = None, queue_id: int = 0) -> list[AppendResult]:
    out = []
    for i in range(n):
        tag = tag_of(i) if tag_of else "TagA"
        a = put(store, "R", f"{i:0{size}d}".encode(), queue_id, TAGS=tag).append
        assert a is not None
        out.append(a)
    assert store.wait_dispatched()
    return out


def _each(store: MessageStore, offset: int, max_msgs: int, flt: MessageFilter | None = None) -> GetResult:
    """The same call, message by message."""
    cq = store.queues.get("R", 0)
    assert cq is not None
    units = cq.read_units(offset, max(16000, max_msgs * 20) // 20)
    return store.reads._get_each(units, offset, max_msgs, flt, cq.min_offset, cq.max_offset)


def _same(a: GetResult, b: GetResult) -> None:
    assert (a.status, a.next_begin_offset, a.min_offset, a.max_offset) == (
        b.status,
        b.next_begin_offset,
        b.min_offset,
        b.max_offset,
    )
    assert (a.message_count, a.buffer_total_size, a.suggest_pulling_from_slave) == (
        b.message_count,
        b.buffer_total_size,
        b.suggest_pulling_from_slave,
    )
    assert a.messages == b.messages
    assert a.body() == b.body()


def _qoffsets(got: GetResult) -> list[int]:
    return [parse_record(m).queue_offset for m in got.messages]


def test_adjacent_records_come_in_one_read(store_factory: StoreFactory) -> None:
    store = store_factory()
    written = _fill(store, 20)
    got = store.get_message("R", 0, 2, 10)
    assert (got.status, got.next_begin_offset, got.message_count) == (GetStatus.FOUND, 12, 10)
    assert len(got.chunks) == 1
    assert got.messages == [store.look_message_by_offset(a.wrote_offset) for a in written[2:12]]
    assert got.buffer_total_size == sum(a.wrote_bytes for a in written[2:12]) == len(got.body())
    _same(got, _each(store, 2, 10))


def test_a_run_ends_at_the_segment_end(store_factory: StoreFactory) -> None:
    size = 1000
    rec = record_len(size, "R", "TAGS\x01TagA")
    per_segment = SEG // rec  # records a 64 KiB segment holds before its blank filler
    store = store_factory()
    written = _fill(store, per_segment + 10, size=size)
    assert written[per_segment].wrote_offset == SEG  # the next segment starts with this record
    start = per_segment - 5
    got = store.get_message("R", 0, start, 10)
    assert got.status is GetStatus.FOUND
    assert _qoffsets(got) == list(range(start, start + 10))
    assert [len(c) for c in got.chunks] == [5 * rec, 5 * rec]  # one read per segment
    _same(got, _each(store, start, 10))


def test_filtered_out_records_split_runs(store_factory: StoreFactory) -> None:
    store = store_factory()
    tags = ["TagA", "TagA", "TagB", "TagA", "TagA", "TagA", "TagB", "TagB", "TagA", "TagA"]
    _fill(store, len(tags), tag_of=lambda i: tags[i])
    only_a = TagFilter.parse("TagA")
    got = store.get_message("R", 0, 0, 32, only_a)
    assert got.status is GetStatus.FOUND
    assert _qoffsets(got) == [0, 1, 3, 4, 5, 8, 9]
    assert [c.count(b"TagA") for c in got.chunks] == [2, 3, 2]
    assert got.next_begin_offset == 10
    _same(got, _each(store, 0, 32, only_a))
    # the batch fills up inside a run: the unit after the last taken one is not consumed
    capped = store.get_message("R", 0, 1, 3, only_a)
    assert (_qoffsets(capped), capped.next_begin_offset, len(capped.chunks)) == ([1, 3, 4], 5, 2)
    _same(capped, _each(store, 1, 3, only_a))
    none = store.get_message("R", 0, 6, 2, TagFilter.parse("TagC"))
    assert (none.status, none.chunks, none.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, [], 10)
    _same(none, _each(store, 6, 2, TagFilter.parse("TagC")))


def test_count_and_byte_caps_in_memory(store_factory: StoreFactory) -> None:
    rec = record_len(100, "R", "TAGS\x01TagA")
    store = store_factory(max_transfer_count_in_memory=5)
    _fill(store, 12, size=100)
    got = store.get_message("R", 0, 0, 32)
    assert (got.message_count, got.next_begin_offset, len(got.chunks)) == (5, 5, 1)
    _same(got, _each(store, 0, 32))
    by_bytes = store_factory(root=store.root.parent / "bytes", max_transfer_bytes_in_memory=3 * rec + rec // 2)
    _fill(by_bytes, 12, size=100)
    got = by_bytes.get_message("R", 0, 4, 32)
    assert (got.message_count, got.buffer_total_size, got.next_begin_offset) == (3, 3 * rec, 7)
    assert len(got.chunks) == 1
    one = store_factory(root=store.root.parent / "one", max_transfer_bytes_in_memory=10)
    _fill(one, 3, size=100)
    got = one.get_message("R", 0, 0, 32)  # at least one message, whatever the caps
    assert (got.message_count, got.next_begin_offset) == (1, 1)


def test_count_and_byte_caps_on_disk(store_factory: StoreFactory) -> None:
    rec = record_len(100, "R", "TAGS\x01TagA")
    store = store_factory(
        max_transfer_count_on_disk=4,
        max_transfer_bytes_on_disk=2 * rec + 1,
        max_transfer_count_in_memory=100,
        max_transfer_bytes_in_memory=1 << 20,
    )
    _fill(store, 12, size=100)
    in_memory = store.get_message("R", 0, 0, 32)
    assert in_memory.message_count == 12 and not in_memory.suggest_pulling_from_slave
    store.memory_budget = 3 * rec  # all but the newest ~3 records now count as on disk
    got = store.get_message("R", 0, 0, 32)
    assert (got.message_count, got.next_begin_offset) == (2, 2)  # the byte cap on disk
    assert got.suggest_pulling_from_slave
    _same(got, _each(store, 0, 32))
    by_count = store_factory(
        root=store.root.parent / "count", max_transfer_count_on_disk=4, max_transfer_count_in_memory=100
    )
    _fill(by_count, 12, size=100)
    by_count.memory_budget = 0  # everything on disk
    got = by_count.get_message("R", 0, 3, 32)
    assert (got.message_count, got.next_begin_offset, len(got.chunks)) == (4, 7, 1)  # the count cap on disk
    _same(got, _each(by_count, 3, 32))


def test_a_failed_run_read_falls_back_to_single_reads(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory()
    written = _fill(store, 6)
    gone = (written[2].wrote_offset, written[5].wrote_offset)
    real = store.commitlog.read

    def read(offset: int, size: int) -> bytes | None:
        return None if any(offset <= g < offset + size for g in gone) else real(offset, size)

    monkeypatch.setattr(store.commitlog, "read", read)
    got = store.get_message("R", 0, 0, 32)
    assert (got.status, _qoffsets(got), got.next_begin_offset) == (GetStatus.FOUND, [0, 1, 3, 4], 6)
    _same(got, _each(store, 0, 32))
    skipped = store.get_message("R", 0, 2, 1)  # an unreadable message does not count
    assert (skipped.status, _qoffsets(skipped), skipped.next_begin_offset) == (GetStatus.FOUND, [3], 4)
    removing = store.get_message("R", 0, 5, 32)
    assert (removing.status, removing.messages, removing.next_begin_offset) == (GetStatus.MESSAGE_WAS_REMOVING, [], 6)


def test_a_filter_that_reads_records_goes_message_by_message(store_factory: StoreFactory) -> None:
    class OddBodies:
        def matches_tags_code(self, tags_code: int) -> bool:
            return True

        def matches_record(self, record: bytes) -> bool:
            return parse_record(record).queue_offset % 2 == 1

    store = store_factory()
    _fill(store, 8)
    got = store.get_message("R", 0, 0, 3, OddBodies())
    assert (_qoffsets(got), got.next_begin_offset) == ([1, 3, 5], 6)


def test_random_batches_match_message_by_message(store_factory: StoreFactory) -> None:
    rnd = random.Random(7)

    def pick(_i: int) -> str:
        return rnd.choice(["TagA", "TagB", "TagC"])

    store = store_factory(max_transfer_count_in_memory=9, max_transfer_bytes_in_memory=9000)
    _fill(store, 300, size=0, tag_of=pick)
    for _ in range(200):
        if rnd.random() < 0.05:
            _fill(store, rnd.randint(1, 20), size=rnd.choice([0, 50, 700]), tag_of=pick)
        high = store.max_offset_in_queue("R", 0)
        offset = rnd.randint(0, high - 1)
        max_msgs = rnd.choice([1, 2, 5, 32, 2048])
        flt = rnd.choice([None, TagFilter.parse("TagA"), TagFilter.parse("TagB || TagC"), TagFilter.parse("*")])
        if rnd.random() < 0.3:
            store.memory_budget = rnd.randint(0, 200_000)
        _same(store.get_message("R", 0, offset, max_msgs, flt), _each(store, offset, max_msgs, flt))
