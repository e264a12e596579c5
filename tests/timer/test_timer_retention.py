"""Retention keeps the commit-log records of timers not delivered yet (store/timer/retention.py),
natively and in DLedger mode; once delivered, their segments go like any other.

The disk gauge says 87% (past the forcible ratio: every segment but the last may go, whatever
its age) and rounds are driven with ``clean_once()``, as in tests/store/test_review_findings.py.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ledgermq.clock import ManualClock
from ledgermq.protocol import properties as P
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.timer.intercept import TIMER_TOPIC
from ledgermq.store.timer.retention import guard_pending_timers
from ledgermq.store.timer.timer_store import TimerStore
from tests.conftest import small_config
from tests.store.dledger.mode_helpers import HOST, Driver, dledger_config
from tests.timer.test_timer_store import drain, put_timer, timer_store

START_MS = int(dt.datetime(2024, 3, 5, 13, 30).timestamp() * 1000)
FORCIBLE = 0.87  # past the forcible ratio: age does not matter
RETENTION: dict[str, Any] = {"clean_resource_interval_ms": 3_600_000}


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    made: list[MessageStore] = []

    def make(clock: ManualClock, *, dledger: bool = False, disk: float = FORCIBLE, **overrides: Any) -> MessageStore:
        root = tmp_path / f"s{len(made)}"
        cfg = (dledger_config if dledger else small_config)(root, **{**RETENTION, **overrides})
        store = open_message_store(cfg, clock=clock, store_host=HOST, disk_usage=lambda _p: disk)
        store.start()
        made.append(store)
        return store

    yield make
    for s in made:
        s.shutdown()


def fill_native(store: MessageStore, segments: int) -> None:
    while len(store.commitlog.queue.files) < segments:
        assert store.put_message(MessageInput(topic="Plain", body=b"x" * 3000)).ok
    assert store.wait_dispatched()


def clean(store: MessageStore) -> int:
    assert store.cleaner is not None
    return store.cleaner.clean_once()


def clean_until(store: MessageStore, done: Callable[[], bool], deadline_s: float = 10.0) -> None:
    """Cleaning rounds until ``done`` (a segment a flush holds for a moment goes next round)."""
    deadline = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < deadline, "retention did not get there"
        clean(store)
        time.sleep(0.01)


def test_a_pending_timer_keeps_its_segment_until_it_is_delivered(make_store: Callable[..., MessageStore]) -> None:
    clock = ManualClock(wall_ms=START_MS)
    store = make_store(clock)
    put_timer(store, b"soon", 5_000)
    fill_native(store, 3)
    put_timer(store, b"later", 20_000)  # in segment 2
    fill_native(store, 6)
    assert store.wait_dispatched()
    ts = timer_store(store, clock)
    guard_pending_timers(store, ts.retention_floor)
    assert ts.retention_floor() == 0  # not filed yet: counted from the queue
    ts.enqueue()
    assert ts.retention_floor() == 0
    assert clean(store) == 0 and store.commitlog.min_offset == 0  # the first segment holds "soon"

    assert drain(ts, store, clock.wall_ms() + 5_000) == [b"soon"]
    # "later" shares its timer-log segment with "soon": the floor is the segment's lowest record
    # until all of it is delivered (a segment's worth kept too much, nothing per timer held)
    assert ts.retention_floor() == 0 and clean(store) == 0
    assert drain(ts, store, clock.wall_ms() + 20_000) == [b"later"]
    assert ts.retention_floor() is None
    last = store.commitlog.queue.files[-1].start_offset
    clean_until(store, lambda: store.commitlog.min_offset == last)  # everything but the active segment
    ts.close()


def test_the_floor_follows_delivery_segment_by_segment_and_survives_a_restart(
    make_store: Callable[..., MessageStore],
) -> None:
    clock = ManualClock(wall_ms=START_MS)
    store = make_store(clock)
    settings = replace(store.timer, log_file_size=52 * 4)  # 3 units and a blank per timer-log segment
    offsets: list[int] = []
    for i in range(6):
        put_timer(store, f"t{i}".encode(), 2_000 + 1_000 * i)
        offsets.append(store.commitlog.max_offset)
        fill_native(store, 2 + i)
    ts = timer_store(store, clock, settings)
    ts.enqueue()
    assert len(ts.log.files.files) == 2  # 3 units, then a blank; 3 units
    assert ts.retention_floor() == 0
    ts.close()  # a restart: the first (sealed) segment is summarised by a scan
    ts = timer_store(store, clock, settings)
    guard_pending_timers(store, ts.retention_floor)
    assert ts.retention_floor() == 0
    got = drain(ts, store, clock.wall_ms() + 4_000)  # t0, t1, t2: the first timer-log segment
    assert got == [b"t0", b"t1", b"t2"]
    floor = ts.retention_floor()
    assert floor is not None and 0 < floor <= offsets[3] - 1
    clean_until(store, lambda: store.commitlog.min_offset > 0)
    clean(store)
    assert store.commitlog.min_offset <= floor  # t3's record is still there
    assert drain(ts, store, clock.wall_ms() + 8_000) == [b"t3", b"t4", b"t5"]
    ts.close()


def test_in_dledger_mode_the_entry_of_a_pending_timer_is_kept(make_store: Callable[..., MessageStore]) -> None:
    clock = ManualClock(wall_ms=START_MS)
    # DLedger's cleaner drops its guards past the forcible ratio: a disk over
    # diskMaxUsedSpaceRatio (75%) but under 85%, and files older than fileReservedTime + 1 h
    store = make_store(clock, dledger=True, disk=0.80, mapped_file_size_commitlog=4096)
    d = Driver(store)
    assert store.commitlog is not None
    ledger = store.commitlog.ledger

    def propose(msg: MessageInput) -> None:
        encoded = store.encode_message(msg)
        assert not isinstance(encoded, MessageInput) and isinstance(encoded, tuple)
        messages, topic, queue_id, _wait = encoded
        bodies = store.prepare_append(list(messages), topic, queue_id)
        first = d.last_index + 1
        store.append_entries([(first + k, d.term, b) for k, b in enumerate(bodies)])

    propose(MessageInput(topic="Orders", body=b"t", properties={P.TIMER_DELAY_MS: "5000"}))
    while len(ledger.data.files) < 4:
        propose(MessageInput(topic="Plain", body=bytes(300)))
    d.commit()
    d.checkpoint()
    old_s = clock.wall_ms() / 1000 - 100 * 3600
    for mf in ledger.data.files:
        os.utime(mf.path, (old_s, old_s))
    ts = TimerStore(store.root, store.timer, lambda: store.queues.get(TIMER_TOPIC, 0), clock)
    ts.open()
    ts.set_delivering(True)
    ts.enqueue()
    guard_pending_timers(store, ts.retention_floor)
    assert clean(store) == 0 and ledger.first_index == 0
    assert drain(ts, store, clock.wall_ms() + 5_000) == [b"t"]
    clean_until(store, lambda: ledger.first_index > 0)
    ts.close()
