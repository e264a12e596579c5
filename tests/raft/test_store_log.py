"""``StoreLog``: the Raft log written through a DLedger-mode message store, fsynced as flushDiskType says."""

from __future__ import annotations

from pathlib import Path

from ledgermq.config import FlushDiskType
from ledgermq.raft import Entry, EntryKind
from ledgermq.raftio.store_log import StoreLog
from ledgermq.store.message_store import MessageStore, open_message_store
from tests.store.dledger.mode_helpers import HOST, TOPIC, dledger_config, encode


def _store(root: Path, flush: FlushDiskType) -> MessageStore:
    store = open_message_store(
        dledger_config(root, flush_disk_type=flush, flush_interval_commitlog_ms=60_000), store_host=HOST
    )
    store.start()
    return store


def _entry(store: MessageStore, index: int) -> Entry:
    (body,) = store.prepare_append([encode(f"m{index}".encode())], TOPIC, 0)
    return Entry(index, 1, bytes(body))


def test_sync_flush_fsyncs_every_write_async_flush_at_most_every_interval(tmp_path: Path) -> None:
    for flush, expect_durable_each_time in ((FlushDiskType.SYNC_FLUSH, True), (FlushDiskType.ASYNC_FLUSH, False)):
        store = _store(tmp_path / flush.value, flush)
        try:
            log = StoreLog(store)
            assert store.commitlog is not None
            ledger = store.commitlog.ledger
            durable = []
            for i in (1, 2, 3):
                log.write([_entry(store, i)])
                assert log.flush() == (i, 1)  # what the driver acknowledges to the core
                durable.append(ledger.persisted_index + 1)  # fsynced, as raft indices
            if expect_durable_each_time:
                assert durable == [1, 2, 3]
            else:  # the first write fsyncs, the next ones wait for flushIntervalCommitLog
                assert durable == [1, 1, 1]
        finally:
            store.shutdown()


def test_noop_entries_are_stored_empty_and_normal_ones_need_data(tmp_path: Path) -> None:
    store = _store(tmp_path, FlushDiskType.ASYNC_FLUSH)
    try:
        log = StoreLog(store)
        log.write([Entry(1, 1, b"", EntryKind.NOOP), _entry(store, 2)])
        (noop, msg) = log.entries(1, 3, 1 << 20)
        assert noop.kind is EntryKind.NOOP and msg.kind is EntryKind.NORMAL
        log.commit([noop, msg])
        assert store.wait_dispatched(timeout=5)
        assert store.max_offset_in_queue(TOPIC, 0) == 1  # the no-op is no message
    finally:
        store.shutdown()
