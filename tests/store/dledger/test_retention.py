"""Retention in DLedger mode: which DLedger data files a cleaning round deletes, and what
follows (first index, index files, consume queues, pulls, key queries, restart).

Rounds are driven with ``store.cleaner.clean_once()`` (the timer is set to an hour), a
ManualClock at a deleteWhen hour, file ages set with ``os.utime`` and a fake disk gauge,
as in tests/store/test_retention.py. Data files are 4 KiB so a file holds a dozen entries.

RocketMQ's DLedger mode (DLedgerCommitLog + DLedger's CleanSpaceService): files expire
after fileReservedTime + 1 hours, never the last one, at most 10 per round; the ledger's
first index becomes the first entry left; index files below it go too.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ledgermq.clock import ManualClock
from ledgermq.protocol import message as M
from ledgermq.store.dledger import INDEX_UNIT_SIZE, mode_store
from ledgermq.store.dledger.retention import DLedgerCleanService
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.results import GetStatus
from ledgermq.testing.crash import abandon
from tests.conftest import small_config
from tests.store.dledger.mode_helpers import HOST, TOPIC, Driver, dledger_config

DATA_FILE = 4096
INDEX_FILE = INDEX_UNIT_SIZE * 8  # 8 units per index file
OLD_H = 100.0  # older than fileReservedTime (72) + 1 hours
BORDER_H = 72.5  # older than fileReservedTime, younger than fileReservedTime + 1
YOUNG_H = 1.0

RETENTION: dict[str, Any] = dict(
    mapped_file_size_commitlog=DATA_FILE,
    clean_resource_interval_ms=3_600_000,
    file_reserved_time_hours=72.0,
    delete_when="04",
    disk_max_used_space_ratio=75,
)


class DiskGauge:
    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio

    def __call__(self, path: Path) -> float:
        return self.ratio


def clock_at(hour: int) -> ManualClock:
    return ManualClock(wall_ms=int(dt.datetime(2024, 3, 5, hour, 30).timestamp() * 1000))


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    made: list[MessageStore] = []

    def make(clock: ManualClock, gauge: DiskGauge, **overrides: Any) -> MessageStore:
        cfg = dledger_config(tmp_path / "s", **{**RETENTION, **overrides})
        store = open_message_store(cfg, clock=clock, store_host=HOST, disk_usage=gauge)
        made.append(store)
        store.start()
        assert store.commitlog.ledger.index.file_size == INDEX_FILE  # type: ignore[union-attr]
        return store

    yield make
    for s in made:
        s.shutdown()


@pytest.fixture(autouse=True)
def small_index_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 units per index file, so index-file deletion shows (the broker config has no key)."""
    real = mode_store.dledger_store_config
    monkeypatch.setattr(mode_store, "dledger_store_config", lambda cfg: replace(real(cfg), index_file_size=INDEX_FILE))


def cleaner(store: MessageStore) -> DLedgerCleanService:
    assert isinstance(store.cleaner, DLedgerCleanService)
    return store.cleaner


def fill(d: Driver, files: int, *, commit: bool = True) -> int:
    """Propose ~300-byte messages until the data has ``files`` files; returns the count."""
    ledger = d.store.commitlog.ledger  # type: ignore[union-attr]
    n = 0
    while len(ledger.data.files) < files:
        d.propose([b"%06d" % n + bytes(200)], props={"KEYS": f"key{n}"})
        n += 1
    if commit:
        d.commit()
        d.checkpoint()
    return n


def data_paths(store: MessageStore) -> list[Path]:
    return [mf.path for mf in store.commitlog.ledger.data.files]  # type: ignore[union-attr]


def set_ages(clock: ManualClock, paths: list[Path], hours: list[float]) -> None:
    now_s = clock.wall_ms() / 1000
    for path, h in zip(paths, hours, strict=True):
        os.utime(path, (now_s - h * 3600, now_s - h * 3600))


def first_entry_index(store: MessageStore, path: Path) -> int:
    ledger = store.commitlog.ledger  # type: ignore[union-attr]
    mf = next(m for m in ledger.data.files if m.path == path)
    return int.from_bytes(mf.mm[8:16], "big")  # magic, size, then the index


