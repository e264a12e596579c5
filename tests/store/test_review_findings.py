"""Failing tests for defects found in the store review (numbered as in the report).

Each test states the scenario in its docstring. None of them sleeps blindly: interleavings
between threads are forced with monkeypatched hooks, failpoints or by calling the service
steps directly; the only waits are bounded waits for a condition the bug prevents.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ledgermq.config import BrokerRole
from ledgermq.store.consumequeue import ConsumeQueue
from ledgermq.store.message_input import BatchInput, MessageInput
from ledgermq.store.results import GetStatus, PutStatus

from .rw_helpers import StoreFactory, put

# -- 1. a legal message that the reput service and recovery reject -------------------------


@pytest.mark.parametrize(
    "props",
    [{"KEYS": "a\x00b"}, {"TAGS": "t\x00"}, {"custom": "x\x00y"}],
    ids=["nul-in-keys", "nul-in-tags", "nul-in-user-property"],
)
def test_nul_in_a_property_is_refused_at_put(store_factory: StoreFactory, props: dict[str, str]) -> None:
    """Recovery reads NUL in topic or properties as the mark of a torn write, so the store
    refuses such a message up front (MESSAGE_ILLEGAL) instead of storing a record that a
    later recovery would have to second-guess."""
    store = store_factory()
    refused = store.put_message(MessageInput(topic="T", body=b"poison", properties=props))
    assert refused.status is PutStatus.MESSAGE_ILLEGAL and "NUL" in refused.remark
    assert store.max_phy_offset == 0


def test_a_complete_record_with_nul_from_a_master_neither_stalls_nor_is_cut(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    """A Java master may store properties containing U+0000. A slave must dispatch such a
    record, and recovery must keep it (and everything after it): it is followed by a valid
    record, so it cannot be a torn tail."""
    from ledgermq.protocol.message import encode_record
    from ledgermq.testing.crash import abandon

    root = tmp_path / "slave"
    slave = store_factory(root=root, broker_role=BrokerRole.SLAVE)
    poison = encode_record(topic="T", body=b"poison", properties="custom\x01x\x00y", physical_offset=0)
    later = encode_record(topic="Other", body=b"acknowledged later", physical_offset=len(poison))
    slave.append_raw(0, bytes(poison) + bytes(later))
    assert slave.wait_dispatched(timeout=5)
    assert slave.reput is not None and slave.reput.stuck_reason is None
    assert slave.max_offset_in_queue("T", 0) == 1 and slave.max_offset_in_queue("Other", 0) == 1
    abandon(slave)

    reopened = store_factory(root=root, broker_role=BrokerRole.SLAVE)
    assert reopened.recovery is not None and reopened.recovery.abnormal
    assert reopened.look_message_by_offset(len(poison)) is not None, "a record after the NUL one was cut"
    assert reopened.look_message_by_offset(0) is not None


# -- 2. retention unmaps a consume-queue segment under a pinned reader ---------------------


@pytest.fixture
def retention_store(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A store whose disk gauge says 87% (clean forcibly, still accept puts) and whose
    clean timer never fires: tests run rounds with clean_once()."""
    from ledgermq.store.message_store import MessageStore, open_message_store
    from tests.conftest import small_config

    made: list[MessageStore] = []

    def make(**overrides: object) -> MessageStore:
        cfg = small_config(
            tmp_path / "store",
            **{
                "clean_resource_interval_ms": 3_600_000,
                "mapped_file_size_consume_queue": 20 * 16,
                **overrides,
            },
        )
        store = open_message_store(cfg, disk_usage=lambda _p: 0.87)
        store.start()
        made.append(store)
        return store

    yield make
    for s in made:
        s.shutdown()


def _fill_segments(store, segments: int, topic: str = "T") -> None:  # type: ignore[no-untyped-def]
    while len(store.commitlog.queue.files) < segments:
        put(store, topic, b"x" * 5000)
    assert store.wait_dispatched(timeout=10)


