"""The store's replication interface (what HA uses; docs/formats.md §5.5).

``read_commitlog`` on a master plus ``append_raw`` on a SLAVE store reproduce the commit
log byte for byte (blanks and segment rollover included); the slave's own reput builds the
same consume queues and index, and tells arrival listeners. A slave refuses puts, refuses
raw appends anywhere but its end, and keeps clients' offsets (nextOffsetCorrection).
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from ledgermq.config import BrokerRole
from ledgermq.errors import StoreError
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.results import GetStatus, PutStatus
from tests.store.rw_helpers import SEG, StoreFactory, commitlog_files, put, store_root, wait_until

QUEUES = [("RepA", 0), ("RepA", 1), ("RepB", 0), ("RepB", 3)]


def _fill_master(master: MessageStore, n: int, rng: random.Random) -> None:
    for i in range(n):
        topic, qid = QUEUES[i % len(QUEUES)]
        body = bytes([i % 256]) * rng.randrange(300, 2500)
        put(master, topic, body, qid, TAGS=f"t{i % 3}", KEYS=f"key{i}")


def _replicate(master: MessageStore, slave: MessageStore, rng: random.Random, max_chunk: int = 40_000) -> int:
    """Copy everything the slave lacks in random-sized chunks (often ending mid-record)."""
    chunks = 0
    while slave.max_phy_offset < master.max_phy_offset:
        offset = slave.max_phy_offset
        data = master.read_commitlog(offset, rng.randrange(1, max_chunk))
        assert data, f"master returned nothing at {offset}"
        slave.append_raw(offset, data)
        chunks += 1
    return chunks


def _all_messages(store: MessageStore, topic: str, qid: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset_in_queue(topic, qid)
    while True:
        got = store.get_message(topic, qid, offset, 32)
        if got.status is not GetStatus.FOUND:
            assert got.status is GetStatus.OFFSET_OVERFLOW_ONE, got.status
            return out
        out.extend(got.messages)
        offset = got.next_begin_offset


@pytest.fixture
def pair(store_factory: StoreFactory, tmp_path: Path) -> tuple[MessageStore, MessageStore]:
    master = store_factory(root=tmp_path / "master")
    slave = store_factory(root=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    return master, slave


def test_raw_copy_is_byte_identical_and_builds_the_same_queues(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    rng = random.Random(42)
    arrivals: list[tuple[str, int, int, str]] = []
    lock = threading.Lock()

    def listener(topic: str, queue_id: int, max_offset: int) -> None:
        with lock:
            arrivals.append((topic, queue_id, max_offset, threading.current_thread().name))

    slave.add_arrival_listener(listener)
    _fill_master(master, 120, rng)
    master.put_messages(BatchInput(topic="RepA", queue_id=1, entries=[(0, b"b" * 500, {"KEYS": "batch"})] * 4))
    assert master.max_phy_offset > 2 * SEG, "want a rollover or two"
    _replicate(master, slave, rng)
    _fill_master(master, 40, rng)  # more arrives later, as with a live stream
    _replicate(master, slave, rng)

    assert slave.max_phy_offset == master.max_phy_offset
    assert slave.wait_dispatched()
    assert master.wait_dispatched()
    master_files = commitlog_files(master)
    assert [p.name for p in commitlog_files(slave)] == [p.name for p in master_files]
    for mp in master_files:
        sp = store_root(slave) / "commitlog" / mp.name
        assert sp.read_bytes() == mp.read_bytes(), f"commit-log segment {mp.name} differs"

    for topic, qid in QUEUES:
        assert slave.max_offset_in_queue(topic, qid) == master.max_offset_in_queue(topic, qid) > 0
        assert slave.min_offset_in_queue(topic, qid) == master.min_offset_in_queue(topic, qid)
        assert _all_messages(slave, topic, qid) == _all_messages(master, topic, qid)
        for p in sorted((store_root(master) / "consumequeue" / topic / str(qid)).iterdir()):
            q = store_root(slave) / "consumequeue" / topic / str(qid) / p.name
            assert q.read_bytes() == p.read_bytes(), f"consume queue {topic}/{qid}/{p.name} differs"
    for key in ("key0", "key77", "key159", "batch"):
        assert (
            slave.query_message("RepA" if key != "key77" else "RepB", key, 32, 0, 2**62).messages
            == master.query_message("RepA" if key != "key77" else "RepB", key, 32, 0, 2**62).messages
        )

    # Listeners run on the reput thread or on the appender's (a small append is dispatched
    # by the appender itself) and end up at every queue's max offset.
    def settled() -> bool:
        with lock:
            last = {(t, q): m for t, q, m, _ in arrivals}
        return all(last.get(k) == slave.max_offset_in_queue(*k) for k in QUEUES)

    wait_until(settled, what="arrival listeners to see every queue's max offset")
    with lock:
        seen = list(arrivals)
    assert {name for *_, name in seen} <= {"reput", threading.current_thread().name}
    assert {(t, q) for t, q, _, _ in seen} == set(QUEUES)
    for k in QUEUES:
        maxima = [m for t, q, m, _ in seen if (t, q) == k]
        assert maxima == sorted(maxima), "a queue's max offset never goes back"


def test_master_arrival_listener_sees_puts(store_factory: StoreFactory) -> None:
    master = store_factory()
    seen: list[tuple[str, int, int]] = []
    lock = threading.Lock()

    def listener(topic: str, queue_id: int, max_offset: int) -> None:
        with lock:
            seen.append((topic, queue_id, max_offset))

    master.add_arrival_listener(listener)
    for _ in range(3):
        put(master, "Arr", queue_id=2)
    put(master, "Arr", queue_id=2, sysflag=0x4)  # a half message makes no arrival
    assert master.wait_dispatched()

    def last() -> tuple[str, int, int] | None:
        with lock:
            return seen[-1] if seen else None

    wait_until(lambda: last() == ("Arr", 2, 3), what="listener to see offset 3")
    with lock:
        assert all(s[:2] == ("Arr", 2) for s in seen)


def test_a_slave_waits_quietly_for_the_rest_of_a_record(pair: tuple[MessageStore, MessageStore]) -> None:
    """An HA batch may end mid-record; RocketMQ's slave reput just waits for the rest
    (``checkMessageAndReturnSize`` -> size -1 -> doNext = false, no skip on a slave).
    The slave must not treat it as damage: after the rest arrives and a clean shutdown,
    the next start is a normal one (no abort marker).
    """
    master, slave = pair
    for i in range(3):
        put(master, "Part", bytes(200), KEYS=f"k{i}")
    data = master.read_commitlog(0, 1 << 20)
    cut = len(data) // 2 + 7  # inside the second record
    slave.append_raw(0, data[:cut])
    wait_until(lambda: slave.max_offset_in_queue("Part", 0) == 1, what="the complete record to be dispatched")
    slave.append_raw(cut, data[cut:])
    assert slave.wait_dispatched()
    assert slave.max_offset_in_queue("Part", 0) == 3
    slave.shutdown()
    assert not (store_root(slave) / "abort").exists(), "the slave's shutdown was not recorded as clean"


def test_append_raw_only_at_the_end(pair: tuple[MessageStore, MessageStore]) -> None:
    master, slave = pair
    for _ in range(5):
        put(master, "Raw")
    data = master.read_commitlog(0, 1 << 20)
    assert len(data) == master.max_phy_offset
    with pytest.raises(StoreError):
        slave.append_raw(10, data[10:])  # ahead of an empty slave
    assert slave.max_phy_offset == 0
    slave.append_raw(0, data[:100])
    for wrong in (0, 99, 101, 5000):
        with pytest.raises(StoreError):
            slave.append_raw(wrong, data[100:])
    assert slave.max_phy_offset == 100
    slave.append_raw(100, data[100:])
    assert slave.max_phy_offset == master.max_phy_offset
    assert slave.read_commitlog(0, 1 << 20) == data


def test_read_commitlog_stays_within_one_segment(store_factory: StoreFactory) -> None:
    master = store_factory()
    put(master, body=b"x" * (SEG - 1000))
    second = put(master, body=b"y" * 2000).append
    assert second.wrote_offset == SEG
    whole_first = master.read_commitlog(0, 10 * SEG)
    assert len(whole_first) == SEG  # records, then the BLANK and the rest of the segment
    assert master.read_commitlog(SEG - 10, 1 << 20) == whole_first[-10:]
    assert master.read_commitlog(SEG, 1 << 20) == master.look_message_by_offset(SEG)
    assert master.read_commitlog(SEG, 16) == master.look_message_by_offset(SEG)[:16]
    assert master.read_commitlog(master.max_phy_offset, 1 << 20) == b""
    assert master.read_commitlog(5 * SEG, 1 << 20) == b""


def test_slave_refuses_puts(pair: tuple[MessageStore, MessageStore]) -> None:
    _master, slave = pair
    res = slave.put_message(MessageInput(topic="S", body=b"x"))
    assert res.status is PutStatus.SERVICE_NOT_AVAILABLE
    batch = slave.put_messages(BatchInput(topic="S", entries=[(0, b"x", {})]))
    assert batch.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert slave.max_phy_offset == 0


def test_slave_keeps_the_clients_offset_on_errors(pair: tuple[MessageStore, MessageStore]) -> None:
    """nextOffsetCorrection: a slave (offsetCheckInSlave=false) answers the requested offset."""
    master, slave = pair
    for _ in range(5):
        put(master, "Off")
    _replicate(master, slave, random.Random(1))
    assert slave.wait_dispatched()
    badly = slave.get_message("Off", 0, 9, 32)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 9)
    missing = slave.get_message("Nope", 0, 7, 32)
    assert (missing.status, missing.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 7)
    one = slave.get_message("Off", 0, 5, 32)
    assert (one.status, one.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 5)
    found = slave.get_message("Off", 0, 1, 2)
    assert (found.status, found.next_begin_offset) == (GetStatus.FOUND, 3)