def seq(raw: bytes) -> int:
    return int(M.decode_record(raw).body[:6])


def test_expired_files_go_at_a_delete_hour_and_the_first_index_moves(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    d = Driver(store)
    n = fill(d, 6)
    paths = data_paths(store)
    set_ages(clock, paths, [OLD_H] * 3 + [BORDER_H] + [YOUNG_H] * 2)
    new_first = first_entry_index(store, paths[3])
    index_files_before = [mf.path for mf in store.commitlog.ledger.index.files]  # type: ignore[union-attr]

    assert cleaner(store).clean_once() == 3  # 72.5 h is not past fileReservedTime + 1
    assert [p.exists() for p in paths] == [False] * 3 + [True] * 3
    ledger = store.commitlog.ledger  # type: ignore[union-attr]
    assert ledger.first_index == new_first
    assert store.min_phy_offset == 3 * DATA_FILE
    # Index files holding only units below the new first index are gone, the rest stay.
    left = [mf.path for mf in ledger.index.files]
    assert all(
        mf.start_offset < new_first * INDEX_UNIT_SIZE < mf.end_offset or mf.start_offset >= new_first * INDEX_UNIT_SIZE
        for mf in ledger.index.files
    )
    assert [p for p in index_files_before if not p.exists()] == index_files_before[
        : len(index_files_before) - len(left)
    ]
    assert len(left) < len(index_files_before)
    # Entries from the first index on still read; the ones before do not.
    assert ledger.get(new_first).body
    with pytest.raises(IndexError):
        ledger.get(new_first - 1)

    # Consume queue: min offset moved to the first message left; a pull below it is told so.
    assert store.min_offset_in_queue(TOPIC, 0) == new_first
    low = store.get_message(TOPIC, 0, 0, 32)
    assert low.status is GetStatus.OFFSET_TOO_SMALL and low.next_begin_offset == new_first
    got = store.get_message(TOPIC, 0, new_first, 4)
    assert got.status is GetStatus.FOUND and [seq(r) for r in got.messages] == list(range(new_first, new_first + 4))
    # Queries by key skip what was deleted and still find what is left.
    assert store.query_message(TOPIC, "key0", 10, 0, 2**62).messages == []
    assert [seq(r) for r in store.query_message(TOPIC, f"key{n - 1}", 10, 0, 2**62).messages] == [n - 1]

    # New writes go on after the deletion.
    d.propose([b"999999"])
    d.commit()
    assert store.max_offset_in_queue(TOPIC, 0) == n + 1


def test_nothing_outside_a_delete_hour_unless_the_disk_is_full_or_asked(open_store) -> None:
    clock, gauge = clock_at(13), DiskGauge(0.10)
    store = open_store(clock, gauge)
    fill(Driver(store), 4)
    paths = data_paths(store)
    set_ages(clock, paths, [OLD_H, YOUNG_H, OLD_H, OLD_H])
    assert cleaner(store).clean_once() == 0
    gauge.ratio = 0.80  # past diskMaxUsedSpaceRatio (75): expired files go at any hour
    assert cleaner(store).clean_once() == 1  # a young file stops the round: no holes
    gauge.ratio = 0.10
    set_ages(clock, paths[1:], [OLD_H] * 3)
    assert cleaner(store).clean_once() == 0
    store.trigger_delete_files()  # an operator's deleteExpiredCommitLog wakes the service
    deadline = time.monotonic() + 5
    while any(p.exists() for p in paths[:3]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [p.exists() for p in paths] == [False, False, False, True]  # never the last one


def test_past_the_forcible_ratio_age_no_longer_matters_unless_disabled(open_store) -> None:
    clock, gauge = clock_at(13), DiskGauge(0.88)
    store = open_store(clock, gauge, clean_file_forcibly_enable=False)
    fill(Driver(store), 3)
    set_ages(clock, data_paths(store), [YOUNG_H] * 3)
    assert cleaner(store).clean_once() == 0
    store.shutdown()

    store = open_store(clock, gauge)
    set_ages(clock, data_paths(store), [YOUNG_H] * 3)
    assert cleaner(store).clean_once() == 2


def test_the_active_file_is_never_deleted(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge(0.99))
    fill(Driver(store), 1)
    set_ages(clock, data_paths(store), [OLD_H])
    assert cleaner(store).clean_once() == 0
    assert len(data_paths(store)) == 1 and data_paths(store)[0].exists()


def test_uncommitted_or_not_checkpointed_entries_are_never_deleted(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge(0.99))  # critical disk: age and guards do not matter
    d = Driver(store)
    fill(d, 4, commit=False)
    paths = data_paths(store)
    set_ages(clock, paths, [OLD_H] * 4)
    assert cleaner(store).clean_once() == 0  # nothing committed

    # Committed in memory up to the second file's end, but not checkpointed: still nothing.
    boundary = first_entry_index(store, paths[2])
    d.commit(boundary)
    assert cleaner(store).clean_once() == 0

    # Checkpointed up to the last entry of file 1: file 0 may go, file 1 not (its successor's
    # first entry, the new first index, is not committed durably yet).
    store.commitlog.ledger.flush()  # type: ignore[union-attr]
    store.commitlog.ledger.save_committed_index(boundary - 1)  # type: ignore[union-attr]
    assert cleaner(store).clean_once() == 1
    store.commitlog.ledger.save_committed_index(boundary)  # type: ignore[union-attr]
    assert cleaner(store).clean_once() == 1
    assert [p.exists() for p in paths] == [False, False, True, True]
    assert store.commitlog.ledger.first_index == boundary  # type: ignore[union-attr]


def test_a_ledger_guard_holds_files_back_until_the_disk_is_critical(open_store) -> None:
    clock, gauge = clock_at(4), DiskGauge(0.10)
    store = open_store(clock, gauge)
    fill(Driver(store), 5)
    paths = data_paths(store)
    set_ages(clock, paths, [OLD_H] * 5)
    needed: dict[str, int | None] = {"n1": first_entry_index(store, paths[1])}
    store.add_ledger_guard(lambda: needed["n1"])
    assert cleaner(store).clean_once() == 1  # only what the member no longer needs
    assert store.commitlog.ledger.first_index == needed["n1"]  # type: ignore[union-attr]
    gauge.ratio = 0.90  # past 85%: a full disk would stop the group; the member is given up
    assert cleaner(store).clean_once() == 3
    needed["n1"] = None


def test_first_index_and_queues_survive_a_restart_after_deletion(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    d = Driver(store)
    n = fill(d, 5)
    paths = data_paths(store)
    set_ages(clock, paths, [OLD_H] * 2 + [YOUNG_H] * 3)
    assert cleaner(store).clean_once() == 2
    first = store.commitlog.ledger.first_index  # type: ignore[union-attr]
    last = store.commitlog.ledger.last_index  # type: ignore[union-attr]
    store.shutdown()

    store = open_store(clock, DiskGauge())
    ledger = store.commitlog.ledger  # type: ignore[union-attr]
    assert (ledger.first_index, ledger.last_index) == (first, last)
    assert [p.exists() for p in paths] == [False, False, True, True, True]  # recovery deleted nothing more
    assert ledger.committed_index == last
    assert store.min_offset_in_queue(TOPIC, 0) == first
    assert store.get_message(TOPIC, 0, 0, 32).status is GetStatus.OFFSET_TOO_SMALL
    got = store.get_message(TOPIC, 0, first, 32)
    assert got.status is GetStatus.FOUND and seq(got.messages[0]) == first
    # The log goes on where it was.
    d = Driver(store)
    assert d.propose([b"000777"]) == [last + 1]
    d.commit()
    assert store.max_offset_in_queue(TOPIC, 0) == n + 1


def test_recovery_after_a_crash_with_deleted_files_comes_up_with_the_right_first_index(tmp_path: Path) -> None:
    clock = clock_at(4)
    cfg = dledger_config(tmp_path / "s", **RETENTION)
    store = open_message_store(cfg, clock=clock, store_host=HOST, disk_usage=DiskGauge())
    store.start()
    d = Driver(store)
    fill(d, 5)
    paths = data_paths(store)
    set_ages(clock, paths, [OLD_H] * 3 + [YOUNG_H] * 2)
    assert cleaner(store).clean_once() == 3
    first = store.commitlog.ledger.first_index  # type: ignore[union-attr]
    abandon(store)  # as SIGKILL would leave it

    store = open_message_store(cfg, clock=clock, store_host=HOST, disk_usage=DiskGauge())
    store.start()
    try:
        assert store.commitlog.ledger.first_index == first  # type: ignore[union-attr]
        assert [p.exists() for p in paths] == [False] * 3 + [True] * 2
        assert store.min_offset_in_queue(TOPIC, 0) == first
    finally:
        store.shutdown()


def test_a_switched_stores_old_log_goes_first_then_dledger_files(open_store, tmp_path: Path) -> None:
    root = tmp_path / "s"
    native = open_message_store(small_config(root, mapped_file_size_commitlog=DATA_FILE))
    native.start()
    olds = 0
    while len(native.commitlog.queue.files) < 3:
        assert native.put_message(MessageInput(TOPIC, b"%06d" % olds + bytes(200), queue_id=0)).ok
        olds += 1
    assert native.wait_dispatched()
    native.shutdown()

    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    assert store.commitlog is not None
    divided = store.commitlog.divided_offset
    d = Driver(store)
    news = fill(d, 3)
    old_paths = [mf.path for mf in store.commitlog.old_log.queue.files]
    paths = data_paths(store)
    set_ages(clock, old_paths + paths, [OLD_H] * (len(old_paths) + len(paths)))

    # The old log goes first, all of it (it is sealed: its last segment is no active file).
    assert cleaner(store).clean_once() == len(old_paths)
    assert not any(p.exists() for p in old_paths) and all(p.exists() for p in paths)
    assert store.min_phy_offset == divided
    assert store.min_offset_in_queue(TOPIC, 0) == olds
    assert store.get_message(TOPIC, 0, 0, 32).status is GetStatus.OFFSET_TOO_SMALL
    # Then the DLedger files, as in any DLedger store.
    assert cleaner(store).clean_once() == 2
    first = store.commitlog.ledger.first_index
    low = store.min_offset_in_queue(TOPIC, 0)
    assert low > olds
    store.shutdown()

    store = open_store(clock, DiskGauge())  # no old log left: the store starts as a plain DLedger one
    assert store.commitlog is not None and store.commitlog.ledger.first_index == first
    assert store.min_offset_in_queue(TOPIC, 0) == low
    assert store.max_offset_in_queue(TOPIC, 0) == olds + news
    got = store.get_message(TOPIC, 0, low, 32)
    assert got.status is GetStatus.FOUND and seq(got.messages[0]) == low - olds


def test_a_file_a_reader_holds_is_removed_when_the_reader_lets_go(open_store) -> None:
    clock = clock_at(4)
    store = open_store(clock, DiskGauge())
    fill(Driver(store), 3)
    paths = data_paths(store)
    set_ages(clock, paths, [OLD_H, YOUNG_H, YOUNG_H])
    ledger = store.commitlog.ledger  # type: ignore[union-attr]
    held = ledger.data.files[0]
    assert held.pin()
    new_first = first_entry_index(store, paths[1])
    assert cleaner(store).clean_once() == 1
    # Out of use at once (the first index moved, the name is free), gone once let go.
    assert ledger.first_index == new_first and data_paths(store) == paths[1:]
    assert not paths[0].exists() and held.path.exists() and held.path.name.endswith(".deleted")
    assert held.read(0, 4)  # the reader can still finish its read
    held.unpin()
    assert not held.path.exists()


def test_past_90_percent_proposals_are_refused_until_retention_made_room(open_store) -> None:
    clock, gauge = clock_at(13), DiskGauge(0.95)
    store = open_store(clock, gauge)
    msg = MessageInput(TOPIC, b"x")
    assert store.check_for_proposal(msg) is None
    cleaner(store).clean_once()
    refused = store.check_for_proposal(msg)
    assert refused is not None and refused.status.name == "SERVICE_NOT_AVAILABLE" and refused.remark == "disk is full"
    gauge.ratio = 0.50
    cleaner(store).clean_once()
    assert store.check_for_proposal(msg) is None
