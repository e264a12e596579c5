"""Flush policies: when an appended message becomes durable, and the checkpoint that says so.

The failpoint "mapped_file.before_fsync" runs right before every segment fdatasync, in
whichever thread flushes; the helpers below only act in the commit-log flush thread, so
consume-queue flushes (another thread) neither count nor block.

RocketMQ (4.9.7 ``CommitLog.GroupCommitService`` / ``handleDiskFlush``): under SYNC_FLUSH a
put that waits for the store (WAIT absent or "true") queues a request; the flush thread
swaps the whole request list, flushes once and answers every request in it, so a burst of
writers shares an fsync. No answer within syncFlushTimeout is FLUSH_DISK_TIMEOUT, and the
message stays stored. WAIT=false only wakes the flusher and returns PUT_OK.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgermq.clock import ManualClock
from ledgermq.config import FlushDiskType
from ledgermq.failpoints import armed
from ledgermq.protocol.message import decode_record
from ledgermq.store.checkpoint import FILE_SIZE
from ledgermq.store.flush import AsyncFlushService, GroupCommitService
from ledgermq.store.message_input import MessageInput
from ledgermq.store.results import GetStatus, PutResult, PutStatus

TOPIC = "FlushTopic"
SYNC = FlushDiskType.SYNC_FLUSH
FSYNC = "mapped_file.before_fsync"


def msg(seq: int, size: int = 100, **props: str) -> MessageInput:
    return MessageInput(
        topic=TOPIC,
        body=struct.pack(">q", seq) + bytes(size),
        properties={"KEYS": f"key-{seq}", **props},
    )


def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        threading.Event().wait(0.005)


def in_thread(name: str) -> bool:
    return threading.current_thread().name == name


class FsyncGate:
    """Counts commit-log fsyncs of one flush service and can hold them until released."""

    def __init__(self, service_name: str, *, hold: bool) -> None:
        self.service_name = service_name
        self.hold = hold
        self.count = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> None:
        if not in_thread(self.service_name):
            return
        with self._lock:
            self.count += 1
        self.entered.set()
        if self.hold:
            self.release.wait(10)


def read_checkpoint(root: Path) -> tuple[int, int, int] | None:
    path = root / "checkpoint"
    if not path.exists():
        return None
    data = path.read_bytes()
    assert len(data) == FILE_SIZE
    assert data[24:] == bytes(FILE_SIZE - 24)
    physic, logics, index = struct.unpack_from(">qqq", data)
    return physic, logics, index


def body_seq(record: bytes) -> int:
    return int(struct.unpack_from(">q", decode_record(record).body)[0])


# == SYNC_FLUSH ======================================================================


def test_sync_flush_put_carries_a_future_and_put_sync_returns_once_durable(store_factory) -> None:
    store = store_factory(flush_disk_type=SYNC)
    assert isinstance(store.commitlog_flusher, GroupCommitService)

    r = store.put_message(msg(0))
    assert r.status is PutStatus.PUT_OK and r.append is not None
    assert r.flush_future is not None
    assert r.flush_future.result(timeout=5) is True
    assert store.flushed_phy_offset >= r.append.next_offset

    for seq in range(1, 40):  # crosses into the next 64 KiB segment
        r = store.put_message_sync(msg(seq, size=3000))
        assert r.status is PutStatus.PUT_OK, r
        assert r.append is not None
        assert store.flushed_phy_offset >= r.append.next_offset
    assert len(store.commitlog.queue.files) >= 2
    assert store.flushed_phy_offset == store.max_phy_offset


def test_group_commit_answers_a_burst_of_writers_with_a_few_fsyncs(store_factory) -> None:
    store = store_factory(flush_disk_type=SYNC, sync_flush_timeout_ms=10_000)
    gate = FsyncGate(GroupCommitService.name, hold=True)
    writers = 32
    results: list[PutResult | None] = [None] * writers
    submitted = threading.Semaphore(0)

    def writer(i: int) -> None:
        r = store.put_message(msg(i + 1))
        submitted.release()  # the flush request is queued once put_message returns
        results[i] = store.wait_for_flush(r)

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(writers)]
    with armed(FSYNC, gate):
        try:
            first = store.put_message(msg(0))
            assert gate.entered.wait(5), "the flush thread never reached fsync"
            # The flusher is stuck in its first fsync while every writer queues a request.
            for t in threads:
                t.start()
            for _ in range(writers):
                assert submitted.acquire(timeout=5)
            assert gate.count == 1
            assert store.flushed_phy_offset < store.max_phy_offset
            assert all(r is None for r in results)  # nobody was answered early
        finally:
            gate.release.set()
        for t in threads:
            t.join(10)
            assert not t.is_alive()

    assert first.flush_future is not None and first.flush_future.result(5) is True
    assert all(r is not None and r.status is PutStatus.PUT_OK for r in results), results
    assert all(r is not None and r.flush_future is not None and r.flush_future.result(0) for r in results)
    # One blocked fsync, then one flush for the whole queue (two fsyncs if it spans segments).
    assert gate.count <= 3, f"{gate.count} fsyncs for {writers + 1} messages"
    assert store.flushed_phy_offset == store.max_phy_offset


def test_many_concurrent_sync_writers_all_succeed(store_factory) -> None:
    store = store_factory(flush_disk_type=SYNC)
    gate = FsyncGate(GroupCommitService.name, hold=False)
    results: list[PutResult | None] = [None] * 64

    def writer(i: int) -> None:
        results[i] = store.put_message_sync(msg(i, size=1500))

    with armed(FSYNC, gate):
        threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
            assert not t.is_alive()
    for r in results:
        assert r is not None and r.status is PutStatus.PUT_OK and r.append is not None
        assert store.flushed_phy_offset >= r.append.next_offset
    assert 1 <= gate.count <= 64 + 1  # never more than one fsync per message (+1 for a segment roll)


def test_a_slow_fsync_is_flush_disk_timeout_but_the_message_is_stored(store_factory) -> None:
    store = store_factory(flush_disk_type=SYNC, sync_flush_timeout_ms=200)
    gate = FsyncGate(GroupCommitService.name, hold=True)
    with armed(FSYNC, gate):
        try:
            started = time.monotonic()
            r = store.put_message_sync(msg(7))
            waited = time.monotonic() - started
            assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
            assert waited >= 0.2  # it did wait syncFlushTimeout
            assert gate.entered.is_set()
            assert r.append is not None
            assert store.flushed_phy_offset < r.append.next_offset
            # Stored all the same: dispatched and readable while the fsync still hangs.
            assert store.wait_dispatched(timeout=5)
            got = store.get_message(TOPIC, 0, r.append.queue_offset, 1)
            assert got.status is GetStatus.FOUND
            assert [body_seq(m) for m in got.messages] == [7]
            record = store.look_message_by_offset(r.append.wrote_offset)
            assert record is not None and body_seq(record) == 7
        finally:
            gate.release.set()
    # The flush completes later; a timeout is not a store failure.
    assert r.flush_future is not None and r.flush_future.result(5) is True
    wait_until(lambda: store.flushed_phy_offset >= r.append.next_offset, what="the late flush")
    assert store.failed_reason is None
    assert store.put_message_sync(msg(8)).status is PutStatus.PUT_OK


def test_wait_false_under_sync_flush_returns_put_ok_without_waiting(store_factory) -> None:
    store = store_factory(flush_disk_type=SYNC, sync_flush_timeout_ms=200)
    gate = FsyncGate(GroupCommitService.name, hold=True)
    with armed(FSYNC, gate):
        try:
            r = store.put_message(msg(1, WAIT="false"))
            assert r.status is PutStatus.PUT_OK and r.flush_future is None
            # Even the sync call does not wait: with the flusher stuck, waiting would have
            # ended in FLUSH_DISK_TIMEOUT.
            r2 = store.put_message_sync(msg(2, WAIT="false"))
            assert r2.status is PutStatus.PUT_OK and r2.flush_future is None
            assert r2.append is not None
            # The flusher was woken for these bytes (it is now inside their fsync).
            assert gate.entered.wait(5)
        finally:
            gate.release.set()
    wait_until(lambda: store.flushed_phy_offset >= r2.append.next_offset, what="the background flush")
    # WAIT=true (explicitly) behaves like no WAIT property: a future and a durable answer.
    r3 = store.put_message_sync(msg(3, WAIT="true"))
    assert r3.status is PutStatus.PUT_OK and r3.flush_future is not None


def test_a_failed_fsync_is_sticky_the_loop_lives_and_nothing_is_claimed_durable_after_it(
    store_factory, tmp_path: Path
) -> None:
    store = store_factory(flush_disk_type=SYNC, sync_flush_timeout_ms=5000)
    ok = store.put_message_sync(msg(1))
    assert ok.status is PutStatus.PUT_OK
    flusher = store.commitlog_flusher
    assert isinstance(flusher, GroupCommitService)
    failures_before = flusher.failures

    def broken_disk() -> None:
        if in_thread(GroupCommitService.name):
            raise OSError(errno.EIO, "injected fdatasync failure")

    with armed(FSYNC, broken_disk):
        r = store.put_message_sync(msg(2))
        assert r.status is not PutStatus.PUT_OK
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
        wait_until(lambda: flusher.failures > failures_before, what="the failure to be counted")
        assert flusher.alive
    assert r.append is not None

    # The loop survived, but it never flushes again: after a failed fsync the kernel may
    # have dropped the dirty pages, and a retry that "succeeds" would claim data that is
    # gone (fsyncgate). Every later request fails at once with the same error.
    assert flusher.alive and store.commitlog_flusher is flusher
    assert flusher.failed is not None
    flushed = store.flushed_phy_offset
    assert flushed < r.append.next_offset
    later = flusher.submit(r.append.next_offset)
    with pytest.raises(OSError, match="injected"):
        later.result(timeout=5)
    assert store.flushed_phy_offset == flushed
    # The store knows it lost an fsync and refuses writes until reopened.
    assert store.failed_reason is not None and "flush" in store.failed_reason
    refused = store.put_message_sync(msg(3))
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    # Readers are unaffected.
    assert store.look_message_by_offset(r.append.wrote_offset) is not None

    # A failed store does not claim a clean exit: the next start recovers thoroughly.
    store.shutdown()
    root = tmp_path / "store"
    assert (root / "abort").exists()
    reopened = store_factory(flush_disk_type=SYNC)
    assert reopened.recovery is not None and reopened.recovery.abnormal
    assert reopened.wait_dispatched(timeout=5)
    got = reopened.get_message(TOPIC, 0, 0, 32)
    assert [body_seq(m) for m in got.messages] == [1, 2]
    assert reopened.put_message_sync(msg(4)).status is PutStatus.PUT_OK


# == ASYNC_FLUSH =====================================================================


def test_async_flush_reaches_the_max_offset_on_its_interval(store_factory) -> None:
    store = store_factory(flush_interval_commitlog_ms=50)
    assert isinstance(store.commitlog_flusher, AsyncFlushService)
    last = None
    for seq in range(60):  # several 64 KiB segments
        r = store.put_message(msg(seq, size=3000))
        assert r.status is PutStatus.PUT_OK and r.flush_future is None
        last = r
    assert last is not None and last.append is not None
    assert len(store.commitlog.queue.files) >= 3
    wait_until(lambda: store.flushed_phy_offset >= store.max_phy_offset, what="the async flush")
    assert store.flushed_phy_offset == store.max_phy_offset == last.append.next_offset
    assert all(mf.flushed == mf.wrote for mf in store.commitlog.queue.files)


def test_async_flush_waits_for_its_timer_not_for_puts_and_shutdown_flushes(store_factory) -> None:
    store = store_factory(flush_interval_commitlog_ms=60_000)
    gate = FsyncGate(AsyncFlushService.name, hold=False)
    with armed(FSYNC, gate):
        r = store.put_message_sync(msg(1))  # no future under ASYNC_FLUSH: returns at once
        assert r.status is PutStatus.PUT_OK and r.flush_future is None and r.append is not None
        assert store.wait_dispatched(timeout=5)
        assert store.flushed_phy_offset == 0  # the timer has not fired
        assert gate.count == 0
        store.shutdown()  # the final flush
        assert gate.count >= 1
    assert store.flushed_phy_offset == r.append.next_offset


# == checkpoint ======================================================================


def test_checkpoint_holds_the_store_times_of_flushed_messages(store_factory, tmp_path: Path) -> None:
    t1 = 1_700_000_000_000
    clock = ManualClock(wall_ms=t1)
    store = store_factory(clock=clock)
    root = tmp_path / "store"
    for seq in range(3):
        r = store.put_message(msg(seq))
        assert r.ok and r.append is not None and r.append.store_timestamp == t1
    clock.advance(5.0)
    t2 = t1 + 5000
    for seq in range(3, 5):
        r = store.put_message(msg(seq))
        assert r.ok and r.append is not None and r.append.store_timestamp == t2

    wait_until(lambda: read_checkpoint(root) == (t2, t2, t2), what="the checkpoint to reach t2")
    store.shutdown()
    assert read_checkpoint(root) == (t2, t2, t2)


def test_checkpoint_never_claims_commit_log_data_that_is_not_flushed(store_factory, tmp_path: Path) -> None:
    t1 = 1_700_000_000_000
    clock = ManualClock(wall_ms=t1)
    store = store_factory(flush_disk_type=SYNC, sync_flush_timeout_ms=10_000, clock=clock)
    root = tmp_path / "store"
    assert store.put_message_sync(msg(1)).status is PutStatus.PUT_OK
    wait_until(lambda: read_checkpoint(root) == (t1, t1, t1), what="the first checkpoint")

    clock.advance(5.0)
    t2 = t1 + 5000
    gate = FsyncGate(GroupCommitService.name, hold=True)
    with armed(FSYNC, gate):
        try:
            r = store.put_message(msg(2))
            assert r.append is not None and r.append.store_timestamp == t2
            assert gate.entered.wait(5)
            # Queue and index flushes go on and are checkpointed; the commit log's time is not.
            wait_until(
                lambda: (cp := read_checkpoint(root)) is not None and cp[1] == t2,
                what="the consume-queue flush",
            )
            assert read_checkpoint(root) == (t1, t2, t2)
        finally:
            gate.release.set()
    assert r.flush_future is not None and r.flush_future.result(5) is True
    wait_until(lambda: read_checkpoint(root) == (t2, t2, t2), what="the checkpoint to catch up")


def test_checkpoint_index_time_never_names_index_entries_not_yet_flushed(
    store_factory, tmp_path: Path, monkeypatch
) -> None:
    """The index time, like the others, must be read before the flush it vouches for.

    An index entry added while the index fdatasync is in progress is not covered by it;
    a checkpoint written after that fsync must not name that entry's store time (RocketMQ
    reads the index file's end timestamp before forcing it).
    """
    t1 = 1_700_000_000_000
    clock = ManualClock(wall_ms=t1)
    store = store_factory(clock=clock)
    root = tmp_path / "store"
    assert store.put_message(msg(1)).ok
    wait_until(lambda: read_checkpoint(root) == (t1, t1, t1), what="the first checkpoint")
    assert store.index is not None

    real_fdatasync = os.fdatasync
    calls = 0
    entered = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]

    def fdatasync(fd: int) -> None:
        nonlocal calls
        index_fds = {f.fd for f in store.index.files} if store.index is not None else set()
        if in_thread("flush-consumequeue") and fd in index_fds and calls < 2:
            n = calls
            calls += 1
            entered[n].set()
            release[n].wait(10)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    try:
        clock.advance(5.0)
        t2 = t1 + 5000
        assert store.put_message(msg(2)).ok
        assert entered[0].wait(5), "the index flush never started"
        # While the index fsync for t2 runs, a t3 message is indexed.
        clock.advance(5.0)
        t3 = t2 + 5000
        assert store.put_message(msg(3)).ok
        assert store.wait_dispatched(timeout=5)
        release[0].set()
        # The next index fsync (the first to cover t3) is held: t3 is not durable yet.
        assert entered[1].wait(5), "the second index flush never started"
        cp = read_checkpoint(root)
        assert cp is not None
        assert cp[2] <= t2, f"checkpoint index time {cp[2]} names an entry (t3={t3}) not yet flushed"
    finally:
        release[0].set()
        release[1].set()
