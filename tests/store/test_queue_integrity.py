"""Consume queues and the index checked against the commit log, rebuilt where they disagree;
records lost in a damaged range keep their queue offsets (placeholders until repaired).

Each test damages files the way a crash or rot does (a cut consume queue, flipped commit-log
bytes, a unit pointing at another record, a broken index header) and then checks what a
consumer sees: every message outside the damage at its own offset, the damaged ones refused
with CorruptRangeError's text, and after a repair from an untouched copy everything equal
to that copy.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgermq.protocol import message as M
from ledgermq.store.checkpoint import Checkpoint
from ledgermq.store.consumequeue import UNIT, UNIT_SIZE, ConsumeQueue
from ledgermq.store.digests import SegmentDigests
from ledgermq.store.index import HEADER
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.results import GetStatus
from ledgermq.testing.crash import abandon
from tests.conftest import small_config

TOPIC = "QiTopic"
QUEUES = 2
SEG = 64 * 1024


def _open(root: Path, **overrides: object) -> MessageStore:
    store = open_message_store(small_config(root, **overrides))
    store.start()
    return store


def _put(store: MessageStore, count: int, body_size: int = 900) -> list[tuple[int, int]]:
    """``count`` messages, message i to queue i % QUEUES with key k<i>; their [start, end)."""
    spans = []
    for seq in range(count):
        body = struct.pack(">q", seq) + bytes((seq * 7 + i) % 251 for i in range(body_size - 8))
        r = store.put_message(
            MessageInput(topic=TOPIC, body=body, queue_id=seq % QUEUES, properties={"KEYS": f"k{seq}"})
        )
        assert r.ok and r.append is not None, r
        spans.append((r.append.wrote_offset, r.append.next_offset))
    assert store.wait_dispatched()
    return spans


def _flip(path: Path, at: int, n: int = 1) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        data = f.read(n)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


def _segment(root: Path, offset: int) -> tuple[Path, int]:
    return root / "commitlog" / f"{offset - offset % SEG:020d}", offset % SEG


def _copy_bytes(root: Path, start: int, end: int) -> bytes:
    path, at = _segment(root, start)
    with open(path, "rb") as f:
        f.seek(at)
        return f.read(end - start)


def _unit_file(root: Path, queue_id: int, k: int) -> tuple[Path, int]:
    size = 20 * 64  # small_config's mapped_file_size_consume_queue
    pos = k * UNIT_SIZE
    return root / "consumequeue" / TOPIC / str(queue_id) / f"{pos - pos % size:020d}", pos % size


def _units(store: MessageStore, q: int) -> list[tuple[int, int, int]]:
    cq = store.queues.get(TOPIC, q)
    assert cq is not None
    return [UNIT.unpack(cq.read_units(i, 1)) for i in range(cq.min_offset, cq.max_offset)]


def _wait(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def _expect_all_found(store: MessageStore, spans: list[tuple[int, int]], copy: Path) -> None:
    for seq, (start, end) in enumerate(spans):
        got = store.get_message(TOPIC, seq % QUEUES, seq // QUEUES, 1)
        assert got.status is GetStatus.FOUND, (seq, got.status, got.remark)
        assert got.messages == [_copy_bytes(copy, start, end)], seq


def test_records_lost_in_damage_before_dispatch_keep_their_offsets_and_come_back_with_the_repair(
    tmp_path: Path,
) -> None:
    """A crash before dispatch *and* damage: the units of records 30..39 were never written
    and records 34 and 35 are damaged. Before, the queues ended at the damage ("unit for
    offset ... not dispatched") and every later message vanished."""
    root, copy = tmp_path / "s", tmp_path / "copy"
    store = _open(root)
    spans = _put(store, 60)
    abandon(store)
    shutil.copytree(root, copy)  # the replica's bytes
    for q in range(QUEUES):  # units from queue offset 15 on (records 30..) never written
        path, at = _unit_file(root, q, 15)
        with open(path, "r+b") as f:
            f.truncate(at)
            f.truncate(20 * 64)
    # Replay everything (the consume queues' checkpoint time is older than the lost units),
    # while every record is known flushed: a bad one is rot, not a torn write.
    cp = Checkpoint.load(root / "checkpoint")
    cp.physic_ts, cp.logics_ts, cp.index_ts = 2**62, 0, 0
    cp.save()
    for seq in (34, 35):  # one record of each queue: queue 0 offset 17, queue 1 offset 17
        path, at = _segment(root, spans[seq][0])
        _flip(path, at + 300)  # inside the body: the CRC fails

    store = _open(root)
    try:
        ranges = store.damaged_ranges()
        assert ranges == [(spans[34][0], spans[36][0])], ranges
        info = store.runtime_info()
        assert info["storeQueuePlaceholders"] == "2" and info["storeQueueUnexplainedGaps"] == "0"
        for seq, (start, end) in enumerate(spans):
            q, k = seq % QUEUES, seq // QUEUES
            assert store.max_offset_in_queue(TOPIC, q) == 30  # nothing vanished
            got = store.get_message(TOPIC, q, k, 1)
            if seq in (34, 35):
                assert got.status is GetStatus.CORRUPT_RANGE, (seq, got.status)
                assert "awaits repair from a replica" in got.remark and got.next_begin_offset == k
            else:
                assert got.status is GetStatus.FOUND, (seq, got.status, got.remark)
                assert got.messages == [_copy_bytes(copy, start, end)]
        assert store.query_message(TOPIC, "k40", 10, 0, 2**62).messages  # indexed after the damage

        store.repair_range(ranges[0][0], _copy_bytes(copy, *ranges[0]), "copy")
        assert store.damaged_ranges() == []
        assert store.runtime_info()["storeQueueUnitsRewritten"] == "2"  # the placeholders
        _expect_all_found(store, spans, copy)
        found = store.query_message(TOPIC, "k34", 10, 0, 2**62).messages
        assert found == [_copy_bytes(copy, *spans[34])]  # indexed by the repair
    finally:
        store.shutdown()

    store = _open(root)  # the rewritten units are durable
    try:
        replica = _open(copy)
        try:
            assert [_units(store, q) for q in range(QUEUES)] == [_units(replica, q) for q in range(QUEUES)]
        finally:
            replica.shutdown()
    finally:
        store.shutdown()


def test_dispatch_steps_over_a_registered_range_and_keeps_later_offsets(tmp_path: Path) -> None:
    """The reput rebuilding deleted queues after a clean stop meets a damaged range
    registered earlier: it steps over it; later records keep their offsets."""
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 40)
    store.report_damage(spans[10][0], spans[12][0], "test")  # records 10 and 11
    store.shutdown()
    for seq in (10, 11):  # their headers rot too: nothing to parse there
        path, at = _segment(root, spans[seq][0])
        _flip(path, at + 4, 4)
    shutil.rmtree(root / "consumequeue")  # an operator has the queues rebuilt

    store = _open(root)
    try:
        assert store.wait_dispatched()
        assert store.runtime_info()["dispatchError"] == "" and store.reput is not None
        assert store.reput.stuck_reason is None
        for q in range(QUEUES):
            assert store.max_offset_in_queue(TOPIC, q) == 20
        assert store.get_message(TOPIC, 0, 5, 1).status is GetStatus.CORRUPT_RANGE  # record 10
        assert store.get_message(TOPIC, 1, 5, 1).status is GetStatus.CORRUPT_RANGE  # record 11
        got = store.get_message(TOPIC, 0, 6, 1)  # record 12
        assert got.status is GetStatus.FOUND and got.messages == [store.commitlog.read(*_span(spans[12]))]
    finally:
        store.shutdown()


