"""LedgerStorage after retention deleted the first DLedger data files: the core's view of
the log (first index, the boundary term, entries) and a restart over it.

The core needs ``term(first_index() - 1)``; the store knows the terms of the entries it
holds only, so once files are gone the first stored entry is the boundary and
``first_index()`` is the raft index after it (etcd's dummy entry).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgermq.errors import InvariantViolation
from ledgermq.raft import RaftConfig, RaftNode
from ledgermq.raft.types import Entry, HardState
from ledgermq.raftio.ledger_storage import LedgerStorage
from ledgermq.raftio.member_watch import member_needs
from ledgermq.store.dledger import DLedgerStore, DLedgerStoreConfig


def open_store(root: Path) -> DLedgerStore:
    return DLedgerStore.open(DLedgerStoreConfig(str(root), "n0", data_file_size=4096, index_file_size=32 * 16))


def fill(s: LedgerStorage, n: int) -> list[Entry]:
    entries = [Entry(i, 1 + i // 40, b"%04d" % i + bytes(200)) for i in range(1, n + 1)]
    s.write(entries)
    s.flush()
    s.save_commit(n)
    s.save_hard_state(HardState(entries[-1].term, None, n))
    return entries


def test_first_index_term_and_entries_after_deletion_and_a_restart(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        entries = fill(s, 100)
        assert s.first_index() == 1
        removed = store.delete_leading_files(lambda mf, head: head.index <= 50, 10, 0.0)
        assert removed
        k = store.first_index  # DLedger index of the first stored entry
        assert 0 < k <= 50
        assert s.first_index() == k + 2
        assert s.term(s.first_index() - 1) == entries[k].term  # raft k + 1 is DLedger k
        got = s.entries(s.first_index(), s.first_index() + 3, 1 << 20)
        assert got == entries[k + 1 : k + 4]
        assert s.all_entries() == entries[k + 1 :]

    with open_store(tmp_path) as store:  # recovery finds the same first index
        s = LedgerStorage(store)
        assert store.first_index == k and s.first_index() == k + 2
        hs = s.load_hard_state()
        assert hs.commit == 100
        node = RaftNode(RaftConfig("n0"), ["n0", "n1", "n2"], hs, storage=s, applied=hs.commit)
        assert node.log_term(k + 1) == entries[k].term and node.log_term(k) is None
        assert node.entries(k + 2, k + 4) == entries[k + 1 : k + 3]
        with pytest.raises(InvariantViolation):
            node.entries(k + 1, k + 2)
        assert member_needs(node, s).keep_from is None  # a follower holds nothing back for others


def test_nothing_is_deleted_past_what_the_condition_allows_and_never_the_last_file(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        s = LedgerStorage(store)
        fill(s, 100)
        files = len(store.data.files)
        assert store.delete_leading_files(lambda mf, head: False, 10, 0.0) == []
        removed = store.delete_leading_files(lambda mf, head: True, 1000, 0.0)
        assert len(removed) == files - 1 and len(store.data.files) == 1
        assert store.first_index <= store.last_index
        assert s.entries(s.first_index(), s.last_index() + 1, 1 << 20)[-1].index == 100
