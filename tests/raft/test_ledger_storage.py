"""LedgerStorage over a real DLedgerStore: index mapping, NOOPs, conflict truncation, hard state."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.raft.types import Entry, EntryKind, HardState
from ledgermq.raftio.ledger_storage import LedgerStorage
from ledgermq.store.dledger import DLedgerStore, DLedgerStoreConfig


def open_store(root: Path) -> DLedgerStore:
    return DLedgerStore.open(DLedgerStoreConfig(str(root), "n0", data_file_size=64 * 1024, index_file_size=32 * 256))


def test_empty_store_looks_like_an_empty_raft_log(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        assert (s.first_index(), s.last_index(), s.term(0)) == (1, 0, 0)
        assert s.entries(1, 1, 100) == [] and s.all_entries() == []
        assert s.load_hard_state() == HardState()
        assert s.flush() == (0, 0)


def test_write_read_and_index_mapping(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        entries = [Entry(1, 1, b"", EntryKind.NOOP), Entry(2, 1, b"a"), Entry(3, 2, b"bb"), Entry(4, 2, b"ccc")]
        s.write(entries)
        assert store.last_index == 3 and store.get(1).body == b"a"  # raft 2 is DLedger 1
        assert s.flush() == (4, 2)
        assert s.last_index() == 4 and [s.term(i) for i in range(5)] == [0, 1, 1, 2, 2]
        assert s.entries(1, 5, 1 << 20) == entries
        assert s.entries(2, 5, 2) == entries[1:2]  # the byte cap stops before going over ...
        assert s.entries(4, 5, 0) == entries[3:]  # ... but never returns nothing
        assert s.entries(3, 99, 1 << 20) == entries[2:]
        with pytest.raises(IndexError):
            s.term(5)


def test_conflicting_suffix_is_truncated_before_append(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        s.write([Entry(1, 1, b"a"), Entry(2, 1, b"b"), Entry(3, 1, b"c")])
        s.write([Entry(2, 3, b"B"), Entry(3, 3, b"C"), Entry(4, 3, b"D")])
        assert [(e.index, e.term, bytes(e.data)) for e in s.all_entries()] == [
            (1, 1, b"a"),
            (2, 3, b"B"),
            (3, 3, b"C"),
            (4, 3, b"D"),
        ]
        s.write([Entry(1, 4, b"z")])
        assert s.last_index() == 1 and s.term(1) == 4
        with pytest.raises(ValueError, match="NOOP"):
            s.write([Entry(2, 4, b"")])


def test_hard_state_survives_reopen_in_dledger_files(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        s.write([Entry(1, 1, b"a"), Entry(2, 2, b"b"), Entry(3, 2, b"c")])
        s.flush()
        s.save_hard_state(HardState(2, "n1", 3))
        assert s.save_commit(2) == 2 and s.save_commit(1) == 2
    text = (tmp_path / "dledger-n0" / "currterm").read_text()
    assert "currTerm=2" in text and "voteLeader=n1" in text
    assert "committedIndex=1" in (tmp_path / "dledger-n0" / "checkpoint").read_text()
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        assert s.load_hard_state() == HardState(2, "n1", 2)
        assert s.last_index() == 3


def test_commit_checkpoint_never_covers_unflushed_entries(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        s.write([Entry(1, 1, b"a")])
        s.flush()
        s.write([Entry(2, 1, b"b")])
        assert s.save_commit(2) == 1
