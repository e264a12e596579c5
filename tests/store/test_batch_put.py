"""Batch puts (``put_messages``; docs/formats.md §4.6, RocketMQ ``CommitLog.asyncPutMessages``).

A batch is written contiguously with consecutive queue offsets, its msg_id joins the offset
ids with commas, and it always lands inside one segment. Empty, delayed and transactional
batches are refused with MESSAGE_ILLEGAL and store nothing.
"""

from __future__ import annotations

import struct

import pytest

from ledgermq.store.message_input import BatchInput
from ledgermq.store.results import GetStatus, PutStatus
from tests.store.rw_helpers import (
    BLANK_MAGIC,
    SEG,
    StoreFactory,
    body_crc,
    encode_props,
    expected_msg_id,
    parse_record,
    put,
    read_commitlog_file_bytes,
    read_cq_units,
    record_len,
)


def _entries(n: int, size: int = 100, tag: str = "B") -> list[tuple[int, bytes, dict[str, str]]]:
    return [(i, bytes([65 + i % 26]) * size, {"TAGS": tag, "UNIQ_KEY": f"U{i:031d}"}) for i in range(n)]


def test_batch_is_contiguous_with_consecutive_queue_offsets(store_factory: StoreFactory) -> None:
    store = store_factory()
    for _ in range(3):
        put(store, "Batch", b"single", queue_id=1)
    put(store, "Batch", b"other queue", queue_id=2)
    entries = _entries(5)
    res = store.put_messages(BatchInput(topic="Batch", entries=entries, queue_id=1, born_timestamp=123))
    assert res.ok and res.append is not None
    a = res.append
    assert a.msg_num == 5
    assert a.queue_offset == 3  # the first message's offset
    sizes = [record_len(len(body), "Batch", encode_props(props)) for _, body, props in entries]
    assert a.wrote_bytes == sum(sizes)
    starts = [a.wrote_offset + sum(sizes[:i]) for i in range(5)]
    assert a.msg_ids == [expected_msg_id(s) for s in starts]
    assert a.msg_id == ",".join(expected_msg_id(s) for s in starts)
    for i, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        rec = parse_record(read_commitlog_file_bytes(store, start, size))
        assert (rec.phys, rec.total, rec.queue_offset, rec.queue_id) == (start, size, 3 + i, 1)
        assert (rec.flag, rec.body, rec.props) == entries[i]
        assert rec.crc == body_crc(entries[i][1])
        assert rec.store_ts == a.store_timestamp and rec.born_ts == 123
    # The next single put continues the queue after the batch.
    assert put(store, "Batch", b"after", queue_id=1).append.queue_offset == 8
    assert store.wait_dispatched()
    units = read_cq_units(store, "Batch", 1)
    assert [u[0] for u in units[3:8]] == starts
    assert [u[1] for u in units[3:8]] == sizes
    got = store.get_message("Batch", 1, 3, 5)
    assert got.status is GetStatus.FOUND
    assert [parse_record(m).body for m in got.messages] == [e[1] for e in entries]
    assert store.max_offset_in_queue("Batch", 2) == 1


def test_batch_that_does_not_fit_goes_whole_to_the_next_segment(store_factory: StoreFactory) -> None:
    store = store_factory()
    topic = "Roll"
    filler = put(store, topic, b"f" * (SEG - 3000 - record_len(0, topic))).append
    assert SEG - filler.wrote_bytes == 3000
    entries = _entries(5, size=1000)  # about 5.6 KB: more than the 3000 bytes left
    res = store.put_messages(BatchInput(topic=topic, entries=entries))
    assert res.ok and res.append is not None
    a = res.append
    assert a.wrote_offset == SEG
    assert a.wrote_offset // SEG == (a.next_offset - 1) // SEG
    assert a.queue_offset == 1
    blank = struct.unpack(">iI", read_commitlog_file_bytes(store, filler.wrote_bytes, 8))
    assert blank == (3000, BLANK_MAGIC)
    # A batch that would have fitted in what was left stays in the old segment, all of it.
    small = store.put_messages(BatchInput(topic=topic, entries=_entries(3, size=10))).append
    assert small is not None and small.wrote_offset == a.next_offset
    assert store.wait_dispatched()
    assert [u[0] for u in read_cq_units(store, topic, 0)][1:6] == [
        SEG + sum(record_len(1000, topic, encode_props(p)) for _, _, p in entries[:i]) for i in range(5)
    ]


def test_batch_ids_are_disjoint_from_neighbours(store_factory: StoreFactory) -> None:
    store = store_factory()
    before = put(store, "Ids").append
    batch = store.put_messages(BatchInput(topic="Ids", entries=_entries(4))).append
    after = put(store, "Ids").append
    assert batch is not None
    assert batch.wrote_offset == before.next_offset
    assert after.wrote_offset == batch.next_offset
    for mid in batch.msg_id.split(","):
        assert store.look_message_by_id(mid) is not None


def _refused_batch_stores_nothing(store_factory: StoreFactory, batch: BatchInput) -> None:
    store = store_factory()
    put(store, batch.topic, queue_id=batch.queue_id)
    max_before = store.max_phy_offset
    res = store.put_messages(batch)
    assert res.status is PutStatus.MESSAGE_ILLEGAL
    assert res.append is None
    assert store.max_phy_offset == max_before
    assert store.wait_dispatched()
    assert store.max_offset_in_queue(batch.topic, batch.queue_id) == 1
    # The store still works afterwards.
    assert put(store, batch.topic, queue_id=batch.queue_id).append.queue_offset == 1


def test_empty_batch_is_refused(store_factory: StoreFactory) -> None:
    _refused_batch_stores_nothing(store_factory, BatchInput(topic="B", entries=[]))


@pytest.mark.parametrize("position", [0, 2])
def test_batch_with_a_delayed_message_is_refused(store_factory: StoreFactory, position: int) -> None:
    entries = _entries(3)
    entries[position][2]["DELAY"] = "2"
    _refused_batch_stores_nothing(store_factory, BatchInput(topic="B", entries=entries))


@pytest.mark.parametrize("sysflag", [0x4, 0x8, 0xC], ids=["prepared", "commit", "rollback"])
def test_transactional_batch_is_refused(store_factory: StoreFactory, sysflag: int) -> None:
    """RocketMQ refuses any batch whose transaction type is not NOT_TYPE (asyncPutMessages)."""
    _refused_batch_stores_nothing(store_factory, BatchInput(topic="B", entries=_entries(2), sysflag=sysflag))
