"""What the HA paths ask of the store: appends of several buffers at once, and a dispatch
loop that waits for the rest of a record and can be held off while a backlog arrives."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

from ledgermq.config import BrokerRole
from ledgermq.store import reput as reput_module
from ledgermq.store.message_store import MessageStore
from tests.ha.helpers import SEG, TOPIC, open_store, put


def _pair(tmp_path: Path) -> tuple[MessageStore, MessageStore]:
    return open_store(tmp_path / "m", BrokerRole.ASYNC_MASTER), open_store(tmp_path / "s", BrokerRole.SLAVE)


def test_append_raw_of_several_buffers_across_segments_matches_the_master(tmp_path: Path) -> None:
    master, slave = _pair(tmp_path)
    try:
        end = put(master, 200)  # ~3 segments of 64 KiB
        assert end > 2 * SEG
        data = b"".join(master.read_commitlog(off, SEG) for off in range(0, end, SEG))
        assert len(data) == end
        # uneven pieces, one of them spanning the first segment boundary
        cuts = [0, 10, 5000, SEG - 100, SEG + 3000, 2 * SEG, end]
        parts = [memoryview(data)[a:b] for a, b in itertools.pairwise(cuts)]
        slave.append_raw(0, parts[:3])
        assert slave.max_phy_offset == SEG - 100
        slave.append_raw(SEG - 100, parts[3:])
        assert slave.max_phy_offset == end
        assert b"".join(slave.read_commitlog(off, SEG) for off in range(0, end, SEG)) == data
        assert slave.wait_dispatched(timeout=10.0)
        assert sum(slave.max_offset_in_queue(TOPIC, q) for q in range(4)) == 200
    finally:
        slave.shutdown()
        master.shutdown()


def test_dispatch_returns_while_the_last_record_is_still_arriving(tmp_path: Path) -> None:
    """A partial record at the end is waited for, not spun on: the pass returns at once."""
    master, slave = _pair(tmp_path)
    try:
        put(master, 3, size=2000)
        data = master.read_commitlog(0, SEG)
        slave.append_raw(0, data[: len(data) - 500])
        assert slave.reput is not None
        done = threading.Event()

        def call() -> None:
            assert slave.reput is not None
            slave.reput.dispatch_available()
            done.set()

        threading.Thread(target=call, daemon=True).start()
        assert done.wait(2.0), "dispatch_available spun on the incomplete tail"
        assert sum(slave.max_offset_in_queue(TOPIC, q) for q in range(4)) == 2
        slave.append_raw(len(data) - 500, data[len(data) - 500 :])
        assert slave.wait_dispatched(timeout=5.0)
        assert sum(slave.max_offset_in_queue(TOPIC, q) for q in range(4)) == 3
    finally:
        slave.shutdown()
        master.shutdown()


def _dispatched(store: MessageStore) -> int:
    return sum(store.max_offset_in_queue(TOPIC, q) for q in range(4))


def test_dispatch_holds_off_while_asked_and_resumes_after(tmp_path: Path) -> None:
    master, slave = _pair(tmp_path)
    held = True
    try:
        put(master, 40)
        data = master.read_commitlog(0, SEG)
        slave.hold_dispatch_while(lambda: held)
        slave.append_raw(0, data)
        time.sleep(0.2)
        assert _dispatched(slave) == 0  # held (well within MAX_HOLD_S)
        held = False
        deadline = time.monotonic() + 2.0
        while _dispatched(slave) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _dispatched(slave) == 40
    finally:
        slave.shutdown()
        master.shutdown()


def test_dispatch_holds_off_for_a_bounded_time_only(tmp_path: Path) -> None:
    master, slave = _pair(tmp_path)
    try:
        put(master, 40)
        data = master.read_commitlog(0, SEG)
        slave.hold_dispatch_while(lambda: True)  # a hold that never lets go
        started = time.monotonic()
        slave.append_raw(0, data)
        assert slave.wait_dispatched(timeout=reput_module.MAX_HOLD_S + 2.0)
        assert _dispatched(slave) == 40
        assert time.monotonic() - started >= reput_module.MAX_HOLD_S * 0.8
        assert slave.reput is not None and slave.reput.dispatch_available() == 0
    finally:
        slave.shutdown()
        master.shutdown()


def test_explicit_dispatch_and_shutdown_ignore_the_hold(tmp_path: Path) -> None:
    master, slave = _pair(tmp_path)
    try:
        put(master, 10)
        data = master.read_commitlog(0, SEG)
        slave.hold_dispatch_while(lambda: True)
        slave.append_raw(0, data)
        assert slave.reput is not None
        assert slave.reput.dispatch_available() == 10
        assert _dispatched(slave) == 10
    finally:
        slave.shutdown()
        master.shutdown()
