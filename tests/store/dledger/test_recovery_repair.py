"""Recovery of a Raft member's store (``repair_damage``): damage is cut and marked for repair
from the group, never silently dropped, and a torn tail is still just cut."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledgermq.store.dledger import BODY_OFFSET, CorruptEntryError, DLedgerStore, DLedgerStoreConfig, RepairMarker
from ledgermq.store.dledger.metadata import REPAIR_FILE
from ledgermq.store.mapped_file import segment_name
from tests.store.dledger.helpers import append_numbered, assert_numbered, small_config


def _written(tmp_path: Path, count: int, committed: int) -> tuple[DLedgerStoreConfig, list[int]]:
    cfg = small_config(tmp_path, repair_damage=True, recover_last_files=0)
    with DLedgerStore.open(cfg) as s:
        positions = append_numbered(s, count)
        s.flush()
        s.save_committed_index(committed)
    return cfg, positions


def _flip(cfg: DLedgerStoreConfig, pos: int) -> None:
    path = cfg.data_dir / segment_name(pos - pos % cfg.data_file_size)
    with path.open("r+b") as f:
        f.seek(pos % cfg.data_file_size)
        b = f.read(1)
        f.seek(pos % cfg.data_file_size)
        f.write(bytes([b[0] ^ 0xFF]))


def test_rot_in_the_middle_is_cut_and_marked_for_repair_below_the_commit(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 60, committed=50)
    _flip(cfg, positions[20] + BODY_OFFSET + 3)
    with DLedgerStore.open(cfg) as s:
        assert s.recovery is not None and s.recovery.damage_found
        assert s.repair == RepairMarker(until=59, last_term=1, first_bad=20)
        assert s.committed_index == 19  # lowered below the cut, so the store may cut there
        assert_numbered(s, 19)
        assert (cfg.default_path / REPAIR_FILE).exists()
    with DLedgerStore.open(cfg) as s:  # a restart mid-repair still knows what the log had
        assert s.repair is not None and s.repair.until == 59
        append_numbered(s, 40)
        s.flush()
        s.end_repair()
    assert not (cfg.default_path / REPAIR_FILE).exists()


def test_a_missing_data_file_in_the_middle_is_repaired_not_refused(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 60, committed=59)
    victim = positions[25] - positions[25] % cfg.data_file_size
    (cfg.data_dir / segment_name(victim)).unlink()
    with DLedgerStore.open(cfg) as s:
        assert s.repair is not None and s.repair.until == 59
        assert s.last_index < 25 and s.committed_index == s.last_index
        assert "hole" in s.recovery.stop_reason  # type: ignore[union-attr]


def test_a_short_data_file_is_padded_and_repaired(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 60, committed=59)
    victim = cfg.data_dir / segment_name(positions[25] - positions[25] % cfg.data_file_size)
    os.truncate(victim, cfg.data_file_size // 3)
    with DLedgerStore.open(cfg) as s:
        assert s.repair is not None and s.repair.until == 59
        assert s.last_index <= 25 and victim.stat().st_size == cfg.data_file_size


def test_a_torn_tail_is_only_cut(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 30, committed=20)
    _flip(cfg, positions[29] + BODY_OFFSET + 1)  # the last entry: nothing valid follows it
    with DLedgerStore.open(cfg) as s:
        assert s.repair is None and s.recovery is not None and not s.recovery.damage_found
        assert_numbered(s, 28)


def test_a_read_of_a_rotten_entry_raises_instead_of_returning_it(tmp_path: Path) -> None:
    cfg, positions = _written(tmp_path, 10, committed=9)
    with DLedgerStore.open(cfg) as s:
        _flip(cfg, positions[4] + BODY_OFFSET + 5)  # rot after recovery verified it
        with pytest.raises(CorruptEntryError, match="entry 4"):
            s.get(4)
        assert s.corrupt_reads == 1
        assert s.get(5).term == 1
