"""Consume-queue files (docs/formats.md §4.4, §5.1, §5.2), read from disk.

``consumequeue/<topic>/<queueId>/<20-digit byte offset>``, 20-byte big-endian units of
(commit-log offset int64, size int32, tagsCode int64), tagsCode = Java String.hashCode of
TAGS sign-extended, 0 without tags. conftest sets mapped_file_size_consume_queue = 64 units.
"""

from __future__ import annotations

import struct

from ledgermq.store.results import GetStatus
from tests.store.rw_helpers import (
    CQ_SEG_UNITS,
    StoreFactory,
    cq_dir,
    java_hash,
    parse_record,
    put,
    read_cq_units,
)

CQ_SEG_BYTES = 20 * CQ_SEG_UNITS


def test_reference_java_hashes() -> None:
    """Known Java String.hashCode values, so the expectations below are anchored."""
    assert java_hash("TagA") == 2598919  # docs/formats.md §4.4
    assert java_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_hash("\U0001f600") == 31 * 0xD83D + 0xDE00  # two UTF-16 code units
    assert java_hash("") == 0


def test_units_files_and_tags_codes(store_factory: StoreFactory) -> None:
    store = store_factory()
    tags = ["TagA", None, "polygenelubricants", "\U0001f600", "Ünïcode"]
    puts = []
    for i in range(100):
        tag = tags[i % len(tags)]
        props = {"TAGS": tag} if tag else {}
        puts.append((put(store, "CQTopic", f"body{i}".encode(), queue_id=1, **props).append, tag))
    put(store, "CQTopic", b"elsewhere", queue_id=2, TAGS="TagA")
    assert store.wait_dispatched()

    qdir = cq_dir(store, "CQTopic", 1)
    assert sorted(p.name for p in qdir.iterdir()) == [f"{0:020d}", f"{CQ_SEG_BYTES:020d}"]
    assert all(p.stat().st_size == CQ_SEG_BYTES for p in qdir.iterdir())
    raw = b"".join(p.read_bytes() for p in sorted(qdir.iterdir()))
    for k, (a, tag) in enumerate(puts):
        phys, size, tags_code = struct.unpack_from(">qiq", raw, 20 * k)
        assert (phys, size) == (a.wrote_offset, a.wrote_bytes)
        assert a.queue_offset == k
        assert tags_code == (java_hash(tag) if tag else 0)
    # Negative hashes are sign-extended into the 8-byte field.
    assert raw[20 * 2 + 12 : 20 * 2 + 20] == bytes.fromhex("FFFFFFFF80000000")
    assert raw[20 * 100 :] == bytes(len(raw) - 20 * 100), "nothing after the last unit"
    assert len(read_cq_units(store, "CQTopic", 2)) == 1
    assert sorted(p.name for p in cq_dir(store, "CQTopic", 0).parent.iterdir()) == ["1", "2"]


def test_queue_segment_rolls_over_exactly_when_full(store_factory: StoreFactory) -> None:
    store = store_factory()
    for _ in range(CQ_SEG_UNITS):
        put(store, "Full")
    assert store.wait_dispatched()
    assert [p.name for p in cq_dir(store, "Full", 0).iterdir()] == [f"{0:020d}"]
    assert store.max_offset_in_queue("Full", 0) == CQ_SEG_UNITS
    put(store, "Full")
    assert store.wait_dispatched()
    assert sorted(p.name for p in cq_dir(store, "Full", 0).iterdir()) == [f"{0:020d}", f"{CQ_SEG_BYTES:020d}"]
    assert store.max_offset_in_queue("Full", 0) == CQ_SEG_UNITS + 1
    assert store.min_offset_in_queue("Full", 0) == 0


def test_max_and_min_offsets_per_queue(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert (store.max_offset_in_queue("Q", 0), store.min_offset_in_queue("Q", 0)) == (0, 0)
    offsets = []
    for i in range(150):
        offsets.append(put(store, "Q", queue_id=i % 3).append.wrote_offset)
    assert store.wait_dispatched()
    for q in range(3):
        assert store.max_offset_in_queue("Q", q) == 50
        assert store.min_offset_in_queue("Q", q) == 0
        for k in (0, 17, 49):
            assert store.commitlog_offset_in_queue("Q", q, k) == offsets[3 * k + q]
    assert store.max_offset_in_queue("Q", 3) == 0
    assert store.max_offset_in_queue("Other", 0) == 0


def test_get_stops_at_the_end_of_a_queue_segment(store_factory: StoreFactory) -> None:
    """RocketMQ reads one CQ mapped file per getMessage: a pull never crosses a CQ segment."""
    store = store_factory()
    for i in range(100):
        put(store, "Seg", f"m{i}".encode())
    assert store.wait_dispatched()
    got = store.get_message("Seg", 0, CQ_SEG_UNITS - 4, 32)
    assert got.status is GetStatus.FOUND
    assert [parse_record(m).queue_offset for m in got.messages] == list(range(CQ_SEG_UNITS - 4, CQ_SEG_UNITS))
    assert got.next_begin_offset == CQ_SEG_UNITS
    nxt = store.get_message("Seg", 0, got.next_begin_offset, 32)
    assert nxt.status is GetStatus.FOUND
    assert [parse_record(m).queue_offset for m in nxt.messages] == list(range(CQ_SEG_UNITS, CQ_SEG_UNITS + 32))
