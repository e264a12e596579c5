"""A store with more consume queues than it may hold open files: every stored message
stays readable, the descriptors stay bounded, a dispatch failure stops puts instead of
being acknowledged through, and queue files whose directory entries never reached the
disk are rebuilt by recovery."""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore
from ledgermq.store.open_files import FileLimit, OpenFiles, capacity_for
from ledgermq.store.queue_files import DirSync
from ledgermq.store.queue_segment import QueueSegment
from ledgermq.store.results import GetStatus, PutStatus
from ledgermq.testing.crash import abandon

from .rw_helpers import StoreFactory, put

TOPICS = 150
QUEUES = 8  # 1,200 queues against a budget of 16 open files


def _cq_descriptors(root: Path) -> int:
    """Descriptors of this process open on files under ``root``/consumequeue."""
    cq_root = str(root / "consumequeue")
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(cq_root):
                count += 1
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
    return count


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _readable(store: MessageStore, topic: str, queue_id: int, body: bytes) -> bool:
    got = store.get_message(topic, queue_id, 0, 4)
    return got.status is GetStatus.FOUND and got.message_count == 1 and body in got.chunks[0]


def test_thousands_of_queues_stay_readable_under_a_small_open_file_budget(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    store = store_factory(root=root, max_open_consume_queue_files=16)
    assert store.open_file_budget == 16
    for t in range(TOPICS):
        for q in range(QUEUES):
            put(store, f"T{t}", f"m-{t}-{q}".encode(), q)
    assert store.wait_dispatched(timeout=30)
    assert store.reput is not None and store.reput.dispatch_error is None
    # A file being created holds its new descriptor a moment before the budget adopts it
    # (and closes the least recently used one): count once the creator thread is idle.
    _wait(lambda: store.queues.creator.backlog == 0, 30)
    assert _cq_descriptors(root) <= 16
    assert all(_readable(store, f"T{t}", q, f"m-{t}-{q}".encode()) for t in range(TOPICS) for q in range(QUEUES))
    assert _cq_descriptors(root) <= 16
    assert store.queues.open_files.opens > 16  # the budget was really exceeded and cycled
    store.shutdown()

    reopened = store_factory(root=root, max_open_consume_queue_files=16)
    assert _cq_descriptors(root) <= 16  # recovery of 1,200 queues kept the budget too
    assert len(reopened.queues.all()) >= TOPICS * QUEUES
    for t in range(0, TOPICS, 7):
        for q in range(QUEUES):
            assert _readable(reopened, f"T{t}", q, f"m-{t}-{q}".encode())
    put(reopened, "T0", b"after", 0)  # queue offsets continue
    assert reopened.wait_dispatched(timeout=10)
    got = reopened.get_message("T0", 0, 1, 4)
    assert got.status is GetStatus.FOUND and b"after" in got.chunks[0]


def test_a_dispatch_failure_refuses_puts_until_it_goes_through(store_factory: StoreFactory) -> None:
    store = store_factory()
    put(store, "Old", b"before", 0)
    assert store.wait_dispatched(timeout=10)

    def no_space() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    failpoints.arm("consume_queue.before_put", no_space)
    try:
        accepted = [put(store, "New", b"first", 0)]  # stored before anyone knew it cannot be dispatched
        assert store.reput is not None
        _wait(lambda: store.reput is not None and store.reput.dispatch_error is not None)
        refused = store.put_message(MessageInput(topic="Old", body=b"refused", queue_id=0))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "New-0" in refused.remark and "readable" in refused.remark
        assert "No space left" in store.runtime_info()["dispatchError"]
        assert not _readable(store, "New", 0, b"first")
    finally:
        failpoints.disarm("consume_queue.before_put")
    _wait(lambda: store.reput is not None and store.reput.dispatch_error is None)
    accepted.append(put(store, "Old", b"after", 0))
    assert store.wait_dispatched(timeout=10)
    assert _readable(store, "New", 0, b"first")
    got = store.get_message("Old", 0, 1, 4)
    assert got.status is GetStatus.FOUND and b"after" in got.chunks[0]
    assert store.runtime_info()["dispatchError"] == ""


def test_a_queue_file_that_cannot_be_created_refuses_puts_but_keeps_what_was_accepted_readable(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    store = store_factory(root=root)

    def no_space() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    failpoints.arm("consume_queue.before_create", no_space)
    try:
        put(store, "Held", b"in-memory", 0)
        _wait(lambda: store.queues.creator.error is not None)
        assert _readable(store, "Held", 0, b"in-memory")  # readable before its file exists
        refused = store.put_message(MessageInput(topic="Held", body=b"refused", queue_id=0))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE and "No space left" in refused.remark
        assert not (root / "consumequeue" / "Held" / "0" / f"{0:020d}").exists()
    finally:
        failpoints.disarm("consume_queue.before_create")
    _wait(lambda: store.queues.creator.error is None and store.queues.creator.backlog == 0)
    assert (root / "consumequeue" / "Held" / "0" / f"{0:020d}").exists()
    put(store, "Held", b"again", 0)
    assert store.wait_dispatched(timeout=10)
    got = store.get_message("Held", 0, 0, 4)
    assert got.status is GetStatus.FOUND and got.message_count == 2
    store.shutdown()
    reopened = store_factory(root=root).get_message("Held", 0, 0, 4)
    assert reopened.message_count == 2 and b"in-memory" in reopened.chunks[0]


def test_creating_a_queue_does_not_sync_its_directory_until_the_flush(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    import ledgermq.store.queue_files as queue_files

    monkeypatch.setattr(queue_files, "fsync_dir", lambda d: synced.append(str(d)))
    store = store_factory(flush_interval_consume_queue_ms=3_600_000)
    for q in range(4):
        put(store, "Fresh", b"x", q)
    assert store.wait_dispatched(timeout=10)
    _wait(lambda: store.queues.creator.backlog == 0)
    assert (Path(store.config.consume_queue_path) / "Fresh" / "3").is_dir()
    assert synced == []  # four queues and their files made without one directory fsync
    store.queues.flush()
    queue_dirs = {str(Path(store.config.consume_queue_path) / "Fresh" / str(q)) for q in range(4)}
    assert queue_dirs | {str(Path(store.config.consume_queue_path) / "Fresh")} <= set(synced)
    assert synced.index(str(Path(store.config.consume_queue_path) / "Fresh")) > max(synced.index(d) for d in queue_dirs)


def test_queues_whose_directory_entries_were_lost_in_a_crash_are_rebuilt(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    store = store_factory(root=root, flush_interval_consume_queue_ms=3_600_000)
    for q in range(QUEUES):
        put(store, "Lost", f"lost-{q}".encode(), q)
    assert store.wait_dispatched(timeout=10)
    store.commitlog.queue.flush()  # the commit log is durable; the queues' entries are not
    abandon(store)
    shutil.rmtree(root / "consumequeue" / "Lost")  # what a power cut may do to unsynced entries

    store = store_factory(root=root)
    assert store.recovery is not None and store.recovery.abnormal
    for q in range(QUEUES):
        assert _readable(store, "Lost", q, f"lost-{q}".encode())


def test_a_borrowed_descriptor_is_never_closed_under_its_user(tmp_path: Path) -> None:
    files = OpenFiles(2)
    segs = []
    for i in range(4):
        path = str(tmp_path / f"{i * 1280:020d}")
        segs.append(QueueSegment.create(path, 1280, files))
    held = files.acquire(segs[0])  # a pull in the middle of a read
    for seg in segs[1:]:
        seg.append(b"u" * 20)
    assert segs[0].fd == held and os.fstat(held)  # still open: every other file was evicted instead
    assert files.open_count <= 3  # over capacity only by the one in use
    segs[0].destroy()  # retention deletes it under the reader
    assert os.pread(held, 4, 0) == b"\x00" * 4  # the reader's descriptor still works
    files.release(segs[0])
    assert segs[0].fd == -1
    with pytest.raises(OSError):
        os.fstat(held)
    files.close_all()


def test_the_open_file_budget_follows_the_limit() -> None:
    assert capacity_for(FileLimit(1_048_576, 1_048_576, None), 1024) == 1024
    assert capacity_for(FileLimit(1024, 1024, None), 1024) == (1024 - 256) // 4
    assert capacity_for(FileLimit(64, 64, None), 1024) == 8


def test_dir_sync_takes_children_before_parents() -> None:
    ds = DirSync()
    ds.add("/a/b/c", "/a/b", "/a")
    assert ds.take() == ["/a/b/c", "/a/b", "/a"]
    assert ds.take() == []


def test_a_clean_restart_takes_the_saved_positions_without_reading_a_queue(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    store = store_factory(root=root)
    for q in range(QUEUES):
        put(store, "Pos", f"p-{q}".encode(), q)
        put(store, "Pos", f"p2-{q}".encode(), q)
    assert store.wait_dispatched(timeout=10)
    before = {q: (store.queues.get("Pos", q).min_offset, store.queues.get("Pos", q).max_offset) for q in range(QUEUES)}  # type: ignore[union-attr]
    store.shutdown()
    assert (root / "consumequeue.positions").exists()

    store = store_factory(root=root)
    assert not (root / "consumequeue.positions").exists()  # never trusted twice
    assert store.queue_positions_used
    assert store.queues.open_files.opens == 0  # no queue file was opened to start
    for q in range(QUEUES):
        cq = store.queues.get("Pos", q)
        assert cq is not None and (cq.min_offset, cq.max_offset) == before[q]
        got = store.get_message("Pos", q, 0, 4)
        assert got.message_count == 2 and f"p-{q}".encode() in got.chunks[0]
    put(store, "Pos", b"third", 0)
    assert store.wait_dispatched(timeout=10)
    assert store.get_message("Pos", 0, 2, 4).message_count == 1


def test_positions_are_ignored_after_a_crash_or_when_the_store_changed_meanwhile(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    store = store_factory(root=root)
    put(store, "Pos", b"one", 0)
    assert store.wait_dispatched(timeout=10)
    store.shutdown()
    saved = (root / "consumequeue.positions").read_bytes()

    # Another broker (a Java one: same formats) ran on the store and stopped cleanly.
    other = store_factory(root=root)
    put(other, "Pos", b"two", 0)
    assert other.wait_dispatched(timeout=10)
    other.shutdown()
    (root / "consumequeue.positions").write_bytes(saved)  # stale: it describes the first run

    store = store_factory(root=root)
    assert not store.queue_positions_used  # read from disk
    assert store.get_message("Pos", 0, 0, 4).message_count == 2

    store.shutdown()
    saved = (root / "consumequeue.positions").read_bytes()
    store = store_factory(root=root)
    abandon(store)
    (root / "consumequeue.positions").write_bytes(saved)
    store = store_factory(root=root)
    assert store.recovery is not None and store.recovery.abnormal
    assert not store.queue_positions_used
    assert store.get_message("Pos", 0, 0, 4).message_count == 2
