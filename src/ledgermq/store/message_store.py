"""The message store: one facade per mode, chosen by the store's config.

``NativeMessageStore`` (store/native_store.py) keeps its own commit log: puts, an HA
slave's raw appends and truncation by commit-log offset. ``DLedgerMessageStore``
(store/dledger/mode_store.py, enableDLegerCommitLog=true) keeps messages in the Raft log:
entries are appended, committed and truncated by Raft index. Both share the read side,
dispatch, the derived files and the lifecycle (store/facade.py); neither has a method it
refuses. ``open_message_store`` builds the one a config asks for; code that serves both
modes takes a ``MessageStore`` and narrows it (``isinstance``) where it writes.
"""

from __future__ import annotations

from typing import TypeAlias

from ledgermq.clock import SYSTEM_CLOCK, Clock
from ledgermq.config import StoreConfig
from ledgermq.protocol import message as M
from ledgermq.store.dledger.mode_store import DLedgerMessageStore
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.store.retention import DiskUsage, disk_usage_ratio

MessageStore: TypeAlias = NativeMessageStore | DLedgerMessageStore

__all__ = ["DLedgerMessageStore", "MessageStore", "NativeMessageStore", "open_message_store"]


def open_message_store(
    config: StoreConfig,
    *,
    clock: Clock = SYSTEM_CLOCK,
    store_host: M.Host = ("127.0.0.1", 10911),
    disk_usage: DiskUsage = disk_usage_ratio,
) -> MessageStore:
    """The store ``config`` asks for (DLedger mode or native), not yet started."""
    if config.enable_dleger_commit_log:
        return DLedgerMessageStore(config, clock=clock, store_host=store_host, disk_usage=disk_usage)
    return NativeMessageStore(config, clock=clock, store_host=store_host, disk_usage=disk_usage)
