"""The message store in DLedger mode: writes through the driver interface, reads unchanged."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgermq.config import StoreConfig, config_from_properties
from ledgermq.errors import ConfigError, StoreError
from ledgermq.protocol import message as M
from ledgermq.protocol.msgid import offset_msg_id
from ledgermq.store.dledger import BODY_OFFSET
from ledgermq.store.dledger.commitlog import DLedgerCommitLog
from ledgermq.store.dledger.config import dledger_store_config
from ledgermq.store.message_filter import PropertyFilter
from ledgermq.store.message_store import DLedgerMessageStore, MessageStore, NativeMessageStore, open_message_store
from ledgermq.store.results import GetStatus
from tests.conftest import small_config
from tests.store.dledger.mode_helpers import HOST, TOPIC, Driver, bodies_in_queue, encode, open_store


def test_put_through_the_driver_then_read(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        d = Driver(store)
        idx = d.propose([b"m0"]) + d.propose([b"m1"], props={"KEYS": "k1", "TAGS": "a"})
        d.commit()
        assert idx == [0, 1]
        assert bodies_in_queue(store) == [b"m0", b"m1"]
        assert store.max_offset_in_queue(TOPIC, 0) == 2
        got = store.get_message(TOPIC, 0, 2, 32)
        assert got.status is GetStatus.OFFSET_OVERFLOW_ONE
        assert store.get_message(TOPIC, 1, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE

        ledger = store.commitlog.ledger  # type: ignore[union-attr]
        pos1 = ledger.entry_span(1)[0]
        phy = store.commitlog_offset_in_queue(TOPIC, 0, 1)
        assert phy == pos1 + BODY_OFFSET
        rec = M.decode_record(store.look_message_by_offset(phy) or b"")
        assert rec.physical_offset == phy and rec.body == b"m1"
        assert store.look_message_by_id(offset_msg_id(HOST, phy)) == store.look_message_by_offset(phy)
        assert [M.decode_record(r).body for r in store.query_message(TOPIC, "k1", 10, 0, 2**62).messages] == [b"m1"]
        assert store.max_phy_offset == ledger.end_pos
        assert store.message_store_timestamp(TOPIC, 0, 0) > 0
    finally:
        store.shutdown()


def test_nothing_uncommitted_is_readable_or_dispatched(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        d = Driver(store)
        d.propose([b"a", b"b"])
        d.commit(0)
        d.propose([b"c"])
        assert bodies_in_queue(store) == [b"a"]
        assert store.max_offset_in_queue(TOPIC, 0) == 1
        pos1 = store.commitlog.ledger.entry_span(1)[0]  # type: ignore[union-attr]
        assert store.max_phy_offset == pos1
        assert store.look_message_by_offset(pos1 + BODY_OFFSET) is None
        assert store.commitlog.read(pos1 + BODY_OFFSET, 10) is None
        d.commit()
        assert bodies_in_queue(store) == [b"a", b"b", b"c"]
    finally:
        store.shutdown()


def test_the_dledger_store_has_no_native_writes_and_refuses_a_native_config(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        assert isinstance(store, DLedgerMessageStore)
        for native in ("put_message", "put_messages", "append_raw", "truncate_after_offset", "fence_writes"):
            assert not hasattr(store, native), native
    finally:
        store.shutdown()
    with pytest.raises(StoreError, match="NativeMessageStore"):
        DLedgerMessageStore(StoreConfig(root_dir=str(tmp_path / "n")))
    with pytest.raises(StoreError, match="DLedgerMessageStore"):
        NativeMessageStore(store.config)


def test_noop_entries_are_skipped_and_batches_are_one_entry_per_message(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        d = Driver(store)
        d.noop()
        idx = d.propose([b"b0", b"b1", b"b2"], queue_id=3)
        d.noop()
        d.propose([b"x"], queue_id=3)
        d.commit()
        assert idx == [1, 2, 3]
        assert bodies_in_queue(store, 3) == [b"b0", b"b1", b"b2", b"x"]
        ledger = store.commitlog.ledger  # type: ignore[union-attr]
        for i, q in zip(idx, range(3), strict=True):
            pos = ledger.entry_span(i)[0]
            assert store.commitlog_offset_in_queue(TOPIC, 3, q) == pos + BODY_OFFSET
        # A pull of the batch reads each message (entries are not adjacent records).
        got = store.get_message(TOPIC, 3, 0, 32)
        assert got.status is GetStatus.FOUND and got.message_count == 4
    finally:
        store.shutdown()


def test_messages_roll_data_files(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        d = Driver(store)
        bodies = [bytes([i % 251]) * 3000 for i in range(60)]  # > 3 data files of 64 KiB
        for b in bodies:
            d.propose([b], queue_id=1)
        d.commit()
        assert len(store.commitlog.ledger.data.files) >= 3  # type: ignore[union-attr]
        assert bodies_in_queue(store, 1) == bodies
    finally:
        store.shutdown()


def test_truncate_uncommitted_tail_then_new_entries(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        d = Driver(store)
        d.propose([b"a0", b"a1"])
        d.propose([b"q0"], queue_id=2)
        d.commit()
        d.propose([b"lost0", b"lost1"])  # indices 3, 4: uncommitted
        d.propose([b"lostq"], queue_id=2)  # index 5
        with pytest.raises(StoreError):
            store.truncate_after_index(1)  # below the committed index
        store.truncate_after_index(2)
        assert d.last_index == 2
        # Queue offsets continue after what is left, not after what was cut.
        assert store.commitlog.queue_offsets == {f"{TOPIC}-0": 2, f"{TOPIC}-2": 1}
        d.term = 2
        d.propose([b"a2"])
        d.propose([b"q1"], queue_id=2)
        d.commit()
        assert bodies_in_queue(store) == [b"a0", b"a1", b"a2"]
        assert bodies_in_queue(store, 2) == [b"q0", b"q1"]
    finally:
        store.shutdown()


def test_follower_learns_queue_offsets_from_the_bytes(tmp_path: Path) -> None:
    leader = open_store(tmp_path / "leader")
    follower = open_store(tmp_path / "follower")
    try:
        d = Driver(leader)
        d.propose([b"f0", b"f1"])
        d.noop()
        d.propose([b"f2"])
        d.commit()
        ll = leader.commitlog.ledger  # type: ignore[union-attr]
        entries = [(i, ll.get(i).term, ll.get(i).body) for i in range(ll.last_index + 1)]
        positions = follower.append_entries(entries)
        assert positions == [ll.entry_span(i)[0] for i in range(ll.last_index + 1)]
        assert follower.commitlog.queue_offsets == {f"{TOPIC}-0": 3}
        follower.commit_to_index(ll.last_index)
        assert follower.wait_dispatched(timeout=5)
        assert bodies_in_queue(follower) == [b"f0", b"f1", b"f2"]
        # The follower becomes leader: its next offsets continue the leader's.
        follower.rebuild_queue_offsets()
        Driver(follower, term=2).propose([b"f3"])
        follower.commit_to_index(ll.last_index + 1)
        assert follower.wait_dispatched(timeout=5)
        assert bodies_in_queue(follower) == [b"f0", b"f1", b"f2", b"f3"]
    finally:
        leader.shutdown()
        follower.shutdown()


def test_a_body_that_is_no_message_is_refused_before_writing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        with pytest.raises(StoreError):
            store.append_entries([(0, 1, b"not a message at all, just bytes")])
        assert store.commitlog.ledger.last_index == -1  # type: ignore[union-attr]
    finally:
        store.shutdown()


def test_a_native_store_has_no_raft_writes(store_factory: Callable[..., MessageStore]) -> None:
    store = store_factory()
    assert isinstance(store, NativeMessageStore)
    for raft in ("prepare_append", "append_entries", "commit_to_index", "truncate_after_index", "reopen_ledger"):
        assert not hasattr(store, raft), raft


def test_append_result_names_the_body_positions(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        Driver(store).propose([b"first"])
        msgs = [encode(b"b0"), encode(b"b1")]
        bodies = store.prepare_append(msgs, TOPIC, 0)
        positions = store.append_entries([(1, 1, bodies[0]), (2, 1, bodies[1])])
        res = DLedgerCommitLog.append_result(bodies, positions, TOPIC, 0)
        assert res.wrote_offset == positions[0] + BODY_OFFSET and res.queue_offset == 1 and res.msg_num == 2
        assert res.msg_ids == [offset_msg_id(HOST, p + BODY_OFFSET) for p in positions]
        assert res.wrote_bytes == sum(len(b) for b in bodies)
    finally:
        store.shutdown()


def test_config_keys() -> None:
    cfg = config_from_properties(
        StoreConfig,
        {
            "enableDLegerCommitLog": "true",
            "dLegerGroup": "broker-a",
            "dLegerPeers": "n0-127.0.0.1:40911;n1-127.0.0.1:40912",
            "dLegerSelfId": "n1",
            "storePathDLedgerCommitLog": "/data/dl",
        },
    )
    assert cfg.enable_dleger_commit_log and cfg.dleger_self_id == "n1" and cfg.dleger_group == "broker-a"
    ledger = dledger_store_config(cfg)
    assert ledger.self_id == "n1" and str(ledger.data_dir) == "/data/dl"
    assert ledger.data_file_size == cfg.mapped_file_size_commitlog
    assert not StoreConfig().enable_dleger_commit_log


def test_dledger_mode_needs_a_self_id(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        open_message_store(small_config(tmp_path / "s", enable_dleger_commit_log=True))


def test_a_property_filter_selects_by_properties_in_dledger_mode(tmp_path: Path) -> None:
    """SQL92 pulls read a record's properties through the commit log: DLedger mode's answers
    from the entry (its CRC checked), so messages that do not match are skipped, as natively."""
    store = open_store(tmp_path / "s")
    try:
        d = Driver(store)
        for n in range(6):
            d.propose([b"m%d" % n], props={"n": str(n), "even": "yes" if n % 2 == 0 else "no"})
        d.commit()
        evens = PropertyFilter(lambda props: props.get("even") == "yes")
        got = store.get_message(TOPIC, 0, 0, 32, evens)
        assert got.status is GetStatus.FOUND and got.next_begin_offset == 6
        assert [M.decode_record(raw).body for raw in got.messages] == [b"m0", b"m2", b"m4"]
        rec = M.decode_record(got.messages[0])
        assert store.commitlog.properties_at(rec.physical_offset, rec.store_size) is not None
        assert store.commitlog.properties_at(store.max_phy_offset + 1000, 100) is None  # past the commit
    finally:
        store.shutdown()


def test_a_commit_does_not_wake_the_reput_thread_when_the_appender_dispatches(tmp_path: Path) -> None:
    """The Raft driver commits on the broker's event loop, whose write turn dispatches what
    the turn wrote (``set_appender_dispatches``, then ``dispatch_appended`` once per turn).
    Waking the reput thread for each commit instead cost every member a thread hand-off
    (and its interpreter-lock switches) per Raft round."""
    store = open_store(tmp_path / "s")
    try:
        reput = store.reput
        assert reput is not None
        reput.interval_s = 3600.0  # park the thread: from now on only a wake-up runs it
        reput.wakeup()
        deadline = time.monotonic() + 5
        while reput._wake.is_set():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        with reput.lock:  # a pass under way ends first
            pass
        dispatched_on: list[int] = []
        store.add_dispatch_hook(lambda _req: dispatched_on.append(threading.get_ident()))
        store.set_appender_dispatches(True)
        d = Driver(store)
        d.propose([b"a"])
        store.commit_to_index(d.last_index)
        d.propose([b"b"])
        store.commit_to_index(d.last_index)
        assert not reput._wake.is_set()
        assert bodies_in_queue(store) == []
        assert store.dispatch_appended() == {(TOPIC, 0): 2}  # the turn's one pass
        assert bodies_in_queue(store) == [b"a", b"b"]
        assert dispatched_on == [threading.get_ident()] * 2
    finally:
        store.shutdown()
