"""Commit-log layout on disk (docs/formats.md §4.1, §4.5, §5.1).

Segments are named by their 20-digit start offset; a record never spans two segments; the
unused end of a full segment starts with TOTALSIZE = bytes left and the BLANK magic; every
AppendResult and offset message id points at exactly the record it describes. All checks
read the segment files directly.
"""

from __future__ import annotations

import random
import struct

import pytest

from ledgermq.store.message_input import MessageInput
from tests.store.rw_helpers import (
    BLANK_MAGIC,
    DEFAULT_STORE_HOST_HEX,
    MESSAGE_MAGIC,
    SEG,
    StoreFactory,
    body_crc,
    commitlog_files,
    expected_msg_id,
    parse_record,
    put,
    read_commitlog_file_bytes,
    record_len,
)


def _walk_segment(data: bytes, start: int) -> tuple[list[int], int | None]:
    """Record offsets in one segment file, and where its BLANK marker is (None if none)."""
    offsets: list[int] = []
    pos = 0
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic == BLANK_MAGIC:
            return offsets, pos
        if total == 0 and magic == 0:
            break
        assert magic == MESSAGE_MAGIC, f"bad magic at {start + pos}"
        offsets.append(start + pos)
        pos += total
    return offsets, None


def test_segments_named_by_start_offset_records_never_span_and_blank_ends(
    store_factory: StoreFactory,
) -> None:
    store = store_factory()
    rng = random.Random(7)
    results = []
    for i in range(260):
        body = bytes([i % 251]) * rng.randrange(200, 1800)
        results.append(put(store, "Layout", body, queue_id=i % 3, TAGS=f"t{i % 4}").append)
    assert results[-1].wrote_offset >= 3 * SEG, "want at least four segments"

    files = commitlog_files(store)
    assert [p.name for p in files] == [f"{k * SEG:020d}" for k in range(len(files))]
    assert all(p.stat().st_size == SEG for p in files)

    for r in results:
        assert r.wrote_offset // SEG == (r.wrote_offset + r.wrote_bytes - 1) // SEG, "record spans segments"

    found: list[int] = []
    sizes = {r.wrote_offset: r.wrote_bytes for r in results}
    for k, path in enumerate(files):
        data = path.read_bytes()
        offsets, blank_at = _walk_segment(data, k * SEG)
        found.extend(offsets)
        for off in offsets:
            # Each stored record left room for at least a blank header behind it.
            assert sizes[off] + 8 <= SEG - (off - k * SEG)
        if k < len(files) - 1:
            assert blank_at is not None, f"full segment {path.name} has no BLANK marker"
            left = SEG - blank_at
            total, magic = struct.unpack_from(">iI", data, blank_at)
            assert (total, magic) == (left, BLANK_MAGIC)
            # The blank was needed: the next segment's first record would not have fitted.
            first_next = (k + 1) * SEG
            assert sizes[first_next] + 8 > left
        else:
            assert blank_at is None
    assert found == [r.wrote_offset for r in results]
    assert store.max_phy_offset == results[-1].wrote_offset + results[-1].wrote_bytes


@pytest.mark.parametrize("short_by", [0, 1])
def test_record_fits_only_with_eight_bytes_to_spare(store_factory: StoreFactory, short_by: int) -> None:
    """msgLen + 8 <= bytes left: the record fits; one byte less and it goes to the next segment."""
    store = store_factory()
    topic = "Edge"
    second_len = record_len(100, topic)
    first_len = SEG - (second_len + 8) + short_by
    first = put(store, topic, b"a" * (first_len - record_len(0, topic))).append
    assert (first.wrote_offset, first.wrote_bytes) == (0, first_len)
    second = put(store, topic, b"b" * 100).append
    third = put(store, topic, b"c" * 100).append
    if short_by == 0:
        assert second.wrote_offset == first_len
        blank_at = first_len + second_len
        assert SEG - blank_at == 8
        assert third.wrote_offset == SEG
    else:
        blank_at = first_len
        assert second.wrote_offset == SEG
        assert third.wrote_offset == SEG + second_len
    assert struct.unpack(">iI", read_commitlog_file_bytes(store, blank_at, 8)) == (
        SEG - blank_at,
        BLANK_MAGIC,
    )


def test_append_results_and_msg_ids_point_at_the_records(store_factory: StoreFactory) -> None:
    store = store_factory()
    results = []
    for i in range(120):
        body = f"message-{i}".encode() * (1 + i % 90)
        res = put(store, f"Top{i % 2}", body, queue_id=i % 4, KEYS=f"k{i}")
        results.append((res.append, body, f"Top{i % 2}", i % 4))
    per_queue: dict[tuple[str, int], int] = {}
    for i, (a, body, topic, qid) in enumerate(results):
        raw = read_commitlog_file_bytes(store, a.wrote_offset, a.wrote_bytes)
        rec = parse_record(raw)
        assert rec.magic == MESSAGE_MAGIC
        assert rec.total == a.wrote_bytes == record_len(len(body), topic, f"KEYS\x01k{i}")
        assert rec.phys == a.wrote_offset
        assert rec.store_ts == a.store_timestamp
        assert (rec.topic, rec.queue_id, rec.body) == (topic, qid, body)
        assert rec.crc == body_crc(body)
        assert (rec.store_ip, rec.store_port) == (bytes([127, 0, 0, 1]), 10911)
        expect_qoff = per_queue.get((topic, qid), 0)
        assert rec.queue_offset == a.queue_offset == expect_qoff
        per_queue[(topic, qid)] = expect_qoff + 1
        assert a.msg_num == 1
        assert a.msg_id == a.msg_ids[0] == expected_msg_id(a.wrote_offset)
        assert int(a.msg_id[16:], 16) == a.wrote_offset  # clients decode the offset from the id
        assert store.look_message_by_offset(a.wrote_offset) == raw
        assert store.look_message_by_id(a.msg_id) == raw


def test_msg_id_uses_the_store_host_of_the_message(store_factory: StoreFactory) -> None:
    store = store_factory()
    put(store)
    res = store.put_message(MessageInput(topic="T", body=b"x", store_host=("10.1.2.3", 10915)))
    assert res.ok and res.append is not None
    off = res.append.wrote_offset
    assert res.append.msg_id == "0A010203" + "00002AA3" + f"{off:016X}"
    rec = parse_record(read_commitlog_file_bytes(store, off, res.append.wrote_bytes))
    assert (rec.store_ip, rec.store_port) == (bytes([10, 1, 2, 3]), 10915)
    # The id decodes to the offset whatever host it names.
    assert store.look_message_by_id(res.append.msg_id) == store.look_message_by_offset(off)
    assert store.look_message_by_id(DEFAULT_STORE_HOST_HEX + f"{off:016X}") is not None


def test_look_message_outside_records_finds_nothing(store_factory: StoreFactory) -> None:
    store = store_factory()
    first = put(store, body=b"x" * (SEG - 300)).append
    second = put(store, body=b"y" * 500).append  # does not fit: rolls to the next segment
    assert second.wrote_offset == SEG
    assert store.look_message_by_offset(first.wrote_offset + 1) is None  # inside a record
    assert store.look_message_by_offset(first.wrote_bytes) is None  # the BLANK marker
    assert store.look_message_by_offset(store.max_phy_offset) is None  # not written yet
    assert store.look_message_by_offset(10 * SEG) is None  # no such segment
    assert store.look_message_by_id(expected_msg_id(10 * SEG)) is None
