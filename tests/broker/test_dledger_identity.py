"""The store identity DLedger members compare at start (broker/dledger_identity.py): the
old native commit log below the DLedger data, told apart by its divided offset, where its
messages end and its last message's CRC. A copy of a store matches it; a store that lacks
the last old message (a slave that had not caught up) or has no old log does not."""

from __future__ import annotations

import shutil
from pathlib import Path

from ledgermq.broker.dledger_identity import UNKNOWN, StoreIdentity, store_identity
from ledgermq.protocol.headers_dledger import StoreIdentityHeader
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import open_message_store
from tests.conftest import small_config
from tests.store.dledger.mode_helpers import TOPIC, open_store


def _native(root: Path, count: int) -> None:
    store = open_message_store(small_config(root))
    store.start()
    try:
        for i in range(count):
            assert store.put_message(MessageInput(TOPIC, f"m{i}".encode() * 20, queue_id=i % 2)).ok
    finally:
        store.shutdown()


def _identity(root: Path) -> StoreIdentity:
    store = open_store(root)
    try:
        return store_identity(store)
    finally:
        store.shutdown()


def test_copies_agree_and_a_shorter_or_empty_log_does_not(tmp_path: Path) -> None:
    _native(tmp_path / "master", 30)
    shutil.copytree(tmp_path / "master", tmp_path / "copy")
    _native(tmp_path / "lagging", 29)  # the same messages but the last
    master, copy, lagging = (_identity(tmp_path / n) for n in ("master", "copy", "lagging"))
    empty = _identity(tmp_path / "empty")
    assert master.divided_offset > 0 and master.old_end > 0 and master.old_last_crc != 0
    assert master == copy and master.agrees(copy)
    assert lagging.divided_offset == master.divided_offset and not master.agrees(lagging)
    assert empty == StoreIdentity(0, 0, 0) and not empty.agrees(master)
    assert _identity(tmp_path / "master") == master  # the same on every later start


def test_wire_form_and_unknown_end() -> None:
    ident = StoreIdentity(1 << 20, 47784, 123)
    assert StoreIdentity.of(StoreIdentityHeader.from_ext(ident.header("n0", "g").ext())) == ident
    gone = StoreIdentity(1 << 20, UNKNOWN, 0)  # last old segment deleted: offsets only
    assert gone.agrees(ident) and ident.agrees(gone)
    assert not gone.agrees(StoreIdentity(2 << 20, UNKNOWN, 0))
    pruned = StoreIdentity(UNKNOWN, UNKNOWN, 0)  # the old log deleted by retention: nothing to compare
    assert pruned.agrees(ident) and ident.agrees(pruned) and pruned.agrees(StoreIdentity(0, 0, 0))
    assert "retention" in pruned.describe()
    assert "no native commit log" in StoreIdentity(0, 0, 0).describe()