def test_retention_does_not_unmap_a_consume_queue_segment_a_reader_holds(
    retention_store, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Retention deleting a consume-queue segment while a pull on another thread reads
    it must not raise out of get_message (it once unmapped the segment under the reader).
    Segments are now read with pread through a borrowed descriptor; a reader that comes
    after the deletion sees the segment gone."""
    from ledgermq.store.open_files import Borrower, OpenFiles

    store = retention_store()
    _fill_segments(store, 3)
    cq = store.queues.get("T", 0)
    assert cq is not None and len(cq.files.files) >= 2
    target = cq.files.files[0]
    original_acquire = OpenFiles.acquire
    ran = []

    def acquire_then_clean(self: OpenFiles, f: Borrower) -> int:
        fd = original_acquire(self, f)
        if f is target and not ran:
            ran.append(True)
            # The clean thread runs between the reader's borrowing of a descriptor and its pread.
            assert store.cleaner is not None
            store.cleaner.clean_once()
            assert target.retired and not os.path.exists(target.path)  # deleted under the reader
        return fd

    monkeypatch.setattr(OpenFiles, "acquire", acquire_then_clean)
    result = store.get_message("T", 0, 0, 32)
    assert ran
    assert result.status in (GetStatus.MESSAGE_WAS_REMOVING, GetStatus.OFFSET_TOO_SMALL, GetStatus.FOUND)


# -- 3. truncate_after_offset (slave realignment) -------------------------------------------


def _master_bytes(store_factory: StoreFactory, root: Path, msgs: list[tuple[bytes, str]]) -> tuple[bytes, list[int]]:
    """Put (body, KEYS) messages to T/0 on a fresh master; return its log and offsets."""
    master = store_factory(root=root)
    offsets = [put(master, "T", body, KEYS=key).append.wrote_offset for body, key in msgs]  # type: ignore[union-attr]
    data = master.read_commitlog(0, master.max_phy_offset)
    assert len(data) == master.max_phy_offset
    master.shutdown()
    return data, offsets


def test_truncate_after_offset_resets_the_index(store_factory: StoreFactory, tmp_path: Path) -> None:
    """MessageStore.truncate_after_offset cuts the commit log and the consume queues but not
    the index: IndexService._next_phy stays past the cut, so records the new master writes
    at the reused offsets are never indexed (build() takes them for replays), and the old
    entries keep answering key queries with whatever record now sits at their offset."""
    old, old_offs = _master_bytes(store_factory, tmp_path / "a", [(b"one", "k1"), (b"two", "old")])
    new, new_offs = _master_bytes(store_factory, tmp_path / "b", [(b"one", "k1"), (b"TWO", "new")])
    assert old_offs == new_offs
    slave = store_factory(root=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    slave.append_raw(0, old)
    assert slave.wait_dispatched(timeout=5)
    assert len(slave.query_message("T", "old", 32, 0, 2**62).messages) == 1

    cut = old_offs[1]
    slave.truncate_after_offset(cut)
    slave.append_raw(cut, new[cut:])
    assert slave.wait_dispatched(timeout=5)

    assert slave.get_message("T", 0, 1, 1).messages[0][-60:].find(b"TWO") >= 0
    assert len(slave.query_message("T", "new", 32, 0, 2**62).messages) == 1, "new record not indexed"
    assert slave.query_message("T", "old", 32, 0, 2**62).messages == [], "stale index entry"


def test_truncate_after_offset_while_the_reput_thread_is_dispatching(
    store_factory: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """truncate_after_offset takes no lock the reput thread respects. If the reput thread has
    already parsed a record beyond the cut, it still writes its consume-queue unit after
    truncate_dirty ran, and it then stores its own reput_from (past the cut) over the reset.
    The new master's records are then dispatched from the middle of a record (reput stuck)
    and queue offset 1 keeps pointing at the old record's size."""
    old, offs = _master_bytes(store_factory, tmp_path / "a", [(b"one", "k1"), (b"two", "k2"), (b"three", "k3")])
    new, new_offs = _master_bytes(store_factory, tmp_path / "b", [(b"one", "k1"), (b"TWO-longer" * 20, "k2")])
    cut = offs[1]
    assert new_offs[1] == cut

    entered, release = threading.Event(), threading.Event()
    real_put_units = ConsumeQueue.put_units

    def slow_put_units(cq, units):  # type: ignore[no-untyped-def]
        # The reput thread writes a pass's units after parsing its records: it holds
        # the record at the cut (and the one after) when it gets here.
        if any(u[0] == cut for u in units) and not entered.is_set():
            entered.set()
            assert release.wait(5)
        real_put_units(cq, units)

    monkeypatch.setattr(ConsumeQueue, "put_units", slow_put_units)
    slave = store_factory(root=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    slave.append_raw(0, old)
    assert entered.wait(5), "reput thread never reached the second record"
    slave.truncate_after_offset(cut)  # the HA thread realigns while the reput thread is mid-segment
    release.set()
    assert slave.wait_dispatched(cut, timeout=5)
    slave.append_raw(cut, new[cut:])

    assert slave.wait_dispatched(timeout=1), f"reput stuck: {slave.reput.stuck_reason if slave.reput else None}"
    got = slave.get_message("T", 0, 1, 1)
    assert got.status is GetStatus.FOUND
    assert b"TWO-longer" in got.messages[0]
    assert slave.max_offset_in_queue("T", 0) == 2


def test_truncate_under_a_reader_does_not_sigbus(tmp_path: Path) -> None:
    """MappedFile.truncate_to shrinks the mapped file and grows it back (ftruncate twice)
    while MappedFile.wrote still says the tail is readable. A reader on another thread
    that checked wrote and touches the tail between the two calls gets SIGBUS, which kills
    the whole process. At recovery nothing else runs; truncate_after_offset runs it live.
    Run in a child process: the reader is invoked at the racy moment from the hook."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import os
        from ledgermq.store.message_store import MessageStore, open_message_store
        from ledgermq.store.message_input import BatchInput, MessageInput
        from ledgermq.config import BrokerRole
        from tests.conftest import small_config

        master = open_message_store(small_config({str(tmp_path / "m")!r}))
        master.start()
        offs = [master.put_message(MessageInput(topic="T", body=b"x" * 3000)).append.wrote_offset for _ in range(3)]
        data = master.read_commitlog(0, master.max_phy_offset)
        master.shutdown()
        slave = open_message_store(small_config({str(tmp_path / "s")!r}, broker_role=BrokerRole.SLAVE))
        slave.start()
        slave.append_raw(0, data)
        real = os.ftruncate
        calls = []
        def ftruncate(fd, size):
            real(fd, size)
            calls.append(size)
            if len(calls) == 1:
                # another thread (a pull, the HA sender, the reput) reading the last record now
                slave.commitlog.read(offs[2], 100)
        os.ftruncate = ftruncate
        slave.truncate_after_offset(offs[1])
        os.ftruncate = real
        slave.shutdown()
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=str(Path(__file__).resolve().parents[2]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-500:]}"


# -- 4. an empty slave cannot start where a RocketMQ master starts it -----------------------


def test_empty_slave_accepts_the_masters_last_segment(store_factory: StoreFactory, tmp_path: Path) -> None:
    """A RocketMQ 4.9.7 master answers a slave's first report of 0 with data from the start
    of its *last* commit-log file (HAConnection: maxOffset - maxOffset % mappedFileSize),
    and HAClient accepts any offset while its own max offset is 0 (CommitLog.appendData
    creates the first file there). CommitLog.append_raw insists on offset == max_offset
    (0 for an empty store), so a slave attached to any master past its first segment can
    never start, although ConsumeQueue's pre-blank filling exists for exactly this case."""
    from ledgermq.errors import StoreError

    master = store_factory(root=tmp_path / "m")
    seg = master.config.mapped_file_size_commitlog
    while master.max_phy_offset < seg + 1000:
        put(master, "T", b"y" * 3000)
    start = master.max_phy_offset - master.max_phy_offset % seg
    data = master.read_commitlog(start, seg)
    slave = store_factory(root=tmp_path / "s", broker_role=BrokerRole.SLAVE)
    try:
        slave.append_raw(start, data)
    except StoreError as exc:
        pytest.fail(f"empty slave refused the master's first transfer at {start}: {exc}")
    assert slave.wait_dispatched(timeout=5)
    assert slave.max_offset_in_queue("T", 0) == master.max_offset_in_queue("T", 0)


# -- 5. reput stalls behind a segment whose deletion waits for a reader --------------------


def test_reput_skips_a_segment_that_is_being_deleted(retention_store) -> None:  # type: ignore[no-untyped-def]
    """When retention asks to destroy a segment a reader still pins (HA sendfile, a long
    read), MappedFile.destroy marks it unavailable and leaves it in the list for up to
    destroyMapedFileIntervalForcibly (120 s). A reput service behind that point finds the
    segment, fails pin() and breaks out, every round, so nothing after it is dispatched
    until the deletion completes. RocketMQ's ReputService jumps to commitLog.getMinOffset()
    (already past an unavailable first file) instead."""
    store = retention_store()
    assert store.reput is not None
    store.reput.stop(final_step=False)  # dispatch by hand from here on: the reput is "behind"
    while len(store.commitlog.queue.files) < 3:
        put(store, "T", b"z" * 5000)
    first = store.commitlog.queue.files[0]
    assert first.pin()  # a reader holds the oldest segment
    try:
        assert store.cleaner is not None
        store.cleaner.clean_once()
        assert not first.available and store.commitlog.min_offset == first.end_offset
        dispatched = store.reput.dispatch_available()
        assert dispatched > 0 and store.reput.reput_from == store.commitlog.max_offset, (
            f"reput stuck at {store.reput.reput_from} behind a segment being deleted"
        )
    finally:
        first.unpin()


# -- 6. resources leaked when start() fails -----------------------------------------------


def _open_fds() -> set[str]:
    import os

    return set(os.listdir("/proc/self/fd"))


def test_failed_start_closes_every_segment_it_mapped(store_factory: StoreFactory, tmp_path: Path) -> None:
    """MappedFileQueue.load maps segments into a local list and assigns self.files only at
    the end; a bad segment later in the directory raises StoreError and the MappedFiles
    already opened (fd + mmap each) are never closed, even though start() calls
    _close_files(). A supervisor retrying start() leaks one fd per good segment per try."""
    from ledgermq.errors import StoreError
    from ledgermq.store.message_store import open_message_store

    root = tmp_path / "store"
    store = store_factory(root=root)
    while len(store.commitlog.queue.files) < 3:
        put(store, "T", b"w" * 5000)
    cfg = store.config
    store.shutdown()
    last = sorted((root / "commitlog").iterdir())[-1]
    with open(last, "r+b") as f:
        f.truncate(4096)  # e.g. copied from a store with another mappedFileSizeCommitLog

    before = _open_fds()
    with pytest.raises(StoreError):
        open_message_store(cfg).start()
    import gc

    gc.collect()
    leaked = _open_fds() - before
    assert not leaked, f"{len(leaked)} file descriptor(s) left open by a failed start"


# -- 7. the store lock does not exclude a Java broker ------------------------------------


def test_store_lock_excludes_a_java_style_posix_lock(tmp_path: Path) -> None:
    """RocketMQ's DefaultMessageStore locks <root>/lock with FileChannel.tryLock(0, 1, false),
    a POSIX (fcntl) record lock. StoreLock uses flock, which on Linux is independent of
    POSIX locks, so a Java broker and ledgermq can both open the same store directory and
    write the same commit log. The child process below takes the lock exactly as the JVM
    does."""
    import subprocess
    import sys

    from ledgermq.errors import StoreLockedError
    from ledgermq.store.message_store import open_message_store
    from tests.conftest import small_config

    root = tmp_path / "store"
    root.mkdir()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            f"fd = os.open({str(root / 'lock')!r}, os.O_RDWR | os.O_CREAT, 0o644)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        store = open_message_store(small_config(root))
        try:
            with pytest.raises(StoreLockedError):
                store.start()
        finally:
            store.shutdown()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)


# -- 8. a put racing shutdown ------------------------------------------------------------


def test_a_put_in_flight_during_shutdown_gets_a_status_not_an_exception(store_factory: StoreFactory) -> None:
    """shutdown() never takes the commit log's put lock, so it unmaps the segments while a
    put that already passed _refuse_put is inside CommitLog.append; that put then raises
    ValueError("mmap closed or invalid") to the caller instead of returning a PutResult.
    (A put that lands between the final reput/flush and the unmap is written but left to
    the next start.) RocketMQ's broker stops its remoting server before the store and the
    store pauses 1 s; here the store is a library called from any thread, so shutdown
    should take CommitLog.put_lock (and puts should re-check ``running`` under it)."""
    from ledgermq.failpoints import armed

    store = store_factory()
    entered, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    def hold() -> None:
        if threading.current_thread().name == "late-put":
            entered.set()
            release.wait(5)

    def late_put() -> None:
        try:
            outcome.append(store.put_message(MessageInput(topic="T", body=b"late")))
        except Exception as exc:
            outcome.append(exc)

    with armed("commitlog.before_append", hold):
        t = threading.Thread(target=late_put, name="late-put")
        t.start()
        assert entered.wait(5)
        done = threading.Event()
        closer = threading.Thread(target=lambda: (store.shutdown(), done.set()))
        closer.start()
        # shutdown either waits for the put (correct) or finishes under it (the bug)
        finished_under_put = done.wait(3)
        release.set()
        t.join(5)
        closer.join(10)
    assert not isinstance(outcome[0], Exception), f"put raised {outcome[0]!r}"
    assert not finished_under_put or outcome[0].status is not PutStatus.PUT_OK  # type: ignore[union-attr]


# -- 9. topics / queue ids the on-disk layout cannot hold --------------------------------


@pytest.mark.parametrize(
    ("topic", "queue_id", "named"),
    [("a/b", 0, "topic"), ("..", 0, "topic"), (".", 0, "topic"), ("", 0, "topic"), ("T", -1, "queue id")],
    ids=["slash-in-topic", "dot-dot-topic", "dot-topic", "empty-topic", "negative-queue"],
)
def test_a_queue_the_on_disk_layout_cannot_hold_is_refused_and_leaves_nothing_behind(
    store_factory: StoreFactory, tmp_path: Path, topic: str, queue_id: int, named: str
) -> None:
    """Topics become directory names under consumequeue/<topic>/<queue id>. A topic with '/'
    would be stored under consumequeue/a/b/0 and a negative queue id under consumequeue/T/-1;
    ConsumeQueueTable.load skips both (it wants consumequeue/<topic>/<digits>), so after a
    clean restart such a queue would be gone and its acknowledged messages unreachable ('..'
    or '.' escape the directory entirely). The store refuses them as RocketMQ's broker does
    (TopicValidator, ^[%|a-zA-Z0-9_-]+$; queue ids >= 0), single and batched, and writes
    nothing; the store goes on taking good messages and keeps them across a restart."""
    root = tmp_path / "store"
    store = store_factory(root=root)
    single = store.put_message(MessageInput(topic=topic, body=b"m0", queue_id=queue_id))
    batch = store.put_messages(BatchInput(topic=topic, entries=[(0, b"b0", {}), (0, b"b1", {})], queue_id=queue_id))
    for refused in (single, batch):
        assert refused.status is PutStatus.MESSAGE_ILLEGAL, refused
        assert named in refused.remark, refused.remark
    assert store.max_phy_offset == 0
    assert sorted(p.name for p in (root / "consumequeue").glob("*")) == []

    put(store, "Other", b"later")
    assert store.wait_dispatched(timeout=5)
    assert store.max_offset_in_queue("Other", 0) == 1
    store.shutdown()

    reopened = store_factory(root=root)
    assert reopened.max_offset_in_queue("Other", 0) == 1
    assert sorted(p.name for p in (root / "consumequeue").glob("*")) == ["Other"]
