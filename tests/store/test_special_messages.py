"""Delayed and transactional messages in the store (docs/formats.md §4.2, §5.2, §5.3, §6.3).

DELAY > 0 on a NOT_TYPE or COMMIT message: stored under SCHEDULE_TOPIC_XXXX, queue
level-1, with REAL_TOPIC / REAL_QID, CQ tagsCode = store time + the level's delay, a level
above the highest clamped to it. PREPARED (0x4) and ROLLBACK (0xC) records: queue offset 0,
no consume-queue unit, queue counter untouched; COMMIT (0x8) is an ordinary entry.
Index: PREPARED and COMMIT are indexed, ROLLBACK is not (IndexService.buildIndex).
"""

from __future__ import annotations

import pytest

from ledgermq.clock import ManualClock
from ledgermq.store.results import GetStatus
from tests.store.rw_helpers import (
    StoreFactory,
    java_hash,
    parse_record,
    put,
    read_commitlog_file_bytes,
    read_cq_units,
)

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
T0 = 1_700_000_000_000
LEVEL_MS = [
    1_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    180_000,
    240_000,
    300_000,
    360_000,
    420_000,
    480_000,
    540_000,
    600_000,
    1_200_000,
    1_800_000,
    3_600_000,
    7_200_000,
]  # "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
PREPARED, COMMIT, ROLLBACK = 0x4, 0x8, 0xC


@pytest.mark.parametrize(("requested", "level"), [(1, 1), (3, 3), (5, 5), (17, 17), (18, 18), (19, 18), (99, 18)])
def test_delayed_message_goes_to_the_schedule_topic(store_factory: StoreFactory, requested: int, level: int) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    put(store, "Real", b"before", queue_id=5)  # the real queue exists and stays at one message
    clock.advance(7)
    a = put(store, "Real", b"later", queue_id=5, DELAY=str(requested), TAGS="TagA", KEYS="dk").append
    assert store.wait_dispatched()

    rec = parse_record(read_commitlog_file_bytes(store, a.wrote_offset, a.wrote_bytes))
    assert (rec.topic, rec.queue_id, rec.body) == (SCHEDULE, level - 1, b"later")
    assert rec.props["REAL_TOPIC"] == "Real"
    assert rec.props["REAL_QID"] == "5"
    assert rec.props["DELAY"] == str(level)
    assert (rec.props["TAGS"], rec.props["KEYS"]) == ("TagA", "dk")
    assert a.queue_offset == rec.queue_offset == 0
    assert a.store_timestamp == T0 + 7000

    units = read_cq_units(store, SCHEDULE, level - 1)
    assert units == [(a.wrote_offset, a.wrote_bytes, T0 + 7000 + LEVEL_MS[level - 1])]
    assert store.max_offset_in_queue("Real", 5) == 1
    got = store.get_message(SCHEDULE, level - 1, 0, 32)
    assert got.status is GetStatus.FOUND and got.messages == [store.look_message_by_offset(a.wrote_offset)]


def test_delayed_messages_of_one_level_share_a_queue(store_factory: StoreFactory) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    offsets = []
    for i in range(3):
        offsets.append(put(store, f"R{i}", queue_id=i, DELAY="2").append.queue_offset)
        clock.advance(1)
    assert offsets == [0, 1, 2]
    assert store.wait_dispatched()
    assert [u[2] for u in read_cq_units(store, SCHEDULE, 1)] == [T0 + 1000 * i + 5000 for i in range(3)]


@pytest.mark.parametrize("delay", ["0", "-1"])
def test_no_positive_delay_means_no_rewrite(store_factory: StoreFactory, delay: str) -> None:
    store = store_factory()
    a = put(store, "Plain", queue_id=2, DELAY=delay, TAGS="TagA").append
    assert store.wait_dispatched()
    rec = parse_record(read_commitlog_file_bytes(store, a.wrote_offset, a.wrote_bytes))
    assert (rec.topic, rec.queue_id) == ("Plain", 2)
    assert "REAL_TOPIC" not in rec.props
    assert read_cq_units(store, "Plain", 2) == [(a.wrote_offset, a.wrote_bytes, java_hash("TagA"))]


