"""DLedger mode across restarts: clean stops, crashes (testing.crash.abandon), lost
consume queues, and the switch from a native commit log (the divided offset)."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from ledgermq.protocol import message as M
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import open_message_store
from ledgermq.testing.crash import abandon
from tests.conftest import small_config
from tests.store.dledger.mode_helpers import TOPIC, Driver, bodies_in_queue, open_store


def _numbered(n: int, start: int = 0, filler: int = 40) -> list[bytes]:
    return [b"msg-%04d-" % i + bytes([i % 7 + 1]) * filler for i in range(start, start + n)]


def test_clean_restart_keeps_committed_and_hides_uncommitted(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = open_store(root)
    d = Driver(store)
    for b in _numbered(20):
        d.propose([b], queue_id=1)
    d.commit()
    d.propose([b"tail-0", b"tail-1"], queue_id=1)  # stored, not committed
    store.shutdown()

    store = open_store(root)
    try:
        d = Driver(store)
        assert store.commitlog is not None and store.commitlog.committed_index == 19
        assert bodies_in_queue(store, 1) == _numbered(20)
        assert store.commitlog.queue_offsets == {f"{TOPIC}-1": 22}  # past the stored tail
        d.commit()
        assert bodies_in_queue(store, 1) == [*_numbered(20), b"tail-0", b"tail-1"]
    finally:
        store.shutdown()


def test_crash_cuts_queues_to_the_checkpointed_commit(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = open_store(root)
    d = Driver(store)
    for b in _numbered(30):
        d.propose([b])
    d.commit(14)
    d.checkpoint()  # the driver persisted committed index 14
    d.commit(24)  # committed in memory only, dispatched (maybe flushed) before the crash
    assert store.max_offset_in_queue(TOPIC, 0) == 25
    store.queues.flush()
    abandon(store)

    store = open_store(root)
    try:
        assert store.recovery is not None and store.recovery.abnormal
        assert store.commitlog is not None and store.commitlog.committed_index == 14
        assert store.max_offset_in_queue(TOPIC, 0) == 15
        assert bodies_in_queue(store) == _numbered(15)
        assert store.commitlog.queue_offsets == {f"{TOPIC}-0": 30}
        Driver(store).commit()  # the leader commits again: same messages at the same offsets
        assert bodies_in_queue(store) == _numbered(30)
    finally:
        store.shutdown()


def test_crash_rebuilds_lost_consume_queues_from_committed_entries(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = open_store(root)
    d = Driver(store)
    for i, b in enumerate(_numbered(40, filler=2500)):  # about 100 KiB: two data files
        d.propose([b], queue_id=i % 3)
    d.noop()
    d.commit(30)
    d.checkpoint()
    assert store.commitlog is not None and len(store.commitlog.ledger.data.files) == 2
    abandon(store)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index", ignore_errors=True)
    (root / "checkpoint").unlink(missing_ok=True)

    store = open_store(root)
    try:
        every = _numbered(40, filler=2500)
        for q in range(3):
            assert bodies_in_queue(store, q) == [b for i, b in enumerate(every[:31]) if i % 3 == q]
        assert store.commitlog.queue_offsets == {f"{TOPIC}-{q}": len(every[q::3]) for q in range(3)}
        Driver(store).commit()
        for q in range(3):
            assert bodies_in_queue(store, q) == every[q::3]
    finally:
        store.shutdown()


def test_switch_from_a_native_commit_log(tmp_path: Path) -> None:
    root = tmp_path / "s"
    native = open_message_store(small_config(root))
    native.start()
    old = _numbered(25)
    for b in old:
        assert native.put_message(MessageInput(TOPIC, b, queue_id=0)).ok
    native.put_message(MessageInput(TOPIC, b"other", queue_id=5))
    assert native.wait_dispatched()
    old_end = native.max_phy_offset
    old_phy = native.commitlog_offset_in_queue(TOPIC, 0, 3)
    native.shutdown()

    store = open_store(root)
    try:
        assert store.commitlog is not None
        divided = store.commitlog.divided_offset
        assert divided >= old_end and divided % (64 * 1024) == 0
        assert bodies_in_queue(store) == old
        assert M.decode_record(store.look_message_by_offset(old_phy) or b"").body == old[3]
        d = Driver(store)
        d.propose([b"new-0", b"new-1"])
        d.propose([b"other-new"], queue_id=5)
        d.commit()
        assert bodies_in_queue(store) == [*old, b"new-0", b"new-1"]
        assert bodies_in_queue(store, 5) == [b"other", b"other-new"]
        assert store.commitlog_offset_in_queue(TOPIC, 0, 25) >= divided
        assert store.min_phy_offset == 0
    finally:
        store.shutdown()

    store = open_store(root)
    try:
        assert store.commitlog is not None and store.commitlog.divided_offset == divided
        assert bodies_in_queue(store) == [*old, b"new-0", b"new-1"]
        Driver(store).propose([b"new-2"])
        Driver(store).commit()
        assert bodies_in_queue(store)[-1] == b"new-2"
    finally:
        store.shutdown()


def test_commit_wakes_the_reput_and_arrival_listeners(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    arrived = threading.Event()
    seen: list[tuple[str, int, int]] = []

    def listener(topic: str, queue_id: int, max_offset: int) -> None:
        seen.append((topic, queue_id, max_offset))
        arrived.set()

    store.add_arrival_listener(listener)
    try:
        d = Driver(store)
        d.propose([b"x", b"y"], queue_id=4)
        time.sleep(0.1)
        assert not arrived.is_set()  # written, not committed
        store.commit_to_index(d.last_index)
        assert arrived.wait(2)
        assert seen[-1] == (TOPIC, 4, 2)
    finally:
        store.shutdown()


def test_after_a_crash_a_follower_cuts_its_uncommitted_tail(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = open_store(root)
    d = Driver(store)
    for b in _numbered(10):
        d.propose([b])
    d.commit(5)
    d.checkpoint()
    abandon(store)

    store = open_store(root)
    try:
        assert store.commitlog.queue_offsets == {f"{TOPIC}-0": 10}
        store.truncate_after_index(5)  # the new leader's log diverges after index 5
        assert store.commitlog.queue_offsets == {f"{TOPIC}-0": 6}
        d = Driver(store, term=2)
        d.propose([b"after-cut"])
        d.commit()
        assert bodies_in_queue(store) == [*_numbered(6), b"after-cut"]
    finally:
        store.shutdown()


def test_clean_restart_rebuilds_a_deleted_consumequeue_directory(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = open_store(root)
    d = Driver(store)
    for i, b in enumerate(_numbered(12)):
        d.propose([b], queue_id=i % 2)
    d.commit()
    store.shutdown()
    shutil.rmtree(root / "consumequeue")

    store = open_store(root)
    try:
        every = _numbered(12)
        assert bodies_in_queue(store, 0) == every[0::2]
        assert bodies_in_queue(store, 1) == every[1::2]
    finally:
        store.shutdown()
