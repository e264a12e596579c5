"""A Raft member's DLedger files between starts: bounded start-up checks trusted to digests,
the scrub that re-reads what start-up skipped, and a lost first data file told apart from
retention (docs/dledger.md, "Disks that lie")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledgermq.clock import SystemClock
from ledgermq.errors import CorruptRangeError
from ledgermq.store.dledger import (
    BODY_OFFSET,
    CorruptEntryError,
    DLedgerRecoveryError,
    DLedgerStore,
    DLedgerStoreConfig,
)
from ledgermq.store.dledger.metadata import LogStart, load_log_start, save_log_start
from ledgermq.store.dledger.scrub import LedgerScrubService
from ledgermq.store.mapped_file import segment_name
from ledgermq.store.scrub import ScrubSettings
from tests.store.dledger.helpers import append_numbered, assert_numbered, body_for, small_config
from tests.store.dledger.mode_helpers import Driver, bodies_in_queue, open_store

ENTRIES = 300  # about 15 data files of 4 KiB


def _written(
    tmp_path: Path, *, committed: int = ENTRIES - 1, **overrides: object
) -> tuple[DLedgerStoreConfig, list[int]]:
    cfg = small_config(tmp_path, repair_damage=True, digests=True, **overrides)
    with DLedgerStore.open(cfg) as s:
        positions = append_numbered(s, ENTRIES)
        s.flush()
        s.save_committed_index(committed)
    return cfg, positions


def _digest_sealed(cfg: DLedgerStoreConfig, count: int) -> list[int]:
    """Digest the first ``count`` data files (what the scrub does once they are sealed)."""
    with DLedgerStore.open(cfg) as s:
        assert s.digests is not None
        files = s.data.files[:count]
        for mf in files:
            s.digests.write(mf.start_offset, mf.mm)
        return [mf.start_offset for mf in files]


def _flip(cfg: DLedgerStoreConfig, pos: int) -> None:
    path = cfg.data_dir / segment_name(pos - pos % cfg.data_file_size)
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, pos % cfg.data_file_size)
        os.pwrite(fd, bytes([old[0] ^ 0x40]), pos % cfg.data_file_size)
    finally:
        os.close(fd)


def _index_at(positions: list[int], file_start: int) -> int:
    return next(i for i, p in enumerate(positions) if p >= file_start + 200)


def test_start_up_walks_the_tail_and_files_without_a_digest_and_leaves_the_rest_to_the_scrub(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path)
    with DLedgerStore.open(cfg) as s:
        files = len(s.data.files)
        rec = s.recovery
        assert rec is not None and files >= 12
        assert (rec.files_walked, rec.files_left_to_scrub) == (files - 3, 0)  # no digest yet: every file checked
    digested = _digest_sealed(cfg, 8)
    with DLedgerStore.open(cfg) as s:
        rec = s.recovery
        assert rec is not None and (rec.files_walked, rec.files_left_to_scrub) == (files - 3 - 8, 8)
        assert_numbered(s, ENTRIES - 1)
    # Rot in a digested file is not looked for at start (the scrub finds it, below) ...
    victim = _index_at(positions, digested[3])
    _flip(cfg, positions[victim] + BODY_OFFSET + 2)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and not s.recovery.damage_found and s.last_index == ENTRIES - 1
        # ... but once a read (or the scrub) recorded it, the next recovery cuts the log there.
        with pytest.raises(CorruptEntryError):
            s.get(victim)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and s.recovery.damage_found and "found damaged" in s.recovery.stop_reason
        assert s.last_index == victim - 1 and s.repair is not None and s.repair.until == ENTRIES - 1
        assert s.damage.ranges() == []  # cut with the log
        assert s.digests is not None and not s.digests.has(digested[3]) and s.digests.has(digested[2])


def test_rot_in_an_early_file_without_a_digest_is_found_at_start(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path)
    digested = _digest_sealed(cfg, 4)
    with DLedgerStore.open(cfg) as s:
        undigested = s.data.files[6].start_offset
    victim = _index_at(positions, undigested)
    _flip(cfg, positions[victim] + BODY_OFFSET + 7)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and s.recovery.damage_found and "CRC" in s.recovery.stop_reason
        assert s.last_index == victim - 1 and s.repair is not None and s.repair.first_bad == victim
        assert s.digests is not None and all(s.digests.has(d) for d in digested)


def test_everything_after_the_committed_entry_is_checked_at_start(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, committed=40)
    _digest_sealed(cfg, 10)  # a digest cannot vouch for what a crash may not have flushed
    with DLedgerStore.open(cfg) as s:
        rec = s.recovery
        holder = next(i for i, mf in enumerate(s.data.files) if mf.start_offset <= positions[40] < mf.end_offset)
        assert rec is not None and rec.scan_start == s.data.files[holder].start_offset
        assert rec.files_left_to_scrub == holder and rec.files_walked == 0


def test_a_lost_first_file_is_damage_but_one_retention_deleted_is_not(tmp_path: Path) -> None:
    cfg, _positions = _written(tmp_path)
    with DLedgerStore.open(cfg) as s:
        s.delete_leading_files(lambda mf, head: True, 2, 0.0)
        first_index, first_pos = s.first_index, s.data.files[0].start_offset
        assert load_log_start(cfg.default_path) == LogStart(first_index, first_pos, 0)
    with DLedgerStore.open(cfg) as s:  # retention's deletion is no damage
        assert s.recovery is not None and not s.recovery.damage_found and s.first_index == first_index
    # Retention interrupted between its record and the unlink: the file is still there, no damage either.
    save_log_start(cfg.default_path, LogStart(first_index + 5, s.data.files[1].start_offset, 0))
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and not s.recovery.damage_found and s.first_index == first_index
    save_log_start(cfg.default_path, LogStart(first_index, first_pos, 0))
    (cfg.data_dir / segment_name(first_pos)).unlink()  # lost, not deleted by retention
    with DLedgerStore.open(cfg) as s:
        rec = s.recovery
        assert rec is not None and rec.damage_found and "is missing" in rec.stop_reason
        # Raft refills a log only at its end: it starts again at index 0, where it began.
        assert (s.first_index, s.last_index, s.committed_index) == (0, -1, -1) and s.data.empty
        assert s.repair is not None and s.repair.until == ENTRIES - 1 and s.repair.first_bad == 0
        assert s.log_start == LogStart(0, 0, 0) == load_log_start(cfg.default_path)
        append_numbered(s, ENTRIES)  # the leader's entries land where they were
        s.flush()
        assert_numbered(s, ENTRIES - 1)


def test_a_lost_first_file_stops_a_bare_store(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, digests=True)
    with DLedgerStore.open(cfg) as s:
        append_numbered(s, ENTRIES)
        s.save_committed_index(s.flush())
        s.delete_leading_files(lambda mf, head: True, 1, 0.0)
        first = s.data.files[0].path
    first.unlink()
    with pytest.raises(DLedgerRecoveryError, match="is missing"):
        DLedgerStore.open(cfg)


def test_the_scrub_digests_sealed_files_and_reports_a_flip_like_a_corrupt_read(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s", mapped_file_size_commitlog=4096)
    try:
        d = Driver(store)
        bodies = [f"m{i:04d}-".encode() + body_for(i, 200) for i in range(200)]
        for b in bodies:
            d.propose([b])
        d.commit()
        d.checkpoint()
        dl = store.commitlog
        assert dl is not None
        heard: list[BaseException] = []
        dl.on_corrupt = heard.append
        scrub = LedgerScrubService(dl, ScrubSettings(bytes_per_second=1 << 30, interval_seconds=0), SystemClock())
        scrub.step()
        ledger = dl.ledger
        assert ledger.digests is not None
        sealed = ledger.data.files[:-1]
        assert len(sealed) >= 6 and scrub.digests_written == len(sealed)
        assert all(ledger.digests.has(mf.start_offset) for mf in sealed) and not heard
        # A byte of a sealed file changes under the running member (a header field: no read sees it).
        victim = sealed[3]
        at = victim.start_offset + 2 * BODY_OFFSET + 300
        with victim.path.open("r+b") as f:
            fd = f.fileno()
            old = os.pread(fd, 1, at - victim.start_offset)
            os.pwrite(fd, bytes([old[0] ^ 0x01]), at - victim.start_offset)
        for _ in range(3):  # a pass ends, the next begins (interval 0)
            scrub.step()
        assert len(heard) == 1 and isinstance(heard[0], CorruptRangeError)
        exc = heard[0]
        assert exc.start <= at < exc.end and scrub.damage_found == 1
        assert ledger.damage.overlapping(at, at + 1) is not None  # recorded: never served, cut at the next recovery
        scrub.step()
        assert len(heard) == 1  # reported once
        store.reopen_ledger()  # what the broker does once the driver fail-stopped
        rec = dl.ledger.recovery
        assert rec is not None and rec.damage_found and dl.ledger.last_index < 199
        assert dl.ledger.data.files[-1].start_offset <= at and dl.ledger.repair is not None
        kept = bodies_in_queue(store)
        assert kept == bodies[: len(kept)] and len(kept) == dl.ledger.last_index + 1
    finally:
        store.shutdown()
