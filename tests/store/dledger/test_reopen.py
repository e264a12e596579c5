"""Re-recovering a DLedger-mode store in place after a write failed part-way
(``MessageStore.reopen_ledger``, what a broker does before it restarts a fail-stopped
Raft driver): a torn entry, an entry whose index file could not be created, a data file
closed by a blank whose successor could not be created, a failed checkpoint write. Every
committed entry stays readable, the torn tail is cut, and the log goes on at the right
index with the right queue offsets.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledgermq import failpoints
from ledgermq.errors import StoreFullError
from ledgermq.store.message_store import MessageStore
from tests.store.dledger.mode_helpers import Driver, bodies_in_queue, open_store


def _enospc() -> None:
    raise OSError(errno.ENOSPC, "No space left on device (failpoint)")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = open_store(tmp_path / "s")
    yield s
    for name in ("dledger.after_entry_head", "mapped_file_queue.before_create", "atomic_file.before_fsync"):
        failpoints.disarm(name)
    s.shutdown()


def _committed_then_fail(store: MessageStore, point: str, fill: Callable[[Driver], None]) -> tuple[Driver, list[bytes]]:
    d = Driver(store)
    committed = [f"c{i}".encode() * 100 for i in range(20)]
    for b in committed:
        d.propose([b])
    d.commit()
    fill(d)
    failpoints.arm(point, _enospc)
    with pytest.raises((OSError, StoreFullError)):
        for i in range(200):  # enough to reach a new data or index file
            d.propose([f"x{i}".encode() * 2000])
    failpoints.disarm(point)
    return d, committed


def _reopen_and_go_on(store: MessageStore, d: Driver, committed: list[bytes]) -> None:
    last_before = d.last_index
    store.reopen_ledger()
    assert store.failed_reason is None
    dl = store.commitlog
    assert dl is not None
    assert dl.committed_index >= len(committed) - 1
    assert dl.ledger.last_index <= last_before + 1
    # Uncommitted entries recovery kept are committed now, then new ones follow them.
    d.commit()
    kept = bodies_in_queue(store)
    assert kept[: len(committed)] == committed
    d.propose([b"after"])
    d.commit()
    again = bodies_in_queue(store)
    assert again[: len(committed)] == committed and again[-1] == b"after"
    assert len(again) == len(kept) + 1  # queue offsets continue with no gap and no reuse


def test_torn_entry_is_cut(store: MessageStore) -> None:
    d, committed = _committed_then_fail(store, "dledger.after_entry_head", lambda _d: None)
    assert store.failed_reason is not None  # the failed append failed the store
    _reopen_and_go_on(store, d, committed)
    dl = store.commitlog
    assert dl is not None and dl.ledger.recovery is not None
    assert dl.ledger.recovery.dirty_tail  # the head without a body was found and cut


def test_missing_data_or_index_file(store: MessageStore) -> None:
    d, committed = _committed_then_fail(store, "mapped_file_queue.before_create", lambda _d: None)
    _reopen_and_go_on(store, d, committed)


def test_failed_checkpoint_write_fails_the_reopen_until_the_disk_is_free(store: MessageStore) -> None:
    d, committed = _committed_then_fail(store, "dledger.after_entry_head", lambda _d: None)
    failpoints.arm("atomic_file.before_fsync", _enospc)
    with pytest.raises(OSError):
        store.reopen_ledger()  # the checkpoint could not be written: still failed
    assert store.failed_reason is not None
    failpoints.disarm("atomic_file.before_fsync")
    _reopen_and_go_on(store, d, committed)