def test_configured_delay_levels(store_factory: StoreFactory) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock, message_delay_level="2s 3m")
    a = put(store, "Real", DELAY="2").append
    b = put(store, "Real", DELAY="7").append  # above the highest level: clamped to 2
    assert store.wait_dispatched()
    assert read_cq_units(store, SCHEDULE, 1) == [
        (a.wrote_offset, a.wrote_bytes, T0 + 180_000),
        (b.wrote_offset, b.wrote_bytes, T0 + 180_000),
    ]
    assert parse_record(store.look_message_by_offset(b.wrote_offset)).props["DELAY"] == "2"


def test_transaction_records_and_queue_offsets(store_factory: StoreFactory) -> None:
    store = store_factory()
    plan = [
        (0, "n0", 0),
        (PREPARED, "p", 0),
        (0, "n1", 1),
        (ROLLBACK, "r", 0),
        (COMMIT, "c", 2),
        (PREPARED, "p2", 0),
        (0, "n3", 3),
    ]
    results = []
    for sysflag, body, want_qoff in plan:
        a = put(store, "Tx", body.encode(), queue_id=1, sysflag=sysflag, KEYS=f"key-{body}").append
        rec = parse_record(read_commitlog_file_bytes(store, a.wrote_offset, a.wrote_bytes))
        assert rec.sysflag & 0xC == sysflag
        assert a.queue_offset == rec.queue_offset == want_qoff, body
        results.append(a)
    assert store.wait_dispatched()

    entry_plan = [(a, body) for a, (flag, body, _) in zip(results, plan, strict=True) if flag in (0, COMMIT)]
    assert read_cq_units(store, "Tx", 1) == [(a.wrote_offset, a.wrote_bytes, 0) for a, _ in entry_plan]
    assert store.max_offset_in_queue("Tx", 1) == 4
    got = store.get_message("Tx", 1, 0, 32)
    assert [parse_record(m).body for m in got.messages] == [b"n0", b"n1", b"c", b"n3"]
    # Half and rollback records stay readable by offset (END_TRANSACTION looks them up).
    assert parse_record(store.look_message_by_offset(results[1].wrote_offset)).body == b"p"
    assert parse_record(store.look_message_by_offset(results[3].wrote_offset)).body == b"r"

    def found(key: str) -> list[bytes]:
        return [parse_record(m).body for m in store.query_message("Tx", key, 32, 0, 2**62).messages]

    assert found("key-p") == [b"p"]
    assert found("key-c") == [b"c"]
    assert found("key-n0") == [b"n0"]
    assert found("key-r") == []


def test_only_transaction_records_on_a_queue_create_no_queue(store_factory: StoreFactory) -> None:
    store = store_factory()
    put(store, "HalfOnly", queue_id=3, sysflag=PREPARED)
    put(store, "HalfOnly", queue_id=3, sysflag=ROLLBACK)
    assert store.wait_dispatched()
    assert store.max_offset_in_queue("HalfOnly", 3) == 0
    assert store.get_message("HalfOnly", 3, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert put(store, "HalfOnly", queue_id=3).append.queue_offset == 0


def test_prepared_message_with_delay_is_not_rewritten(store_factory: StoreFactory) -> None:
    store = store_factory()
    a = put(store, "TxD", queue_id=1, sysflag=PREPARED, DELAY="3").append
    assert store.wait_dispatched()
    rec = parse_record(store.look_message_by_offset(a.wrote_offset))
    assert (rec.topic, rec.queue_id, rec.queue_offset) == ("TxD", 1, 0)
    assert "REAL_TOPIC" not in rec.props
    assert store.max_offset_in_queue(SCHEDULE, 2) == 0


def test_committed_message_with_delay_is_rewritten(store_factory: StoreFactory) -> None:
    clock = ManualClock(T0)
    store = store_factory(clock=clock)
    a = put(store, "TxD", queue_id=1, sysflag=COMMIT, DELAY="3").append
    assert store.wait_dispatched()
    rec = parse_record(store.look_message_by_offset(a.wrote_offset))
    assert (rec.topic, rec.queue_id, rec.props["REAL_TOPIC"], rec.props["REAL_QID"]) == (
        SCHEDULE,
        2,
        "TxD",
        "1",
    )
    assert read_cq_units(store, SCHEDULE, 2) == [(a.wrote_offset, a.wrote_bytes, T0 + 10_000)]
