"""The DLedger reput dispatches committed entries in rounds (store/window_dispatch.py):
one consume-queue write per queue per round, no-op entries passed, and ``reput_from``
standing at the entry of the first record that could not be dispatched.

The reput thread is stopped so that one ``dispatch_available`` is one pass over
everything committed since the last one.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.store.consumequeue import ConsumeQueue
from ledgermq.store.dledger.entry import BODY_OFFSET
from ledgermq.store.message_store import MessageStore
from ledgermq.store.queue_segment import QueueSegment
from ledgermq.store.queue_table import ConsumeQueueTable
from tests.store.dledger.mode_helpers import TOPIC, Driver, bodies_in_queue, open_store


def _stopped(store: MessageStore) -> None:
    assert store.reput is not None
    store.reput.dispatch_available()
    store.reput.stop()


def _entry_pos(store: MessageStore, index: int) -> int:
    assert store.commitlog is not None
    return int(store.commitlog.ledger.entry_span(index)[0])


def _propose_spread(d: Driver, n: int, queues: int) -> list[int]:
    """``n`` messages over ``queues`` queues, a no-op entry after every third; their indices."""
    out: list[int] = []
    for i in range(n):
        out += d.propose([f"m{i}".encode()], queue_id=i % queues, props={"KEYS": f"k{i}", "TAGS": "t"})
        if i % 3 == 2:
            d.noop()
    return out


def test_a_commit_is_dispatched_with_one_write_per_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "s")
    try:
        _stopped(store)
        d = Driver(store)
        _propose_spread(d, 30, 3)
        appends: list[int] = []
        real = QueueSegment.append

        def counting(seg: QueueSegment, data: bytes) -> int:
            appends.append(len(data) // 20)
            return real(seg, data)

        monkeypatch.setattr(QueueSegment, "append", counting)
        store.commit_to_index(d.last_index)
        assert store.reput is not None
        assert store.reput.dispatch_available() == 30
        assert sorted(appends) == [10, 10, 10]
        assert store.reput.reput_from == store.commitlog.max_offset  # type: ignore[union-attr]
        for q in range(3):
            assert bodies_in_queue(store, q) == [f"m{i}".encode() for i in range(q, 30, 3)]
        for i in range(30):
            assert len(store.query_message(TOPIC, f"k{i}", 4, 0, 2**62).messages) == 1
    finally:
        store.shutdown()


def test_a_failed_unit_write_stops_at_the_entry_of_the_first_record_it_left_out(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        _stopped(store)
        d = Driver(store)
        indices = _propose_spread(d, 12, 3)
        seen: list[int] = []
        store.add_dispatch_hook(lambda req: seen.append(req.commit_log_offset), only_with="TAGS")
        store.commit_to_index(d.last_index)
        calls: list[int] = []

        def second_write_fails() -> None:
            calls.append(1)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        assert store.reput is not None
        with failpoints.armed("consume_queue.before_put", second_write_fails):
            assert store.reput.dispatch_available() == 1  # queue 1's first record is the second
        assert store.reput.reput_from == _entry_pos(store, indices[1])
        assert store.reput.dispatch_error is not None and f"{TOPIC}-1 offset 0" in store.reput.dispatch_error
        assert seen == [_entry_pos(store, indices[0]) + BODY_OFFSET]
        assert store.reput.dispatch_available() == 11
        assert store.reput.dispatch_error is None
        assert seen == [_entry_pos(store, i) + BODY_OFFSET for i in indices]  # each once, in order
        for q in range(3):
            assert bodies_in_queue(store, q) == [f"m{i}".encode() for i in range(q, 12, 3)]
    finally:
        store.shutdown()


def test_a_queue_that_cannot_be_made_stops_at_its_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "s")
    try:
        _stopped(store)
        d = Driver(store)
        d.propose([b"g0", b"g1"], topic="Good")
        bad = d.propose([b"b"], topic="Bad")
        d.noop()
        d.propose([b"g2"], topic="Good")
        store.commit_to_index(d.last_index)
        real = ConsumeQueueTable.find_or_create

        def refuse_bad(table: ConsumeQueueTable, topic: str, queue_id: int) -> ConsumeQueue:
            if topic == "Bad":
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            return real(table, topic, queue_id)

        monkeypatch.setattr(ConsumeQueueTable, "find_or_create", refuse_bad)
        assert store.reput is not None
        assert store.reput.dispatch_available() == 2
        assert store.reput.reput_from == _entry_pos(store, bad[0])
        assert store.dispatch_problem is not None and "Bad-0 offset 0" in store.dispatch_problem
        monkeypatch.setattr(ConsumeQueueTable, "find_or_create", real)
        assert store.reput.dispatch_available() == 2
        assert store.dispatch_problem is None
        assert bodies_in_queue(store, 0, "Good") == [b"g0", b"g1", b"g2"]
        assert bodies_in_queue(store, 0, "Bad") == [b"b"]
        assert store.reput.reput_from == store.commitlog.max_offset  # type: ignore[union-attr]
    finally:
        store.shutdown()