def _span(span: tuple[int, int]) -> tuple[int, int]:
    return span[0], span[1] - span[0]


def test_repair_rewrites_a_unit_that_disagrees(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    try:
        spans = _put(store, 20)
        start, end = spans[6]  # queue 0 offset 3
        good = store.commitlog.read(start, end - start)
        assert good is not None
        store.report_damage(start, end, "test")
        cq = store.queues.get(TOPIC, 0)
        assert cq is not None
        right = cq.read_units(3, 1)
        seg = cq.files.find(3 * UNIT_SIZE)
        assert seg is not None
        seg.write_at(3 * UNIT_SIZE, UNIT.pack(start, 17, 99))  # rot in the unit as well
        store.repair_range(start, good, "copy")
        assert cq.read_units(3, 1) == right
        got = store.get_message(TOPIC, 0, 3, 1)
        assert got.status is GetStatus.FOUND and got.messages == [good]
    finally:
        store.shutdown()


def _write_unit(root: Path, queue_id: int, k: int, unit: bytes) -> None:
    path, at = _unit_file(root, queue_id, k)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(unit)


def test_crash_recovery_rederives_a_queue_whose_tail_disagrees(tmp_path: Path) -> None:
    """After a crash queue 1 has a unit too many (pointing at queue 0's record) and its
    last real unit is wrong: the replay rewrites the one, the tail check drops the other."""
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 40)
    expected = [_units(store, q) for q in range(QUEUES)]
    abandon(store)
    _write_unit(root, 1, 19, UNIT.pack(spans[3][0], spans[3][1] - spans[3][0], 0))
    _write_unit(root, 1, 20, UNIT.pack(spans[38][0], spans[38][1] - spans[38][0], 0))

    store = _open(root)
    try:
        assert [_units(store, q) for q in range(QUEUES)] == expected
        info = store.runtime_info()
        assert info["storeQueueRebuilds"] == "1" and info["storeQueueUnitsRewritten"] == "1"
        _put(store, 4)  # later puts continue each queue's offsets
        assert store.max_offset_in_queue(TOPIC, 0) == 22 and store.max_offset_in_queue(TOPIC, 1) == 22
    finally:
        store.shutdown()


