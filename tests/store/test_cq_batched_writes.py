"""A dispatch pass writes each queue's consume-queue units with one write per segment
(``ConsumeQueue.put_units``): what it writes, how often, and what happens when a write
fails or the process dies in the middle of a pass.

The reput thread is stopped in these tests so that one ``dispatch_available`` is one pass
over everything put since the last one (the broker's loop turn).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.store.consumequeue import ConsumeQueue
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.queue_segment import QueueSegment
from ledgermq.store.queue_table import ConsumeQueueTable
from ledgermq.store.results import PutResult
from ledgermq.testing.crash import abandon
from tests.conftest import small_config
from tests.store.rw_helpers import CQ_SEG_UNITS, StoreFactory, java_hash, put, read_cq_units


class Crash(BaseException):
    """Stops the pass where it is, as a kill would (no handler sees it)."""


@pytest.fixture
def appends(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """(segment file name, units) of every consume-queue segment append."""
    seen: list[tuple[str, int]] = []
    real = QueueSegment.append

    def counting(seg: QueueSegment, data: bytes) -> int:
        seen.append((os.path.basename(seg.path), len(data) // 20))
        return real(seg, data)

    monkeypatch.setattr(QueueSegment, "append", counting)
    yield seen


def _stopped_reput(store: MessageStore) -> None:
    assert store.reput is not None
    store.reput.dispatch_available()
    store.reput.stop()


def _put_spread(store: MessageStore, n: int, queues: int, topic: str = "T") -> list[PutResult]:
    return [put(store, topic, f"m{i}".encode(), i % queues, TAGS=f"t{i % 3}", KEYS=f"k{i}") for i in range(n)]


def _expected_units(results: list[PutResult], queues: int, queue_id: int) -> list[tuple[int, int, int]]:
    out = []
    for i, r in enumerate(results):
        if i % queues == queue_id:
            assert r.append is not None
            out.append((r.append.wrote_offset, r.append.wrote_bytes, java_hash(f"t{i % 3}")))
    return out


def test_a_pass_writes_each_queue_once(store_factory: StoreFactory, appends: list[tuple[str, int]]) -> None:
    store = store_factory()
    _stopped_reput(store)
    results = _put_spread(store, 30, 3)
    assert store.reput is not None
    assert store.reput.dispatch_available() == 30
    assert sorted(units for _name, units in appends) == [10, 10, 10]
    store.shutdown()
    for q in range(3):
        assert read_cq_units(store, "T", q) == _expected_units(results, 3, q)


def test_a_segment_boundary_inside_a_pass(store_factory: StoreFactory, appends: list[tuple[str, int]]) -> None:
    store = store_factory()
    _stopped_reput(store)
    early = _put_spread(store, 10, 1)
    assert store.reput is not None
    store.reput.dispatch_available()
    appends.clear()
    late = _put_spread(store, CQ_SEG_UNITS + 20, 1)
    store.reput.dispatch_available()
    # the rest of the first segment, then the start of the second, in one pass
    assert appends == [(f"{0:020d}", CQ_SEG_UNITS - 10), (f"{CQ_SEG_UNITS * 20:020d}", 30)]
    assert store.max_offset_in_queue("T", 0) == CQ_SEG_UNITS + 30
    store.shutdown()
    units = read_cq_units(store, "T", 0)
    assert [u[:2] for u in units] == [(r.append.wrote_offset, r.append.wrote_bytes) for r in early + late if r.append]


def test_a_failed_write_stops_dispatch_at_the_first_record_it_left_out(store_factory: StoreFactory) -> None:
    """The second queue's write fails: dispatch stands at that queue's first record of the
    pass (records after it in other queues went through and are not written twice), hooks
    saw exactly the records before it, puts are refused until a later pass succeeds."""
    store = store_factory()
    _stopped_reput(store)
    seen: list[int] = []
    store.add_dispatch_hook(lambda req: seen.append(req.commit_log_offset))
    results = _put_spread(store, 12, 3)
    offsets = [r.append.wrote_offset for r in results if r.append]
    calls = []

    def second_write_fails() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    assert store.reput is not None
    with failpoints.armed("consume_queue.before_put", second_write_fails):
        done = store.reput.dispatch_available()
    assert done == 1  # queue 1's first record is the second of the pass
    assert seen == offsets[:1]
    assert store.reput.reput_from == offsets[1]
    assert store.reput.dispatch_error is not None and "T-1 offset 0" in store.reput.dispatch_error
    assert store.dispatch_problem is not None
    assert store.reput.dispatch_available() == 11
    assert store.reput.dispatch_error is None
    assert seen == offsets  # each record once, in commit-log order
    store.shutdown()
    for q in range(3):
        assert read_cq_units(store, "T", q) == _expected_units(results, 3, q)


def test_recovery_after_a_crash_in_the_middle_of_a_pass(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = open_message_store(small_config(root))
    store.start()
    _stopped_reput(store)
    results = _put_spread(store, 3 * (CQ_SEG_UNITS + 5), 3)  # each queue crosses a segment
    calls = []

    def crash_on_second_write() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise Crash

    assert store.reput is not None
    with failpoints.armed("consume_queue.before_put", crash_on_second_write), pytest.raises(Crash):
        store.reput.dispatch_available()
    abandon(store)  # queue 0's first segment is written, nothing else; nothing was flushed

    reopened = open_message_store(small_config(root))
    reopened.start()
    try:
        assert reopened.wait_dispatched(timeout=10)
        for q in range(3):
            assert reopened.max_offset_in_queue("T", q) == CQ_SEG_UNITS + 5
    finally:
        reopened.shutdown()
    for q in range(3):
        assert read_cq_units(reopened, "T", q) == _expected_units(results, 3, q)


def test_index_entries_follow_the_units_of_a_pass(store_factory: StoreFactory) -> None:
    store = store_factory()
    _stopped_reput(store)
    results = _put_spread(store, 9, 3)
    assert store.reput is not None
    store.reput.dispatch_available()
    for i, r in enumerate(results):
        got = store.query_message("T", f"k{i}", 4, 0, 2**62)
        assert r.append is not None and len(got.messages) == 1
        assert f"m{i}".encode() in got.messages[0]


def test_a_queue_that_cannot_be_opened_stops_the_pass_at_its_record(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record whose queue cannot even be looked up is not staged: the records before it
    are written and announced, dispatch stands at it and puts are refused until it goes."""
    store = store_factory()
    _stopped_reput(store)
    first = [put(store, "Good", f"g{i}".encode(), 0) for i in range(3)]
    bad = put(store, "Bad", b"b", 0)
    put(store, "Good", b"after", 0)
    real = ConsumeQueueTable.find_or_create

    def refuse_bad(table: ConsumeQueueTable, topic: str, queue_id: int) -> ConsumeQueue:
        if topic == "Bad":
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(table, topic, queue_id)

    monkeypatch.setattr(ConsumeQueueTable, "find_or_create", refuse_bad)
    assert store.reput is not None
    assert store.reput.dispatch_available() == 3
    assert bad.append is not None and store.reput.reput_from == bad.append.wrote_offset
    assert store.dispatch_problem is not None and "Bad-0 offset 0" in store.dispatch_problem
    assert store.max_offset_in_queue("Good", 0) == 3
    monkeypatch.setattr(ConsumeQueueTable, "find_or_create", real)
    assert store.reput.dispatch_available() == 2
    assert store.dispatch_problem is None
    assert store.max_offset_in_queue("Good", 0) == 4 and store.max_offset_in_queue("Bad", 0) == 1
    assert all(r.ok for r in first)