def test_the_scrub_rederives_a_queue_with_a_bad_unit_in_the_middle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 40)
    expected = [_units(store, q) for q in range(QUEUES)]
    store.shutdown()
    _write_unit(root, 0, 12, UNIT.pack(spans[3][0], spans[3][1] - spans[3][0], 0))  # rot while stopped

    shrunk: list[int] = []
    real_drop = ConsumeQueue.drop_from

    def spy(cq: ConsumeQueue, k: int) -> None:
        shrunk.append(k)
        real_drop(cq, k)

    monkeypatch.setattr(ConsumeQueue, "drop_from", spy)
    store = _open(root, store_scrub_interval_seconds=0, store_scrub_bytes_per_second=64 << 20)
    try:
        assert _wait(lambda: _units(store, 0) == expected[0])
        # A pull served meanwhile must never see the queue shorter than it is.
        assert shrunk == [], shrunk
        info = store.runtime_info()
        assert info["storeQueueRebuilds"] == "1" and int(info["storeQueueUnitsChecked"]) >= 12
        assert _units(store, 1) == expected[1]
        got = store.get_message(TOPIC, 0, 12, 1)
        assert got.messages == [store.commitlog.read(*_span(spans[24]))]
    finally:
        store.shutdown()


def test_a_broken_index_file_is_dropped_and_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root, max_index_num=64)  # several index files
    _put(store, 100)
    assert store.index is not None and len(store.index.files) >= 2
    names = sorted(p.name for p in (root / "index").iterdir())
    store.shutdown()
    with open(root / "index" / names[0], "r+b") as f:  # the first file's entry count rots
        head = bytearray(f.read(HEADER.size))
        fields = list(HEADER.unpack(head))
        fields[5] = 1 << 20
        f.seek(0)
        f.write(HEADER.pack(*fields))

    store = _open(root, max_index_num=64)
    try:
        assert store.runtime_info()["storeIndexRebuilds"] == str(len(names))
        for seq in (0, 37, 99):
            found = store.query_message(TOPIC, f"k{seq}", 10, 0, 2**62).messages
            assert len(found) == 1 and struct.unpack_from(">q", M.decode_record(found[0]).body)[0] == seq
    finally:
        store.shutdown()


def test_the_scrub_digests_a_segment_sealed_before_it_started_then_finds_a_properties_flip(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _open(root)
    spans = _put(store, 200)  # about three sealed segments
    store.shutdown()
    shutil.rmtree(root / "digests", ignore_errors=True)  # a RocketMQ store, or digests lost in a crash

    store = _open(root, store_scrub_interval_seconds=0, store_scrub_bytes_per_second=64 << 20)
    heard: list[tuple[int, int, str]] = []
    try:
        store.add_damage_listener(lambda s, e, r: heard.append((s, e, r)))
        digests = SegmentDigests(root / "digests" / "commitlog", SEG)
        assert _wait(lambda: digests.has(0) and digests.has(SEG))
        assert store.damaged_ranges() == []
        victim = next(sp for sp in spans if sp[0] >= SEG + 1000)
        fd = os.open(root / "commitlog" / f"{SEG:020d}", os.O_RDWR)
        try:
            os.pwrite(fd, b"Z", victim[1] - 2 - SEG)  # inside KEYS: the body CRC passes
        finally:
            os.close(fd)
        assert _wait(lambda: bool(heard))
        start, end, reason = heard[0]
        assert start <= victim[0] and end >= victim[1] and "digest" in reason
    finally:
        store.shutdown()
